"""One home per fact, unprivileged: the syscall table per architecture, the one mountinfo
parser (against the kernel's own escapes), the fd path helper."""

from __future__ import annotations

import errno
import os

import pytest

from ocihook import linux, mountinfo, securepath


def test_syscall_numbers_per_architecture():
    assert linux.syscall_number("openat2", "x86_64") == 437
    assert linux.syscall_number("bpf", "x86_64") == 321
    assert linux.syscall_number("bpf", "aarch64") == 280
    assert linux.syscall_number("mount_setattr", "aarch64") == 442


def test_unknown_architecture_fails_clearly():
    with pytest.raises(OSError) as info:
        linux.syscall_number("open_tree", "mips")
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
