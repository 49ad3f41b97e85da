"""A symlink swapped in for a target directory while the hook runs (CVE-2024-0132 style).

The container is a real process in its own mount namespace whose rootfs is a host
directory bind-mounted onto itself (what runc has set up at createRuntime), in a v1
devices cgroup of its own. While the hook runs, a racer on the host keeps exchanging
the rootfs's `usr/lib64` directory with a symlink to a host canary directory
(renameat2 RENAME_EXCHANGE: atomic, so the hook meets either at any moment). Many rounds;
each must leave the canary and the host mount table untouched, and each hook run either
injects inside the rootfs or fails with one clear line.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import base_config, mount_table
from tests.support import hostile
from tests.support.sandbox import FakeRuntimeProcess, bind_onto_itself

ROUNDS = 30
RENAME_EXCHANGE = 2
AT_FDCWD = -100
_libc = ctypes.CDLL(None, use_errno=True)
DEVICES_CGROUP = Path("/sys/fs/cgroup/devices")


def exchange(a: Path, b: Path) -> None:
    if _libc.renameat2(AT_FDCWD, bytes(a), AT_FDCWD, bytes(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


class Racer(threading.Thread):
    """Flips usr/lib64 <-> a symlink to the canary until stopped."""

    def __init__(self, rootfs: Path, target: str) -> None:
        super().__init__(daemon=True)
        self.real = rootfs / "usr/lib64"
        self.evil = rootfs / "usr/lib64.evil"
        os.symlink(target, self.evil)
        self.stop = threading.Event()
        self.flips = 0

    def run(self) -> None:
        while not self.stop.is_set():
            exchange(self.real, self.evil)
            self.flips += 1


def start_container(rootfs: Path, cgroup: Path) -> FakeRuntimeProcess:
    """A process in a new mount namespace with `rootfs` bind-mounted onto itself."""
    return FakeRuntimeProcess(cgroup, mounts=(bind_onto_itself(rootfs),))


@pytest.fixture
def race_cgroup():
    cgroup = DEVICES_CGROUP / f"ocihook-race-{os.getpid()}"
    cgroup.mkdir()
    yield cgroup
    for _ in range(50):
        try:
            cgroup.rmdir()
            return
        except OSError:
            time.sleep(0.05)


@pytest.mark.parametrize("mount_api", ["auto", "classic"])
@pytest.mark.parametrize("style", ["absolute", "relative"])
def test_swapped_symlink_never_leads_out_of_the_rootfs(
    hook_setup, synth_root, tmp_path, race_cgroup, style, mount_api
):
    canary = hostile.make_canary(tmp_path / "canary")
    hook_setup.write_config(
        **base_config(
            hook_setup.dir,
            synth_root,
            ldconfig={"enabled": False},
            container={"lib_dir": "/usr/lib64"},
            mount_api=mount_api,
        )
    )
    before_canary = hostile.snapshot(canary)
    before_mounts = mount_table()
    outcomes = {"injected": 0, "refused": 0}
    reasons: set[str] = set()
    for round_ in range(ROUNDS):
        rootfs = tmp_path / f"rootfs{round_}"
        (rootfs / "usr/lib64").mkdir(parents=True)
        (rootfs / "dev").mkdir()
        target = str(canary) if style == "absolute" else "../" * 12 + str(canary).lstrip("/")
        bundle = hostile.write_bundle(
            tmp_path / f"bundle{round_}",
            {
                "ociVersion": "1.0.2",
                "root": {"path": str(rootfs)},
                "annotations": {"ocihook.io/devices": "0"},
                "linux": {"cgroupsPath": f"/{race_cgroup.name}"},
            },
        )
        container = start_container(rootfs, race_cgroup)
        racer = Racer(rootfs, target)
        racer.start()
        try:
            result = hostile.run_hook(
                hook_setup.hook,
                hook_setup.config,
                hook_setup.cache_dir,
                hostile.state(str(bundle), container.pid, devices="0", id=f"race{round_}"),
            )
            racer.stop.set()
            racer.join()
            if result.returncode == 0:
                mounts = Path(f"/proc/{container.pid}/mountinfo").read_text().splitlines()
                points = [line.split()[4] for line in mounts]
                assert str(canary) not in "\n".join(points), f"round {round_}: mount in canary"
                injected = [p for p in points if p.endswith("libsynth.so.1.2.3")]
                assert injected and all(p.startswith(f"{rootfs}/") for p in injected), points
        finally:
            racer.stop.set()
            racer.join()
            container.close()
        assert racer.flips > 0
        if result.returncode == 0:
            outcomes["injected"] += 1
        else:
            assert result.returncode == 1, result.stderr
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("ocihook: "), result.stderr
            outcomes["refused"] += 1
            reasons.add(lines[0])
        assert hostile.snapshot(canary) == before_canary, f"round {round_}: canary changed"
        assert mount_table() == before_mounts, f"round {round_}: host mounts changed"
    # Both outcomes are fine; what matters is that the attack never reached the host.
    assert sum(outcomes.values()) == ROUNDS
    print(json.dumps({**outcomes, "reasons": sorted(reasons)}, indent=1))
