"""Read a source root's /etc/ld.so.conf: the library dirs its ldconfig would scan.

Discovery falls back on it when the source root has no ld.so.cache (a driver volume that
never ran ldconfig): a driver in a dir of its own (/usr/lib/nvidia-340, /usr/lib64/nvidia)
is named only there, in an `/etc/ld.so.conf.d/*.conf` entry. glibc's syntax (elf/ldconfig.c
`parse_conf`): `#` comments, one dir per line (an old `dir=TYPE` suffix dropped),
`include PATTERN...` (relative to the including file's dir; a glob in the last component,
read in sorted order), `hwcap` lines ignored. The files come from the source root, which
may be a driver volume: read through fds resolved inside it, bounded in size, count and
depth; what cannot be read is skipped, as ldconfig skips it.
"""

from __future__ import annotations

import os
import stat

from ocihook.globmatch import glob_match, is_glob
from ocihook.linux import securepath

MAX_FILE = 64 << 10
MAX_FILES = 64
MAX_DEPTH = 8
MAX_DIRS = 256


def read_dirs(root_fd: int, path: str) -> list[str]:
    """The library dirs `path` (inside the root `root_fd`) names, in its order, once each."""
    dirs: list[str] = []
    _parse(root_fd, path, dirs, [0], 0)
    return dirs


def _parse(root_fd: int, path: str, dirs: list[str], files: list[int], depth: int) -> None:
    if depth > MAX_DEPTH or files[0] >= MAX_FILES:
        return
    files[0] += 1
    text = _read(root_fd, path)
    for line in (text or "").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        word, *rest = line.split(None, 1)
        if word == "include" and rest:
            for pattern in rest[0].split():
                for included in _expand(root_fd, os.path.dirname(path), pattern):
                    _parse(root_fd, included, dirs, files, depth + 1)
        elif word == "hwcap":
            continue
        else:
            directory = line.split("=", 1)[0].strip().rstrip("/") or "/"
            if directory.startswith("/") and directory not in dirs and len(dirs) < MAX_DIRS:
                dirs.append(directory)


def _expand(root_fd: int, base: str, pattern: str) -> list[str]:
    """The files an include names, sorted (a glob only in the last component)."""
    if not pattern.startswith("/"):
        pattern = f"{base.rstrip('/')}/{pattern}"
    parent, name = os.path.split(pattern)
    if is_glob(parent):
        return []
    if not is_glob(name):
        return [pattern]
    try:
        fd = securepath.resolve(root_fd, parent, flags=os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return []
    try:
        names = os.listdir(fd)
    except OSError:
        return []
    finally:
        os.close(fd)
    return [f"{parent}/{n}" for n in sorted(names) if glob_match(n, name)][:MAX_FILES]


def _read(root_fd: int, path: str) -> str | None:
    try:
        fd = securepath.resolve(root_fd, path, flags=os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, MAX_FILE).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
