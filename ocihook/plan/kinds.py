"""Kinds of injected file, and the file types they are made of: the one table of each.

Discovery gives each bind mount a kind (`Mount.kind`); the plan takes its mount flags and
the library dir it moves with from here, the executor the file types its source and its
mount point may have, the source label check its rule, `ocihook plan` and `ocihook audit`
the words they show. Adding a kind is one row of KINDS plus a golden that shows it
(docs/architecture.md, "Adding a kind").

Kept stdlib-free apart from `stat`: the hook imports it at every injection.
"""

from __future__ import annotations

import stat

from ocihook.structs import Struct

# File types by st_mode: (words in messages, short name in listings and in KINDS, test).
FILE_TYPES = (
    ("symlink", "link", stat.S_ISLNK),
    ("directory", "dir", stat.S_ISDIR),
    ("regular file", "file", stat.S_ISREG),
    ("fifo", "fifo", stat.S_ISFIFO),
    ("socket", "sock", stat.S_ISSOCK),
    ("character device", "chr", stat.S_ISCHR),
    ("block device", "blk", stat.S_ISBLK),
)
_TESTS = {short: test for _name, short, test in FILE_TYPES}


def type_name(mode: int) -> str:
    """'regular file', 'symlink', ... (for messages)."""
    return next((name for name, _short, test in FILE_TYPES if test(mode)), "file of unknown type")


def short_type(mode: int) -> str:
    """'file', 'link', 'dir', ... (for listings); 'other' for a type Linux does not have."""
    return next((short for _name, short, test in FILE_TYPES if test(mode)), "other")


def is_type(mode: int, shorts: tuple[str, ...]) -> bool:
    """Whether the st_mode is one of the file types named (short names)."""
    return any(_TESTS[short](mode) for short in shorts)


# Rules a bind-mount source's SELinux label is checked against (inject.check_source_labels).
LABEL_SHARED = "shared"  # readable by every container: container_ro_file_t or a host lib type
LABEL_WRITABLE = "writable"  # writable by every container: container_file_t at s0 (rw mounts)


class Kind(Struct):
    """One kind of bind-mounted driver file."""

    __slots__ = (
        "name",
        "source",
        "mount_points",
        "executable",
        "lib_dir",
        "sections",
        "may_write",
        "label",
        "shown",
        "audit",
    )
    name: str  # Mount.kind: in the plan, its JSON and the records
    source: str  # the file type (short name) its source must be
    mount_points: tuple[str, ...]  # the file types the image may have at its target
    executable: bool  # mounted without noexec (ld.so maps libraries PROT_EXEC; binaries run)
    lib_dir: str | None  # the Plan field whose dir its targets are in ("lib_dir", "lib_dir32")
    sections: tuple[str, ...]  # the profile lists whose entries may become this kind
    may_write: bool  # a profile entry may mount it read-write (`writable: true`)
    label: str  # the rule its source's label is checked against (read-only mounts)
    shown: str  # its column in `ocihook plan`'s text
    audit: str  # how `ocihook audit` names it ("injected library /usr/lib64/...")

    def flags(self, writable: bool = False) -> tuple[str, ...]:
        """Its mount flags by name: read-only unless `writable`, always nosuid and nodev,
        noexec unless executable (the kinds' default flags: `writable` False)."""
        access = "rw" if writable else "ro"
        return (access, "nosuid", "nodev") + (() if self.executable else ("noexec",))


KINDS = {
    kind.name: kind
    for kind in (
        Kind(
            "library", "file", ("file",), True, "lib_dir", ("libraries",), False,
            LABEL_SHARED, "library", "library",
        ),
        Kind(
            "library32", "file", ("file",), True, "lib_dir32", ("libraries",), False,
            LABEL_SHARED, "library32", "library32",
        ),
        Kind(
            "binary", "file", ("file",), True, None, ("binaries",), False,
            LABEL_SHARED, "binary", "binary",
        ),
        Kind(
            "firmware", "file", ("file",), False, None, ("firmware",), False,
            LABEL_SHARED, "firmware", "firmware",
        ),
        Kind(
            "file", "file", ("file",), False, None, ("files",), False,
            LABEL_SHARED, "file", "file",
        ),
        Kind(
            "socket", "sock", ("file", "sock"), False, None, ("files", "firmware"), False,
            LABEL_SHARED, "socket", "socket",
        ),
        Kind(
            "directory", "dir", ("dir",), False, None, ("files",), True,
            LABEL_SHARED, "directory", "directory",
        ),
    )
}  # fmt: skip
# The profile lists that name driver files, in the order discovery reads them.
SECTIONS = ("libraries", "binaries", "firmware", "files")
# Looked up for every injected file: computed once from KINDS.
MOUNT_FLAGS = {(k.name, rw): k.flags(rw) for k in KINDS.values() for rw in (False, True)}
_SOURCE_TESTS = {k.name: _TESTS[k.source] for k in KINDS.values()}
_IN_SECTION = {s: [k for k in KINDS.values() if s in k.sections] for s in SECTIONS}


def section_kind(section: str) -> Kind:
    """The kind a profile list's entries are named by in messages ("firmware: ...")."""
    return _IN_SECTION[section][0]


def found_kind(section: str, mode: int) -> Kind | None:
    """The kind of a file that an entry of the profile list `section` matched, by its file
    type (a `files` entry may be a regular file, a socket or a directory); None: not one
    that list injects."""
    for kind in _IN_SECTION[section]:
        if _SOURCE_TESTS[kind.name](mode):
            return kind
    return None


def is_source(kind: str, mode: int) -> bool:
    """Whether an st_mode is the file type a source of `kind` must be."""
    return _SOURCE_TESTS[kind](mode)


def audit_name(kind: str) -> str:
    """How the audit names an injected file of `kind` (a record's kind string: records of
    other versions may hold kinds this table no longer has)."""
    found = KINDS.get(kind)
    return found.audit if found else kind
