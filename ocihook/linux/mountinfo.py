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


def parse(text: str) -> list[Entry]:
    """Every well-formed line of a mountinfo text, in order."""
    entries = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        major, _, minor = fields[2].partition(":")
        entries.append(
            Entry(
                dev=os.makedev(int(major), int(minor)),
                root=unescape(fields[3]),
                point=unescape(fields[4]),
                fstype=tail[0],
                options=tuple(tail[2].split(",")),
            )
        )
    return entries


def read(path: str = "/proc/self/mountinfo") -> list[Entry]:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return parse(f.read())


def is_mount_point(path: str) -> bool:
    """Whether `path` is a mount point in our mount namespace."""
    wanted = path.rstrip("/") or "/"
    return any(entry.point == wanted for entry in read())


def superblocks() -> frozenset[int]:
    """st_dev of every file system mounted in our mount namespace."""
    return frozenset(entry.dev for entry in read())
