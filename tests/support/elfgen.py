"""Minimal ELF shared objects for fake hosts: a header, one PT_LOAD, a PT_DYNAMIC with
DT_SONAME, DT_NEEDED and DT_STRTAB, and the string table. Nothing can run or load them (no
code, no symbols); what they are is what glibc's ldconfig and the hook read from a library:
its class, machine and DT_SONAME (checked against the host's own ldconfig in
tests/test_elf.py). Real libraries that a program loads are built with gcc
(tests/support/synthetic.py)."""

from __future__ import annotations

import struct

EM_386, EM_X86_64 = 3, 62
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14
PT_LOAD, PT_DYNAMIC = 1, 2
PF_R, PF_W = 4, 2
SHT_STRTAB, SHT_NOTE = 3, 7
_SHDR = {64: struct.Struct("<IIQQQQIIQQ"), 32: struct.Struct("<IIIIIIIIII")}
_LAYOUT = {  # bits -> (ehdr, phdr, dyn, machine)
    64: (struct.Struct("<16sHHIQQQIHHHHHH"), struct.Struct("<IIQQQQQQ"), struct.Struct("<qQ"), 62),
    32: (struct.Struct("<16sHHIIIIIHHHHHH"), struct.Struct("<IIIIIIII"), struct.Struct("<iI"), 3),
}


def shared_object(
    soname: str | None,
    bits: int = 64,
    needed: tuple[str, ...] = (),
    note: str = "",
    sections: tuple[tuple[str, int, bytes, int], ...] = (),
) -> bytes:
    """The bytes of a shared object of `bits` (64: x86_64, 32: i386) with `soname` (None:
    no DT_SONAME) and `needed` libraries; `note` is carried after the string table (a name
    for people reading the tree); `sections` (name, sh_type, contents, alignment), when
    given, get section headers (and a .shstrtab) after everything else."""
    ehdr, phdr, dyn, machine = _LAYOUT[bits]
    strings = bytearray(b"\0")
    offsets = {}
    for name in (*needed, *([soname] if soname else [])):
        offsets[name] = len(strings)
        strings += name.encode() + b"\0"
    tags = [(DT_NEEDED, offsets[n]) for n in needed]
    if soname:
        tags.append((DT_SONAME, offsets[soname]))
    dyn_at = ehdr.size + 2 * phdr.size
    str_at = dyn_at + (len(tags) + 3) * dyn.size
    tags += [(DT_STRTAB, str_at), (DT_STRSZ, len(strings)), (DT_NULL, 0)]
    dynamic = b"".join(dyn.pack(tag, value) for tag, value in tags)
    tail = bytes(strings) + (b"\0" + note.encode() + b"\0" if note else b"")
    size = str_at + len(tail)
    extra, shoff, shnum = _sections(bits, size, sections) if sections else (b"", 0, 0)
    ident = b"\x7fELF" + bytes([2 if bits == 64 else 1, 1, 1]) + bytes(9)
    shentsize = _SHDR[bits].size if shnum else 0
    shstrndx = shnum - 1 if shnum else 0
    header = ehdr.pack(
        ident, 3, machine, 1, 0, ehdr.size, shoff, 0, ehdr.size, phdr.size, 2, shentsize, shnum,
        shstrndx,
    )  # fmt: skip
    n = len(dynamic)
    if bits == 64:
        load = phdr.pack(PT_LOAD, PF_R, 0, 0, 0, size, size, 0x1000)
        dynph = phdr.pack(PT_DYNAMIC, PF_R | PF_W, dyn_at, dyn_at, dyn_at, n, n, 8)
    else:
        load = phdr.pack(PT_LOAD, 0, 0, 0, size, size, PF_R, 0x1000)
        dynph = phdr.pack(PT_DYNAMIC, dyn_at, dyn_at, dyn_at, n, n, PF_R | PF_W, 4)
    return header + load + dynph + dynamic + tail + extra


def _sections(bits: int, start: int, sections) -> tuple[bytes, int, int]:
    """(the bytes after `start`: each section's contents, .shstrtab and the section header
    table; e_shoff; e_shnum): a null section first, .shstrtab last."""
    shdr = _SHDR[bits]
    names = bytearray(b"\0")
    blob = bytearray()
    headers = [shdr.pack(*[0] * 10)]
    rows = [*sections, (".shstrtab", SHT_STRTAB, None, 1)]
    for name, sh_type, data, align in rows:
        name_at = len(names)
        names += name.encode() + b"\0"
        if data is None:
            data = bytes(names)
        while (start + len(blob)) % max(align, 1):
            blob.append(0)
        offset = start + len(blob)
        blob += data
        headers.append(shdr.pack(name_at, sh_type, 0, 0, offset, len(data), 0, 0, align, 0))
    while (start + len(blob)) % 8:
        blob.append(0)
    shoff = start + len(blob)
    return bytes(blob) + b"".join(headers), shoff, len(headers)
