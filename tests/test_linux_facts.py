"""One home per fact, unprivileged: the syscall table per architecture, the one mountinfo
parser (against the kernel's own escapes), the fd path helper."""

from __future__ import annotations

import errno
import os

import pytest

from ocihook.apply import sources
from ocihook.linux import mountinfo, securepath, syscalls
from ocihook.plan.model import FLAGS_LEGEND, Mount


def test_syscall_numbers_per_architecture():
    assert syscalls.syscall_number("openat2", "x86_64") == 437
    assert syscalls.syscall_number("bpf", "x86_64") == 321
    assert syscalls.syscall_number("bpf", "aarch64") == 280
    assert syscalls.syscall_number("mount_setattr", "aarch64") == 442


def test_unknown_architecture_fails_clearly():
    with pytest.raises(OSError) as info:
        syscalls.syscall_number("open_tree", "mips")
    assert info.value.errno == errno.ENOSYS and "mips" in info.value.strerror


def test_mountinfo_unescape_and_fields():
    text = (
        "36 35 98:0 /mnt\\0401 /a\\040b\\011c\\134d rw,noatime master:1 - ext3 /dev/root "
        "rw,errors=continue\n"
        "garbage line\n"
        "37 35 0:30 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"
    )
    first, second = mountinfo.parse(text)
    assert first.point == "/a b\tc\\d" and first.root == "/mnt 1"
    assert first.dev == os.makedev(98, 0) and first.fstype == "ext3"
    assert first.options == ("rw", "errors=continue")
    assert second.fstype == "cgroup" and "devices" in second.options


def test_mountinfo_of_this_process():
    assert mountinfo.is_mount_point("/")
    assert os.stat("/").st_dev in mountinfo.superblocks()


def test_unescape_leaves_other_backslashes():
    assert mountinfo.unescape("a\\b\\04") == "a\\b\\04"


def test_fd_path():
    assert securepath.fd_path(7) == "/proc/self/fd/7"
    assert securepath.fd_path(7, "x") == "/proc/self/fd/7/x"


@pytest.mark.parametrize(
    "kind", ["library", "library32", "binary", "firmware", "file", "socket", "directory"]
)
@pytest.mark.parametrize("writable", [False, True])
def test_mount_flags_are_what_the_plan_text_says(kind, writable):
    """plan.FLAGS_LEGEND (the plan text) and Mount.flags (what apply mounts) agree."""
    flags = Mount("s", "/h/s", "/t", kind, writable).flags
    assert ("rw" if writable else "ro") in flags and "read-only unless [rw]" in FLAGS_LEGEND
    assert {"nosuid", "nodev"} <= set(flags) and "nosuid, nodev" in FLAGS_LEGEND
    assert ("noexec" in flags) == (kind not in ("library", "library32", "binary"))
    assert "noexec except libraries and binaries" in FLAGS_LEGEND
    assert sources.new_api_attrs(flags) & syscalls.MOUNT_ATTR_NOSUID
    assert bool(sources.classic_flags(flags) & syscalls.MS_RDONLY) is not writable
