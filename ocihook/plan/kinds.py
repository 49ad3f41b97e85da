"""Kinds of injected file: the one table of them (the file types they are made of are
linux/filetypes.py's).

Discovery gives each bind mount a kind (`Mount.kind`); the plan takes its mount flags and
the library dir it moves with from here, the executor the file types its source and its
mount point may have, the source label check its rule, `ocihook plan` and `ocihook audit`
the words they show. Adding a kind is one row of KINDS plus a golden that shows it
(docs/architecture.md, "Adding a kind").

Kept stdlib-free apart from `stat`: the hook imports it at every injection.
"""

from __future__ import annotations

import stat

from ocihook.linux.filetypes import SHORT_BY_IFMT, TEST_BY_SHORT
from ocihook.structs import Struct

# Rules a bind-mount source's SELinux label is checked against (selinux.source_policy; the
# labels are read from the mounted fds by apply.sources).
LABEL_SHARED = "shared"  # readable by every container: container_ro_file_t or a host lib type
LABEL_WRITABLE = "writable"  # writable by every container: container_file_t at s0 (rw mounts)


class Kind(Struct):
    """One kind of bind-mounted driver file (built by keyword: the fields with a default
    are the safe choice, a read-only, noexec regular file checked as shared)."""

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
    _defaults = {
        "source": "file",
        "mount_points": ("file",),
        "executable": False,
        "lib_dir": None,
        "may_write": False,
        "label": LABEL_SHARED,
    }
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


# The kinds by name (Mount.kind): code names a kind by these, never by a string literal.
LIBRARY = "library"
LIBRARY32 = "library32"
BINARY = "binary"
FIRMWARE = "firmware"
FILE = "file"
SOCKET = "socket"
DIRECTORY = "directory"

KINDS = {
    kind.name: kind
    for kind in (
        Kind(
            name=LIBRARY,
            executable=True,
            lib_dir="lib_dir",
            sections=("libraries",),
            shown="library",
            audit="library",
        ),
        Kind(
            name=LIBRARY32,
            executable=True,
            lib_dir="lib_dir32",
            sections=("libraries",),
            shown="library32",
            audit="library32",
        ),
        Kind(
            name=BINARY,
            executable=True,
            sections=("binaries",),
            shown="binary",
            audit="binary",
        ),
        Kind(name=FIRMWARE, sections=("firmware",), shown="firmware", audit="firmware"),
        Kind(name=FILE, sections=("files",), shown="file", audit="file"),
        Kind(
            name=SOCKET,
            source="sock",
            mount_points=("file", "sock"),
            sections=("files", "firmware"),
            shown="socket",
            audit="socket",
        ),
        Kind(
            name=DIRECTORY,
            source="dir",
            mount_points=("dir",),
            sections=("files",),
            may_write=True,
            shown="directory",
            audit="directory",
        ),
    )
}
# The profile lists that name driver files, in the order discovery reads them (each has its
# discoverer, discover/build.py's DISCOVERERS).
SECTIONS = ("libraries", "binaries", "firmware", "files")
# Looked up for every injected file: computed once from KINDS.
MOUNT_FLAGS = {(k.name, rw): k.flags(rw) for k in KINDS.values() for rw in (False, True)}
_SOURCE_TESTS = {k.name: TEST_BY_SHORT[k.source] for k in KINDS.values()}
# What a file that an entry of a profile list matched becomes: the list's kind for the
# file's type and the lib dir it goes to. Only `libraries` has two kinds of one file type
# (its 64- and 32-bit copies, which go to two lib dirs); a `files` entry may match a regular
# file, a socket or a directory, a `firmware` entry a regular file or a socket. No two kinds
# of one list share both (tests/test_discover_sections.py), so the choice is the table's.
BY_SOURCE = {
    (section, kind.source, kind.lib_dir): kind
    for kind in KINDS.values()
    for section in kind.sections
}


def found_kind(section: str, mode: int, lib_dir: str | None = None) -> Kind | None:
    """The kind of a file that an entry of the profile list `section` matched, by its file
    type (st_mode) and the lib dir it goes to (a Kind.lib_dir; None but for libraries);
    None: a file that list does not inject."""
    return BY_SOURCE.get((section, SHORT_BY_IFMT.get(stat.S_IFMT(mode)), lib_dir))


def section_kind(section: str) -> Kind:
    """The kind a path-named profile list's entries are named by in messages ("firmware:
    ...", "file: ..."): that of a regular file it matched."""
    return BY_SOURCE[section, "file", None]


def is_source(kind: str, mode: int) -> bool:
    """Whether an st_mode is the file type a source of `kind` must be."""
    return _SOURCE_TESTS[kind](mode)


def audit_name(kind: str) -> str:
    """How the audit names an injected file of `kind` (a record's kind string: records of
    other versions may hold kinds this table no longer has)."""
    found = KINDS.get(kind)
    return found.audit if found else kind
