"""The host's ldconfig: opened on the host, before the hook enters a container, and checked
to be a static ELF executable (it runs chrooted in the rootfs, where a dynamic one would
load the image's ld.so and libc). The hook and `ocihook cdi-hook` run it (ldcache.py);
`ocihook check` checks it without importing the sandbox.
"""

from __future__ import annotations

import os
import stat

from ocihook.errors import OcihookError


def open_ldconfig(path: str) -> int:
    """The host's ldconfig, opened on the host before entering the container.

    It must be a static ELF executable: it runs chrooted in the rootfs, where a dynamic
    one would load the image's ld.so and libc (and a script the image's interpreter)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise OcihookError(f"ldconfig {path}: {error.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        problem = _not_static_elf(fd, mode)
        if problem is None and not mode & 0o111:
            problem = f"not executable (mode {stat.S_IMODE(mode):04o})"
    except OSError as error:
        problem = error.strerror
    if problem:
        os.close(fd)
        raise OcihookError(f"ldconfig {path}: {problem}; it must be a static executable")
    return fd


def _not_static_elf(fd: int, mode: int) -> str | None:
    """Why the file at `fd` (of st_mode `mode`) is not a static ELF executable (None when it
    is one)."""
    import struct

    if not stat.S_ISREG(mode):
        return "not a regular file"
    header = os.pread(fd, 64, 0)
    if len(header) < 64 or header[:4] != b"\x7fELF":
        return "not an ELF file"
    if header[4] != 2 or header[5] != 1:
        return "not a 64-bit little-endian ELF file"
    (phoff,) = struct.unpack_from("<Q", header, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
    if phentsize < 56 or phnum > 512:
        return "malformed ELF program headers"
    table = os.pread(fd, phentsize * phnum, phoff)
    if len(table) < phentsize * phnum:
        return "truncated ELF program headers"
    for i in range(phnum):
        (p_type,) = struct.unpack_from("<I", table, i * phentsize)
        if p_type == 3:  # PT_INTERP
            return "dynamically linked (it would load the container's ld.so)"
    return None
