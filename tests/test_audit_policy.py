"""--policy verdicts agree with audit2why run on the same records through sepolgen."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner

from ocihook.audit.cli import audit

# One line to switch to the linked refpolicy + container + ocihook policy once
# tests/policy_build.py lands: POLICY = build_linked_policy()
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
    log = tmp_path / "audit.log"
    log.write_text(
        "\n".join(
            AVC.format(n=n, s=s, t=t, c=c, perms=p) for n, (s, t, c, p) in enumerate(CASES, 1)
        )
        + "\n"
    )
    reference = subprocess.run(
        [sys.executable, "-c", REFERENCE, str(POLICY), str(log)],
        check=True,
        capture_output=True,
        text=True,
    )
    want = {int(k): v for k, v in json.loads(reference.stdout).items()}
    result = CliRunner().invoke(
        audit, ["--json", "--all", "--policy", str(POLICY), "--state-dir", str(tmp_path), str(log)]
    )
    report = json.loads(result.output)
    assert report["policy"] == str(POLICY)
    got = {
        f["serial"]: [f["verdict"]["verdict"], f["verdict"]["booleans"] or None]
        for f in report["findings"]
    }
    assert got == want
    # the records cover the verdicts that matter, whatever the policy
    assert len({v[0] for v in want.values()}) >= 4
    booleans = [f for f in report["findings"] if f["verdict"]["verdict"] == "BOOLEAN"]
    for finding in booleans:
        assert finding["fixes"][0].startswith("setsebool -P ")
    assert (
        "Verdicts from audit2why"
        in CliRunner()
        .invoke(audit, ["--policy", str(POLICY), "--state-dir", str(tmp_path), str(log)])
        .output
    )
