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
    text = mountinfo.read_text()
    entries = mountinfo.parse(text)
    assert "/" in {e.point for e in entries}
    assert os.stat("/").st_dev in mountinfo.superblocks()
    # the dev-only reading agrees with the whole parse, line for line
    assert mountinfo.superblocks(text) == frozenset(e.dev for e in entries)


SAMPLE = (
    "36 35 98:0 /mnt\\0401 /a\\040b rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n"
    "garbage line\n"
    "38 35 0:31 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
    "37 35 0:30 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"
    "39 35 0:32 / /empty\\040source rw - tmpfs  rw,size=4k\n"
    "no separator 1:2 here\n"
)


def test_mountinfo_filtered_by_type_builds_only_those_lines():
    every = mountinfo.parse(SAMPLE)
    assert [e.fstype for e in every] == ["ext3", "cgroup2", "cgroup", "tmpfs"]
    cgroups = mountinfo.parse(SAMPLE, ("cgroup", "cgroup2"))
    assert cgroups == [e for e in every if e.fstype in ("cgroup", "cgroup2")]
    assert cgroups[1].options == ("rw", "devices") and cgroups[0].point == "/sys/fs/cgroup"
    assert mountinfo.parse(SAMPLE, ()) == []
    # an empty source (two spaces) still leaves the super options in their place
    assert every[3].point == "/empty source" and every[3].options == ("rw", "size=4k")
    assert mountinfo.superblocks(SAMPLE) == frozenset(
        os.makedev(*pair) for pair in ((98, 0), (0, 31), (0, 30), (0, 32))
    )


def test_mount_root_is_told_by_mount_id(tmp_path):
    """/proc is the root of its own mount; a directory in a mount is not, nor is the root of
    the mount namespace (its ".." is itself)."""
    cases = {"/proc": True, str(tmp_path): None, "/": False}
    (tmp_path / "sub").mkdir()
    cases[str(tmp_path / "sub")] = False
    for path, expected in cases.items():
        fd = securepath.open_dir(path)
        try:
            got = securepath.is_mount_root(fd)
        finally:
            os.close(fd)
        if expected is None:  # tmp_path may or may not be a mount point here: the table says
            expected = path in {e.point for e in mountinfo.read()}
        assert got is expected, path


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
