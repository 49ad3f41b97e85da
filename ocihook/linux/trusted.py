"""The hook's persistent files (config cache and records): trusted dirs, trusted reads,
atomic writes.

One rule for both: a directory the hook keeps state in is a real directory (no symlink),
owned by the hook's user (root), with no access for group or others (0700); a file in it is
a regular file with the same owner and no group/other access (0600). Writes go to a
temporary name in the same directory and are renamed over the target; the temporary file
is removed on any failure. Errors are OcihookError naming the path and the cause.
"""

from __future__ import annotations

import os
import stat

from ocihook.errors import OcihookError, describe

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# File times move by the kernel's clock tick: a cache keyed by a file's stat (the config
# cache, the ld cache entries kept between starts) keeps a file only when its ctime is at
# least RACY_SECONDS below this clock taken before the read.
CLOCK_REALTIME_COARSE = 5  # Linux; the clock file times are taken from
RACY_SECONDS = 0.1


def dir_problem(st: os.stat_result) -> str | None:
    """Why a state directory with this (l)stat is not trusted; None when it is."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not {os.geteuid()}"
    if st.st_mode & 0o077:
        return f"mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
    return None


def file_problem(st: os.stat_result) -> str | None:
    """Why a state file with this fstat is not trusted; None when it is."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not {os.geteuid()}"
    if st.st_mode & 0o077:
        return f"mode {stat.S_IMODE(st.st_mode):04o}, not 0600"
    return None


def make_dirs(path: str, what: str) -> None:
    """Create `path` and any missing parents, each 0700 (never the umask's 0755)."""
    missing = []
    current = os.path.abspath(path)
    while not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        except OSError as error:
            raise OcihookError(f"{what} {directory}: cannot create: {describe(error)}") from None


def open_dir(path: str, what: str, create: bool = True) -> int:
    """A trusted state directory's fd (created 0700 if missing; set to 0700 when it is ours
    and writable by nobody else); OcihookError when it is not trusted or cannot be made."""
    if create:
        make_dirs(path, what)
    try:
        fd = os.open(path, DIR_FLAGS)
    except OSError as error:
        raise OcihookError(f"{what} {path}: {describe(error)}") from None
    st = os.fstat(fd)
    problem = dir_problem(st)
    if problem and problem.startswith("mode") and not st.st_mode & 0o022:
        # Ours and nobody else could write in it (0755 from an older version): tighten it.
        try:
            os.fchmod(fd, 0o700)
            problem = None
        except OSError as error:
            problem = f"{problem}, and chmod 0700 failed: {describe(error)}"
    if problem:
        os.close(fd)
        raise OcihookError(
            f"{what} {path}: {problem}; it must be a directory owned by root with mode 0700"
        )
    return fd


def read_file(dir_fd: int, name: str, limit: int) -> bytes | None:
    """The content of a trusted state file, or None when it is missing or not trusted."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        if file_problem(os.fstat(fd)):
            return None
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def write_file(dir_fd: int, dir_path: str, name: str, data: bytes, what: str) -> None:
    """Atomically replace `name` in the directory with `data` (mode 0600); the temporary file
    never survives a failure. OcihookError names the file and the cause. (atomic.py is
    imported here: a start that only reads the config cache never needs it.)"""
    from ocihook.linux import atomic

    try:
        atomic.replace_at(
            dir_fd, name, data, lambda temp: os.open(temp, atomic.TEMP_FLAGS, 0o600, dir_fd=dir_fd)
        )
    except OSError as error:
        path = os.path.join(dir_path, name)
        raise OcihookError(f"{what} {path}: cannot write: {describe(error)}") from None
