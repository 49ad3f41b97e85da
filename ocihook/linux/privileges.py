"""Least privilege: drop capabilities and set no_new_privs (prctl(2) and capset(2) by ctypes,
through the package's one libc handle: no extension module to import at container start)."""

from __future__ import annotations

import ctypes
import errno
import os

from ocihook.linux import syscalls

PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _prctl(option: int, arg: int = 0) -> int:
    # prctl is variadic: every argument as a full unsigned long (the kernel wants the unused
    # ones zero, all 64 bits of them).
    zero = ctypes.c_ulong(0)
    return _check(
        syscalls.libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), zero, zero, zero),
        f"prctl({option})",
    )


def bounding_set() -> list[int]:
    """The capabilities in this process's bounding set. Probed with PR_CAPBSET_READ up to the
    kernel's last one (EINVAL), so it works where /proc is not mounted (the ldconfig sandbox)."""
    caps = []
    cap = 0
    while True:
        try:
            if _prctl(PR_CAPBSET_READ, cap):
                caps.append(cap)
        except OSError as error:
            if error.errno == errno.EINVAL:
                return caps
            raise
        cap += 1


def drop_bounding_set(keep: tuple[int, ...] = ()) -> None:
    """Remove every capability but `keep` from the bounding set (needs CAP_SETPCAP): each one
    up to the kernel's last (EINVAL), without reading the set first (dropping one that is
    not in it changes nothing): one prctl per capability, at every container start."""
    cap = 0
    while True:
        if cap not in keep:
            try:
                _prctl(PR_CAPBSET_DROP, cap)
            except OSError as error:
                if error.errno == errno.EINVAL:
                    return
                if error.errno != errno.EPERM:
                    raise
                # Without CAP_SETPCAP (the kernel checks it first): an error only for a
                # capability still in the set; past the kernel's last one, done.
                try:
                    still_in_set = _prctl(PR_CAPBSET_READ, cap)
                except OSError as read_error:
                    if read_error.errno == errno.EINVAL:
                        return
                    raise
                if still_in_set:
                    raise
        cap += 1


def clear_capabilities(keep: tuple[int, ...] = ()) -> None:
    """Keep only `keep` in the effective and permitted sets, nothing inheritable (so nothing
    ambient either); set no_new_privs."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    for cap in keep:
        word, bit = divmod(cap, 32)
        data[word].effective |= 1 << bit
        data[word].permitted |= 1 << bit
    _check(syscalls.libc.capset(ctypes.byref(header), data), "capset")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def drop_capabilities(keep: tuple[int, ...] = ()) -> None:
    drop_bounding_set(keep)
    clear_capabilities(keep)


def effective_capabilities() -> int:
    """The CapEff mask of this process, read from /proc (for tests and debug logs)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0
