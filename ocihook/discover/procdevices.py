"""The kernel's registered char majors (/proc/devices) and misc minors (/proc/misc), read
under the device root by fd, as data: which driver a node's numbers belong to.

Read only for requests that need them (IMEX channels, the GPUDirect capabilities): a
request for GPUs alone never opens these files.
"""

from __future__ import annotations

from ocihook.discover.roots import Roots, read_small_file

MAX_FILE = 64 << 10
MAX_MAJOR = 4096  # the kernel's CHRDEV_MAJOR_MAX
MAX_MINOR = 1 << 20
MISC_MAJOR = 10


def _read(roots: Roots, path: str) -> str:
    """A small proc file under the device root ("" when it is missing)."""
    return read_small_file(roots, path, MAX_FILE) or ""


def _number(text: str, bound: int) -> int | None:
    if 0 < len(text) <= 7 and text.isascii() and text.isdigit() and int(text) < bound:
        return int(text)
    return None


def char_majors(roots: Roots) -> dict[str, set[int]]:
    """name -> the char majors /proc/devices lists for it (a driver may hold several: the
    infiniband ones have a fixed and a dynamic region)."""
    majors: dict[str, set[int]] = {}
    text = _read(roots, "/proc/devices")
    for line in text.split("Block devices:")[0].splitlines():
        number, _, name = line.strip().partition(" ")
        major = _number(number, MAX_MAJOR)
        if major is not None and name.strip():
            majors.setdefault(name.strip(), set()).add(major)
    return majors


def misc_minors(roots: Roots) -> dict[str, int]:
    """name -> minor of the misc devices (major 10) /proc/misc lists."""
    minors: dict[str, int] = {}
    for line in _read(roots, "/proc/misc").splitlines():
        number, _, name = line.strip().partition(" ")
        minor = _number(number, MAX_MINOR)
        if minor is not None and name.strip():
            minors.setdefault(name.strip(), minor)
    return minors
