"""The prestart route on this host (podman's cgroupfs manager, the v1 devices controller,
runc): what a runtime update does to the device the hook granted. Measured, so that what
docs/cgroups.md and `ocihook check` say about updates stays true: runc's `update` here does
not re-apply the OCI config's devices (it skips the device rules), so the grant stays."""

from __future__ import annotations

import subprocess

from tests.support import podman

OPEN = ["/bin/sh", "-c", "exec 3<>/dev/synth0 && echo OPENED"]  # synth0: a stand-in node


def _exec(name: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", "exec", name, *OPEN], capture_output=True, text=True)


def test_runc_update_keeps_the_prestart_grant(hook_setup, image_busybox):
    name = podman.unique_name("ocihook-update")
    started = hook_setup.run(
        image_busybox, ["/bin/sleep", "120"], devices="0", extra=["-d", "--name", name]
    )
    try:
        assert started.returncode == 0, started.stderr
        assert "OPENED" in _exec(name).stdout
        fmt = "{{.Id}} {{.State.Pid}}"
        cid, pid = subprocess.run(
            ["podman", "inspect", "-f", fmt, name], capture_output=True, text=True
        ).stdout.split()
        cgroup = open(f"/proc/{pid}/cgroup").read()
        assert "devices:/libpod_parent/" in cgroup  # cgroupfs manager, v1 devices
        updated = subprocess.run(
            ["runc", "--root", "/run/runc", "update", "--cpu-share", "512", cid],
            capture_output=True,
            text=True,
        )
        assert updated.returncode == 0, updated.stderr
        cpu = next(
            line.split(":", 2)[2]
            for line in cgroup.splitlines()
            if ":cpu," in line or line.split(":")[1] == "cpu"
        )
        with open(f"/sys/fs/cgroup/cpu{cpu}/cpu.shares") as f:
            assert f.read().strip() == "512"  # the update happened
        after = _exec(name)
        assert "OPENED" in after.stdout, after.stderr
    finally:
        podman.remove(name)
