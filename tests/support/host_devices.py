"""Char devices of the running kernel that stand in for accelerators in the tests.

The synthetic driver, the demo, the bench, every test and the enforcing guest take their
device numbers from `pick`, never from a table: which devices a kernel has depends on its
modules (a kernel without autofs has no 10:235), and the suite must pass on any kernel.

The rule. A device is picked when all of this holds:

1. The running kernel registered it: a misc device (major 10) listed in /proc/misc, or a
   node of a char major whose driver /proc/devices lists. A node that exists while its
   driver is not loaded (a static node of a module) is never taken: opening it would ask
   the kernel to load the module.
2. Its driver is in SAFE_MISC or SAFE_MAJORS: drivers whose open(2) changes nothing on the
   host (their state comes with a later ioctl or write), in that order of preference.
   Never taken: cpu_dma_latency, network_latency, memory_bandwidth (a PM QoS request
   while open), watchdog (opening arms the timer), snapshot (hibernation), rtc and hpet
   (exclusive, or a timer per open), tty and console majors (controlling terminal), mem
   (1:x), tun (10:200: runc allows it anyway).
3. runc's default device rules do not allow it (RUNC_ALLOWED: libcontainer/specconv
   AllowedDevices, plus /dev/console that older runc versions allowed; crun's defaults
   are the same). A container then opens it only when its device cgroup allows it, and
   gets EPERM otherwise: the tests rely on that EPERM being real.
4. Its node is on this host: a char device with these numbers in /dev (top level or one
   directory down), and as root it opens read-write (O_RDWR | O_NONBLOCK | O_NOCTTY,
   closed at once), so the driver is bound and accepts what synth-smi does (hw_random
   refuses writers, so it is not in SAFE_MISC). As another user, a node it may not open
   (EACCES) counts: only root can tell, and the tiers that open devices run as root.

Devices come in preference order (SAFE_MISC's order, then the SAFE_MAJORS nodes by minor),
so every process on one kernel picks the same numbers. OCIHOOK_TEST_EXCLUDE_DEVICES (names,
comma-separated, e.g. "autofs") drops devices as if the kernel lacked them. When a kernel
has too few, `pick` raises TooFewDevices: one line naming what was found and what is needed.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
from dataclasses import dataclass

EXCLUDE_ENV = "OCIHOOK_TEST_EXCLUDE_DEVICES"
MISC_MAJOR = 10
# Misc drivers (their /proc/misc names) whose open has no side effect, preferred first.
SAFE_MISC = (
    "loop-control",
    "autofs",
    "btrfs-control",
    "kvm",
    "fuse",
    "vga_arbiter",
    "vsock",
    "userfaultfd",
    "device-mapper",
    "uinput",
    "vhost-net",
    "vhost-vsock",
)
# Char majors (their /proc/devices names) any node of which is as harmless to open.
SAFE_MAJORS = ("vcs",)
# Modules that register the first SAFE_MISC devices, for a kernel that builds them as
# modules (the enforcing guest loads them before it picks).
MODULES = ("loop", "autofs4", "btrfs", "fuse")
# (major, minor) runc allows by default; -1 is any minor.
RUNC_ALLOWED = frozenset(
    {(1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 1), (5, 2), (136, -1), (10, 200)}
)
# /dev subdirectories that hold no driver nodes worth a look.
_SKIP_DIRS = {"pts", "shm", "mqueue", "hugepages", "fd", "disk", "block", "char"}


class TooFewDevices(RuntimeError):
    """The running kernel has fewer usable devices than asked for (a one-line message)."""


@dataclass(frozen=True)
class HostDevice:
    """A char device of this host: its driver's name, its node and its numbers."""

    name: str
    path: str
    major: int
    minor: int

    @property
    def numbers(self) -> tuple[int, int]:
        return (self.major, self.minor)

    def rule(self, access: str = "rw") -> str:
        """The cgroup v1 syntax: 'c 10:237 rw'."""
        return f"c {self.major}:{self.minor} {access}"

    def __str__(self) -> str:
        return f"{self.name} {self.major}:{self.minor}"


def runc_allows(major: int, minor: int) -> bool:
    return (major, minor) in RUNC_ALLOWED or (major, -1) in RUNC_ALLOWED


def registered(misc: str, devices: str) -> list[tuple[str, int, int | None]]:
    """(name, major, minor) of the safe drivers that /proc/misc (`misc`) and /proc/devices
    (`devices`) list, in preference order; minor None: any node of that major."""
    minors = {}
    for line in misc.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit():
            minors.setdefault(fields[1], int(fields[0]))
    majors = {}
    for line in devices.split("Block devices:")[0].splitlines():
        fields = line.split(None, 1)
        if len(fields) == 2 and fields[0].isdigit():
            majors.setdefault(fields[1].strip(), int(fields[0]))
    found: list[tuple[str, int, int | None]] = [
        (name, MISC_MAJOR, minors[name]) for name in SAFE_MISC if name in minors
    ]
    found += [(name, majors[name], None) for name in SAFE_MAJORS if name in majors]
    return [(n, ma, mi) for n, ma, mi in found if mi is None or not runc_allows(ma, mi)]


def host_nodes(dev: str = "/dev") -> dict[tuple[int, int], str]:
    """(major, minor) -> path of the char nodes in `dev` and its subdirectories (one level);
    the first path in sorted order wins."""
    nodes: dict[tuple[int, int], str] = {}

    def scan(directory: str, depth: int) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode):
                numbers = (os.major(st.st_rdev), os.minor(st.st_rdev))
                nodes.setdefault(numbers, entry.path)
            elif stat.S_ISDIR(st.st_mode) and depth and entry.name not in _SKIP_DIRS:
                scan(entry.path, depth - 1)

    scan(dev, 1)
    return nodes


def opens(path: str) -> bool:
    """Whether the node opens read-write (the driver is bound and takes writers); for a
    user other than root, a permission error counts as yes."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as error:
        return os.geteuid() != 0 and error.errno in (errno.EACCES, errno.EPERM)
    os.close(fd)
    return True


def usable(
    candidates: list[tuple[str, int, int | None]],
    nodes: dict[tuple[int, int], str],
    exclude: frozenset[str] = frozenset(),
) -> list[HostDevice]:
    """The candidates whose node is in `nodes` and opens, less the `exclude`d names."""
    picked = []
    for name, major, minor in candidates:
        if name in exclude:
            continue
        if minor is None:
            numbers = sorted(n for n in nodes if n[0] == major and not runc_allows(*n))
        else:
            numbers = [(major, minor)] if (major, minor) in nodes else []
        for number in numbers:
            if opens(nodes[number]):
                picked.append(HostDevice(name, nodes[number], *number))
    return picked


def excluded() -> frozenset[str]:
    """The names in OCIHOOK_TEST_EXCLUDE_DEVICES."""
    return frozenset(n.strip() for n in os.environ.get(EXCLUDE_ENV, "").split(",") if n.strip())


@functools.cache
def _all(proc: str, dev: str, exclude: frozenset[str]) -> tuple[HostDevice, ...]:
    with open(os.path.join(proc, "misc")) as misc, open(os.path.join(proc, "devices")) as devs:
        candidates = registered(misc.read(), devs.read())
    return tuple(usable(candidates, host_nodes(dev), exclude))


def available(
    proc: str = "/proc", dev: str = "/dev", exclude: frozenset[str] | None = None
) -> list[HostDevice]:
    """Every usable device of the running kernel (the module docstring's rule), in pick's
    order; `exclude` as pick's."""
    return list(_all(proc, dev, excluded() if exclude is None else frozenset(exclude)))


def pick(
    count: int,
    purpose: str = "tests",
    proc: str = "/proc",
    dev: str = "/dev",
    exclude: frozenset[str] | None = None,
) -> list[HostDevice]:
    """The first `count` usable devices of the running kernel (the module docstring's rule);
    `exclude` (default: OCIHOOK_TEST_EXCLUDE_DEVICES) drops names."""
    skip = excluded() if exclude is None else frozenset(exclude)
    found = _all(proc, dev, skip)
    if len(found) < count:
        have = ", ".join(str(d) for d in found) or "none"
        dropped = f"; {EXCLUDE_ENV} drops {','.join(sorted(skip))}" if skip else ""
        raise TooFewDevices(
            f"{purpose}: need {count} char devices that this kernel has and runc denies, "
            f"found {len(found)} ({have}) in {proc}/misc and {proc}/devices{dropped}; "
            f"load drivers of {', '.join(SAFE_MISC)} (modules {' '.join(MODULES)})"
        )
    return list(found[:count])


def pick_same_major(
    count: int,
    purpose: str = "tests",
    proc: str = "/proc",
    dev: str = "/dev",
    exclude: frozenset[str] | None = None,
) -> list[HostDevice]:
    """The first `count` usable devices (pick's rule and order) that share one major: the
    stand-ins for the nodes of one driver's dynamic major (NVIDIA's nvidia-caps)."""
    skip = excluded() if exclude is None else frozenset(exclude)
    found = _all(proc, dev, skip)
    groups: dict[int, list[HostDevice]] = {}
    for device in found:
        groups.setdefault(device.major, []).append(device)
    for group in groups.values():
        if len(group) >= count:
            return group[:count]
    have = ", ".join(f"{len(g)} of major {m}" for m, g in groups.items()) or "none"
    raise TooFewDevices(
        f"{purpose}: need {count} char devices of one major that this kernel has and runc "
        f"denies, found {have} in {proc}/misc and {proc}/devices; load drivers of "
        f"{', '.join(SAFE_MISC)} (modules {' '.join(MODULES)})"
    )
