"""Label driver source trees and device nodes for containers (`ocihook selinux relabel`).

A driver tree gets `container_ro_file_t:s0` (every container may read, map and execute it,
none may write it); character devices in it, or given under /dev, get the module's device
type. Symlinks are labelled as links and never followed; the walk holds directory file
descriptors and stays on the file system of each given path.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from ocihook.errors import OcihookError, describe
from ocihook.linux import securepath
from ocihook.linux.filetypes import short_type
from ocihook.selinux.label import (
    DEVICE_TYPE,
    SHARED_FILE_CONTEXT,
    XATTR,
    selinux_enabled,
    set_label_at,
    split_context,
)

# Refused themselves; their subdirectories may be driver trees.
SYSTEM_DIRS = frozenset(
    {"/", "/home", "/var", "/var/lib", "/var/run", "/run", "/tmp", "/var/tmp", "/opt", "/srv"}
    | {"/root", "/mnt", "/media", "/dev"}
)
# Refused with everything under them (host software: never relabel it).
SYSTEM_TREES = ("/usr", "/etc", "/bin", "/sbin", "/boot", "/proc", "/sys")
SYSTEM_TREE_RE = re.compile(r"^/lib[^/]*(/|$)")
# Exception inside SYSTEM_TREES: the packaged default driver root (selinux/ocihook.fc).
ALLOWED_UNDER_SYSTEM = ("/usr/lib/ocihook",)


@dataclass(frozen=True)
class Change:
    """One label change: `old` is None for an unlabeled file."""

    path: str
    kind: str
    old: str | None
    new: str


@dataclass(frozen=True)
class Entry:
    """A file seen by the walk, with the label it should have (None: leave it alone)."""

    dirfd: int
    name: str
    path: str
    kind: str
    current: str | None
    expected: str | None


def device_context(device_type: str = DEVICE_TYPE) -> str:
    """The full context for device nodes of type `device_type`."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", device_type):
        raise OcihookError(f"invalid SELinux type {device_type!r}")
    return f"system_u:object_r:{device_type}:s0"


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def refusal(path: str) -> str | None:
    """Why `path` (absolute, resolved) must not be relabelled, or None."""
    if any(_within(path, allowed) for allowed in ALLOWED_UNDER_SYSTEM):
        return None
    if path in SYSTEM_DIRS:
        return f"refusing to relabel host system directory {path}: give the driver tree itself"
    for tree in SYSTEM_TREES:
        if path == tree:
            return f"refusing to relabel host system directory {path}: give the driver tree itself"
        if _within(path, tree):
            return f"refusing to relabel {path}: it is host system content under {tree}"
    if SYSTEM_TREE_RE.match(path):
        if "/" not in path[1:]:
            return f"refusing to relabel host system directory {path}: give the driver tree itself"
        return f"refusing to relabel {path}: it is host system content"
    return None


def _read_label(dirfd: int, name: str) -> str | None:
    try:
        raw = os.getxattr(securepath.fd_path(dirfd, name), XATTR, follow_symlinks=False)
    except OSError:
        return None
    return raw.rstrip(b"\0").decode(errors="replace") or None


def _entry(dirfd: int, name: str, path: str, st: os.stat_result, dev_ctx: str, in_dev: bool):
    kind = short_type(st.st_mode)
    if kind == "chr":
        expected: str | None = dev_ctx
    else:
        expected = None if in_dev else SHARED_FILE_CONTEXT
    return Entry(dirfd, name, path, kind, _read_label(dirfd, name), expected)


def walk(path: str, dev_ctx: str) -> Iterator[Entry]:
    """Every file under `path` (resolved, checked) with its expected label.

    Yields while the directory descriptors are open: consume (and label) entries
    before advancing.
    """
    in_dev = _within(path, "/dev")
    parent, name = os.path.split(path)
    parent_fd = os.open(parent, os.O_PATH | os.O_DIRECTORY)
    try:
        top = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        yield _entry(parent_fd, name, path, top, dev_ctx, in_dev)
    finally:
        os.close(parent_fd)
    if not stat.S_ISDIR(top.st_mode):
        return
    for dirpath, dirnames, filenames, dirfd in os.fwalk(path, follow_symlinks=False):
        if os.fstat(dirfd).st_dev != top.st_dev:
            dirnames[:] = []
            continue
        keep = []
        for entry_name in sorted(dirnames) + sorted(filenames):
            try:
                st = os.stat(entry_name, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if st.st_dev != top.st_dev:
                    continue  # another file system mounted here: leave it alone
                keep.append(entry_name)
            full = os.path.join(dirpath, entry_name)
            yield _entry(dirfd, entry_name, full, st, dev_ctx, in_dev)
        dirnames[:] = sorted(keep)


def _setter() -> Callable[[int, str, str], None]:
    """libselinux's lsetfilecon when SELinux runs, the raw xattr otherwise."""
    if selinux_enabled():
        import selinux  # system bindings; only needed on SELinux hosts

        def set_with_libselinux(dirfd: int, name: str, context: str) -> None:
            selinux.lsetfilecon(securepath.fd_path(dirfd, name), context)

        return set_with_libselinux
    return set_label_at


def resolve(paths: Iterable[str]) -> list[str]:
    """Absolute, symlink-free paths; raises OcihookError for missing or system paths."""
    resolved = []
    for given in paths:
        path = os.path.realpath(given)
        problem = refusal(path)
        if problem:
            raise OcihookError(problem)
        if not os.path.lexists(path):
            raise OcihookError(f"{given}: does not exist")
        resolved.append(path)
    return resolved


def relabel(
    paths: Iterable[str],
    dry_run: bool = False,
    device_type: str = DEVICE_TYPE,
) -> list[Change]:
    """Label driver trees and device nodes; returns the changes (made, or planned when dry_run)."""
    dev_ctx = device_context(device_type)
    setter = None if dry_run else _setter()
    resolved = resolve(paths)
    if setter is not None:  # nothing half-done on a read-only file system: check them all first
        for path in resolved:
            if os.statvfs(path).f_flag & os.ST_RDONLY:
                raise OcihookError(f"relabel {path}: read-only file system; nothing was changed")
    changes: list[Change] = []
    for path in resolved:
        for entry in walk(path, dev_ctx):
            if entry.expected is None or entry.current == entry.expected:
                continue
            if setter is not None:
                try:
                    setter(entry.dirfd, entry.name, entry.expected)
                except OSError as error:
                    raise OcihookError(
                        f"relabel {entry.path}: cannot set {entry.expected}: {describe(error)}; "
                        f"{len(changes)} file(s) were relabelled before it: run it again "
                        "once that is fixed"
                    ) from None
            changes.append(Change(entry.path, entry.kind, entry.current, entry.expected))
    return changes


def label_type(context: str | None) -> str | None:
    """The type field of `context`, or None."""
    if not context:
        return None
    try:
        return split_context(context)[2]
    except ValueError:
        return None
