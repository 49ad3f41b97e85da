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

from ocihook.errors import OcihookError
from ocihook.ld import cachefile, elf
from ocihook.linux import securepath

CACHE = "/etc/ld.so.cache"
GENERATOR = b"ocihook (the image's ld.so.cache plus the injected libraries)"
_READ = elf.READ
EM_386, EM_X86_64 = 3, 62
# ldconfig's libc6 marker for 32-bit x86 libraries (elf/readlib.c known_libs); older libcs
# would get other flags: such a library takes the ldconfig path.
LIBC6_NAMES = (b"libc.so.6", b"libm.so.6")
OLD_LIBC_NAMES = (b"libc.so.5", b"libm.so.5", b"libc.so.4", b"libm.so.4")


def is_dso_name(name: str) -> bool:
    """The file names ldconfig considers in a directory."""
    return name.startswith(("lib", "ld-")) and ".so" in name


def elf_entry(fd: int, name: str) -> tuple[bytes, int] | str:
    """(soname, cache flags) of the ELF shared library open as `fd` (file name `name`), as
    ldconfig records it on x86_64; or why it cannot be told."""
    return _entry(elf.read_library(fd, needed_for=(EM_386,)), name)


def _entry(found: elf.Library | str, name: str) -> tuple[bytes, int] | str:
    """(soname, flags) from the headers elf.py read (only 32-bit x86 libraries' flags
    depend on what they link against)."""
    if isinstance(found, str):
        return found
    if found.interp:
        return "has a program interpreter"
    key = found.soname if found.soname is not None else name.encode()
    if not key or b"/" in key or not key.isascii():
        return f"soname {key!r}"
    if found.machine == EM_X86_64:
        wide = found.elfclass == elf.ELFCLASS64
        arch = cachefile.FLAG_X8664_LIB64 if wide else cachefile.FLAG_X8664_LIBX32
        return key, cachefile.FLAG_ELF_LIBC6 | arch
    if found.machine == EM_386 and found.elfclass == elf.ELFCLASS32:
        if any(n in OLD_LIBC_NAMES for n in found.needed):
            return "linked against an old libc"
        libc6 = any(n in LIBC6_NAMES for n in found.needed)
        return key, cachefile.FLAG_ELF_LIBC6 if libc6 else cachefile.FLAG_ELF
    return f"ELF machine {found.machine}"


def library_entries(
    root_fd: int,
    ld_dirs: list[str],
    targets: list[str],
    known: dict[str, tuple[bytes, int]] | None = None,
    learnt: dict[str, tuple[bytes, int]] | None = None,
) -> list | str:
    """The entries ldconfig -X would add for the injected libraries `targets` (container
    paths) in `ld_dirs`, in ldconfig's order (directory by directory); or why not.

    An entry is keyed by the library's DT_SONAME and names `<dir>/<soname>`: when nothing
    of that name is in the dir (the plan's soname link has another name), the library
    would not load; that is an OcihookError, not a reason (ldconfig would write the same
    entry). `known`: (soname, flags) of targets read at an earlier start (ld/known.py: the
    same source file, by its identity), not read again; `learnt` gets those read now."""
    entries: list[cachefile.FullEntry] = []
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
                target = prefix + name
                found = known.get(target) if known else None
                if found is None:
                    found = _entry_at(dir_fd, name)
                    if isinstance(found, str):
                        return f"{target}: {found}"
                    if learnt is not None:
                        learnt[target] = found
                key, flags = found
                if key != name.encode() and not _present(dir_fd, key):
                    raise OcihookError(
                        f"container {prefix}{name}: DT_SONAME {key.decode()} names nothing in "
                        f"{directory} (the driver's soname link has another name): programs "
                        "would not load it"
                    )
                entry = (key, prefix.encode() + key, flags, 0)
                if entry not in seen:
                    seen.add(entry)
                    entries.append(entry)
        finally:
            os.close(dir_fd)
    return entries


def _present(dir_fd: int, name: bytes) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def _entry_at(dir_fd: int, name: str) -> tuple[bytes, int] | str:
    return _entry(elf.read_at(dir_fd, name, needed_for=(EM_386,)), name)


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
        return cachefile.read_bounded(fd)
    except ValueError as error:
        return f"/etc/ld.so.cache is {error}"
    except OSError as error:
        return f"/etc/ld.so.cache: {error.strerror}"
    finally:
        os.close(fd)


def merge(image: list, ours: list) -> list:
    """`ours` before the image's entries of the same name and flags; an image entry with a
    path of ours is dropped (that file is ours now)."""
    paths = {entry[1] for entry in ours}
    return cachefile.sort_entries(ours + [e for e in image if e[1] not in paths])


def compat_entries(root_fd: int, directory: str) -> list:
    """The entries ldconfig would make for the image's CUDA compat dir (cuda.py decided to
    put it first): each regular DSO file there, by fd (elf.open_regular: no FIFO or
    device node is opened), whose DT_SONAME names something in the dir; the others are
    skipped, as the image's own business. Bounded by elf.MAX_DIR_ENTRIES."""
    try:
        dir_fd = securepath.resolve(root_fd, directory, flags=os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return []
    entries: list[cachefile.FullEntry] = []
    prefix = directory.rstrip("/").encode() + b"/"
    try:
        with os.scandir(dir_fd) as listing:
            names = sorted(e.name for _, e in zip(range(elf.MAX_DIR_ENTRIES), listing))
        for name in names:
            if not is_dso_name(name):
                continue
            fd = elf.open_regular(dir_fd, name)
            if isinstance(fd, str):
                continue
            try:
                found = _entry(elf.read_fd(fd, needed_for=(EM_386,)), name)
            finally:
                os.close(fd)
            if isinstance(found, str) or not _present(dir_fd, found[0]):
                continue
            entry = (found[0], prefix + found[0], found[1], 0)
            if entry not in entries:
                entries.append(entry)
    except OSError:
        return []
    finally:
        os.close(dir_fd)
    return entries


def build(
    root_fd: int,
    etc_fd: int,
    ld_dirs: list[str],
    targets: list[str],
    first: str | None = None,
    known: dict | None = None,
    learnt: dict | None = None,
) -> bytes | str:
    """The merged cache's bytes, or why the native writer cannot be exact. `first`: a dir
    of the image whose libraries come before everything (the CUDA compat dir); `known`,
    `learnt`: library_entries'."""
    if os.uname().machine != "x86_64":
        return f"machine {os.uname().machine}"
    data = read_cache(etc_fd)
    if isinstance(data, str):
        return data
    try:
        image = cachefile.parse_for_merge(data)
    except cachefile.NotExact as error:
        return f"the image's /etc/ld.so.cache: {error}"
    ours = library_entries(root_fd, ld_dirs, targets, known, learnt)
    if isinstance(ours, str):
        return ours
    if first is not None:
        ours = compat_entries(root_fd, first) + ours
    try:
        return cachefile.write_new(merge(image, ours), GENERATOR)
    except cachefile.NotExact as error:
        return str(error)
