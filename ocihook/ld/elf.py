"""The one ELF reader: what a shared library's headers say, read through an fd.

Discovery reads a driver library's class (which lib dir it belongs to) and its DT_SONAME
(which soname link the container needs); the native ld cache writer (ld/native.py) its
soname, class, machine and DT_NEEDED for the cache entry's flags; the hook, `cdi-hook` and
`ocihook check` whether the host's ldconfig is a static executable (open_static_executable);
the CUDA compat probe (plan/cuda.py) a note section of an image's compat libcuda
(note_section), which it and the compat dir's cache entries (ld/native.py) open with
open_regular.
The file may come from a driver volume or from the container's image: hostile input. Every
read is bounded, every offset checked; what cannot be told is a reason (a string), never an
exception.
"""

from __future__ import annotations

import os
import stat
import struct

from ocihook.errors import OcihookError, describe
from ocihook.linux import securepath
from ocihook.structs import Struct

MAX_PHNUM = 512
MAX_DYNAMIC = 1 << 16
MAX_NAME = 4096
MAX_NEEDED = 256
MAX_SHNUM = 4096
MAX_SHSTRTAB = 1 << 16
MAX_NOTE = 4096
MAX_DIR_ENTRIES = 4096  # the most entries of an image's library dir listed (its CUDA compat dir)
MAX_LIBRARY_BYTES = 1 << 30  # the largest library open_regular opens
SHT_NOTE = 7
ELFCLASS32, ELFCLASS64 = 1, 2
ET_DYN = 3
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_SONAME = 0, 1, 5, 14
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_HEAD = 64
_ELF = {  # class -> (ehdr: phoff, phentsize, phnum), phdr, dyn
    ELFCLASS32: (struct.Struct("<28xI10xHH"), struct.Struct("<IIIIIIII"), struct.Struct("<iI")),
    ELFCLASS64: (struct.Struct("<32xQ14xHH"), struct.Struct("<IIQQQQQQ"), struct.Struct("<qQ")),
}


# class -> (e_shoff, e_shentsize, e_shnum, e_shstrndx) in the ELF header; a section header
# (sh_name, sh_type, sh_offset, sh_size, sh_addralign)
_SECTIONS = {
    ELFCLASS32: (struct.Struct("<32xI10xHHH"), struct.Struct("<II8xII8xI4x")),
    ELFCLASS64: (struct.Struct("<40xQ10xHHH"), struct.Struct("<II16xQQ8xQ8x")),
}


class Library(Struct):
    """What an ELF shared library's headers say."""

    __slots__ = ("elfclass", "machine", "soname", "needed", "interp")
    elfclass: int  # ELFCLASS32 or ELFCLASS64
    machine: int  # e_machine (EM_X86_64 62, EM_386 3, ...)
    soname: bytes | None  # DT_SONAME; None: the library has none (its file name stands in)
    needed: list[bytes]  # DT_NEEDED names (read only for the machines asked for)
    interp: bool  # it has a program interpreter (PT_INTERP: an executable, or libc itself)


def elf_class(fd: int) -> int | str:
    """ELFCLASS32 or ELFCLASS64 of the little-endian ELF file open as `fd` (one read of its
    identification), or why it is not one."""
    ident = os.pread(fd, 6, 0)
    if len(ident) < 6 or ident[:4] != b"\x7fELF" or ident[4] not in _ELF or ident[5] != 1:
        return "not a little-endian ELF file"
    return ident[4]


def read_library(fd: int, needed_for: tuple[int, ...] = ()) -> Library | str:
    """The headers of the ELF shared library open as `fd` (its DT_NEEDED names only for a
    machine in `needed_for`), or why they cannot be told. OSError and offsets past what
    pread takes are the caller's (`read_fd` turns them into reasons)."""
    head = os.pread(fd, _HEAD, 0)
    if len(head) < _HEAD or head[:4] != b"\x7fELF" or head[4] not in _ELF or head[5] != 1:
        return "not a little-endian ELF file"
    elfclass = head[4]
    ehdr, phdr, dyn = _ELF[elfclass]
    e_type, machine = struct.unpack_from("<HH", head, 16)
    if e_type != ET_DYN:
        return "not a shared object"
    phoff, phentsize, phnum = ehdr.unpack_from(head, 0)
    if phentsize != phdr.size or not 0 < phnum <= MAX_PHNUM:
        return "malformed program headers"
    table = os.pread(fd, phentsize * phnum, phoff)
    if len(table) < phentsize * phnum:
        return "truncated program headers"
    loads = []
    dynamic = None
    interp = False
    for i in range(phnum):
        fields = phdr.unpack_from(table, i * phentsize)
        if elfclass == ELFCLASS64:
            p_type, _, offset, vaddr, _, filesz = fields[:6]
        else:
            p_type, offset, vaddr, _, filesz = fields[:5]
        if p_type == PT_INTERP:
            interp = True
        elif p_type == PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (offset, filesz)
    if dynamic is None or dynamic[1] > MAX_DYNAMIC:
        return "no dynamic section"
    data = os.pread(fd, dynamic[1], dynamic[0])
    strtab = soname = None
    offsets = []
    for tag, value in dyn.iter_unpack(data[: len(data) - len(data) % dyn.size]):
        if tag == DT_NULL:
            break
        if tag == DT_STRTAB:
            strtab = value
        elif tag == DT_SONAME:
            soname = value
        elif tag == DT_NEEDED:
            offsets.append(value)
    if len(offsets) > MAX_NEEDED:
        return f"{len(offsets)} DT_NEEDED entries"
    if strtab is None:
        return "no string table"
    base = next((off + strtab - va for va, off, size in loads if va <= strtab < va + size), None)
    if base is None:
        return "no string table"
    try:
        names = [_string(fd, base + at) for at in offsets] if machine in needed_for else []
        name = _string(fd, base + soname) if soname is not None else None
    except ValueError as error:
        return str(error)
    return Library(elfclass, machine, name, names, interp)


def _string(fd: int, offset: int) -> bytes:
    chunk = os.pread(fd, MAX_NAME, offset)
    stop = chunk.find(b"\0")
    if stop < 0:
        raise ValueError("a name outside the file")
    return chunk[:stop]


def read_at(dir_fd: int, name: str, needed_for: tuple[int, ...] = ()) -> Library | str:
    """`read_library` of the regular file `name` in the directory `dir_fd` (not following
    a link there), every failure a reason."""
    try:
        fd = os.open(name, READ, dir_fd=dir_fd)
    except OSError as error:
        return describe(error)
    try:
        return read_fd(fd, needed_for)
    finally:
        os.close(fd)


def open_regular(dir_fd: int, name: str) -> int | str:
    """`name` in the dir opened for reading when it is a regular file (an O_PATH fd,
    not following a link, checked, then reopened: a FIFO or a device node is never
    opened, whatever it is swapped for), or why not."""
    try:
        path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as error:
        return describe(error)
    try:
        st = os.fstat(path_fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if st.st_size > MAX_LIBRARY_BYTES:
            return f"larger than {MAX_LIBRARY_BYTES >> 30} GiB"
        return os.open(securepath.fd_path(path_fd), os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        return describe(error)
    finally:
        os.close(path_fd)


def read_fd(fd: int, needed_for: tuple[int, ...] = ()) -> Library | str:
    """`read_library` of an open file that must be a regular one, every failure a reason."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not a regular file"
        return read_library(fd, needed_for)
    except OSError as error:
        return describe(error)
    except (OverflowError, ValueError):  # an offset past what pread takes
        return "an offset outside the file"


def note_section(fd: int, name: bytes) -> tuple[bytes, int] | None | str:
    """(contents, alignment) of the SHT_NOTE section `name` of the little-endian ELF file
    open as `fd`; None when it has no such section; or why its section headers cannot be
    read. Bounded: at most MAX_SHNUM headers, MAX_NOTE bytes of the note."""
    try:
        head = os.pread(fd, _HEAD, 0)
        if len(head) < _HEAD or head[:4] != b"\x7fELF" or head[4] not in _SECTIONS or head[5] != 1:
            return "not a little-endian ELF file"
        ehdr, shdr = _SECTIONS[head[4]]
        shoff, shentsize, shnum, shstrndx = ehdr.unpack_from(head)
        if shoff == 0 or shnum == 0:
            return None
        if shentsize != shdr.size or shnum > MAX_SHNUM or shstrndx >= shnum:
            return "malformed section headers"
        table = os.pread(fd, shentsize * shnum, shoff)
        if len(table) < shentsize * shnum:
            return "truncated section headers"
        headers = [shdr.unpack_from(table, i * shentsize) for i in range(shnum)]
        _, _, str_offset, str_size, _ = headers[shstrndx]
        names = os.pread(fd, min(str_size, MAX_SHSTRTAB), str_offset)
        for sh_name, sh_type, offset, size, align in headers:
            if sh_type != SHT_NOTE or names[sh_name : sh_name + len(name) + 1] != name + b"\0":
                continue
            if size > MAX_NOTE:
                return f"section {name.decode('ascii', 'replace')}: larger than {MAX_NOTE} bytes"
            data = os.pread(fd, size, offset)
            if len(data) < size:
                return f"section {name.decode('ascii', 'replace')}: truncated"
            return data, max(align, 1)
        return None
    except OSError as error:
        return describe(error)
    except (OverflowError, ValueError):  # an offset past what pread takes
        return "an offset outside the file"


def is_file_name(soname: bytes) -> bool:
    """Whether a DT_SONAME can name a file in a library dir: one plain ASCII component."""
    return (
        bool(soname)
        and len(soname) <= 255
        and b"/" not in soname
        and soname not in (b".", b"..")
        and soname.isascii()
        and soname.decode("ascii").isprintable()
    )


def static_executable_problem(fd: int) -> str | None:
    """Why the file open as `fd` is not a static 64-bit little-endian ELF executable (it
    has a program interpreter, PT_INTERP), or None when it is one."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        return "not a regular file"
    head = os.pread(fd, _HEAD, 0)
    if len(head) < _HEAD or head[:4] != b"\x7fELF":
        return "not an ELF file"
    if head[4] != ELFCLASS64 or head[5] != 1:
        return "not a 64-bit little-endian ELF file"
    ehdr, phdr, _dyn = _ELF[ELFCLASS64]
    phoff, phentsize, phnum = ehdr.unpack_from(head)
    if phentsize < phdr.size or phnum > MAX_PHNUM:
        return "malformed ELF program headers"
    table = os.pread(fd, phentsize * phnum, phoff)
    if len(table) < phentsize * phnum:
        return "truncated ELF program headers"
    for i in range(phnum):
        if phdr.unpack_from(table, i * phentsize)[0] == PT_INTERP:
            return "dynamically linked (it would load the container's ld.so)"
    return None


def open_static_executable(path: str, what: str) -> int:
    """`path` opened on the host (before the hook enters a container), checked to be a
    static ELF executable that may be run: the host's ldconfig runs chrooted in the rootfs,
    where a dynamic one would load the image's ld.so and libc (and a script the image's
    interpreter). One line naming `what` when it is not."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise OcihookError(f"{what} {path}: {describe(error)}") from None
    try:
        problem = static_executable_problem(fd)
        mode = os.fstat(fd).st_mode
        if problem is None and not mode & 0o111:
            problem = f"not executable (mode {stat.S_IMODE(mode):04o})"
    except OSError as error:
        problem = describe(error)
    except (OverflowError, ValueError):
        problem = "an offset outside the file"
    if problem:
        os.close(fd)
        raise OcihookError(f"{what} {path}: {problem}; it must be a static executable")
    return fd
