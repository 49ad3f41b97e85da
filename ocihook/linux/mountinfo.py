"""/proc/<pid>/mountinfo: the one parser and the one unescape of the package."""

from __future__ import annotations

import os

from ocihook.structs import Struct


class Entry(Struct):
    """One line of mountinfo (the fields the package reads)."""

    __slots__ = ("dev", "root", "point", "fstype", "options")
    dev: int  # st_dev of the mounted file system
    root: str  # the mounted dir inside that file system
    point: str  # the mount point
    fstype: str
    options: tuple[str, ...]  # super options (after the separator)


def unescape(field: str) -> str:
    """Undo the kernel's octal escapes (\\040 space, \\011 tab, \\012 newline, \\134 \\)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse(text: str, fstypes: tuple[str, ...] | None = None) -> list[Entry]:
    """Every well-formed line of a mountinfo text, in order; only the lines of a file system
    type in `fstypes` when given (the others are not taken apart: a Kubernetes node's table
    has thousands of lines, and the hook reads it at every start)."""
    entries = []
    append = entries.append
    makedev = os.makedev
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        tail = right.split(" ", 3)
        if not sep or len(tail) < 3 or (fstypes is not None and tail[0] not in fstypes):
            continue
        fields = left.split(" ", 5)
        if len(fields) < 5:
            continue
        major, _, minor = fields[2].partition(":")
        append(
            Entry(  # positional: Struct's fast path (`__slots__`' order)
                makedev(int(major), int(minor)),
                unescape(fields[3]),
                unescape(fields[4]),
                tail[0],
                tuple(tail[2].split(",")),
            )
        )
    return entries


def read_text(path: str = "/proc/self/mountinfo") -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read()


def read(path: str = "/proc/self/mountinfo") -> list[Entry]:
    return parse(read_text(path))


def superblocks(text: str | None = None) -> frozenset[int]:
    """st_dev of every file system mounted in our mount namespace (in `text`, a mountinfo
    text, when the caller has read it), from each line's third field alone."""
    if text is None:
        text = read_text()
    numbers = set()
    for line in text.splitlines():
        fields = line.split(" ", 3)
        if len(fields) == 4 and " - " in fields[3]:
            numbers.add(fields[2])
    devices = set()
    for number in numbers:
        major, sep, minor = number.partition(":")
        if sep and major.isdigit() and minor.isdigit():
            devices.add(os.makedev(int(major), int(minor)))
    return frozenset(devices)
