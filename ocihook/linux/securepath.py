"""Resolve paths inside a root directory by file descriptor, never escaping it.

Every lookup is relative to a directory fd that stands for "/" of a tree we do not
trust (a container's rootfs, a driver volume): symlinks, `..` and absolute link
targets are resolved as if that fd were the root (openat2 RESOLVE_IN_ROOT). Where
the kernel lacks openat2, a component walk with O_PATH|O_NOFOLLOW does the same.
Magic links (/proc/self/...) are never followed.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat

from ocihook.linux import syscalls

TYPE_CHECKING = False  # typing costs ~10 ms of imports at container start: annotations only
if TYPE_CHECKING:
    from collections.abc import Callable

MAX_SYMLINKS = 40
# openat2 fails with EAGAIN when a rename or mount anywhere raced a ".." lookup: retry.
OPENAT2_RETRIES = 32
PROC_SUPER_MAGIC = 0x9FA0
_O_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_RESOLVE = syscalls.RESOLVE_IN_ROOT | syscalls.RESOLVE_NO_MAGICLINKS
_have_openat2: bool | None = None
_libc = syscalls.libc


def open_dir(path: str) -> int:
    """O_PATH fd of an absolute host directory that must not itself be a symlink."""
    if not os.path.isabs(path):
        raise OSError(errno.EINVAL, "not an absolute path", path)
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


class Changed(OSError):
    """A path no longer names the directory an fd was opened on."""


def reopen_dir(path: str, like_fd: int) -> int:
    """O_PATH fd of the absolute directory `path` opened again (e.g. in another mount
    namespace), checked to be the same directory (dev, ino) as `like_fd`; else Changed."""
    fd = open_dir(path)
    old, new = os.fstat(like_fd), os.fstat(fd)
    if (old.st_dev, old.st_ino) != (new.st_dev, new.st_ino):
        os.close(fd)
        raise Changed(f"{path}: not the directory opened before")
    return fd


def resolve(root_fd: int, path: str, follow_final: bool = True, flags: int = os.O_PATH) -> int:
    """An fd (O_PATH unless `flags` say otherwise) of `path` looked up inside `root_fd`."""
    global _have_openat2
    flags |= os.O_CLOEXEC | (0 if follow_final else os.O_NOFOLLOW)
    if _have_openat2 is not False:
        for attempt in range(OPENAT2_RETRIES):
            try:
                fd = syscalls.openat2(root_fd, path, flags, _RESOLVE)
                _have_openat2 = True
                return fd
            except OSError as error:
                if error.errno == errno.EAGAIN and attempt + 1 < OPENAT2_RETRIES:
                    continue
                if error.errno != errno.ENOSYS:
                    raise
                _have_openat2 = False
                break
    fd = _walk(root_fd, path, follow_final)
    try:
        mode = os.fstat(fd).st_mode
        if flags & os.O_DIRECTORY and not stat.S_ISDIR(mode):
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        if flags & os.O_PATH:
            fd, result = -1, fd
            return result
        if stat.S_ISLNK(mode):  # O_NOFOLLOW on a final symlink, as open(2) says
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        return os.open(fd_path(fd), flags & ~os.O_NOFOLLOW)
    finally:
        if fd >= 0:
            os.close(fd)


def _readlink_fd(fd: int) -> str:
    buf = ctypes.create_string_buffer(4096)
    n = _libc.readlinkat(ctypes.c_int(fd), b"", buf, ctypes.c_size_t(len(buf)))
    if n < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return os.fsdecode(buf.raw[:n])


class _StatFs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_byte * 120)]


def _is_magic_link(fd: int) -> bool:
    """A symlink on procfs (/proc/self/root, /proc/N/fd/M, ...): its target is no text."""
    buf = _StatFs()
    if _libc.fstatfs(ctypes.c_int(fd), ctypes.byref(buf)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return buf.f_type == PROC_SUPER_MAGIC


def _components(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _walk(root_fd: int, path: str, follow_final: bool) -> int:
    """Fallback for kernels without openat2: one O_PATH|O_NOFOLLOW open per component."""
    pending = _components(path)
    stack = [os.dup(root_fd)]
    links = 0
    try:
        while pending:
            name = pending.pop(0)
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            fd = os.open(name, _O_PATH_FLAGS, dir_fd=stack[-1])
            mode = os.fstat(fd).st_mode
            if stat.S_ISLNK(mode) and (pending or follow_final):
                links += 1
                try:
                    if _is_magic_link(fd):  # as RESOLVE_NO_MAGICLINKS
                        raise OSError(errno.ELOOP, "refusing to follow a /proc magic link", path)
                    target = _readlink_fd(fd)
                finally:
                    os.close(fd)
                if links > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                pending[:0] = _components(target)
                continue
            if pending and not stat.S_ISDIR(mode):
                os.close(fd)
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
            stack.append(fd)
        return os.dup(stack[-1])
    finally:
        for fd in stack:
            os.close(fd)


def mount_id(fd: int) -> int:
    """The id of the mount that `fd` is on (as in /proc/self/mountinfo)."""
    info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(info, 4096)  # a few short lines (pos, flags, mnt_id, ino, ...)
    finally:
        os.close(info)
    for line in data.split(b"\n"):
        if line.startswith(b"mnt_id:"):
            return int(line.split()[1])
    raise OSError(errno.ENOTSUP, "no mnt_id in fdinfo")


def is_mount_root(dir_fd: int) -> bool:
    """Whether the directory `dir_fd` is the root of a mount: its ".." (which leaves a mount's
    root for the directory its mount point is in) is on another mount. False for the root of
    the mount namespace, whose ".." is itself."""
    parent = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        return mount_id(parent) != mount_id(dir_fd)
    finally:
        os.close(parent)


def fd_path(fd: int, name: str = "") -> str:
    """A path that refers to `fd` (and `name` inside it) without a lookup from "/"."""
    return f"/proc/self/fd/{fd}" + (f"/{name}" if name else "")


def mkdirs(
    root_fd: int,
    path: str,
    mode: int = 0o755,
    created: list[str] | None = None,
    check: Callable[[int, str], None] | None = None,
) -> int:
    """O_PATH fd of directory `path` inside the root, creating missing components.

    Each created directory's in-root path is appended to `created`; `check(parent_fd, path)`
    runs before each mkdir and may raise to refuse it. Re-resolving
    from the root after every mkdir means a swapped-in symlink can only redirect
    us elsewhere inside the root, never out of it.
    """
    parts = _components(path)
    for depth in range(len(parts) + 1):
        prefix = "/" + "/".join(parts[:depth])
        try:
            fd = resolve(root_fd, prefix)
        except FileNotFoundError:
            break
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.ENOTDIR, "exists and is not a directory", prefix)
        if depth == len(parts):
            return fd
        os.close(fd)
    else:  # pragma: no cover - the loop returns or breaks
        raise AssertionError
    # parts[:depth] is missing: create it and every component after it.
    for index in range(depth, len(parts) + 1):
        parent = "/" + "/".join(parts[: index - 1])
        parent_fd = resolve(root_fd, parent)
        try:
            if not stat.S_ISDIR(os.fstat(parent_fd).st_mode):
                raise OSError(errno.ENOTDIR, "exists and is not a directory", parent)
            if check is not None and not os.path.lexists(fd_path(parent_fd, parts[index - 1])):
                check(parent_fd, "/" + "/".join(parts[:index]))
            try:
                os.mkdir(parts[index - 1], mode, dir_fd=parent_fd)
                if created is not None:
                    created.append("/" + "/".join(parts[:index]))
            except FileExistsError:
                pass
        finally:
            os.close(parent_fd)
    fd = resolve(root_fd, path)
    if not stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.ENOTDIR, "exists and is not a directory", path)
    return fd


def split(path: str) -> tuple[str, str]:
    """("/parent", "name") of an absolute in-root path; the name is never empty."""
    if path[:1] == "/" and "//" not in path and "/." not in path and path[-1] != "/":
        # Already canonical (the plan's paths, at every file a start makes): no component
        # is empty, ".", ".." or hidden, so the last "/" splits it as the loop below would.
        at = path.rfind("/")
        return path[:at] or "/", path[at + 1 :]
    parts = _components(path)
    if not parts or parts[-1] == "..":
        raise OSError(errno.EINVAL, "not a file path", path)
    return "/" + "/".join(parts[:-1]), parts[-1]
