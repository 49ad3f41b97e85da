"""Records outlive the container: the shipped registration has no poststop stage, so a record
says running until an injecting start's sweep finds its process gone (orphaned); with the
poststop stage added (an admin's choice) it is marked exited with the exit time. Pruning by
age and count, and `ocihook audit` ties denials to containers that are gone either way.
All with real podman + runc containers."""

from __future__ import annotations

import json
import os
import stat
import time

from click.testing import CliRunner

from ocihook.cli.audit import audit
from ocihook.records import SWEEP_STAMP, is_running, process_start
from tests.conftest import base_config
from tests.support import podman


def read(path) -> dict:
    return json.loads(path.read_text())


def _with_poststop(hook_setup) -> None:
    """The registration with the poststop stage added (not shipped: exact exit times)."""
    podman.write_hooks_dir(
        hook_setup.hooks_dir, hook_setup.hook, hook_setup.config, hook_setup.cache_dir,
        poststop=True,
    )  # fmt: skip


def test_record_running_then_exited_with_the_poststop_stage(hook_setup, image_busybox):
    _with_poststop(hook_setup)
    name = podman.unique_name("ocihook-i12-lifecycle")
    started = time.time()
    result = hook_setup.run(
        image_busybox, ["/bin/sleep", "60"], devices="0", extra=["-d", "--name", name]
    )
    try:
        assert result.returncode == 0, result.stderr
        (path,) = hook_setup.records()
        body = read(path)
        assert body["status"] == "running" and body["version"] == 2
        assert started - 1 <= body["created_at"] <= time.time()
        assert body["pid_start"] == process_start(body["pid"])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(hook_setup.state_dir.stat().st_mode) == 0o700
    finally:
        podman.remove(name)
    body = read(path)
    assert body["status"] == "exited"
    assert body["created_at"] <= body["exited_at"] <= time.time()
    assert [p.name for p in hook_setup.state_dir.iterdir() if p.name.endswith(".tmp")] == []


def test_a_0755_state_dir_of_an_older_version_is_tightened(hook_setup, image_busybox):
    hook_setup.state_dir.mkdir()
    hook_setup.state_dir.chmod(0o755)
    assert hook_setup.run(image_busybox, ["/bin/true"], devices="0").returncode == 0
    assert stat.S_IMODE(hook_setup.state_dir.stat().st_mode) == 0o700
    assert len(hook_setup.records()) == 1


def _sweep_due(hook_setup) -> None:
    """The sweep runs at most once a minute: make the last one a minute old."""
    stamp = hook_setup.state_dir / SWEEP_STAMP
    old = time.time() - 61
    os.utime(stamp, (old, old))


def test_a_gone_container_is_marked_by_the_next_injecting_start(hook_setup, image_busybox):
    """The shipped registration (no poststop): the record says running, its process is gone
    (liveness: pid and start time), and the next injecting start's sweep marks it."""
    assert json.loads((hook_setup.hooks_dir / "ocihook.json").read_text())["stages"] == [
        "createRuntime"
    ]
    result = hook_setup.run(image_busybox, ["/bin/true"], devices="0")
    assert result.returncode == 0, result.stderr
    (orphan,) = hook_setup.records()
    assert read(orphan)["status"] == "running"  # no poststop came
    assert not is_running(read(orphan))
    _sweep_due(hook_setup)
    before = time.time()
    result = hook_setup.run(image_busybox, ["/bin/true"], devices="0")
    assert result.returncode == 0, result.stderr
    body = read(orphan)
    assert body["status"] == "orphaned"
    assert before <= body["orphaned_at"] <= time.time()
    assert "exited_at" not in body
    statuses = sorted(read(p)["status"] for p in hook_setup.records())
    assert statuses == ["orphaned", "running"]  # the second one had no poststop either


def test_sweep_leaves_a_live_container_running(hook_setup, image_busybox):
    name = podman.unique_name("ocihook-i12-live")
    result = hook_setup.run(
        image_busybox, ["/bin/sleep", "60"], devices="0", extra=["-d", "--name", name]
    )
    try:
        assert result.returncode == 0, result.stderr
        (live,) = hook_setup.records()
        _sweep_due(hook_setup)
        assert hook_setup.run(image_busybox, ["/bin/true"], devices="0").returncode == 0
        assert read(live)["status"] == "running"
    finally:
        podman.remove(name)
    assert read(live)["status"] == "running" and not is_running(read(live))


def test_pruned_by_count(hook_setup, synth_root, image_busybox):
    config = base_config(hook_setup.dir, synth_root, records={"max_count": 2, "max_age": 3600})
    hook_setup.write_config(**config)
    ids = []
    for round_ in range(4):
        if round_ == 3:
            _sweep_due(hook_setup)  # the sweep runs at most once a minute
        result = hook_setup.run(image_busybox, ["/bin/true"], devices="0")
        assert result.returncode == 0, result.stderr
        newest = max(hook_setup.records(), key=lambda p: read(p)["created_at"])
        ids.append(newest.stem)
    left = {p.stem: read(p)["status"] for p in hook_setup.records()}
    # the sweep at the 4th prestart kept the newest two and marked the one whose process
    # was gone; the older two (gone too) were surplus
    assert left == {ids[2]: "orphaned", ids[3]: "running"}


def test_pruned_by_age_but_never_a_running_container(hook_setup, synth_root, image_busybox):
    config = base_config(hook_setup.dir, synth_root, records={"max_age": 600})
    hook_setup.write_config(**config)
    name = podman.unique_name("ocihook-i12-age")
    result = hook_setup.run(
        image_busybox, ["/bin/sleep", "60"], devices="0", extra=["-d", "--name", name]
    )
    try:
        assert result.returncode == 0, result.stderr
        (live,) = hook_setup.records()
        assert hook_setup.run(image_busybox, ["/bin/true"], devices="0").returncode == 0
        (exited,) = [p for p in hook_setup.records() if p != live]
        old = time.time() - 601
        for path in (live, exited):
            os.utime(path, (old, old))
        _sweep_due(hook_setup)
        assert hook_setup.run(image_busybox, ["/bin/true"], devices="0").returncode == 0
        left = {p.stem: read(p)["status"] for p in hook_setup.records()}
        assert exited.stem not in left
        assert left[live.stem] == "running"
        assert sorted(left.values()) == ["running", "running"]
    finally:
        podman.remove(name)


def test_sweep_removes_temporary_files_of_killed_writers(hook_setup, image_busybox):
    hook_setup.state_dir.mkdir(mode=0o700)
    stale = hook_setup.state_dir / ".dead.json.4242.tmp"
    fresh = hook_setup.state_dir / ".busy.json.4243.tmp"
    for path in (stale, fresh):
        path.write_text("{")
        path.chmod(0o600)
    old = time.time() - 601
    os.utime(stale, (old, old))
    assert hook_setup.run(image_busybox, ["/bin/true"], devices="0").returncode == 0
    assert not stale.exists() and fresh.exists()


def _avc(when: float, pid: int, path: str) -> str:
    return (
        f"type=AVC msg=audit({when:.3f}:4242): avc:  denied  {{ read }} for  pid={pid} "
        f'comm="synth-smi" path="{path}" dev="overlay" ino=99 '
        "scontext=system_u:system_r:container_t:s0:c1,c2 "
        "tcontext=system_u:object_r:container_file_t:s0 tclass=file permissive=0\n"
    )


def test_audit_ties_a_denial_to_a_container_gone_by_liveness(hook_setup, image_busybox, tmp_path):
    """No poststop (the shipped registration): the record still says running, the audit
    reads it as gone (its pid no longer runs) and ties a denial of its lifetime to it."""
    result = hook_setup.run(image_busybox, ["/bin/true"], devices="0")
    assert result.returncode == 0, result.stderr
    (path,) = hook_setup.records()
    body = read(path)
    assert body["status"] == "running" and not is_running(body)
    log = tmp_path / "audit.log"
    log.write_text(_avc(body["created_at"] + 0.1, body["pid"], "/usr/bin/synth-smi"))
    state = ["--json", "--state-dir", str(hook_setup.state_dir)]
    out = CliRunner().invoke(audit, [*state, str(log)], catch_exceptions=False)
    (finding,) = json.loads(out.output)["findings"]
    assert finding["container"] == body["id"]
    assert finding["injected"]["target"] == "/usr/bin/synth-smi"


def test_audit_ties_a_denial_to_an_exited_container(hook_setup, image_busybox, tmp_path):
    _with_poststop(hook_setup)
    result = hook_setup.run(image_busybox, ["/bin/true"], devices="0")
    assert result.returncode == 0, result.stderr
    (path,) = hook_setup.records()
    body = read(path)
    assert body["status"] == "exited"
    log = tmp_path / "audit.log"
    during = (body["created_at"] + body["exited_at"]) / 2
    log.write_text(_avc(during, body["pid"], "/usr/bin/synth-smi"))
    state = ["--json", "--state-dir", str(hook_setup.state_dir)]
    out = CliRunner().invoke(audit, [*state, str(log)], catch_exceptions=False)
    (finding,) = json.loads(out.output)["findings"]
    assert finding["container"] == body["id"]
    assert finding["injected"]["target"] == "/usr/bin/synth-smi"
    # the same pid an hour later is another process: not this container's denial (listed
    # only with --all, as every denial not related to ocihook)
    log.write_text(_avc(body["exited_at"] + 3600, body["pid"], "/etc/passwd"))
    out = CliRunner().invoke(audit, [*state, "--all", str(log)], catch_exceptions=False)
    (finding,) = json.loads(out.output)["findings"]
    assert finding["container"] is None
