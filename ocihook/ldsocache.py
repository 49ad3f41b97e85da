"""Read a host's (or driver volume's) /etc/ld.so.cache: which directory holds which soname.

Parses glibc's binary format itself (nothing is executed on the file): the current
"glibc-ld.so.cache1.1" format, alone or after the old "ld.so-1.7.0" table (ldconfig -c
compat), and the old format alone. The file comes from the source root, which may be a
driver container's volume: it is read through an fd resolved inside that root, bounded in
size, and every offset is checked.
"""

from __future__ import annotations

import os
import stat
import struct

from ocihook import securepath
from ocihook.errors import OcihookError

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
MAX_BYTES = 64 << 20
_OLD_HEADER = struct.Struct("=12sI")  # magic[11] + padding, nlibs
_OLD_ENTRY = struct.Struct("=iII")  # flags, key, value
_NEW_HEADER = struct.Struct("=20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, ext
_NEW_ENTRY = struct.Struct("=iIIIQ")  # flags, key, value, osversion, hwcap

FLAG_ELF_LIBC6 = 0x0003
FLAG_TYPE_MASK = 0x00FF
FLAG_ARCH_MASK = 0xFF00
# The arch bits ldconfig gives this machine's 64-bit libraries, and its 32-bit compat ones.
_ARCH_FLAGS = {
    "x86_64": (0x0300, 0x0000),
    "aarch64": (0x0A00, 0x0900),
    "ppc64le": (0x0500, None),
    "s390x": (0x0400, None),
}

Entry = tuple  # (soname: str, path: str, flags: int)


def arch_flags(machine: str | None = None) -> tuple[int, int | None]:
    """(64-bit flags, 32-bit flags or None) for `machine` (default: this one)."""
    return _ARCH_FLAGS.get(machine or os.uname().machine, (0x0300, 0x0000))


def parse(data: bytes, what: str = "ld.so.cache") -> list[Entry]:
    """Entries in the cache's order (the dynamic linker's preference order)."""
    if data.startswith(NEW_MAGIC):
        return _parse_new(data, 0, what)
    if not data.startswith(OLD_MAGIC):
        raise OcihookError(f"{what}: not an ld.so.cache (unknown magic)")
    if len(data) < _OLD_HEADER.size:
        raise OcihookError(f"{what}: truncated")
    nlibs = _OLD_HEADER.unpack_from(data, 0)[1]
    end = _OLD_HEADER.size + nlibs * _OLD_ENTRY.size
    if end > len(data):
        raise OcihookError(f"{what}: truncated")
    new_at = (end + 7) & ~7  # the new table follows, aligned like struct cache_file_new
    if data.startswith(NEW_MAGIC, new_at):
        return _parse_new(data, new_at, what)
    return [
        (_string(data, end + key, what), _string(data, end + value, what), flags)
        for flags, key, value in _OLD_ENTRY.iter_unpack(data[_OLD_HEADER.size : end])
    ]


def _parse_new(data: bytes, base: int, what: str) -> list[Entry]:
    if len(data) < base + _NEW_HEADER.size:
        raise OcihookError(f"{what}: truncated")
    nlibs = _NEW_HEADER.unpack_from(data, base)[1]
    start = base + _NEW_HEADER.size
    end = start + nlibs * _NEW_ENTRY.size
    if end > len(data):
        raise OcihookError(f"{what}: truncated")
    # String offsets of the new format are relative to its header.
    return [
        (_string(data, base + key, what), _string(data, base + value, what), flags)
        for flags, key, value, _, _ in _NEW_ENTRY.iter_unpack(data[start:end])
    ]


def _string(data: bytes, offset: int, what: str) -> str:
    stop = data.find(b"\0", offset)
    if offset >= len(data) or stop < 0:
        raise OcihookError(f"{what}: string offset {offset} outside the file")
    return data[offset:stop].decode("utf-8", "surrogateescape")


def read(root_fd: int, path: str, what: str) -> list[Entry] | None:
    """The entries of the cache at `path` inside the root `root_fd`; None if there is none."""
    try:
        # O_NONBLOCK: a FIFO planted in a driver volume must not hang the hook.
        fd = securepath.resolve(root_fd, path, flags=os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise OcihookError(f"{what}: {error.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OcihookError(f"{what}: not a regular file")
        size = st.st_size
        if size > MAX_BYTES:
            raise OcihookError(f"{what}: larger than {MAX_BYTES >> 20} MiB")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            if sum(map(len, chunks)) > MAX_BYTES:
                raise OcihookError(f"{what}: larger than {MAX_BYTES >> 20} MiB")
    except OSError as error:
        raise OcihookError(f"{what}: {error.strerror}") from None
    finally:
        os.close(fd)
    return parse(b"".join(chunks), what)


def is_arch(flags: int, arch: int) -> bool:
    """Whether an entry's flags say: a glibc ELF library of the arch bits `arch`."""
    return flags & FLAG_TYPE_MASK == FLAG_ELF_LIBC6 and flags & FLAG_ARCH_MASK == arch


class Index:
    """Entries of one arch, grouped by the name before ".so" for quick lookups by pattern."""

    def __init__(self, entries: list[Entry], arch: int) -> None:
        self.by_stem: dict[str, list[tuple[str, str]]] = {}
        self.all: list[tuple[str, str]] = []
        for soname, path, flags in entries:
            if is_arch(flags, arch):
                item = (soname, path)
                self.all.append(item)
                self.by_stem.setdefault(soname.split(".so", 1)[0], []).append(item)

    def candidates(self, pattern: str) -> list[tuple[str, str]]:
        """(soname, path) entries that may match `pattern` (the caller matches exactly)."""
        stem = pattern.split(".so", 1)[0]
        if "*" in stem or "?" in stem or "[" in stem:
            return self.all
        return self.by_stem.get(stem, [])
