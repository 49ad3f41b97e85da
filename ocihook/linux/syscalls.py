"""Linux syscalls the standard library lacks, through ctypes (x86_64 and aarch64).

Only the calls the hook needs: openat2, the new mount API (open_tree, move_mount,
mount_setattr), classic mount/umount2, setns and unshare.
"""

from __future__ import annotations

import ctypes
import errno
import os

# The one libc handle of the package (securepath and bpf use it too).
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
_libc = libc
MACHINE = os.uname().machine

# Syscall numbers per architecture. Since Linux 5.1 every architecture but alpha numbers new
# calls (424 and up) alike; bpf is older and differs. An architecture not listed gets ENOSYS
# with its name, never another architecture's numbers.
_NEW = {"open_tree": 428, "move_mount": 429, "openat2": 437, "mount_setattr": 442}
SYSCALLS = {
    "x86_64": {**_NEW, "bpf": 321},
    "aarch64": {**_NEW, "bpf": 280},
    "ppc64le": {**_NEW, "bpf": 361},
    "s390x": {**_NEW, "bpf": 351},
    "riscv64": {**_NEW, "bpf": 280},
}
SYSCALLS["arm64"] = SYSCALLS["aarch64"]


def syscall_number(name: str, machine: str = MACHINE) -> int:
    """The number of syscall `name` on `machine`; OSError(ENOSYS) where it is not known."""
    number = SYSCALLS.get(machine, {}).get(name)
    if number is None:
        raise OSError(errno.ENOSYS, f"{name}: no syscall number known for {machine}")
    return number


# openat2 resolve flags
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10

AT_EMPTY_PATH = 0x1000
AT_SYMLINK_NOFOLLOW = 0x100
AT_RECURSIVE = 0x8000
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x04
MOVE_MOUNT_T_EMPTY_PATH = 0x40

MOUNT_ATTR_RDONLY = 0x1
MOUNT_ATTR_NOSUID = 0x2
MOUNT_ATTR_NODEV = 0x4
MOUNT_ATTR_NOEXEC = 0x8

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 0x2

CLONE_NEWNS = 0x00020000


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _check(result: int, what: str, path: str = "") -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}", path or None)
    return result


def _syscall(name: str, *args: object) -> int:
    return _libc.syscall(syscall_number(name), *args)


def openat2(dirfd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    return _check(
        _syscall(
            "openat2",
            ctypes.c_int(dirfd),
            os.fsencode(path),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        ),
        "openat2",
        path,
    )


def open_tree(dirfd: int, path: str, flags: int) -> int:
    return _check(
        _syscall("open_tree", ctypes.c_int(dirfd), os.fsencode(path), ctypes.c_uint(flags)),
        "open_tree",
        path,
    )


def move_mount(from_fd: int, from_path: str, to_fd: int, to_path: str, flags: int) -> None:
    _check(
        _syscall(
            "move_mount",
            ctypes.c_int(from_fd),
            os.fsencode(from_path),
            ctypes.c_int(to_fd),
            os.fsencode(to_path),
            ctypes.c_uint(flags),
        ),
        "move_mount",
        to_path,
    )


def mount_setattr(fd: int, attr_set: int, attr_clr: int = 0, flags: int = AT_EMPTY_PATH) -> None:
    attr = _MountAttr(attr_set, attr_clr, 0, 0)
    _check(
        _syscall(
            "mount_setattr",
            ctypes.c_int(fd),
            b"",
            ctypes.c_uint(flags),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        ),
        "mount_setattr",
    )


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _check(
        _libc.mount(
            os.fsencode(source) if source else None,
            os.fsencode(target),
            os.fsencode(fstype) if fstype else None,
            ctypes.c_ulong(flags),
            os.fsencode(data) if data else None,
        ),
        "mount",
        target,
    )


def umount2(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(os.fsencode(target), ctypes.c_int(flags)), "umount2", target)


def setns(fd: int, nstype: int = 0) -> None:
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def setfsuid(uid: int) -> int:
    """Set the filesystem uid; returns the previous one (the call cannot report errors)."""
    return _libc.setfsuid(ctypes.c_uint(uid))


def setfsgid(gid: int) -> int:
    return _libc.setfsgid(ctypes.c_uint(gid))
