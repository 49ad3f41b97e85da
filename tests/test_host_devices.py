"""The host-device picker (tests/support/host_devices.py) that the whole suite takes its
device numbers from: it adapts to the kernel it runs on and says so in one line when the
kernel has too few.

Other kernels are simulated by /proc/misc and /proc/devices texts written to a directory
(the `proc` argument); the nodes and the open(2) checks are this host's, for real.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ocihook.linux import syscalls
from tests.conftest import base_config
from tests.support import host_devices, synthetic
from tests.support.host_devices import HostDevice, TooFewDevices
from tests.support.sandbox import in_private_mount_ns

# This machine's kind of kernel (6.18, everything built in).
MISC = """\
234 btrfs-control
259 cpu_dma_latency
258 vsock
200 tun
237 loop-control
229 fuse
235 autofs
257 userfaultfd
232 kvm
183 hw_random
256 vga_arbiter
130 watchdog
"""
DEVICES = """\
Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
  5 /dev/tty
  7 vcs
 10 misc
136 pts
249 watchdog

Block devices:
  7 loop
"""


def fake_proc(tmp_path: Path, misc: str, devices: str = DEVICES) -> str:
    """A directory with `misc` and `devices` files, standing in for another kernel's /proc."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "misc").write_text(misc)
    (proc / "devices").write_text(devices)
    return str(proc)


def without(text: str, *names: str) -> str:
    """A /proc/misc or /proc/devices text less the lines that register `names`."""
    kept = [line for line in text.splitlines() if not set(line.split()[1:2]) & set(names)]
    return "".join(line + "\n" for line in kept)


def test_registered_takes_only_safe_drivers_that_runc_denies():
    found = host_devices.registered(MISC, DEVICES)
    assert [name for name, _, _ in found] == [
        "loop-control",
        "autofs",
        "btrfs-control",
        "kvm",
        "fuse",
        "vga_arbiter",
        "vsock",
        "userfaultfd",
        "vcs",
    ]
    # Not taken: tun (runc allows 10:200), cpu_dma_latency and watchdog (side effects of an
    # open), hw_random (refuses writers), tty and mem majors.
    assert found[0] == ("loop-control", 10, 237) and found[-1] == ("vcs", 7, None)
    # A block major is no char driver.
    only_block = "Character devices:\n\nBlock devices:\n  7 vcs\n"
    assert [name for name, _, _ in host_devices.registered("", only_block)] == []


def test_runc_defaults_are_never_picked():
    assert host_devices.registered("200 tun\n", "") == []
    for major, minor in [(1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 1), (5, 2)]:
        assert host_devices.runc_allows(major, minor)
    assert host_devices.runc_allows(136, 4) and host_devices.runc_allows(10, 200)
    assert not host_devices.runc_allows(10, 237)


def test_suite_picks_are_real_openable_char_devices_runc_denies():
    picked = synthetic.suite_devices()
    assert list(picked) == list(synthetic.SUITE_NAMES)
    assert len({d.numbers for d in picked.values()}) == len(picked)  # all distinct
    for device in picked.values():
        st = os.stat(device.path)
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == device.numbers
        assert not host_devices.runc_allows(*device.numbers)
        assert device.name in host_devices.SAFE_MISC + host_devices.SAFE_MAJORS
        assert host_devices.opens(device.path)
    assert synthetic.DEVICES == {n: picked[n].numbers for n in synthetic.DEVICE_NAMES}
    assert synthetic.CONTROL == {n: picked[n].numbers for n in synthetic.CONTROL_NAMES}
    assert synthetic.UNREQUESTED == picked["unrequested"]


def test_a_kernel_without_one_driver_gets_the_next_devices(tmp_path, monkeypatch):
    """As on a kernel without the first driver this host has: this host's own /proc/misc and
    /proc/devices, less that driver's line. The picks skip it and the next ones move up. Any
    host the suite runs on has the devices this needs (the suite picks 7)."""
    misc, devices = Path("/proc/misc").read_text(), Path("/proc/devices").read_text()
    (tmp_path / "full").mkdir()
    (tmp_path / "lacking").mkdir()
    proc = fake_proc(tmp_path / "full", misc, devices)
    host_devices.pick(2, "this test", proc=proc, exclude=frozenset())  # or one clear line
    full = host_devices.available(proc=proc, exclude=frozenset())
    gone = full[0].name
    rest = [d for d in full if d.name != gone]
    assert rest, f"needs devices of two drivers; this host has only {gone}'s: {full}"
    lacking = fake_proc(tmp_path / "lacking", without(misc, gone), without(devices, gone))
    picked = host_devices.pick(len(rest), proc=lacking, exclude=frozenset())
    assert gone not in [d.name for d in picked]
    assert picked == rest  # in the same order, moved up
    # The environment variable drops it as if the kernel lacked it.
    monkeypatch.setenv(host_devices.EXCLUDE_ENV, gone)
    assert host_devices.pick(len(rest), proc=proc) == picked


def test_a_listed_driver_without_a_node_is_not_picked(tmp_path):
    """/proc/misc lists it, /dev has no node of it: not picked."""
    proc = fake_proc(tmp_path, "237 loop-control\n229 fuse\n", "Character devices:\n")
    empty_dev = tmp_path / "dev"
    empty_dev.mkdir()
    with pytest.raises(TooFewDevices):
        host_devices.pick(1, proc=proc, dev=str(empty_dev), exclude=frozenset())


def _pick_from_nodev_mount(dev: str, nodev: str, proc: str) -> None:
    """In a private mount namespace: `dev` bound at `nodev` with nodev, where open(2) of a
    device node fails even for root."""
    syscalls.mount(dev, nodev, None, syscalls.MS_BIND)
    syscalls.mount(None, nodev, None, syscalls.MS_BIND | syscalls.MS_REMOUNT | syscalls.MS_NODEV)
    assert host_devices.host_nodes(nodev)  # the node is there,
    with pytest.raises(TooFewDevices):  # but it does not open
        host_devices.pick(1, proc=proc, dev=nodev, exclude=frozenset())


@pytest.mark.root
def test_a_node_that_does_not_open_is_not_picked(tmp_path):
    """The same host device's node, in a dir where it opens (picked) and on a nodev mount
    where it does not (EACCES, even for root: not picked)."""
    first = host_devices.pick(1, exclude=frozenset())[0]
    dev, nodev = tmp_path / "dev", tmp_path / "nodev"
    dev.mkdir()
    nodev.mkdir()
    os.mknod(dev / "node", 0o600 | 0o020000, os.makedev(*first.numbers))
    if first.major == host_devices.MISC_MAJOR:
        proc = fake_proc(tmp_path, f"{first.minor} {first.name}\n", "")
    else:
        proc = fake_proc(tmp_path, "", f"Character devices:\n{first.major} {first.name}\n")
    assert host_devices.pick(1, proc=proc, dev=str(dev), exclude=frozenset()) == [
        HostDevice(first.name, str(dev / "node"), *first.numbers)
    ]
    in_private_mount_ns(lambda: _pick_from_nodev_mount(str(dev), str(nodev), proc))


def test_too_few_devices_is_one_clear_line(tmp_path):
    proc = fake_proc(tmp_path, "237 loop-control\n200 tun\n259 cpu_dma_latency\n", "")
    with pytest.raises(TooFewDevices) as error:
        host_devices.pick(6, "synthetic driver", proc=proc, exclude=frozenset())
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(
        "synthetic driver: need 6 char devices that this kernel has and runc "
        f"denies, found 1 (loop-control 10:237) in {proc}/misc and {proc}/devices; "
    )


def test_exclusion_is_named_in_the_failure(tmp_path, monkeypatch):
    proc = fake_proc(tmp_path, "237 loop-control\n235 autofs\n", "")
    monkeypatch.setenv(host_devices.EXCLUDE_ENV, "autofs, loop-control")
    with pytest.raises(TooFewDevices) as error:
        host_devices.pick(1, proc=proc)
    assert f"; {host_devices.EXCLUDE_ENV} drops autofs,loop-control; " in str(error.value)


@pytest.mark.root
@pytest.mark.podman
def test_driver_without_the_default_devices_works_in_podman(hook_setup, tmp_path, image_rhel):
    """The kernel's synth1 device (autofs here) dropped, as if the kernel lacked it: a driver
    built from the remaining picks injects, and synth-smi opens every node read-write in a
    real podman container (its cgroup rules carry the new numbers)."""
    default = synthetic.suite_devices()
    gone = default["synth1"].name
    picked = dict(zip(synthetic.SUITE_NAMES, host_devices.pick(6, exclude=frozenset({gone}))))
    assert gone not in [d.name for d in picked.values()]
    root = synthetic.build_driver(
        tmp_path / "driver",
        devices={n: picked[n].numbers for n in synthetic.DEVICE_NAMES},
        control={n: picked[n].numbers for n in synthetic.CONTROL_NAMES},
    )
    root.chmod(0o755)
    hook_setup.write_config(**base_config(hook_setup.dir, root))
    result = hook_setup.run(image_rhel, ["/usr/bin/synth-smi"], devices="all")
    assert result.returncode == 0, result.stdout + result.stderr
    for name in synthetic.DEVICE_NAMES + synthetic.CONTROL_NAMES:
        device = picked[name]
        assert f"opened /dev/{name} ({device.major}:{device.minor}) read-write" in result.stdout
    assert f"({default['synth1'].major}:{default['synth1'].minor})" not in result.stdout
