"""--policy verdicts agree with audit2why run on the same records through sepolgen."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from ocihook.cli.audit import audit
from tests.policy_build import build_linked_policy

# ocihook's --policy and the reference both load the policy into libselinux's audit2why.
pytestmark = pytest.mark.devstack("selinux.audit2why", "sepolgen")

# Debian's own policy (no container module: its verdicts cover the general cases) ...
POLICY = Path("/etc/selinux/default/policy/policy.33")  # scripts/install-deps.sh installs it

AVC = (
    "type=AVC msg=audit(1764518400.{n}:{n}): avc:  denied  {{ {perms} }} for  pid=7 "
    'comm="p" name="f" dev="sda1" ino={n} scontext={s} tcontext={t} tclass={c} permissive=0'
)
CASES = [
    ("system_u:system_r:httpd_t:s0", "unconfined_u:object_r:user_home_t:s0", "file", "read"),
    (
        "system_u:system_r:svirt_t:s0:c1,c2",
        "system_u:object_r:svirt_image_t:s0:c3,c4",
        "file",
        "read",
    ),
    ("user_u:user_r:user_t:s0", "system_u:object_r:shadow_t:s0", "file", "read"),
    ("system_u:system_r:httpd_t:s0", "system_u:object_r:shadow_t:s0", "file", "read"),
    ("system_u:system_r:svirt_t:s0:c1,c2", "system_u:object_r:usr_t:s0", "file", "read"),
    (
        "system_u:system_r:svirt_t:s0:c1,c2",
        "system_u:object_r:dri_device_t:s0",
        "chr_file",
        "read write",
    ),
    ("system_u:system_r:container_t:s0:c1,c2", "system_u:object_r:lib_t:s0", "file", "read"),
    (
        "system_u:system_r:container_t:s0:c1,c2",
        "system_u:object_r:xserver_misc_device_t:s0",
        "chr_file",
        "map",
    ),
]

# ... and the linked refpolicy + container + ocihook policy, for the container cases.
CONTAINER = "system_u:system_r:container_t:s0:c1,c2"
CONTAINER_CASES = [
    (CONTAINER, "system_u:object_r:ocihook_device_t:s0", "chr_file", "open read write ioctl map"),
    (CONTAINER, "system_u:object_r:container_ro_file_t:s0", "file", "read open map execute"),
    (CONTAINER, "system_u:object_r:container_ro_file_t:s0", "file", "write"),
    (CONTAINER, "system_u:object_r:container_file_t:s0:c3,c4", "file", "read"),
    (CONTAINER, "system_u:object_r:xserver_misc_device_t:s0", "chr_file", "read write"),
    (CONTAINER, "system_u:object_r:fixed_disk_device_t:s0", "blk_file", "read"),
    (CONTAINER, "system_u:object_r:user_home_t:s0", "file", "read"),
]

# The reference: sepolgen's audit parser, which calls audit2why.analyze() per AVC (as the
# audit2why command does); AVCs it rejects (unknown context) are asked of audit2why directly.
REFERENCE = textwrap.dedent(
    """
    import json, re, sys
    import selinux.audit2why as audit2why
    from sepolgen import audit
    names = {getattr(audit2why, n): n for n in
             "ALLOW DONTAUDIT TERULE BOOLEAN CONSTRAINT RBAC BOUNDS BADSCON BADTCON "
             "BADTCLASS BADPERM BADCOMPUTE NOPOLICY UNKNOWN".split()}
    audit2why.init(sys.argv[1])
    parser = audit.AuditParser()
    parser.parse_string(open(sys.argv[2]).read())
    out = {}
    for msg in parser.avc_msgs:
        serial = int(re.search(r":(\\d+)\\)", msg.header).group(1))
        out[serial] = [names[msg.type], msg.data if msg.type == audit2why.BOOLEAN else None]
    for msg in parser.invalid_msgs:
        serial = int(re.search(r"audit\\([\\d.]+:(\\d+)\\)", msg.message).group(1))
        f = dict(x.split("=", 1) for x in msg.message.split() if x.count("=") == 1)
        perms = msg.message.split("{")[1].split("}")[0].split()
        code, data = audit2why.analyze(f["scontext"], f["tcontext"], f["tclass"], perms)
        out[serial] = [names[code], None]
    print(json.dumps(out))
    """
)


def test_policy_verdicts_match_audit2why(tmp_path):
    assert POLICY.exists(), "selinux-policy-default is missing: run scripts/install-deps.sh"
    _cross_check(POLICY, CASES, tmp_path, min_verdicts=4)


@pytest.mark.root
def test_linked_container_policy_verdicts_match_audit2why(tmp_path):
    report = _cross_check(build_linked_policy(), CONTAINER_CASES, tmp_path, min_verdicts=3)
    verdicts = [
        f["verdict"]["verdict"] for f in sorted(report["findings"], key=lambda f: f["serial"])
    ]
    assert verdicts[0] == "ALLOW" and verdicts[1] == "ALLOW"
    assert verdicts[2] == "TERULE" and verdicts[3] == "CONSTRAINT"


def _cross_check(policy: Path, cases: list, tmp_path: Path, min_verdicts: int) -> dict:
    log = tmp_path / "audit.log"
    log.write_text(
        "\n".join(
            AVC.format(n=n, s=s, t=t, c=c, perms=p) for n, (s, t, c, p) in enumerate(cases, 1)
        )
        + "\n"
    )
    reference = subprocess.run(
        [sys.executable, "-c", REFERENCE, str(policy), str(log)],
        check=True,
        capture_output=True,
        text=True,
    )
    want = {int(k): v for k, v in json.loads(reference.stdout).items()}
    result = CliRunner().invoke(
        audit, ["--json", "--all", "--policy", str(policy), "--state-dir", str(tmp_path), str(log)]
    )
    report = json.loads(result.output)
    assert report["policy"] == str(policy)
    got = {
        f["serial"]: [f["verdict"]["verdict"], f["verdict"]["booleans"] or None]
        for f in report["findings"]
    }
    assert got == want
    # the records cover the verdicts that matter, whatever the policy
    assert len({v[0] for v in want.values()}) >= min_verdicts
    booleans = [f for f in report["findings"] if f["verdict"]["verdict"] == "BOOLEAN"]
    for finding in booleans:
        assert finding["fixes"][0].startswith("setsebool -P ")
    assert (
        "Verdicts from audit2why"
        in CliRunner()
        .invoke(audit, ["--policy", str(policy), "--state-dir", str(tmp_path), str(log)])
        .output
    )
    return report
