"""Where ocihook is registered, against the directories the runtimes read
(ocihook/check/registration.py): read by whom, nobody reads it, masked, twice, and a foreign file
that stops the runtime. The runtimes' directories here are temporary ones."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ocihook.check.findings import FAILED, OK, WARNING
from ocihook.check.hooksdirs import Reader
from ocihook.check.registration import registration_findings, runtime_findings

REPO = Path(__file__).resolve().parent.parent


def registration(path: Path, hook: str = "/bin/sh", **changes) -> Path:
    document = {
        "version": "1.0.0",
        "hook": {"path": hook, "args": ["ocihook-hook"], "env": ["PATH=/usr/bin:/bin"]},
        "when": {"annotations": {r"^ocihook\.io/devices$": ".+"}},
        "stages": ["prestart", "poststop"],
    }
    document.update(changes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


@pytest.fixture
def dirs(tmp_path) -> dict[str, Path]:
    names = ("usr", "etc", "custom")
    return {n: tmp_path / n for n in names}


def lines(findings) -> list[tuple[str, str]]:
    return [(f.status, f.message) for f in findings]


def test_a_registration_the_runtimes_read(dirs):
    path = registration(dirs["usr"] / "ocihook.json")
    usr = [str(dirs["usr"])]
    readers = [Reader("podman", usr, "default"), Reader("CRI-O", usr, "default")]
    found = registration_findings(readers, [], (str(dirs["usr"]), str(dirs["etc"])))
    assert lines(found) == [(OK, f"hooks.d file {path} (read by podman, CRI-O)")]


def test_a_registration_in_a_directory_nobody_reads(dirs):
    path = registration(dirs["etc"] / "ocihook.json")
    readers = [Reader("podman", [str(dirs["usr"])], "default")]
    found = registration_findings(readers, [], (str(dirs["usr"]), str(dirs["etc"])))
    assert (
        FAILED,
        f"hooks.d file {path} sits in a directory nobody reads (podman reads {dirs['usr']})",
    ) in lines(found)
    assert (
        FAILED,
        f"no hooks.d file for ocihook in a directory the runtimes read (podman reads "
        f"{dirs['usr']})",
    ) in lines(found)


def test_one_runtime_reads_it_the_other_does_not(dirs):
    path = registration(dirs["custom"] / "ocihook.json")
    readers = [
        Reader("podman", [str(dirs["custom"])], "hooks_dir in x"),
        Reader("CRI-O", [str(dirs["usr"])], "default"),
    ]
    found = lines(registration_findings(readers, [], (str(dirs["usr"]),)))
    assert (OK, f"hooks.d file {path} (read by podman)") in found
    assert (WARNING, f"CRI-O reads no hooks.d file for ocihook ({dirs['usr']})") in found
    assert not [f for f in found if f[0] == FAILED]


def test_a_same_named_file_in_a_later_directory_masks_it(dirs):
    first = registration(dirs["usr"] / "ocihook.json")
    later = registration(dirs["etc"] / "ocihook.json", hook="/nonexistent/ocihook-hook")
    readers = [Reader("podman", [str(dirs["usr"]), str(dirs["etc"])], "hooks_dir in x")]
    found = lines(registration_findings(readers, [], ()))
    assert (WARNING, f"hooks.d file {first}: masked by {later} for podman (same name)") in found
    assert any(s == FAILED and "/nonexistent/ocihook-hook does not exist" in m for s, m in found)
    assert any(s == FAILED and m.startswith("no hooks.d file for ocihook") for s, m in found)


def test_registered_twice(dirs):
    one = registration(dirs["usr"] / "ocihook.json")
    two = registration(dirs["usr"] / "ocihook-env.json", when={"always": True})
    readers = [Reader("podman", [str(dirs["usr"])], "default")]
    found = lines(registration_findings(readers, [], ()))
    assert (
        FAILED,
        f"ocihook is registered twice for podman: {two}, {one} (it runs twice)",
    ) in found


def test_a_foreign_file_that_stops_the_runtime(dirs):
    registration(dirs["usr"] / "ocihook.json")
    other = dirs["usr"] / "other-vendor.json"
    document = {"version": "1.0.0", "hook": {"path": "/bin/true"}, "when": {"always": True}}
    other.write_text(json.dumps({**document, "stages": ["prestrat"], "bogus": 1}))
    readers = [Reader("podman", [str(dirs["usr"])], "default")]
    found = lines(registration_findings(readers, [], ()))
    assert (
        FAILED,
        f"hooks.d file {other}: stages: unknown stage 'prestrat' (podman then runs no container)",
    ) in found
    assert (WARNING, f"hooks.d file {other}: bogus: unknown key, ignored by the runtime") in found


def test_explicit_directories_are_read_as_podman_hooks_dir_reads_them(dirs):
    path = registration(dirs["custom"] / "ocihook.json")
    readers = [Reader("podman", [str(dirs["usr"])], "default")]
    found = lines(registration_findings(readers, [str(dirs["custom"])]))
    assert found == [
        (OK, f"hooks.d file {path}"),
        (
            WARNING,
            f"hooks dir {dirs['custom']}: read only by a runtime started with --hooks-dir "
            f"(podman reads {dirs['usr']})",
        ),
    ]


def test_runtime_findings_name_dirs_origin_and_problems():
    readers = [
        Reader("podman", ["/a"], "hooks_dir in /etc/containers/containers.conf"),
        Reader("CRI-O", [], "hooks_dir in /etc/crio/crio.conf", problems=["x line 2: y: z"]),
    ]
    assert lines(runtime_findings(readers)) == [
        (OK, "hooks dirs: podman reads /a (hooks_dir in /etc/containers/containers.conf)"),
        (WARNING, "hooks dirs: CRI-O reads no directory (hooks_dir in /etc/crio/crio.conf)"),
        (FAILED, "x line 2: y: z"),
    ]


def test_the_precreate_registration_beside_the_prestart_one_is_not_a_second_one(tmp_path):
    """The precreate registration in a dir only podman reads, next to ocihook.json in the
    shared one: both are fine, and the hook is not "registered twice"; the same file in a
    dir CRI-O reads is an error (CRI-O refuses to start)."""
    shared, podman_only = tmp_path / "shared", tmp_path / "podman-only"
    shared.mkdir(), podman_only.mkdir()
    prestart = json.loads((REPO / "hooks.d/ocihook.json").read_text())
    precreate = json.loads((REPO / "hooks.d/ocihook-precreate.json").read_text())
    for document in (prestart, precreate):
        document["hook"]["path"] = sys.executable
    (shared / "ocihook.json").write_text(json.dumps(prestart))
    (podman_only / "ocihook-precreate.json").write_text(json.dumps(precreate))
    readers = [
        Reader("podman", [str(shared), str(podman_only)], "test"),
        Reader("CRI-O", [str(shared)], "test"),
    ]
    findings = registration_findings(readers, [], known=())
    failed = [f.message for f in findings if f.status == FAILED]
    assert failed == [], failed
    assert not any("registered twice" in f.message for f in findings)
    (shared / "ocihook-precreate.json").write_text(json.dumps(precreate))
    findings = registration_findings(readers, [], known=())
    failed = [f.message for f in findings if f.status == FAILED]
    assert any("keep it in a dir only podman reads" in m for m in failed), failed


# -- the stage ocihook runs at (check/stages.py) ---------------------------------------------


@pytest.mark.parametrize(
    "line, parsed, runs",
    [
        ("runc version 1.1.5+ds1", ((1, 1, 5), None), True),  # Debian 12's
        ("runc version 1.0.0-rc91", ((1, 0, 0), 91), True),  # the first with createRuntime
        ("runc version 1.0.0-rc10", ((1, 0, 0), 10), False),
        ("runc version 1.0.0-rc90+dev", ((1, 0, 0), 90), False),
        ("runc version 0.1.1", ((0, 1, 1), None), False),
        ("runc version 1.3.6", ((1, 3, 6), None), True),
        ("crun version 1.8", ((1, 8, 0), None), True),
        ("crun version 0.11", ((0, 11, 0), None), False),
        ("crun version 0.12", ((0, 12, 0), None), True),
    ],
)
def test_which_runtime_versions_run_create_runtime(line, parsed, runs):
    from ocihook.check import stages

    assert stages.parse_version(line) == parsed
    assert stages.runs_create_runtime(line.split()[0], parsed) is runs


def _fake_runtime(bin_dir: Path, name: str, version: str) -> Path:
    path = bin_dir / name
    bin_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho '{name} version {version}'\necho 'spec: 1.0.2'\n")
    path.chmod(0o755)
    return path


def test_stage_lines_say_which_stage_and_who_runs_it(dirs, tmp_path):
    """A createRuntime registration: OK naming the runtimes that run it; FAILED naming one
    that never would (it predates createRuntime), with the way out; a prestart one: OK, and
    why createRuntime is what ships."""
    from ocihook.check import stages
    from ocihook.check.registration import stage_findings

    create = registration(dirs["usr"] / "ocihook.json", stages=["createRuntime", "poststop"])
    readers = [Reader("podman", [str(dirs["usr"])], "default")]
    runtimes = [
        ("runc", "/usr/sbin/runc", "runc version 1.1.5+ds1"),
        ("crun", "/usr/bin/crun", "crun version 1.8"),
    ]
    (found,) = stage_findings(readers, [], runtimes)
    assert (found.status, found.message) == (
        OK,
        f"stage: hooks.d file {create} (read by podman) registers ocihook at createRuntime, "
        "which runc 1.1.5+ds1 (/usr/sbin/runc), crun 1.8 (/usr/bin/crun) runs where prestart "
        "hooks run",
    )
    old = [("runc", "/opt/runc", "runc version 1.0.0-rc10")]
    (failed,) = stage_findings(readers, [], old)
    assert failed.status == FAILED and "runc 1.0.0-rc10 (/opt/runc) never runs" in failed.message
    assert "register ocihook at prestart" in failed.message
    (unknown,) = stage_findings(readers, [], [])
    assert unknown.status == WARNING and "no runc or crun found" in unknown.message
    registration(create, stages=["prestart", "poststop"])
    (prestart,) = stage_findings(readers, [], old)
    assert prestart.status == OK and "registers ocihook at prestart" in prestart.message
    # what this host's own runc and crun answer (Debian 12: both run createRuntime)
    bin_dir = tmp_path / "bin"
    _fake_runtime(bin_dir, "runc", "1.0.0-rc10")
    assert stages.installed_runtimes({"PATH": str(bin_dir)})[0] == (
        "runc",
        str(bin_dir / "runc"),
        "runc version 1.0.0-rc10",
    )


def test_both_prestart_and_create_runtime_run_it_twice(dirs):
    path = registration(dirs["usr"] / "ocihook.json", stages=["prestart", "createRuntime"])
    text = [
        m for _, m in lines(registration_findings([Reader("podman", [str(dirs["usr"])], "x")], []))
    ]
    assert any(
        "both prestart and createRuntime: the runtime runs the hook twice" in m and str(path) in m
        for m in text
    ), text
