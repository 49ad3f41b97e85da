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
import sys

from ocihook.errors import OcihookError
from ocihook.linux import securepath

OLD_MAGIC = b"ld.so-1.7.0"
NEW_MAGIC = b"glibc-ld.so.cache1.1"
MAX_BYTES = 64 << 20
_OLD_HEADER = struct.Struct("=12sI")  # magic[11] + padding, nlibs
_OLD_ENTRY = struct.Struct("=iII")  # flags, key, value
_NEW_HEADER = struct.Struct("=20sIIB3xI12x")  # magic+version, nlibs, len_strings, flags, ext
_NEW_ENTRY = struct.Struct("=iIIIQ")  # flags, key, value, osversion, hwcap

# An entry's flags (glibc's elf/ldconfig.h): the library type in the low byte, the arch
# bits in the high one. The one home of these values (ld/native.py writes them too).
FLAG_ELF = 0x0001
FLAG_ELF_LIBC6 = 0x0003
FLAG_TYPE_MASK = 0x00FF
FLAG_ARCH_MASK = 0xFF00
FLAG_X8664_LIB64 = 0x0300
FLAG_S390_LIB64 = 0x0400
FLAG_POWERPC_LIB64 = 0x0500
FLAG_X8664_LIBX32 = 0x0800
FLAG_ARM_LIBHF = 0x0900
FLAG_AARCH64_LIB64 = 0x0A00
# The arch bits ldconfig gives this machine's 64-bit libraries, and its 32-bit compat ones.
_ARCH_FLAGS = {
    "x86_64": (FLAG_X8664_LIB64, 0x0000),
    "aarch64": (FLAG_AARCH64_LIB64, FLAG_ARM_LIBHF),
    "ppc64le": (FLAG_POWERPC_LIB64, None),
    "s390x": (FLAG_S390_LIB64, None),
}

Entry = tuple  # (soname: str, path: str, flags: int)


def arch_flags(machine: str | None = None) -> tuple[int, int | None]:
    """(64-bit flags, 32-bit flags or None) for `machine` (default: this one)."""
    return _ARCH_FLAGS.get(machine or os.uname().machine, (FLAG_X8664_LIB64, 0x0000))


def _new_table_at(data: bytes) -> int | None:
    """Where the table of the new format starts: 0 (a file of the new format), after the
    old table (the compat layout of `ldconfig -c compat`), or None (the old format alone).
    ValueError: not an ld.so.cache, or the old table is cut short."""
    if data.startswith(NEW_MAGIC):
        return 0
    if not data.startswith(OLD_MAGIC):
        raise ValueError("not an ld.so.cache (unknown magic)")
    if len(data) < _OLD_HEADER.size:
        raise ValueError("truncated")
    nlibs = _OLD_HEADER.unpack_from(data, 0)[1]
    if nlibs > (len(data) - _OLD_HEADER.size) // _OLD_ENTRY.size:
        raise ValueError("truncated")
    # The new table follows, aligned like struct cache_file_new.
    new_at = (_OLD_HEADER.size + nlibs * _OLD_ENTRY.size + 7) & ~7
    return new_at if data.startswith(NEW_MAGIC, new_at) else None


def _layout(data: bytes) -> tuple[int, bool, int, int]:
    """Where the entry table is, undecoded: (base of the string offsets, whether it is the
    new format, offset of its first row, number of rows). ValueError as `table`."""
    new_at = _new_table_at(data)
    if new_at is None:
        nlibs = _OLD_HEADER.unpack_from(data, 0)[1]
        return _OLD_HEADER.size + nlibs * _OLD_ENTRY.size, False, _OLD_HEADER.size, nlibs
    if len(data) < new_at + _NEW_HEADER.size:
        raise ValueError("truncated")
    nlibs = _NEW_HEADER.unpack_from(data, new_at)[1]
    start = new_at + _NEW_HEADER.size
    if nlibs > (len(data) - start) // _NEW_ENTRY.size:
        raise ValueError(f"truncated: {nlibs} entries do not fit in {len(data)} bytes")
    return new_at, True, start, nlibs


def table(data: bytes) -> tuple[int, bool, list[tuple[int, int, int, int, int]]]:
    """The one parser of the file's entry table: the new-format table where there is one
    (alone, or after the old table), else the old one. String offsets of the new format
    are relative to its header, the old format's to the end of its table. ValueError: not
    an ld.so.cache, or a table that does not fit in the file."""
    base, new, start, count = _layout(data)
    if not new:
        rows = [(f, k, v, 0, 0) for f, k, v in _OLD_ENTRY.iter_unpack(data[start:base])]
        return base, False, rows
    return base, True, list(_NEW_ENTRY.iter_unpack(data[start : start + count * _NEW_ENTRY.size]))


def string_at(data: bytes, offset: int) -> bytes:
    """The NUL-terminated string at `offset`. ValueError: outside the file."""
    stop = data.find(b"\0", offset)
    if offset >= len(data) or stop < 0:
        raise ValueError(f"string offset {offset} outside the file")
    return data[offset:stop]


def parse(data: bytes, what: str = "ld.so.cache") -> list[Entry]:
    """Entries (name, path, flags) in the cache's order (the dynamic linker's preference)."""
    try:
        base, _, rows = table(data)
        return [
            (_text(string_at(data, base + key)), _text(string_at(data, base + value)), flags)
            for flags, key, value, _, _ in rows
        ]
    except ValueError as error:
        raise OcihookError(f"{what}: {error}") from None


def _text(name: bytes) -> str:
    return name.decode("utf-8", "surrogateescape")


def read_bounded(fd: int) -> bytes:
    """The whole file open at `fd`, a regular file of at most MAX_BYTES (checked by fstat
    and again while reading: it may grow). ValueError: why not (a phrase: "not a regular
    file", "larger than 64 MiB"); OSError as the reads raise it."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("not a regular file")
    too_big = f"larger than {MAX_BYTES >> 20} MiB"
    if st.st_size > MAX_BYTES:
        raise ValueError(too_big)
    chunks, size = [], 0
    while size <= MAX_BYTES:
        chunk = os.read(fd, MAX_BYTES + 1 - size)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
    raise ValueError(too_big)


def _read_data(root_fd: int, path: str, what: str) -> bytes | None:
    try:
        # O_NONBLOCK: a FIFO planted in a driver volume must not hang the hook.
        fd = securepath.resolve(root_fd, path, flags=os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise OcihookError(f"{what}: {error.strerror}") from None
    try:
        return read_bounded(fd)
    except ValueError as error:
        raise OcihookError(f"{what}: {error}") from None
    except OSError as error:
        raise OcihookError(f"{what}: {error.strerror}") from None
    finally:
        os.close(fd)


def read(root_fd: int, path: str, what: str) -> list[Entry] | None:
    """The entries of the cache at `path` inside the root `root_fd`; None if there is none."""
    data = _read_data(root_fd, path, what)
    return None if data is None else parse(data, what)


class Cache:
    """A cache file's bytes with its table located but not decoded (`load`): an Index of it
    decodes only the entries it is asked for. A host's cache has thousands of entries and a
    profile asks for a few dozen names: decoding them all cost milliseconds per start. Its
    table is checked to fit in the file as `table` checks it; a string offset outside the
    file is refused where an entry is decoded (as the dynamic linker checks it, at lookup)."""

    def __init__(self, data: bytes, what: str) -> None:
        try:
            self.base, new, self.start, count = _layout(data)
        except ValueError as error:
            raise OcihookError(f"{what}: {error}") from None
        self.data = data
        self.what = what
        self.row = _NEW_ENTRY if new else _OLD_ENTRY
        self.end = self.start + count * self.row.size
        self._entries: list[Entry] | None = None
        self._first_row: dict[int, int] | None = None  # name offset -> its first row
        self._later_rows: dict[int, list[int]] = {}  # name offset -> its other rows, if any

    def entries(self) -> list[Entry]:
        """Every entry, decoded (parse), once."""
        if self._entries is None:
            self._entries = parse(self.data, self.what)
        return self._entries

    def with_stem(self, stem: str, arch: int) -> list[tuple[str, str]]:
        """(name, path) of the entries of `arch` whose name's part before its first ".so" is
        `stem` (as Index groups them), in the cache's order. Found in the bytes: each place
        the file holds `stem` followed by ".so" (or by the NUL ending a name of `stem` alone)
        that a row's name offset points at; ldconfig merges strings, so a name is often the
        tail of a path, and only the rows' offsets say where names are. A file holding the
        stem far more often than its rows could (a driver volume's, made so) is decoded
        whole instead, once: never more work than the parse."""
        data, base, start, size = self.data, self.base, self.start, self.row.size
        encoded = stem.encode("utf-8", "surrogateescape")
        if not encoded:  # names starting with ".so" or empty: no bytes to look for
            return self._decoded_with_stem(stem, arch)
        after = len(encoded)
        rows = set()
        left = 4 * (self.end - start) // size + 64  # a real cache holds a name a few times
        at = data.find(encoded, base)
        while at >= 0:
            left -= 1
            if left < 0:  # a file made to repeat it: decode every entry once, no more
                return self._decoded_with_stem(stem, arch)
            follows = data[at + after : at + after + 3]
            if follows == b".so" or follows[:1] == b"\0":
                rows.update(self._rows_named_at(at - base))
            at = data.find(encoded, at + 1)
        found = []
        try:
            for index in sorted(rows):
                flags, key, value = self.row.unpack_from(data, start + index * size)[:3]
                if is_arch(flags, arch):
                    name = _text(string_at(data, base + key))
                    found.append((name, _text(string_at(data, base + value))))
        except ValueError as error:
            raise OcihookError(f"{self.what}: {error}") from None
        return found

    def _decoded_with_stem(self, stem: str, arch: int) -> list[tuple[str, str]]:
        """with_stem's answer from every entry decoded (Index's grouping by the name's part
        before ".so")."""
        return [
            (n, p)
            for n, p, f in self.entries()
            if is_arch(f, arch) and n.split(".so", 1)[0] == stem
        ]

    def _rows_named_at(self, name_at: int) -> list[int]:
        """The rows whose name offset is `name_at`, in order (several where one string is
        shared, as by a 32-bit and a 64-bit library of one name)."""
        if self._first_row is None:
            # Every row's name offset, read at C speed: the table as 32-bit words, the name
            # offset the second word of a row in either format (after the flags).
            words = memoryview(self.data)[self.start : self.end].cast("I")
            name_ats = words[1 :: self.row.size // 4].tolist()
            last = len(name_ats) - 1
            self._first_row = dict(zip(reversed(name_ats), range(last, -1, -1)))
            if len(self._first_row) != len(name_ats):  # shared strings: their later rows
                for row, at in enumerate(name_ats):
                    if self._first_row[at] != row:
                        self._later_rows.setdefault(at, []).append(row)
        row = self._first_row.get(name_at)
        if row is None:
            return []
        return [row, *self._later_rows.get(name_at, ())]


def load(root_fd: int, path: str, what: str) -> Cache | None:
    """The cache at `path` inside the root `root_fd`, its table located; None if there is
    none. OcihookError: not an ld.so.cache, or a table that does not fit in the file."""
    data = _read_data(root_fd, path, what)
    return None if data is None else Cache(data, what)


def is_arch(flags: int, arch: int) -> bool:
    """Whether an entry's flags say: a glibc ELF library of the arch bits `arch`."""
    return flags & FLAG_TYPE_MASK == FLAG_ELF_LIBC6 and flags & FLAG_ARCH_MASK == arch


class Index:
    """Entries of one arch, grouped by the name before ".so" for quick lookups by pattern:
    of a list of entries (parse), or of a Cache, whose entries are decoded as they are
    looked up (Cache.with_stem)."""

    def __init__(self, entries: list[Entry] | Cache, arch: int) -> None:
        self.arch = arch
        self._cache = entries if isinstance(entries, Cache) else None
        self._all: list[tuple[str, str]] | None = None
        self._by_stem: dict[str, list[tuple[str, str]]] = {}
        if self._cache is None:
            self._all = []
            for soname, path, flags in entries:
                if is_arch(flags, arch):
                    item = (soname, path)
                    self._all.append(item)
                    self._by_stem.setdefault(soname.split(".so", 1)[0], []).append(item)

    @property
    def all(self) -> list[tuple[str, str]]:
        """Every (name, path) of the arch, in the cache's order."""
        if self._all is None:
            self._all = [(n, p) for n, p, f in self._cache.entries() if is_arch(f, self.arch)]
        return self._all

    def stem(self, stem: str) -> list[tuple[str, str]]:
        """The (name, path) entries whose name's part before ".so" is `stem`."""
        if self._cache is None:
            return self._by_stem.get(stem, [])
        found = self._by_stem.get(stem)
        if found is None:
            found = self._by_stem[stem] = self._cache.with_stem(stem, self.arch)
        return found

    def candidates(self, pattern: str) -> list[tuple[str, str]]:
        """(soname, path) entries that may match `pattern` (the caller matches exactly)."""
        stem = pattern.split(".so", 1)[0]
        if "*" in stem or "?" in stem or "[" in stem:
            return self.all
        return self.stem(stem)


# -- merging into and writing the new format (the native ld cache writer) ---------------------

ENDIAN_MASK = 3
ENDIAN_LITTLE = 2  # what glibc >= 2.33 writes in the header's flags on little-endian hosts
EXT_MAGIC = 0xEAA42174
EXT_TAG_GENERATOR = 0
HWCAP_EXTENSION = 1 << 62  # a glibc-hwcaps entry (its hwcap's low bits index a subdir)
_EXT_HEADER = struct.Struct("=II")  # magic, count
_EXT_SECTION = struct.Struct("=IIII")  # tag, flags, offset, size
_MAX_DIGITS = 1 << 31  # glibc compares digit runs as C ints: larger values would wrap

FullEntry = tuple  # (key: bytes, value: bytes, flags: int, osversion: int)


class NotExact(Exception):
    """The cache cannot be carried over faithfully; the message says why."""


def parse_for_merge(data: bytes) -> list[FullEntry]:
    """Every entry of a cache in the new format (new-only, or hidden in the old one), in
    file order, for writing back; NotExact when something would not survive that.

    Refused: old-format-only caches, another byte order, hwcap entries (glibc-hwcaps or
    legacy), extension sections other than the generator string, names that are not
    ASCII (glibc orders them by C `char`, whose sign differs by architecture), digit runs
    past a C int, any offset outside the file."""
    try:
        base, new, rows = table(data)
    except ValueError as error:
        raise NotExact(str(error)) from None
    if not new:
        raise NotExact("old format only")
    _, _, _, flags, ext_offset = _NEW_HEADER.unpack_from(data, base)
    if flags & ENDIAN_MASK not in (0, ENDIAN_LITTLE):
        raise NotExact(f"byte order flag {flags & ENDIAN_MASK}")
    if ext_offset:
        _check_extensions(data, ext_offset)
    entries = []
    for flags, key, value, osversion, hwcap in rows:
        if hwcap:
            what = "glibc-hwcaps" if hwcap & HWCAP_EXTENSION else "hwcap"
            raise NotExact(f"{what} entries")
        entries.append((_ascii(data, base + key), _ascii(data, base + value), flags, osversion))
    return entries


def _check_extensions(data: bytes, offset: int) -> None:
    if offset % 4 or offset + _EXT_HEADER.size > len(data):
        raise NotExact("extension directory outside the file")
    magic, count = _EXT_HEADER.unpack_from(data, offset)
    if magic != EXT_MAGIC:
        raise NotExact("extension directory with a wrong magic")
    if count > (len(data) - offset - _EXT_HEADER.size) // _EXT_SECTION.size:
        raise NotExact("extension directory outside the file")
    for i in range(count):
        tag, _, where, size = _EXT_SECTION.unpack_from(
            data, offset + _EXT_HEADER.size + i * _EXT_SECTION.size
        )
        if where + size > len(data):
            raise NotExact("extension section outside the file")
        if tag != EXT_TAG_GENERATOR:  # the generator string is informative: ours replaces it
            raise NotExact(f"extension section {tag}")


def _ascii(data: bytes, offset: int) -> bytes:
    try:
        text = string_at(data, offset)
    except ValueError as error:
        raise NotExact(str(error)) from None
    if not text.isascii():
        raise NotExact("a name that is not ASCII")
    return text


_DIGITS_TO_NUL = bytes.maketrans(b"0123456789", bytes(10))


def libcmp_key(name: bytes) -> tuple:
    """A key that orders ASCII names as glibc's `_dl_cache_libcmp`: runs of digits compare
    as numbers and above any other character, other characters by value, the end of the
    name as a character of value 0. Each run of other characters becomes one bytes item
    ending in b"\\xff" (a digit run follows) or b"\\0" (the name ends), each digit run an int."""
    marked = name.translate(_DIGITS_TO_NUL)  # digits -> NUL (a name holds no NUL)
    key: list = []
    pos = 0
    while True:
        digit = marked.find(0, pos)
        if digit < 0:
            key.append(name[pos:] + b"\0")
            return tuple(key)
        key.append(name[pos:digit] + b"\xff")
        pos = len(marked) - len(marked[digit:].lstrip(b"\0"))
        value = int(name[digit:pos])
        if value >= _MAX_DIGITS:
            raise NotExact(f"digit run {name[digit:pos].decode()} past a C int")
        key.append(value)


def sort_entries(entries: list[FullEntry]) -> list[FullEntry]:
    """In the order glibc's ldconfig writes (elf/cache.c `compare`), which ld.so's binary
    search relies on: names descending by `_dl_cache_libcmp`, then flags and osversion
    descending; entries equal in all three keep their order (the earlier one wins)."""
    return sorted(entries, key=lambda e: (libcmp_key(e[0]), e[2], e[3]), reverse=True)


def write_new(entries: list[FullEntry], generator: bytes = b"") -> bytes:
    """A cache in the new format only ("glibc-ld.so.cache1.1", little-endian flag set, as
    glibc >= 2.33's ldconfig writes it by default) holding `entries` in the given order,
    with `generator` as its generator extension (none when empty)."""
    if sys.byteorder != "little":
        raise NotExact("big-endian host")
    base = _NEW_HEADER.size + len(entries) * _NEW_ENTRY.size
    strings = bytearray()
    offsets: dict[bytes, int] = {}

    def intern(text: bytes) -> int:
        at = offsets.get(text)
        if at is None:
            at = offsets[text] = base + len(strings)
            strings.extend(text + b"\0")
        return at

    table = bytearray()
    for key, value, flags, osversion in entries:
        value_at = intern(value)
        # The key is usually the value's last component: share its bytes (ldconfig does too).
        if value.endswith(b"/" + key):
            key_at = value_at + len(value) - len(key)
        else:
            key_at = intern(key)
        table += _NEW_ENTRY.pack(flags, key_at, value_at, osversion, 0)
    ext_offset = 0
    tail = b""
    if generator:
        end = base + len(strings)
        ext_offset = (end + 3) & ~3
        section_at = ext_offset + _EXT_HEADER.size + _EXT_SECTION.size
        tail = (
            bytes(ext_offset - end)
            + _EXT_HEADER.pack(EXT_MAGIC, 1)
            + _EXT_SECTION.pack(EXT_TAG_GENERATOR, 0, section_at, len(generator))
            + generator
        )
    header = _NEW_HEADER.pack(NEW_MAGIC, len(entries), len(strings), ENDIAN_LITTLE, ext_offset)
    return header + bytes(table) + bytes(strings) + tail
