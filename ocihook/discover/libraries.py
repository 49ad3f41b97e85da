"""The `libraries` section: each entry's files (64-bit; with the `compat32` capability also
their 32-bit copies), found by the source root's ld cache, ld.so.conf and the profile's
library dirs, with the links the host has to them and the soname links the container needs.
Discovery reads, never writes: every lookup goes through the source root's fd (discover/roots.py).
"""

from __future__ import annotations

import os
import stat

from ocihook.discover.found import Found, add_mount
from ocihook.discover.libfinder import (
    Candidate,
    LibraryFinder,
)
from ocihook.discover.roots import (
    Roots,
    host_path,
)
from ocihook.errors import OcihookError
from ocihook.linux.filetypes import type_name
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
        chosen: list[Candidate] = []
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
    chosen: list[Candidate],
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
    injected library and refuses one whose soname names nothing: ld/native.py); `ocihook
    plan` and `check` read them all (`verify`) and refuse the same way."""
    groups: dict[str, list[Candidate]] = {}
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
            kind = type_name(entry.st_mode)
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
