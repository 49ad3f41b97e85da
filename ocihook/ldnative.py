"""Write a container's ld.so.cache natively: the image's cache plus the injected libraries.

What `ldconfig -X <ld dirs>` would add for the injected libraries (soname -> <dir>/<soname>,
flags from the ELF class and machine) is merged into the entries of the image's own
/etc/ld.so.cache, sorted as ldconfig sorts, and written back in glibc's new format. No
process is started. The image's cache and the libraries' ELF headers are hostile input:
read through fds resolved inside the rootfs, bounded, every offset checked, nothing run.
Whenever the result could differ from what ld.so expects, `update` says why and the caller
runs the sandboxed ldconfig instead (ldcache.update_cache).
"""

from __future__ import annotations

import errno
import os
import stat
import struct

from ocihook import ldsocache, securepath

CACHE = "/etc/ld.so.cache"
GENERATOR = b"ocihook (the image's ld.so.cache plus the injected libraries)"
MAX_PHNUM = 512
MAX_DYNAMIC = 1 << 16
MAX_NAME = 4096
MAX_NEEDED = 256
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
EM_386, EM_X86_64 = 3, 62
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_SONAME = 0, 1, 5, 14
# ldconfig's libc6 marker for 32-bit x86 libraries (elf/readlib.c known_libs); older libcs
# would get other flags: such a library takes the ldconfig path.
LIBC6_NAMES = (b"libc.so.6", b"libm.so.6")
OLD_LIBC_NAMES = (b"libc.so.5", b"libm.so.5", b"libc.so.4", b"libm.so.4")
_ELF = {  # class -> (ehdr: phoff, phentsize, phnum), phdr, dyn
    1: (struct.Struct("<28xI10xHH"), struct.Struct("<IIIIIIII"), struct.Struct("<iI")),
    2: (struct.Struct("<32xQ14xHH"), struct.Struct("<IIQQQQQQ"), struct.Struct("<qQ")),
}


def is_dso_name(name: str) -> bool:
    """The file names ldconfig considers in a directory."""
    return name.startswith(("lib", "ld-")) and ".so" in name


def elf_entry(fd: int, name: str) -> tuple[bytes, int] | str:
    """(soname, cache flags) of the ELF shared library open as `fd` (file name `name`), as
    ldconfig records it on x86_64; or why it cannot be told."""
    head = os.pread(fd, 64, 0)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] not in _ELF or head[5] != 1:
        return "not a little-endian ELF file"
    elfclass = head[4]
    ehdr, phdr, dyn = _ELF[elfclass]
    (e_type, machine) = struct.unpack_from("<HH", head, 16)
    if e_type != 3:
        return "not a shared object"
    phoff, phentsize, phnum = ehdr.unpack_from(head, 0)
    if phentsize != phdr.size or not 0 < phnum <= MAX_PHNUM:
        return "malformed program headers"
    table = os.pread(fd, phentsize * phnum, phoff)
    if len(table) < phentsize * phnum:
        return "truncated program headers"
    loads = []
    dynamic = None
    for i in range(phnum):
        fields = phdr.unpack_from(table, i * phentsize)
        if elfclass == 2:
            p_type, _, offset, vaddr, _, filesz = fields[:6]
        else:
            p_type, offset, vaddr, _, filesz = fields[:5]
        if p_type == PT_INTERP:
            return "has a program interpreter"
        if p_type == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None or dynamic[1] > MAX_DYNAMIC:
        return "no dynamic section"
    data = os.pread(fd, dynamic[1], dynamic[0])
    strtab = soname = None
    needed = []
    for tag, value in dyn.iter_unpack(data[: len(data) - len(data) % dyn.size]):
        if tag == DT_NULL:
            break
        if tag == DT_STRTAB:
            strtab = value
        elif tag == DT_SONAME:
            soname = value
        elif tag == DT_NEEDED:
            needed.append(value)
    if len(needed) > MAX_NEEDED:
        return f"{len(needed)} DT_NEEDED entries"
    if strtab is None:
        return "no string table"
    base = next((off + strtab - va for va, off, size in loads if va <= strtab < va + size), None)
    if base is None:
        return "no string table"
    try:
        # (only 32-bit x86 libraries' flags depend on what they link against)
        names = [_string(fd, base + at) for at in needed] if machine == EM_386 else []
        key = _string(fd, base + soname) if soname is not None else name.encode()
    except ValueError as error:
        return str(error)
    if not key or b"/" in key or not key.isascii():
        return f"soname {key!r}"
    if machine == EM_X86_64:
        arch = ldsocache.FLAG_X8664_LIB64 if elfclass == 2 else ldsocache.FLAG_X8664_LIBX32
        return key, ldsocache.FLAG_ELF_LIBC6 | arch
    if machine == EM_386 and elfclass == 1:
        if any(n in OLD_LIBC_NAMES for n in names):
            return "linked against an old libc"
        libc6 = any(n in LIBC6_NAMES for n in names)
        return key, ldsocache.FLAG_ELF_LIBC6 if libc6 else ldsocache.FLAG_ELF
    return f"ELF machine {machine}"


def _string(fd: int, offset: int) -> bytes:
    chunk = os.pread(fd, MAX_NAME, offset)
    stop = chunk.find(b"\0")
    if stop < 0:
        raise ValueError("a name outside the file")
    return chunk[:stop]


def library_entries(root_fd: int, ld_dirs: list[str], targets: list[str]) -> list | str:
    """The entries ldconfig -X would add for the injected libraries `targets` (container
    paths) in `ld_dirs`, in ldconfig's order (directory by directory); or why not."""
    entries: list[ldsocache.FullEntry] = []
    seen = set()
    for directory in ld_dirs:
        prefix = directory.rstrip("/") + "/"
        names = [t[len(prefix) :] for t in targets if t.startswith(prefix)]
        names = [n for n in names if "/" not in n and is_dso_name(n)]
        if not names:
            continue
        try:
            dir_fd = securepath.resolve(root_fd, directory, flags=os.O_PATH | os.O_DIRECTORY)
        except OSError as error:
            return f"{directory}: {error.strerror}"
        try:
            for name in names:
                found = _entry_at(dir_fd, name)
                if isinstance(found, str):
                    return f"{prefix}{name}: {found}"
                key, flags = found
                entry = (key, prefix.encode() + key, flags, 0)
                if entry not in seen:
                    seen.add(entry)
                    entries.append(entry)
        finally:
            os.close(dir_fd)
    return entries


def _entry_at(dir_fd: int, name: str) -> tuple[bytes, int] | str:
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except OSError as error:
        return error.strerror or "cannot open"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not a regular file"
        return elf_entry(fd, name)
    except OSError as error:
        return error.strerror or "cannot read"
    except (OverflowError, ValueError):  # an offset past what pread takes
        return "an offset outside the file"
    finally:
        os.close(fd)


def read_cache(etc_fd: int) -> bytes | str:
    """The image's /etc/ld.so.cache (in the directory `etc_fd`), or why it cannot be used."""
    try:
        fd = os.open("ld.so.cache", _READ, dir_fd=etc_fd)
    except FileNotFoundError:
        return "the image has no /etc/ld.so.cache"
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "/etc/ld.so.cache is a symlink"
        return f"/etc/ld.so.cache: {error.strerror}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "/etc/ld.so.cache is not a regular file"
        if st.st_size > ldsocache.MAX_BYTES:
            return f"/etc/ld.so.cache is larger than {ldsocache.MAX_BYTES >> 20} MiB"
        chunks, size = [], 0
        while size <= ldsocache.MAX_BYTES:
            chunk = os.read(fd, ldsocache.MAX_BYTES + 1 - size)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
        return f"/etc/ld.so.cache is larger than {ldsocache.MAX_BYTES >> 20} MiB"
    except OSError as error:
        return f"/etc/ld.so.cache: {error.strerror}"
    finally:
        os.close(fd)


def merge(image: list, ours: list) -> list:
    """`ours` before the image's entries of the same name and flags; an image entry with a
    path of ours is dropped (that file is ours now)."""
    paths = {entry[1] for entry in ours}
    return ldsocache.sort_entries(ours + [e for e in image if e[1] not in paths])


def build(root_fd: int, etc_fd: int, ld_dirs: list[str], targets: list[str]) -> bytes | str:
    """The merged cache's bytes, or why the native writer cannot be exact."""
    if os.uname().machine != "x86_64":
        return f"machine {os.uname().machine}"
    data = read_cache(etc_fd)
    if isinstance(data, str):
        return data
    try:
        image = ldsocache.parse_for_merge(data)
    except ldsocache.NotExact as error:
        return f"the image's /etc/ld.so.cache: {error}"
    ours = library_entries(root_fd, ld_dirs, targets)
    if isinstance(ours, str):
        return ours
    try:
        return ldsocache.write_new(merge(image, ours), GENERATOR)
    except ldsocache.NotExact as error:
        return str(error)
