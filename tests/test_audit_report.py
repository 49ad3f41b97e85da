"""Correlation with hook records, explanations, CLI output and exit status."""

from __future__ import annotations

import gzip
import json
import os

import pytest
from audit_helpers import DATA

from ocihook.audit.records import categories
from ocihook.cli.audit import parse_since
from tests.support.cli import invoke

CID = "3f2a9c1b7e04d5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4"
OTHER = "99aa9c1b7e04d5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4"


def record(cid: str, level: str, pid: int) -> dict:
    """A record as the hook writes it to /run/ocihook/<id>.json (version 1)."""
    return {
        "version": 1,
        "id": cid,
        "created": "2025-11-30T15:59:58Z",
        "pid": pid,
        "rootfs": f"/var/lib/containers/storage/overlay/{cid[:8]}/merged",
        "bundle": f"/run/containers/storage/overlay-containers/{cid}/userdata",
        "profile": "synthetic",
        "source_root": "/run/synth/driver",
        "device_root": "/",
        "mount_label": f"system_u:object_r:container_file_t:{level}",
        "process_label": f"system_u:system_r:container_t:{level}",
        "mounts": [
            {
                "source": "/run/synth/driver/usr/lib/x86_64-linux-gnu/libsynth.so.1.2.3",
                "target": "/usr/lib64/libsynth.so.1.2.3",
                "kind": "library",
                "dev": os.makedev(259, 77),
                "ino": 12345,
                "label": "system_u:object_r:container_ro_file_t:s0",
            },
            {
                "source": "/run/synth/driver/usr/lib/x86_64-linux-gnu/libsynth-ml.so.4",
                "target": "/usr/lib64/libsynth-ml.so.4",
                "kind": "library",
                "dev": os.makedev(259, 77),
                "ino": 777,
                "label": "system_u:object_r:container_ro_file_t:s0",
            },
        ],
        "links": [{"target": "/usr/lib64/libsynth.so.1", "points_to": "libsynth.so.1.2.3"}],
        "devices": [
            {
                "path": "/dev/synth0",
                "host_path": "/dev/synth0",
                "type": "c",
                "major": 10,
                "minor": 237,
                "label": "system_u:object_r:ocihook_device_t:s0",
                "index": 0,
            }
        ],
        "cgroup": [],
        "ld_dirs": ["/usr/lib64"],
    }


@pytest.fixture
def state(tmp_path):
    directory = tmp_path / "ocihook"
    directory.mkdir()
    (directory / f"{CID}.json").write_text(json.dumps(record(CID, "s0:c123,c456", 4200)))
    (directory / f"{OTHER}.json").write_text(json.dumps(record(OTHER, "s0:c7,c9", 5200)))
    (directory / "broken.json").write_text("{not json")
    return directory


def run(*args, stdin=None):
    code, out, _ = invoke(["audit", *args], stdin)
    return code, out


def findings(state, *files, extra=()):
    code, out = run("--json", "--state-dir", str(state), *extra, *files)
    return code, json.loads(out)


def by_target(report):
    return {f["target"]: f for f in report["findings"]}


def test_report_names_container_file_and_fix(state):
    code, report = findings(state, str(DATA / "audit.log"))
    assert code == 1
    got = by_target(report)
    lib = got["libsynth.so.1.2.3"]  # AVC name= only; PATH record gives the container path
    assert lib["container"] == CID and lib["profile"] == "synthetic"
    assert lib["injected"]["target"] == "/usr/lib64/libsynth.so.1.2.3"
    assert lib["matched_by"] == ["MCS categories", "path"]
    assert lib["cause"] == "source-unlabelled"
    assert lib["fixes"] == ["ocihook selinux relabel /run/synth/driver"]
    dev = got["/dev/synth0"]
    assert dev["container"] == CID and dev["cause"] == "device-type"
    assert dev["fixes"][0] == "semodule -i /usr/share/selinux/packages/ocihook.pp"
    assert "chcon -t ocihook_device_t /dev/synth0" in dev["fixes"][1]
    assert (
        dev["fixes"][2]
        == "or keep xserver_misc_device_t: setsebool -P ocihook_use_vendor_devices on"
    )
    ml = got["/usr/lib64/libsynth-ml.so.4"]
    assert ml["cause"] == "mcs-mismatch" and "c7,c9" in ml["explanation"]
    assert ml["fixes"] == ["ocihook selinux relabel /run/synth/driver"]
    # same categories, but no injected file: the container's, not the hook's file
    assert got["/opt/synth dir"]["container"] == CID and got["/opt/synth dir"]["permissive"]
    assert got["/opt/synth dir"]["injected"] is None
    assert got["/opt/synth dir"]["cause"] == "not-ocihook"
    assert any("broken.json" in w for w in report["warnings"])


def test_text_report_groups_by_container_and_cause(state):
    code, out = run("--state-dir", str(state), str(DATA / "audit.log"))
    assert code == 1
    assert f"Container {CID[:12]}  profile synthetic  source /run/synth/driver" in out
    assert "  source not labelled for containers:" in out
    assert "  device type not allowed for containers:" in out
    assert "  MCS categories do not match:" in out
    assert "injected library /usr/lib64/libsynth.so.1.2.3 from /run/synth/driver" in out
    assert "    fix: ocihook selinux relabel /run/synth/driver" in out
    assert "5 denial(s), 5 related to ocihook;" in out  # the unrelated auditallow: not listed


def test_unrelated_denials_are_counted_not_listed_and_exit_zero(state):
    """Exit 1 exactly when a denial is listed: unrelated ones are listed only with --all."""
    code, report = findings(state, str(DATA / "samples.jsonl"))
    assert code == 0 and report["findings"] == []
    assert report["summary"]["not_listed"] == report["summary"]["denials"] > 0
    code, out = run("--state-dir", str(state), str(DATA / "samples.jsonl"))
    assert code == 0 and "No denials related to ocihook." in out and "--all lists them" in out
    code, report = findings(state, str(DATA / "samples.jsonl"), extra=("--all",))
    assert code == 1
    denied = [f for f in report["findings"] if f["result"] == "denied"]
    assert denied and all(f["cause"] == "not-ocihook" for f in denied)
    assert all(f["fixes"][0].startswith("allow container_t ") for f in denied)


def test_container_filter_is_a_prefix(state):
    code, report = findings(state, str(DATA / "audit.log"), extra=("--container", OTHER[:6]))
    assert code == 0 and report["findings"] == []
    code, report = findings(state, str(DATA / "audit.log"), extra=("--container", CID[:6]))
    assert code == 1 and {f["container"] for f in report["findings"]} == {CID}


def test_match_by_inode_and_host_path(state, tmp_path):
    log = tmp_path / "a.log"
    log.write_text(
        'type=AVC msg=audit(1764518400.1:1): avc:  denied  { execute } for  pid=9 comm="x" '
        'name="libsynth.so.1.2.3" dev="zz" ino=12345 scontext=system_u:system_r:container_t:s0 '
        "tcontext=system_u:object_r:lib_t:s0 tclass=file permissive=0\n"
        'type=AVC msg=audit(1764518400.1:2): avc:  denied  { read } for  pid=9 comm="x" '
        'path="/run/synth/driver/usr/lib/x86_64-linux-gnu/libsynth-ml.so.4" dev="zz" ino=1 '
        "scontext=system_u:system_r:container_t:s0 "
        "tcontext=system_u:object_r:container_ro_file_t:s0 tclass=file permissive=0\n"
    )
    code, report = findings(state, str(log))
    assert code == 1
    first, second = report["findings"]
    # s0 without categories belongs to no one container: both records inject the file
    assert first["matched_by"] == ["inode"] and sorted(first["candidates"]) == sorted([CID, OTHER])
    assert second["matched_by"] == ["host path"] and second["cause"] == "missing-rule"


def test_since_filters_events(state):
    code, report = findings(
        state, str(DATA / "audit.log"), extra=("--since", "1764518500", "--all")
    )
    assert {f["serial"] for f in report["findings"]} == {5003, 5004, 5005, 5006}
    assert parse_since("10m", now=1000.0) == 400.0
    assert parse_since("1h", now=7200.0) == 3600.0
    assert parse_since("2025-11-30T16:00:00Z") == 1764518400.0


def test_stdin_gzip_and_exit_codes(state, tmp_path):
    data = (DATA / "audit.log").read_bytes()
    assert run("--state-dir", str(state), "-", stdin=data)[0] == 1
    gz = tmp_path / "audit.log.1.gz"
    gz.write_bytes(gzip.compress(data))
    assert run("--state-dir", str(state), str(gz))[0] == 1
    assert run("--since", "whenever", str(gz))[0] == 2  # a usage error
    # Input that cannot be read: 3, neither "clean" (0) nor "denials listed" (1).
    assert run("--state-dir", str(state), str(tmp_path / "missing.log"))[0] == 3
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"\x1f\x8b" + b"\x00" * 30)
    assert run("--state-dir", str(state), str(bad))[0] == 3
    assert run("--policy", str(tmp_path / "nopolicy"), str(gz))[0] == 3
    unreadable = tmp_path / "unreadable.log"
    unreadable.write_bytes(data)
    unreadable.chmod(0)
    if os.geteuid() != 0:  # root reads it anyway: a directory stands in
        assert run("--state-dir", str(state), str(unreadable))[0] == 3
    assert run("--state-dir", str(state), str(tmp_path))[0] == 3
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert run("--state-dir", str(state), str(empty))[0] == 0  # an empty log is a clean one


def test_garbage_and_truncated_input_is_reported_not_fatal(state, tmp_path):
    junk = os.urandom(4096) + b"\n" + (DATA / "truncated.txt").read_bytes()
    code, out, err = invoke(["audit", "--json", "--state-dir", str(state), "-"], junk)
    report = json.loads(out)
    assert code == 1  # the one complete MCS-mismatch denial in truncated.txt
    assert report["summary"]["unreadable"] >= 5
    # The lines that are no audit record at all are counted on stderr, in one line.
    assert err.startswith("ocihook: warning: ") and err.count("\n") == 1, err
    assert "line(s) are not audit records (" in err and "binary)" in err
    gz = tmp_path / "t.gz"
    whole = gzip.compress((DATA / "audit.log").read_bytes() + os.urandom(200000).hex().encode())
    gz.write_bytes(whole[: len(whole) // 2])  # cut mid-stream
    code, out = run("--state-dir", str(state), str(gz))
    assert code == 1 and "read error: Compressed file ended" in out


def test_input_without_audit_records_is_one_line_and_status_3(state):
    """Binary or other text, and no audit record at all: one line that says so, never the
    raw bytes, and status 3 (neither clean, 0, nor denials listed, 1)."""
    junk = bytes(b for b in range(256) if b != 10) * 2 + b"\n\xff\xfe\x1b[31mred\n"
    for args in ([], ["--json"]):
        code, out, err = invoke(["audit", *args, "--state-dir", str(state), "-"], junk)
        assert code == 3, err
        assert (
            err
            == "ocihook: <stdin>: not audit records: 2 line(s) of binary data, no audit record\n"
        )
        assert out == "" if not args else json.loads(out)["exit_code"] == 3
    code, out, err = invoke(["audit", "--state-dir", str(state), "-"], "hello\nworld\n")
    assert code == 3 and err == "ocihook: <stdin>: not audit records: 2 line(s), no audit record\n"


def test_pasted_fragments_are_found_and_explained(state):
    """tests/data/avc/fragments.txt: header-less denials as pasted in an issue (one a line,
    wrapped, quoted) among prose; every one is a finding with its cause and fix, the prose
    is counted on stderr, and the status is 1 (denials listed), not 3."""
    code, out, err = invoke(
        ["audit", "--json", "--all", "--state-dir", str(state), str(DATA / "fragments.txt")]
    )
    assert code == 1, err
    report = json.loads(out)
    got = [(f["target"], f["container"], f["cause"], f["fixes"][0]) for f in report["findings"]]
    relabel = "ocihook selinux relabel /run/synth/driver"
    assert got == [
        ("libsynth.so.1.2.3", CID, "source-unlabelled", relabel),
        ("synth0", CID, "device-type", "semodule -i /usr/share/selinux/packages/ocihook.pp"),
        ("/usr/lib64/libsynth-ml.so.4", OTHER, "mcs-mismatch", relabel),
        ("btmp", None, "not-ocihook", "allow container_t var_log_t:file { unlink };"),
    ]  # fmt: skip
    assert all(f["explanation"] for f in report["findings"])
    assert err == "ocihook: warning: 4 of 16 line(s) are not audit records\n"
    code, out = run("--state-dir", str(state), str(DATA / "fragments.txt"))
    assert code == 1 and "3 related to ocihook" in out
    # Prose that merely says "denied { ... } for" is still no audit record: status 3.
    prose = "the merge was denied { again } for now\nhello\n"
    code, out, err = invoke(["audit", "--state-dir", str(state), "-"], prose)
    assert code == 3 and err == "ocihook: <stdin>: not audit records: 2 line(s), no audit record\n"


def test_binary_lines_are_escaped_never_echoed(state):
    """The report lists a binary line among real records as printable ASCII escapes."""
    raw = b"\x1b]0;title\x07\xc3\xa9\\ok"
    data = (DATA / "audit.log").read_bytes() + raw + b"\n"
    code, out, err = invoke(["audit", "--json", "--state-dir", str(state), "-"], data)
    assert code == 1 and "1 of" in err and "(1 binary)" in err
    (line,) = [u for u in json.loads(out)["unreadable"] if u["reason"] == "binary data"]
    assert line["text"] == "\\x1b]0;title\\x07\\xc3\\xa9\\x5cok"
    code, out, err = invoke(["audit", "--state-dir", str(state), "-"], data)
    assert "\x1b" not in out + err and "\xe9" not in out + err
    assert "binary data: \\x1b]0;title" in out


def test_categories():
    assert categories("system_u:system_r:container_t:s0:c1,c2") == {"c1", "c2"}
    assert categories("u:r:t:s0-s0:c0.c3") == set()
    assert categories("u:r:t:s0:c0.c2-s0:c0.c1023") == {"c0", "c1", "c2"}
    assert categories("garbage") == set()
