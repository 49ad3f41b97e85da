"""Where a driver's libraries are: the library dirs of the source root (its ld.so.cache in
the dynamic linker's order, else its ld.so.conf) and the profile's, searched by fd
(discover/roots.py); the `libraries` section (libraries.py) asks it for each entry's files."""

from __future__ import annotations

import os
import stat

from ocihook.discover.roots import (
    Listing,
    Roots,
    host_path,
    in_root,
    resolve_final,
)
from ocihook.errors import OcihookError
from ocihook.globmatch import glob_match
from ocihook.ld import cachefile, elf
from ocihook.linux import securepath
from ocihook.structs import Struct


def version_suffix_ok(name: str, pattern: str) -> bool:
    """A `libfoo.so.*` pattern matches only version suffixes (`.so.1`, `.so.550.54.14`), never
    `libfoo.so.1.2.3.away` or a backup copy."""
    if not pattern.endswith(".so.*"):
        return True
    suffix = name.rpartition(".so.")[2]
    return bool(suffix) and suffix[0].isdigit() and suffix.replace(".", "").isdigit()


def _match(directory: Listing, pattern: str) -> list[str]:
    return [name for name in directory.match(pattern) if version_suffix_ok(name, pattern)]


def _version_of(name: str) -> str:
    return name.rpartition(".so.")[2]


class Candidate(Struct):
    __slots__ = ("name", "real", "is_link", "sibling")
    name: str  # the name in the directory searched
    real: str  # the regular file it is (in-root path)
    is_link: bool
    sibling: bool  # a link by a plain name to a file beside it (a soname link as ldconfig makes it)


class LibraryFinder:
    """Finds library files: directories from the source root's ld.so.cache (in the dynamic
    linker's order) and the profile's library dirs (fallback, or override); without a
    cache, the dirs of the source root's ld.so.conf before the profile's."""

    def __init__(self, roots: Roots, profile: dict, verify: bool = False) -> None:
        self.roots = roots
        self.profile = profile
        self.verify = verify
        self.cache_path = profile.get("ld_cache")
        cache = None
        if self.cache_path:
            cache = cachefile.load(
                roots.source_fd,
                self.cache_path,
                f"source {host_path(roots.source_root, self.cache_path)}",
            )
        self.cache_found = cache is not None
        flags64, flags32 = cachefile.arch_flags()
        self.index = {
            64: cachefile.Index(cache or [], flags64),
            32: cachefile.Index(cache or [], flags32) if flags32 is not None else None,
        }
        self.fallback = {64: profile["library_dirs"], 32: profile["library_dirs32"]}
        self.driver_dirs: dict[int, list[str]] = {64: [], 32: []}
        self._conf_dirs: list[str] | None = None
        # (directory, pattern) -> candidates, listed once per plan: the driver version and
        # the libraries section ask for the same pattern (callers never change the list).
        self._candidates: dict[tuple[str, str], list[Candidate]] = {}

    def conf_dirs(self) -> list[str]:
        """The dirs of the source root's ld.so.conf (profile `ld_conf`), read once, and only
        when there is no ld cache: with one, the cache is what ldconfig made of them."""
        if self._conf_dirs is None:
            path = self.profile.get("ld_conf")
            found = not self.cache_found and path
            if found:
                from ocihook.ld import (
                    conf as ldsoconf,  # only for a source root without an ld cache
                )

                self._conf_dirs = ldsoconf.read_dirs(self.roots.source_fd, path)
            else:
                self._conf_dirs = []
        return self._conf_dirs

    def dirs(self, pattern: str, arch: int) -> list[str]:
        cache_dirs: list[str] = []
        index = self.index[arch]
        for soname, path in index.candidates(pattern) if index else ():
            if glob_match(soname, pattern) and version_suffix_ok(soname, pattern):
                directory = os.path.dirname(path) or "/"
                if directory not in cache_dirs:
                    cache_dirs.append(directory)
        for directory in cache_dirs:
            if directory not in self.driver_dirs[arch]:
                self.driver_dirs[arch].append(directory)
        listed = self.fallback[arch]
        conf = self.conf_dirs()
        if conf:
            listed = conf + [d for d in listed if d not in conf]
        if self.profile["library_dirs_first"]:
            return listed + [d for d in cache_dirs if d not in listed]
        return cache_dirs + [d for d in listed if d not in cache_dirs]

    def subdirs(self, subdir: str, arch: int) -> list[str]:
        """`<dir>/<subdir>` for every dir that held a driver library (vdpau/, nvidia/wine/)."""
        bases = self.driver_dirs[arch] + [
            d for d in self.fallback[arch] if d not in self.driver_dirs[arch]
        ]
        return [f"{base.rstrip('/')}/{subdir}" for base in bases]

    def candidates(self, directory: str, pattern: str) -> list[Candidate]:
        """Regular files matching `pattern` in `directory`, and symlinks there to regular
        files (resolved inside the source root). A symlink to nothing is a broken driver (a
        library removed, a half-finished upgrade): the container would fail to load it.

        A library that the dir's `tls/` subdir holds too is taken from there: older drivers
        ship libnvidia-tls twice, the one in tls/ for the new TLS ABI, which glibc's loader
        preferred (it searched tls/ first) and NVIDIA's tools select. It goes to the
        container's lib dir under its name, where any loader finds it."""
        key = (directory, pattern)
        if key not in self._candidates:
            self._candidates[key] = self._candidates_uncached(directory, pattern)
        return self._candidates[key]

    def _candidates_uncached(self, directory: str, pattern: str) -> list[Candidate]:
        listing = self.roots.listing(self.roots.source_fd, directory)
        found = self._candidates_in(listing, directory, pattern)
        tls = listing.entries.get("tls")
        if tls is None or not stat.S_ISDIR(tls.st_mode):
            return found
        tls_dir = f"{directory.rstrip('/')}/tls"
        newer = self._candidates_in(
            self.roots.listing(self.roots.source_fd, tls_dir), tls_dir, pattern
        )
        by_file = {os.path.basename(c.real): c.real for c in newer}
        names = {c.name for c in found}
        moved = [c.replace(real=by_file.get(os.path.basename(c.real), c.real)) for c in found]
        return moved + [c for c in newer if c.name not in names]

    def _candidates_in(self, listing: Listing, directory: str, pattern: str) -> list[Candidate]:
        """The candidates of one listed dir. Each file is named by its canonical in-root
        path (the dir as the kernel resolved it, then the name): through a symlinked dir
        (Arch's /usr/lib64 -> lib) a file and the soname link beside it are one file, not
        two."""
        found = []
        here = in_root(self.roots.source_real, listing.real) if listing.real else directory
        for name in _match(listing, pattern):
            mode = listing.entries[name].st_mode
            if stat.S_ISREG(mode):
                found.append(Candidate(name, f"{here.rstrip('/')}/{name}", False, False))
            elif stat.S_ISLNK(mode):
                sibling = listing.sibling_file(name)
                if sibling is not None:  # the common soname link: no resolution needed
                    real = in_root(self.roots.source_real, sibling)
                    found.append(Candidate(name, real, True, True))
                    continue
                final = resolve_final(self.roots.source_fd, f"{directory}/{name}")
                if final is None:
                    where = host_path(self.roots.source_root, f"{directory}/{name}")
                    raise OcihookError(
                        f"source {where}: soname link to a library that does not exist; "
                        "the driver is incomplete"
                    )
                if stat.S_ISREG(final[1].st_mode):
                    real = in_root(self.roots.source_real, final[0])
                    found.append(Candidate(name, real, True, False))
        return found

    def listed(self, arch: int, path: str) -> bool:
        """Whether the ld cache lists `path` as a library of `arch`: ldconfig read its ELF
        class and keyed it by its DT_SONAME (the file name)."""
        index = self.index[arch]
        if index is None:
            return False
        name = os.path.basename(path)
        return any(p == path for _, p in index.stem(name.split(".so", 1)[0]))

    def of_arch(self, chosen: list[Candidate], directory: str, arch: int) -> list[Candidate]:
        """`chosen` without the files of the other ELF class: a file the ld cache lists for
        `arch` (by a name in `directory`) is of it; any other one's class is read (a dir list
        or ld.so.conf may hold a 32-bit and a 64-bit copy of the same name)."""
        vouched = {c.real for c in chosen if self.listed(arch, f"{directory}/{c.name}")}
        wanted = elf.ELFCLASS64 if arch == 64 else elf.ELFCLASS32
        unvouched = {c.real for c in chosen} - vouched
        classes = {real: self._read(real, elf.elf_class) for real in unvouched}
        return [c for c in chosen if c.real in vouched or classes[c.real] == wanted]

    def _read(self, inner: str, reader):
        """`reader(fd)` of the file `inner` of the source root, opened there by fd (in the
        dir it was found in, open already); a reason (what cannot be read, a file that is
        not ELF) is one line."""
        parent, name = os.path.split(inner)
        listing = self.roots.listing(self.roots.source_fd, parent)
        try:
            if listing.fd >= 0:
                fd = os.open(name, elf.READ, dir_fd=listing.fd)
            else:
                fd = securepath.resolve(self.roots.source_fd, inner, flags=elf.READ)
            try:
                found = reader(fd)
            finally:
                os.close(fd)
        except OSError as error:
            found = error.strerror or "cannot read"
        except (OverflowError, ValueError):
            found = "an offset outside the file"
        if isinstance(found, str):
            where = host_path(self.roots.source_root, inner)
            raise OcihookError(f"source {where}: {found}: not a library the loader can use")
        return found

    def soname(self, real: str) -> str:
        """The DT_SONAME of the library file `real` (its file name when it has none), read
        through the source root; one line when it cannot be read or names no file."""
        library = self._read(real, elf.read_fd)
        name = library.soname if library.soname is not None else os.path.basename(real).encode()
        where = host_path(self.roots.source_root, real)
        if not elf.is_file_name(name):
            raise OcihookError(f"source {where}: DT_SONAME {name!r} is not a file name")
        text = name.decode("ascii")
        if text.split(".so", 1)[0] != os.path.basename(real).split(".so", 1)[0]:
            raise OcihookError(
                f"source {where}: DT_SONAME {text} is another library's name; the driver's "
                "files are mixed up"
            )
        return text

    def versions(self, pattern: str) -> list[str]:
        """Driver versions of the files matching `pattern`, in lookup order."""
        versions: list[str] = []
        for directory in self.dirs(pattern, 64):
            for candidate in self.candidates(directory, pattern):
                version = _version_of(os.path.basename(candidate.real))
                if version and version not in versions:
                    versions.append(version)
        return versions
