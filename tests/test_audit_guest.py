"""`ocihook audit` on records captured in the SELinux-enforcing guest (make test-enforcing).

tests/data/avc/guest-enforcing/: the guest's whole audit.log of one run of the tier (boot-time
denials of Debian's own services; the broken-on-purpose check's denial: runc refused
`entrypoint` on the injected synth-smi, its driver tree relabelled user_home_t), and the hook's
records of the two broken-on-purpose containers as the hook kept them after they exited and
were removed. ldconfig-nnp.log: the denial an ocihook that ran its sandboxed ldconfig with a
domain transition got in the same guest (captured with that code path restored).
"""

from __future__ import annotations

import json

import pytest
from audit_helpers import DATA, check_golden
from click.testing import CliRunner

from ocihook.cli.audit import audit

GUEST = DATA / "guest-enforcing"
CONTAINER = "8daa5adf6ed62d4eab658efab02bbd0651f24a3d80504d7dbb0a6bb95ee99ca3"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(audit, list(args))
    return result.exit_code, result.output


@pytest.fixture(autouse=True)
def _in_guest_data(monkeypatch):
    """Relative paths (the report names its input files) and UTC."""
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.chdir(GUEST)


def test_denial_of_a_removed_container_is_tied_to_it_with_the_relabel_fix():
    code, out = run("--json", "--state-dir", "records", "audit.log")
    report = json.loads(out)
    check_golden("guest-enforcing", report)
    assert code == 1 and report["exit_code"] == 1
    (finding,) = report["findings"]
    assert finding["container"] == CONTAINER
    assert finding["injected"]["kind"] == "binary"
    assert finding["injected"]["target"] == "/usr/bin/synth-smi"
    assert finding["perms"] == ["entrypoint"]
    assert finding["cause"] == "source-unlabelled"
    assert finding["fixes"] == ["ocihook selinux relabel /srv/synth-driver"]
    # the distribution's own boot-time denials are counted, not listed
    assert report["summary"]["not_listed"] == report["summary"]["denials"] - 1 > 0


def test_text_report_never_suggests_an_allow_rule_for_a_relabel():
    code, out = run("--state-dir", "records", "audit.log")
    assert code == 1
    assert f"Container {CONTAINER[:12]}" in out
    assert "fix: ocihook selinux relabel /srv/synth-driver" in out
    assert "allow " not in out
    assert "not related to ocihook not listed (--all lists them)" in out


def test_without_records_the_denial_is_not_blamed_on_ocihook():
    """The same log with an empty state dir: nothing to tie it to, nothing listed, exit 0."""
    code, out = run("--state-dir", "/nonexistent", "audit.log")
    assert code == 0 and "No denials related to ocihook." in out


def test_the_hooks_own_ldconfig_transition_denial_is_ocihooks_with_its_real_fix():
    code, out = run("--json", "--state-dir", "/nonexistent", "ldconfig-nnp.log")
    report = json.loads(out)
    check_golden("guest-ldconfig-nnp", report)
    assert code == 1
    hook = [f for f in report["findings"] if f["cause"] == "hook"]
    assert hook and all(f["tclass"] == "process2" for f in hook)
    assert set(hook[0]["perms"]) == {"nnp_transition", "nosuid_transition"}
    assert "ldconfig_t" in hook[0]["tcontext"]
    assert hook[0]["fixes"] == [
        "upgrade ocihook (its ldconfig sandbox no longer asks for a transition)"
    ]
    assert not any(fix.startswith("allow ") for f in hook for fix in f["fixes"])
