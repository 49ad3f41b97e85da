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

from ocihook.slots import Struct

TYPE_CHECKING = False  # typing costs imports at container start: annotations only
if TYPE_CHECKING:
    from collections.abc import Callable


class FileType(Struct):
    """One file type of st_mode: its words in messages and in listings."""

    __slots__ = ("name", "short", "test")
    name: str  # in messages: "exists in the image as a regular file"
    short: str  # in listings (`ocihook selinux relabel`) and in KINDS: "file"
    test: Callable[[int], bool]  # stat.S_ISREG, ...


FILE_TYPES = (
    FileType("symlink", "link", stat.S_ISLNK),
    FileType("directory", "dir", stat.S_ISDIR),
    FileType("regular file", "file", stat.S_ISREG),
    FileType("fifo", "fifo", stat.S_ISFIFO),
    FileType("socket", "sock", stat.S_ISSOCK),
    FileType("character device", "chr", stat.S_ISCHR),
    FileType("block device", "blk", stat.S_ISBLK),
)
_BY_SHORT = {t.short: t for t in FILE_TYPES}


def file_type(mode: int) -> FileType | None:
    """The file type of an st_mode, or None for one Linux does not have."""
    for kind in FILE_TYPES:
        if kind.test(mode):
            return kind
    return None


def type_name(mode: int) -> str:
    """'regular file', 'symlink', ... (for messages)."""
    found = file_type(mode)
    return found.name if found else "file of unknown type"


def short_type(mode: int) -> str:
    """'file', 'link', 'dir', ... (for listings); 'other' for an unknown type."""
    found = file_type(mode)
    return found.short if found else "other"


def is_type(mode: int, shorts: tuple[str, ...]) -> bool:
    """Whether the st_mode is one of the file types named (short names)."""
    return any(_BY_SHORT[short].test(mode) for short in shorts)


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


def section_kind(section: str) -> Kind:
    """The kind a profile list's entries are named by in messages ("firmware: ...")."""
    return next(k for k in KINDS.values() if section in k.sections)


def found_kind(section: str, mode: int) -> Kind | None:
    """The kind of a file that an entry of the profile list `section` matched, by its file
    type (a `files` entry may be a regular file, a socket or a directory); None: not one
    that list injects."""
    for kind in KINDS.values():
        if section in kind.sections and _BY_SHORT[kind.source].test(mode):
            return kind
    return None


def audit_name(kind: str) -> str:
    """How the audit names an injected file of `kind` (a record's kind string: records of
    other versions may hold kinds this table no longer has)."""
    found = KINDS.get(kind)
    return found.audit if found else kind
