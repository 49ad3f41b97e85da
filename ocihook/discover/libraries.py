"""The `libraries` section: each entry's files (64-bit; with the `compat32` capability also
their 32-bit copies), found by the source root's ld cache, ld.so.conf and the profile's
library dirs, with the links the host has to them and the soname links the container needs.
Discovery reads, never writes: every lookup goes through the source root's fd (roots.py).
"""

from __future__ import annotations

import os
import stat

from ocihook.discover.found import Found, add_mount
from ocihook.discover.roots import (
    Listing,
    Roots,
    glob_match,
    host_path,
    in_root,
    resolve_final,
)
from ocihook.errors import OcihookError
from ocihook.ld import cachefile, elf
from ocihook.linux import securepath
from ocihook.plan import kinds
from ocihook.plan.kinds import LIBRARY, LIBRARY32
from ocihook.plan.model import PLACEHOLDER_LIB_DIR, PLACEHOLDER_LIB_DIR32, Link, Mount
from ocihook.structs import Struct

COMPAT32 = "compat32"  # the capability that adds the 32-bit copies of the selected libraries
# (ELF class, kind, the placeholder lib dir its files go to until the plan is finalized)
ARCHES = ((64, LIBRARY, PLACEHOLDER_LIB_DIR), (32, LIBRARY32, PLACEHOLDER_LIB_DIR32))


def discover(found: Found) -> None:
    """The section's mounts and links, 64-bit first; one warning per source dir whose
    libraries lack their soname links."""
    finder = found.finder
    missing: dict[str, list[str]] = {}
    for arch, kind, lib_dir in ARCHES:
        if arch == 32 and (COMPAT32 not in found.capabilities or finder.index[32] is None):
            continue
        mounts, links = _libraries(
            finder,
            found.parts["libraries"],
            found.version,
            arch,
            lib_dir,
            kind,
            found.unmatched,
            found.warnings,
            missing,
        )
        found.mounts += mounts
        found.links += links
    found.warnings += _missing_links(missing)


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


class _Candidate(Struct):
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
        entries = None
        if self.cache_path:
            entries = cachefile.read(
                roots.source_fd,
                self.cache_path,
                f"source {host_path(roots.source_root, self.cache_path)}",
            )
        self.cache_found = entries is not None
        flags64, flags32 = cachefile.arch_flags()
        self.index = {
            64: cachefile.Index(entries or [], flags64),
            32: cachefile.Index(entries or [], flags32) if flags32 is not None else None,
        }
        self.fallback = {64: profile["library_dirs"], 32: profile["library_dirs32"]}
        self.driver_dirs: dict[int, list[str]] = {64: [], 32: []}
        self._conf_dirs: list[str] | None = None

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

    def candidates(self, directory: str, pattern: str) -> list[_Candidate]:
        """Regular files matching `pattern` in `directory`, and symlinks there to regular
        files (resolved inside the source root). A symlink to nothing is a broken driver (a
        library removed, a half-finished upgrade): the container would fail to load it.

        A library that the dir's `tls/` subdir holds too is taken from there: older drivers
        ship libnvidia-tls twice, the one in tls/ for the new TLS ABI, which glibc's loader
        preferred (it searched tls/ first) and NVIDIA's tools select. It goes to the
        container's lib dir under its name, where any loader finds it."""
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

    def _candidates_in(self, listing: Listing, directory: str, pattern: str) -> list[_Candidate]:
        """The candidates of one listed dir. Each file is named by its canonical in-root
        path (the dir as the kernel resolved it, then the name): through a symlinked dir
        (Arch's /usr/lib64 -> lib) a file and the soname link beside it are one file, not
        two."""
        found = []
        here = in_root(self.roots.source_real, listing.real) if listing.real else directory
        for name in _match(listing, pattern):
            mode = listing.entries[name].st_mode
            if stat.S_ISREG(mode):
                found.append(_Candidate(name, f"{here.rstrip('/')}/{name}", False, False))
            elif stat.S_ISLNK(mode):
                sibling = listing.sibling_file(name)
                if sibling is not None:  # the common soname link: no resolution needed
                    real = in_root(self.roots.source_real, sibling)
                    found.append(_Candidate(name, real, True, True))
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
                    found.append(_Candidate(name, real, True, False))
        return found

    def listed(self, arch: int, path: str) -> bool:
        """Whether the ld cache lists `path` as a library of `arch`: ldconfig read its ELF
        class and keyed it by its DT_SONAME (the file name)."""
        index = self.index[arch]
        if index is None or not index.all:
            return False
        name = os.path.basename(path)
        return any(p == path for _, p in index.by_stem.get(name.split(".so", 1)[0], ()))

    def of_arch(self, chosen: list[_Candidate], directory: str, arch: int) -> list[_Candidate]:
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


def _entry(item: str | dict) -> dict:
    if isinstance(item, str):
        return {"name": item, "subdir": None, "own_version": False}
    return {"subdir": None, "own_version": False, **item}


def _libraries(
    finder: LibraryFinder,
    entries: list,
    version: str | None,
    arch: int,
    lib_dir: str,
    kind: str,
    unmatched: list[str],
    warnings: list[str],
    missing: dict[str, list[str]],
) -> tuple[list[Mount], list[Link]]:
    mounts: dict[str, Mount] = {}
    links: dict[tuple[str, str], Link] = {}  # by (target, points_to): linear, not n*n
    roots = finder.roots
    for entry in sorted(map(_entry, entries), key=lambda e: e["subdir"] is not None):
        pattern, subdir = entry["name"], entry["subdir"]
        if arch == 32 and (subdir or not pattern.endswith(".so.*")):
            continue  # compat32: the libraries the dynamic linker loads, not plugins
        dirs = finder.subdirs(subdir, arch) if subdir else finder.dirs(pattern, arch)
        # Only a `.so.*` pattern names files with the driver's version in their name.
        versioned = pattern.endswith(".so.*") and not entry["own_version"]
        wanted = f".so.{version}" if version and versioned else None
        chosen: list[_Candidate] = []
        for directory in dirs:
            chosen = [
                c
                for c in finder.candidates(directory, pattern)
                if wanted is None or c.real.endswith(wanted)
            ]
            if chosen and ".so" in pattern:  # ELF files (not the Windows DLLs of ngx)
                chosen = finder.of_arch(chosen, directory, arch)
            if chosen:
                break
        if not chosen:
            label = f"{subdir}/{pattern}" if subdir else pattern
            unmatched.append(f"{'32-bit ' if arch == 32 else ''}libraries: {label}")
            continue
        target_dir = f"{lib_dir}/{subdir}" if subdir else lib_dir
        for candidate in chosen:
            target_name = os.path.basename(candidate.real)
            add_mount(mounts, roots, candidate.real, f"{target_dir}/{target_name}", kind)
            if candidate.is_link and candidate.name != target_name:
                link_target = f"{target_dir}/{candidate.name}"
                if (link_target, target_name) not in links:
                    links[link_target, target_name] = Link(link_target, target_name)
        if not subdir and pattern.endswith(".so.*"):  # what the loader finds by soname
            for link in _soname_links(finder, chosen, directory, target_dir, arch, version):
                _check_free(link, mounts, links, finder.roots)
                links[link.target, link.points_to] = link
                if link.why:
                    warnings.append(link.why)
                else:  # no soname link at all: one warning per dir (discover)
                    where = host_path(roots.source_root, directory)
                    missing.setdefault(where, []).append(os.path.basename(link.target))
    return list(mounts.values()), [Link(link.target, link.points_to) for link in links.values()]


def _missing_links(missing: dict[str, list[str]]) -> list[str]:
    """One warning per source dir whose libraries lack their soname links."""
    one = "1 library lacks its soname link; the container gets it (DT_SONAME)"
    many = "{} libraries lack a soname link; the container gets them (DT_SONAME)"
    return [
        f"{where}: {one if len(names) == 1 else many.format(len(names))}"
        for where, names in missing.items()
    ]


class _SonameLink(Struct):
    __slots__ = ("target", "points_to", "source", "why")
    target: str  # in the container: <lib dir>/<DT_SONAME>
    points_to: str  # the library's file name
    source: str  # the library's host path (for messages)
    why: str  # the plan's warning: what the host has instead ("": no soname link at all)


def _soname_links(
    finder: LibraryFinder,
    chosen: list[_Candidate],
    directory: str,
    target_dir: str,
    arch: int,
    version: str | None,
) -> list[_SonameLink]:
    """The soname links the container needs beyond the host's: for each library file the
    one its DT_SONAME names (the name the loader and the ld cache look it up by), when no
    chosen link has that name. The ELF is read only when the host's links do not already
    say it: a link the ld cache lists (ldconfig keyed it by the DT_SONAME) or a plain soname
    link beside the file is taken as its soname (the native ld cache writer reads every
    injected library and refuses one whose soname names nothing: ldnative.py); `ocihook
    plan` and `check` read them all (`verify`) and refuse the same way."""
    groups: dict[str, list[_Candidate]] = {}
    for candidate in chosen:
        groups.setdefault(candidate.real, []).append(candidate)
    roots = finder.roots
    listing = roots.listing(roots.source_fd, directory)
    needed = []
    for real, group in groups.items():
        file_name = os.path.basename(real)
        names = [c.name for c in group if c.is_link]
        trusted = [
            c.name
            for c in group
            if c.is_link and (c.sibling or finder.listed(arch, f"{directory}/{c.name}"))
        ]
        if finder.listed(arch, real):
            trusted.append(file_name)
        if trusted and not finder.verify:
            continue
        soname = finder.soname(real)
        if soname == file_name or soname in names:
            continue
        where = host_path(roots.source_root, real)
        if trusted:
            raise OcihookError(
                f"source {where}: DT_SONAME {soname} differs from its soname link "
                f"{trusted[0]}: programs would not load it"
            )
        host_link = f"{host_path(roots.source_root, directory)}/{soname}"
        entry = listing.entries.get(soname)
        if entry is not None and stat.S_ISLNK(entry.st_mode):
            try:
                points = os.readlink(soname, dir_fd=listing.fd)
            except OSError:
                points = "?"
            why = f"{host_link} points to {points}: the container's to {file_name}"
        elif entry is not None:
            kind = kinds.type_name(entry.st_mode)
            why = f"{host_link} is a {kind}, not a soname link: the container's is one"
        elif names:
            why = f"{where}: DT_SONAME {soname}, not {', '.join(names)}: the container gets both"
        else:
            why = ""  # no soname link at all: said once per dir
        needed.append(_SonameLink(f"{target_dir}/{soname}", file_name, where, why))
    return needed


def _check_free(link: _SonameLink, mounts: dict, links: dict, roots: Roots) -> None:
    """A soname link the container gets must not take the name of another injected file."""
    mount = mounts.get(link.target)
    if mount is not None:
        raise OcihookError(
            f"source {link.source}: its DT_SONAME names {mount.host_path}, another file of the "
            "driver; the driver's files are mixed up"
        )
    for target, points_to in links:
        if target == link.target and points_to != link.points_to:
            raise OcihookError(
                f"source {link.source}: its DT_SONAME is the name of a soname link to "
                f"{points_to}; the driver's files are mixed up"
            )


def ld_cache_note(finder: LibraryFinder, roots: Roots) -> str:
    """The plan's words on the source root's ld cache."""
    if not finder.cache_path:
        return "not used (profile ld_cache: null)"
    where = finder.cache_path + ("" if roots.source_root == "/" else " in the source root")
    return where if finder.cache_found else f"{where}: missing, library dirs only"
