"""`ocihook audit` on records captured in the Fedora-policy enforcing guest (make
test-enforcing, Fedora's targeted policy 38.1 with container-selinux 2.229.0).

tests/data/avc/guest-fedora/: the guest's whole audit.log of one run of the tier (a boot-time
denial of Debian's systemd under Fedora's policy; the fake hosts' module requests; the
broken-on-purpose check's one denial: container_t refused `map` of the injected synth-smi,
its driver tree relabelled user_home_t), the hook's records as the guest kept them, and
live-policy-verdict.json: what audit2why answered for that denial in the guest, from the
running policy (BOOLEAN: domain_can_mmap_files). The ordinary tier has no Fedora policy to
ask, so the test hands that recorded answer to the report as its policy (a stand-in for
audit2why, named here).
"""

from __future__ import annotations

import json

import pytest
from audit_helpers import DATA, check_golden
from click.testing import CliRunner

from ocihook.audit import explain
from ocihook.audit.policy import Verdict
from ocihook.audit.records import load_records, match
from ocihook.cli.audit import audit, read_inputs

GUEST = DATA / "guest-fedora"
CONTAINER = "c864b16b474f4e3f9263c0c93230a5fd3bda31ab93495ef6784f1bb98c3e4110"


@pytest.fixture(autouse=True)
def _in_guest_data(monkeypatch):
    """Relative paths (the report names its input files) and UTC."""
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.chdir(GUEST)


class RecordedVerdict:
    """audit2why's answer as the guest's running policy gave it (live-policy-verdict.json)."""

    def __init__(self) -> None:
        self.recorded = json.loads((GUEST / "live-policy-verdict.json").read_text())

    def analyze(
        self, scontext: str, tcontext: str, tclass: str, perms: list[str]
    ) -> Verdict | None:
        """The recorded answer for the recorded denial; None (no answer) for the others."""
        r = self.recorded
        if [scontext, tcontext, tclass, perms] != [
            r[k] for k in ("scontext", "tcontext", "tclass", "perms")
        ]:
            return None
        v = r["verdict"]
        return Verdict(v["verdict"], [tuple(b) for b in v["booleans"]], v["constraint"])


def test_the_map_denial_is_tied_to_the_container_with_the_relabel_fix():
    result = CliRunner().invoke(audit, ["--json", "--state-dir", "records", "audit.log"])
    report = json.loads(result.output)
    check_golden("guest-fedora", report)
    assert result.exit_code == 1
    (finding,) = [f for f in report["findings"] if f["perms"] == ["map"]]
    assert finding["container"] == CONTAINER
    assert (finding["injected"]["kind"], finding["injected"]["target"]) == (
        "binary",
        "/usr/bin/synth-smi",
    )
    assert finding["cause"] == "source-unlabelled"
    assert finding["fixes"] == ["ocihook selinux relabel /srv/synth-driver"]
    # Debian's systemd at boot is not ocihook's: counted, not listed
    assert report["summary"]["not_listed"] == 1


def test_a_module_request_for_an_injected_node_is_a_driver_the_host_lacks():
    """The fake hosts' nodes (kfd, accel, infiniband, rdma_cm) have no driver in the guest:
    opening them made the kernel ask to load one. Each denial names the injected node by its
    numbers, and the fix is the host's driver, never a rule letting containers load modules."""
    result = CliRunner().invoke(audit, ["--json", "--state-dir", "records", "audit.log"])
    report = json.loads(result.output)
    requests = [f for f in report["findings"] if f["perms"] == ["module_request"]]
    nodes = sorted(f["injected"]["target"] for f in requests)
    assert nodes == [
        "/dev/accel/accel1",
        "/dev/accel/accel_controlD1",
        "/dev/infiniband/rdma_cm",
        "/dev/infiniband/umad1",
        "/dev/infiniband/uverbs1",
        "/dev/kfd",
    ]
    for finding in requests:
        assert finding["cause"] == "driver-not-loaded"
        assert finding["container"] and "device number" in finding["matched_by"]
        (fix,) = finding["fixes"]
        assert fix.startswith("load the device's driver on the host (`modprobe -R char-major-")
        assert not any(f.startswith("allow ") for f in finding["fixes"])


def test_a_boolean_the_policy_offers_never_replaces_the_relabel():
    """Fedora's policy says a host-wide boolean (domain_can_mmap_files) would allow the map:
    the report still gives the relabel as the one fix, and says why not the boolean."""
    parsed = read_inputs(["audit.log"])
    containers, _ = load_records("records")
    findings = explain.explain_all(
        parsed.events, lambda event, avc: match(event, avc, containers), RecordedVerdict()
    )
    (finding,) = [f for f in findings if f.avc.denied and "user_home_t" in f.avc.tcontext]
    assert finding.verdict.verdict == "BOOLEAN"
    assert finding.cause == "source-unlabelled"
    assert finding.fixes == ["ocihook selinux relabel /srv/synth-driver"]
    assert "domain_can_mmap_files=on would allow it" in finding.explanation
    assert "the driver's label is the cause" in finding.explanation
    assert "this host's policy denies containers { map }" in finding.explanation
    assert not any(fix.startswith(("setsebool", "allow ")) for fix in finding.fixes)
