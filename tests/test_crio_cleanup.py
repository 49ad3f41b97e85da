"""The CRI-O tier's cleanup (tests/support/crio.py) when a run was killed: what such a run
leaves (its scratch dir, mounts below it, crio running on in a session of its own, container
processes in the cgroups named after the dir) is undone at the start of the next run, and
nothing else is touched.

No crio runs here: the dirs are laid out in a private base dir as a killed run leaves them,
with real bind mounts and real processes. Stand-ins, named so: a sleeping python whose
command line names the dir stands in for the orphaned crio (`--config DIR/crio.conf`), and
sleeping processes in real cgroups named after the dir (in the cgroup v2 hierarchy, mounted
at /sys/fs/cgroup/unified on this hybrid host and at /sys/fs/cgroup on a v2 host, and in the
v1 pids hierarchy where there is one) stand in for conmon and the containers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ocihook.linux import mountinfo
from tests.support import crio as crio_support
from tests.support.crio import DIR_PREFIX, OWNER

V1_HOST = """\
25 21 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,name=systemd
27 25 0:24 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
28 25 0:25 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
"""
HYBRID_HOST = V1_HOST + "29 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
V2_HOST = """\
22 1 0:21 / /proc rw - proc proc rw
30 24 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
"""


def test_cgroup_hierarchies_on_v1_hybrid_and_v2_hosts():
    """Where the cgroups named after a scratch dir can be: one root per hierarchy, the v2
    one directly at /sys/fs/cgroup on a v2 host."""
    v1 = ["/sys/fs/cgroup/systemd", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu,cpuacct"]
    assert [str(p) for p in crio_support.cgroup_hierarchies(V1_HOST)] == v1
    hybrid = crio_support.cgroup_hierarchies(HYBRID_HOST)
    assert [str(p) for p in hybrid] == [*v1, "/sys/fs/cgroup/unified"]
    assert crio_support.cgroup_hierarchies(V2_HOST) == [Path("/sys/fs/cgroup")]
    here = {(e.point, e.fstype) for e in mountinfo.read() if e.fstype.startswith("cgroup")}
    assert {str(p) for p in crio_support.cgroup_hierarchies()} == {p for p, _ in here}


def test_stale_by_owner_pid_and_start_time(tmp_path):
    """A dir whose owner is alive is in use; a dead owner, or a live pid with another start
    time (the pid reused), makes it stale."""
    live = crio_support.make_dir(tmp_path)
    assert (live / OWNER).read_text().split()[0] == str(os.getpid())
    assert not crio_support.stale(live)
    (live / OWNER).write_text(f"{os.getpid()} 1\n")
    assert crio_support.stale(live)
    (live / OWNER).write_text(_dead_owner())
    assert crio_support.stale(live)


def _dead_owner() -> str:
    """The owner line of a process that has ended."""
    process = subprocess.Popen(["sleep", "600"])
    started = crio_support.start_time(process.pid)
    process.kill()
    process.wait()
    assert crio_support.start_time(process.pid) != started
    return f"{process.pid} {started}\n"


def _standin_crio(directory: Path) -> subprocess.Popen:
    """A stand-in for an orphaned crio: asleep in a session of its own, its command line
    naming the dir as crio's does."""
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(600)",
            "--config",
            f"{directory}/crio.conf",
        ],
        start_new_session=True,
    )


def _standin_container(cgroup: Path) -> subprocess.Popen | None:
    """A stand-in container process, asleep in `cgroup` (made here); None where the
    hierarchy is not writable."""
    try:
        cgroup.mkdir(parents=True)
    except OSError:
        return None
    process = subprocess.Popen(["sleep", "600"])
    (cgroup / "cgroup.procs").write_text(str(process.pid))
    return process


def _bind(source: Path, target: Path) -> None:
    subprocess.run(["mount", "--bind", str(source), str(target)], check=True)


def _cgroup_roots() -> list[Path]:
    """The v2 hierarchy and the v1 pids one, those that this host has."""
    entries = mountinfo.read()
    roots = [Path(e.point) for e in entries if e.fstype == "cgroup2"]
    roots += [Path(e.point) for e in entries if e.fstype == "cgroup" and "pids" in e.options]
    return roots


@pytest.mark.root
def test_sweep_undoes_exactly_what_a_killed_run_left(tmp_path):
    base = tmp_path / "var-tmp"
    base.mkdir()
    lower = tmp_path / "lower"
    lower.mkdir()
    processes: list[subprocess.Popen] = []
    roots = crio_support.cgroup_hierarchies()
    names = set()
    try:
        # A killed run's dir: owner gone, storage bound onto itself and a container root
        # mounted below it, crio running on, container processes in its cgroups.
        killed = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=base))
        names.add(killed.name)
        (killed / OWNER).write_text(_dead_owner())
        overlay = killed / "storage" / "overlay"
        merged = overlay / ("0" * 64) / "merged"
        merged.mkdir(parents=True)
        _bind(overlay, overlay)
        _bind(lower, merged)
        crio = _standin_crio(killed)
        processes.append(crio)
        containers = {}
        for root in _cgroup_roots():
            process = _standin_container(root / killed.name / f"crio-{root.name}")
            if process is not None:
                containers[root] = process
                processes.append(process)
        # Not to be touched: a live run's dir (this process owns it), a dir without an
        # owner file that a process names, one that changed within the hour, and another
        # dir of the base.
        live = crio_support.make_dir(base)
        (live / "mnt").mkdir()
        _bind(lower, live / "mnt")
        live_crio = _standin_crio(live)
        processes.append(live_crio)
        busy = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=base))
        busy_crio = _standin_crio(busy)
        processes.append(busy_crio)
        fresh = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=base))
        other = base / "ocihook-other"
        (other / "mnt").mkdir(parents=True)
        _bind(lower, other / "mnt")
        # An old dir without an owner file and without processes: left by a run of an older
        # version (or killed before it wrote the file).
        unowned = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=base))
        (unowned / "crio.log").write_text("")
        hour_ago = time.time() - crio_support.UNOWNED_AGE - 60
        for path in (busy, unowned / "crio.log", unowned):
            os.utime(path, (hour_ago, hour_ago))

        done = crio_support.sweep_leftovers(base)

        killed_pids = {crio.pid, *(p.pid for p in containers.values())}
        assert {line for line in done if line.startswith("process ")} == {
            f"process {pid} killed" for pid in killed_pids
        }
        assert [line for line in done if line.endswith(" unmounted")] == [
            f"{merged} unmounted",  # the deeper one first
            f"{overlay} unmounted",
        ]
        assert {line for line in done if line.endswith(" removed")} == {
            f"{killed} removed",
            f"{unowned} removed",
        }
        assert len(done) == len(killed_pids) + 4
        for process in [crio, *containers.values()]:
            assert process.wait(timeout=30) == -9
        assert not killed.exists() and not unowned.exists()
        for root in containers:
            assert not (root / killed.name).exists()
        assert sorted(base.iterdir()) == sorted([live, busy, fresh, other])
        points = {e.point for e in mountinfo.read()}
        assert {str(live / "mnt"), str(other / "mnt")} <= points
        assert not {p for p in points if p.startswith(f"{killed}/")}
        for process in (live_crio, busy_crio):
            assert process.poll() is None
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for directory in base.glob(f"{DIR_PREFIX}*"):
            crio_support.undo(directory)
        for root in roots:  # a sweep that missed a cgroup still removed the dir
            for name in names:
                crio_support.remove_cgroups(name, [root])
        for point in [*crio_support.mounts_below(base)]:
            subprocess.run(["umount", "-l", point], check=False)


# A run of the CRI-O tier, in a process of its own that the test kills as a run is killed:
# its crio (started in a session of its own, as the tier starts it) with a pod and a
# container, then nothing but sleep.
KILLED_RUN = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.support import crio, images
server = crio.Crio(crio.docs_drop_in(Path(sys.argv[1], "docs/kubernetes.md").read_text()))
print(server.dir, flush=True)
image = server.import_image(images.busybox_rootfs(Path(sys.argv[2])), "ocihook-crio-busybox")
server.write_config(pause_image=image)
server.start()
pod = server.pod("killed", "team-a")
pod.run("idle", image, crio.IDLE)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.root
@pytest.mark.podman
@pytest.mark.crio
def test_sweep_after_a_real_crio_run_was_killed(tmp_path):
    """A real crio, with a running pod, whose run is killed (SIGKILL, no teardown): crio,
    conmon and the container live on, their mounts and cgroups stay; the sweep at the start
    of the next run ends them, unmounts, removes the cgroups and the dir."""
    repo = Path(__file__).resolve().parent.parent
    run = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, str(repo), str(tmp_path / "busybox")],
        stdout=subprocess.PIPE,
        text=True,
    )
    directory = None
    try:
        directory = Path(run.stdout.readline().strip())
        assert directory.name.startswith(DIR_PREFIX), directory
        assert run.stdout.readline().strip() == "ready"
        run.kill()
        run.wait()
        roots = crio_support.cgroup_hierarchies()
        assert crio_support.stale(directory)
        left = crio_support.processes(directory, roots)
        assert len(left) >= 3  # crio, conmon, the container
        assert crio_support.mounts_below(directory)
        assert [r for r in roots if (r / directory.name).is_dir()]

        done = crio_support.sweep_leftovers()

        assert f"{directory} removed" in done, done
        assert {f"process {pid} killed" for pid in left} <= set(done)
        assert not directory.exists()
        assert crio_support.processes(directory, roots) == set()
        assert crio_support.mounts_below(directory) == []
        assert [r for r in roots if (r / directory.name).exists()] == []
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        if directory is not None and directory.name.startswith(DIR_PREFIX) and directory.exists():
            crio_support.undo(directory)
