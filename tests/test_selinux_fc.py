"""File contexts: the file_contexts that semodule wrote for the linked policy, matched by
libselinux (matchpathcon) as restorecon and udev do on a host."""

from __future__ import annotations

import stat

import pytest

from tests.policy_build import linked_file_contexts
from tests.support import devstack

selinux = devstack.module("selinux")  # libselinux's matchpathcon

pytestmark = [pytest.mark.root, pytest.mark.devstack("selinux")]

CHR = stat.S_IFCHR | 0o666
REG = stat.S_IFREG | 0o644
DIR = stat.S_IFDIR | 0o755


@pytest.fixture(scope="module")
def lookup():
    assert selinux.matchpathcon_init(str(linked_file_contexts())) == 0

    def type_of(path: str, mode: int) -> str | None:
        try:
            rc, context = selinux.matchpathcon(path, mode)
        except FileNotFoundError:
            return None  # no entry matches
        assert rc == 0, path
        return context.split(":")[2]

    yield type_of
    selinux.matchpathcon_fini()


@pytest.mark.parametrize(
    "path, mode, expected",
    [
        ("/dev/nvidia0", CHR, "ocihook_device_t"),
        ("/dev/nvidia15", CHR, "ocihook_device_t"),
        ("/dev/nvidiactl", CHR, "ocihook_device_t"),
        ("/dev/nvidia-uvm", CHR, "ocihook_device_t"),
        ("/dev/nvidia-uvm-tools", CHR, "ocihook_device_t"),
        ("/dev/nvidia-caps-imex-channels/channel0", CHR, "ocihook_device_t"),  # IMEX
        ("/dev/nvidia-caps-imex-channels/channel2047", CHR, "ocihook_device_t"),
        ("/dev/nvidia-fs0", CHR, "ocihook_device_t"),  # GPUDirect Storage
        ("/dev/nvidia-fs15", CHR, "ocihook_device_t"),
        ("/dev/gdrdrv", CHR, "ocihook_device_t"),  # GDRCopy
        ("/dev/gdrdrvx", CHR, "device_t"),  # exact: no other node is ours
        ("/dev/synth0", CHR, "ocihook_device_t"),
        ("/dev/synthctl", CHR, "ocihook_device_t"),
        ("/dev/nvidia-modeset", CHR, "xserver_misc_device_t"),  # refpolicy's, untouched
        ("/dev/sda", stat.S_IFBLK | 0o660, "fixed_disk_device_t"),
        ("/usr/lib/ocihook/driver", DIR, "container_ro_file_t"),
        ("/usr/lib/ocihook/driver/lib64/libsynth.so.1", REG, "container_ro_file_t"),
        ("/usr/lib/ocihook/driver/bin/synth-smi", REG, "container_ro_file_t"),
        ("/run/ocihook/driver", DIR, "container_ro_file_t"),
        ("/run/ocihook/driver/firmware/synth.bin", REG, "container_ro_file_t"),
        ("/run/ocihook/abc.json", REG, None),  # the hook's records: not shared
        ("/usr/lib/x86_64-linux-gnu/libc.so.6", REG, "lib_t"),
    ],
)
def test_file_contexts(lookup, path, mode, expected) -> None:
    assert lookup(path, mode) == expected
