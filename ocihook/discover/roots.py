"""The source and device roots, held by fd: every lookup of discovery (driver files,
device nodes, sysfs) resolves inside them, so a driver volume's symlinks can only point
inside that volume. `Roots` is opened once per plan (a context manager); its directory
listings are read once and matched with `globmatch.glob_match` (no `re` on the hot path)."""

from __future__ import annotations

import os
import stat

from ocihook.errors import OcihookError
from ocihook.globmatch import glob_match, is_glob
from ocihook.linux import securepath


class Roots:
    """O_PATH fds of the source and device roots, opened once (a context manager)."""

    def __init__(self, source_root: str, device_root: str) -> None:
        self.source_root = source_root
        self.device_root = device_root
        self.source_fd = _open_root(source_root, "source root")
        try:
            self.device_fd = (
                self.source_fd
                if device_root == source_root
                else _open_root(device_root, "device root")
            )
        except OcihookError:
            os.close(self.source_fd)
            raise
        # Canonical host paths of the roots, to turn kernel-resolved paths back into in-root ones.
        self.source_real = os.readlink(securepath.fd_path(self.source_fd))
        self.device_real = os.readlink(securepath.fd_path(self.device_fd))
        self._listings: dict[tuple[int, str], Listing] = {}

    def listing(self, root_fd: int, path: str) -> Listing:
        """The directory `path` of the root `root_fd`, listed once per plan."""
        key = (root_fd, path)
        if key not in self._listings:
            self._listings[key] = Listing(root_fd, path)
        return self._listings[key]

    def close(self) -> None:
        for listing in self._listings.values():
            listing.close()
        self._listings.clear()
        if self.device_fd != self.source_fd:
            os.close(self.device_fd)
        os.close(self.source_fd)

    def __enter__(self) -> Roots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_root(path: str, what: str) -> int:
    try:
        return securepath.open_dir(path)
    except OSError as error:
        raise OcihookError(f"{what} {path}: {error.strerror}") from None


def host_path(root: str, inner: str) -> str:
    return inner if root == "/" else root.rstrip("/") + inner


class EntryType:
    """What a listing knows of an entry: its file type, as `st_mode` type bits (the only
    part of an lstat result that discovery reads from a listing)."""

    __slots__ = ("st_mode",)

    def __init__(self, st_mode: int) -> None:
        self.st_mode = st_mode


_REGULAR, _LINK, _DIR = EntryType(stat.S_IFREG), EntryType(stat.S_IFLNK), EntryType(stat.S_IFDIR)


def _entries(fd: int) -> dict[str, EntryType]:
    """Each entry's type from the directory itself (getdents' d_type: no lstat per entry);
    an lstat only for other types, or where the file system does not say. (One loop with
    no call per entry: a host's lib dir has thousands.)"""
    entries = {}
    with os.scandir(fd) as it:
        for entry in it:
            if entry.is_symlink():
                entries[entry.name] = _LINK
            elif entry.is_file(follow_symlinks=False):
                entries[entry.name] = _REGULAR
            elif entry.is_dir(follow_symlinks=False):
                entries[entry.name] = _DIR
            else:
                mode = entry.stat(follow_symlinks=False).st_mode
                entries[entry.name] = EntryType(stat.S_IFMT(mode))
    return entries


class Listing:
    """One directory of the source root, listed once: name -> its file type (EntryType).
    Its fd stays open (Roots closes it) for reading the links in it."""

    def __init__(self, root_fd: int, path: str) -> None:
        self.path = path
        self.entries: dict[str, EntryType] = {}
        self.fd = -1
        self.real = ""  # the directory's canonical host path
        self._by_prefix: dict[str, list[str]] | None = None
        try:
            fd = securepath.resolve(root_fd, path, flags=os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            self.entries = _entries(fd)
            self.real = os.readlink(securepath.fd_path(fd))
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def sibling_file(self, name: str) -> str | None:
        """For a symlink `name` here whose target is a plain name of a regular file in this
        same directory (a soname link): that file's canonical host path, known from the
        listing without resolving anything; else None (resolve it inside the root)."""
        try:
            target = os.readlink(name, dir_fd=self.fd)
        except OSError:
            return None
        st = self.entries.get(target)
        if "/" in target or st is None or not stat.S_ISREG(st.st_mode):
            return None
        return f"{self.real}/{target}"

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def match(self, pattern: str) -> list[str]:
        """The names matching `pattern` (glob_match), sorted."""
        if not is_glob(pattern):
            return [pattern] if pattern in self.entries else []
        head = pattern[: _literal_head(pattern)]
        names = self._named_from(head)
        if "[" in pattern or "?" in pattern:
            return sorted(name for name in names if glob_match(name, pattern))
        # Stars only (the profiles' kind): the pattern's literal head and tail filter first.
        tail = pattern.rsplit("*", 1)[1]
        return sorted(
            name
            for name in names
            if name.startswith(head) and name.endswith(tail) and glob_match(name, pattern)
        )

    def _named_from(self, head: str):
        """The names that may start with `head`: those of its PREFIX-character bucket (a
        host's lib dir holds thousands of files and a profile has dozens of patterns: each
        pattern scanning every name cost milliseconds per start), every name for a shorter
        head. The buckets are made at the first lookup that can use them."""
        if len(head) < PREFIX:
            return self.entries
        if self._by_prefix is None:
            self._by_prefix = {}
            for name in self.entries:
                bucket = self._by_prefix.get(name[:PREFIX])
                if bucket is None:
                    self._by_prefix[name[:PREFIX]] = [name]
                else:
                    bucket.append(name)
        return self._by_prefix.get(head[:PREFIX], ())


PREFIX = 8  # the bucket key of Listing._named_from: "libcuda.", "libnvidi"


def _literal_head(pattern: str) -> int:
    """Where the first wildcard of a glob pattern is (its literal head ends there)."""
    return min(
        at
        for at in (pattern.find("*"), pattern.find("?"), pattern.find("["), len(pattern))
        if at >= 0
    )


def resolve_final(root_fd: int, path: str) -> tuple[str, os.stat_result] | None:
    """Resolve `path` in the root; (resolved in-root path, stat) or None if missing."""
    try:
        fd = securepath.resolve(root_fd, path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise OcihookError(f"source {path}: {error.strerror}") from None
    try:
        st = os.fstat(fd)
        resolved = os.readlink(securepath.fd_path(fd))
    finally:
        os.close(fd)
    return resolved, st


def in_root(root: str, resolved_host_path: str) -> str:
    """The in-root path of a host path that the kernel resolved inside `root`."""
    if root == "/":
        return resolved_host_path
    prefix = root.rstrip("/")
    if resolved_host_path == prefix:
        return "/"
    if not resolved_host_path.startswith(prefix + "/"):
        raise OcihookError(f"source {resolved_host_path}: resolved outside the source root")
    return resolved_host_path[len(prefix) :]


def read_small_file(roots: Roots, path: str, limit: int) -> str | None:
    """At most `limit` bytes of a small text file under the device root (by fd, in-root,
    non-blocking), or None when it is missing; any other failure is one line."""
    try:
        fd = securepath.resolve(roots.device_fd, path, flags=os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise OcihookError(f"{host_path(roots.device_root, path)}: {error.strerror}") from None
    try:
        return os.read(fd, limit).decode("ascii", "replace")
    except OSError as error:
        raise OcihookError(f"{host_path(roots.device_root, path)}: {error.strerror}") from None
    finally:
        os.close(fd)
