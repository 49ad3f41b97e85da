"""Resolve a driver profile against the source root into a Plan (reads, never writes):
`build_plan`, the plan-building entry point of the hook and of every read-only command.

All lookups go through the file descriptors of the source and device roots (roots.py) with
in-root resolution: a driver volume's symlinks can only point inside that volume.
"""

from __future__ import annotations

import os
import stat

from ocihook import devices, ldsocache, securepath
from ocihook.errors import OcihookError
from ocihook.kinds import SECTIONS, found_kind, section_kind
from ocihook.plan import (
    PLACEHOLDER_LIB_DIR,
    PLACEHOLDER_LIB_DIR32,
    DeviceNode,
    Link,
    Mount,
    Plan,
    ld_dirs_for,
)
from ocihook.request import DeviceRequest
from ocihook.roots import Listing, Roots, glob_match, host_path, in_root, is_glob, resolve_final
from ocihook.slots import Struct

COMPAT32 = "compat32"  # the capability that adds the 32-bit copies of the selected libraries


def version_suffix_ok(name: str, pattern: str) -> bool:
    """A `libfoo.so.*` pattern matches only version suffixes (`.so.1`, `.so.550.54.14`), never
    `libfoo.so.1.2.3.away` or a backup copy."""
    if not pattern.endswith(".so.*"):
        return True
    suffix = name.rpartition(".so.")[2]
    return bool(suffix) and suffix[0].isdigit() and suffix.replace(".", "").isdigit()


def _match(directory: Listing, pattern: str) -> list[str]:
    return [name for name in directory.match(pattern) if version_suffix_ok(name, pattern)]


def _merged(parts: list[dict], key: str) -> list:
    """The `key` lists of the selected profile parts, in order, without repeats."""
    seen: list = []
    for part in parts:
        for item in part.get(key) or ():
            if item not in seen:
                seen.append(item)
    return seen


def select_parts(profile: dict, capabilities: list[str]) -> dict:
    """The profile's lists for the selected capabilities (plus its top-level lists)."""
    parts = [profile] + [p for c, p in profile["capabilities"].items() if c in capabilities]
    return {key: _merged(parts, key) for key in (*SECTIONS, "control")}


def read_kernel_version(roots: Roots, paths: list[str]) -> tuple[str, str] | None:
    """(version, the file it came from) from the first readable kernel module version file
    under the device root: a bare `550.54.14` (/sys/module/nvidia/version) or a line such as
    `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  ...` (/proc/driver/...)."""
    for path in paths:
        try:
            fd = securepath.resolve(roots.device_fd, path, flags=os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            text = os.read(fd, 4096).decode("ascii", "replace")
        except OSError:
            continue
        finally:
            os.close(fd)
        for token in text.split("\n", 1)[0].split():
            if (
                len(token) <= 32
                and "." in token
                and token[0].isdigit()
                and token.replace(".", "").isdigit()
            ):
                return token, path
    return None


def _version_of(name: str) -> str:
    return name.rpartition(".so.")[2]


class _Candidate(Struct):
    __slots__ = ("name", "real", "is_link")
    name: str  # the name in the directory searched
    real: str  # the regular file it is (in-root path)
    is_link: bool


class _LibraryFinder:
    """Finds library files: directories from the source root's ld.so.cache (in the dynamic
    linker's order) and the profile's library dirs (fallback, or override)."""

    def __init__(self, roots: Roots, profile: dict) -> None:
        self.roots = roots
        self.profile = profile
        self.cache_path = profile.get("ld_cache")
        entries = None
        if self.cache_path:
            entries = ldsocache.read(
                roots.source_fd,
                self.cache_path,
                f"source {host_path(roots.source_root, self.cache_path)}",
            )
        self.cache_found = entries is not None
        flags64, flags32 = ldsocache.arch_flags()
        self.index = {
            64: ldsocache.Index(entries or [], flags64),
            32: ldsocache.Index(entries or [], flags32) if flags32 is not None else None,
        }
        self.fallback = {64: profile["library_dirs"], 32: profile["library_dirs32"]}
        self.driver_dirs: dict[int, list[str]] = {64: [], 32: []}

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
        library removed, a half-finished upgrade): the container would fail to load it."""
        listing = self.roots.listing(self.roots.source_fd, directory)
        found = []
        for name in _match(listing, pattern):
            mode = listing.entries[name].st_mode
            if stat.S_ISREG(mode):
                found.append(_Candidate(name, f"{directory}/{name}", False))
            elif stat.S_ISLNK(mode):
                sibling = listing.sibling_file(name)
                if sibling is not None:  # the common soname link: no resolution needed
                    found.append(_Candidate(name, in_root(self.roots.source_real, sibling), True))
                    continue
                final = resolve_final(self.roots.source_fd, f"{directory}/{name}")
                if final is None:
                    where = host_path(self.roots.source_root, f"{directory}/{name}")
                    raise OcihookError(
                        f"source {where}: soname link to a library that does not exist; "
                        "the driver is incomplete"
                    )
                if stat.S_ISREG(final[1].st_mode):
                    found.append(_Candidate(name, in_root(self.roots.source_real, final[0]), True))
        return found

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
    finder: _LibraryFinder,
    entries: list,
    version: str | None,
    arch: int,
    lib_dir: str,
    kind: str,
    unmatched: list[str],
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
            if chosen:
                break
        if not chosen:
            label = f"{subdir}/{pattern}" if subdir else pattern
            unmatched.append(f"{'32-bit ' if arch == 32 else ''}libraries: {label}")
            continue
        target_dir = f"{lib_dir}/{subdir}" if subdir else lib_dir
        for candidate in chosen:
            target_name = os.path.basename(candidate.real)
            _add_mount(mounts, roots, candidate.real, f"{target_dir}/{target_name}", kind)
            if candidate.is_link and candidate.name != target_name:
                link_target = f"{target_dir}/{candidate.name}"
                if (link_target, target_name) not in links:
                    links[link_target, target_name] = Link(link_target, target_name)
    return list(mounts.values()), list(links.values())


def _add_mount(
    mounts: dict[str, Mount],
    roots: Roots,
    inner: str,
    target: str,
    kind: str,
    writable: bool = False,
) -> None:
    if target not in mounts:
        mounts[target] = Mount(inner, host_path(roots.source_root, inner), target, kind, writable)


def _binaries(
    roots: Roots, profile: dict, names: list[str], bin_dir: str, unmatched
) -> list[Mount]:
    mounts: dict[str, Mount] = {}
    for name in names:
        for directory in profile["binary_dirs"]:
            final = resolve_final(roots.source_fd, f"{directory}/{name}")
            if final is not None and stat.S_ISREG(final[1].st_mode):
                inner = in_root(roots.source_real, final[0])
                _add_mount(mounts, roots, inner, f"{bin_dir}/{name}", "binary")
                break
        else:
            unmatched.append(f"binaries: {name}")
    return list(mounts.values())


def _glob_files(roots: Roots, pattern: str) -> list[tuple[str, str, os.stat_result]]:
    """(path as the profile names it, resolved in-root path, stat) of the files matching
    `pattern` (glob characters in its last component only)."""
    parent, name = os.path.split(pattern)
    if is_glob(parent):
        raise OcihookError(f"profile: glob characters only in the last component: {pattern}")
    found = []
    for match in roots.listing(roots.source_fd, parent).match(name):
        final = resolve_final(roots.source_fd, f"{parent}/{match}")
        if final is not None:
            found.append((f"{parent}/{match}", in_root(roots.source_real, final[0]), final[1]))
    return found


def _files(roots: Roots, parts: dict, version: str | None, unmatched: list[str]) -> list[Mount]:
    """The `firmware` and `files` entries: each match's kind by its file type (kinds.py)."""
    mounts: dict[str, Mount] = {}
    entries = [("firmware", {"path": f}) for f in parts["firmware"]]
    entries += [("files", {"path": f} if isinstance(f, str) else f) for f in parts["files"]]
    for section, entry in entries:
        named_as = section_kind(section).name  # "firmware: ...", "file: ..." in messages
        pattern = entry["path"]
        if "{version}" in pattern:
            if version is None:
                unmatched.append(f"{named_as}: {pattern} (no driver version)")
                continue
            pattern = pattern.replace("{version}", version)
        found = _glob_files(roots, pattern)
        if not found and section == "files" and not entry.get("optional", False):
            raise OcihookError(
                f"profile: file {pattern} not found in source root {roots.source_root}"
            )
        if not found:
            unmatched.append(f"{named_as}: {pattern}")
        for named, inner, st in found:
            kind = found_kind(section, st.st_mode)
            if kind is None:
                continue
            writable = kind.may_write and entry.get("writable", False)
            # The path as the profile names it, not where the source root's links lead
            # (/lib/firmware stays /lib/firmware on a merged-/usr host).
            target = entry.get("target") or named
            _add_mount(mounts, roots, inner, target, kind.name, writable)
    return list(mounts.values())


def driver_version(
    roots: Roots, profile: dict, finder: _LibraryFinder
) -> tuple[str | None, str | None, list[str]]:
    """(version, where it came from, warnings). The running kernel module's version wins;
    without one, the version of the profile's `driver_version.library` files."""
    spec = profile.get("driver_version") or {}
    kernel_paths = spec.get("kernel") or []
    library = spec.get("library")
    kernel = read_kernel_version(roots, kernel_paths)
    if kernel is not None:
        version, path = kernel
        found = finder.versions(library) if library else []
        if found and version not in found:
            raise OcihookError(
                f"driver {version} is loaded ({host_path(roots.device_root, path)}) but "
                f"{roots.source_root} has {library} only of {', '.join(found)}: the driver "
                "was upgraded without reloading its kernel module; reboot (or reload it)"
            )
        return version, f"kernel module, {host_path(roots.device_root, path)}", []
    found = finder.versions(library) if library else []
    if not found:
        return None, None, []
    warnings = []
    if len(found) > 1:
        where = ", ".join(host_path(roots.device_root, p) for p in kernel_paths) or "none"
        warnings.append(
            f"no kernel module version ({where}) and several driver versions in the source "
            f"root ({', '.join(found)}): using {found[0]}, the first the ld cache lists"
        )
    return found[0], f"{library}, no kernel module version", warnings


def build_plan(
    config: dict, roots: Roots, request: DeviceRequest, describe: str | None = None
) -> Plan:
    """The plan-building entry point: everything a container asking for `request` gets from
    the source and device roots (the devices it selects, the driver files of its
    capabilities, or the profile's default ones), with libraries under placeholder dirs.
    `plan.finalize` places them and decides the rest for one target (target.decide).
    `describe` ("plan" or "strict", for the read-only commands): also every device's
    address and UUID and every MIG device of the host (devices.choose)."""
    profile = config["profile"]
    capabilities = request.capabilities
    if capabilities is None:
        capabilities = list(profile["default_capabilities"])
    lib_dir, lib_dir32 = PLACEHOLDER_LIB_DIR, PLACEHOLDER_LIB_DIR32
    parts = select_parts(profile, capabilities)
    finder = _LibraryFinder(roots, profile)
    version, version_source, warnings = driver_version(roots, profile, finder)
    spec = profile["devices"]
    chosen = devices.choose(
        roots, spec, request, lambda name: finder.dirs(name, 64), version, describe
    )
    mode = spec.get("mode")
    warnings += chosen.warnings
    unmatched: list[str] = []
    mounts, links = _libraries(
        finder, parts["libraries"], version, 64, lib_dir, "library", unmatched
    )
    if COMPAT32 in capabilities and finder.index[32] is not None:
        mounts32, links32 = _libraries(
            finder, parts["libraries"], version, 32, lib_dir32, "library32", unmatched
        )
        mounts += mounts32
        links += links32
    mounts += _binaries(
        roots, profile, parts["binaries"], config["container"]["bin_dir"], unmatched
    )
    mounts += _files(roots, parts, version, unmatched)
    if not mounts and (parts["libraries"] or parts["binaries"]):
        raise OcihookError(
            f"profile {profile['name']}: no driver files found in source root {roots.source_root}"
        )
    return Plan(
        profile=profile["name"],
        source_root=roots.source_root,
        device_root=roots.device_root,
        request=request.describe(),
        lib_dir=lib_dir,
        driver_version=version,
        mounts=mounts,
        links=links,
        devices=_with_mode(
            devices.plan_nodes(roots, spec, chosen.selection, chosen.available, parts["control"]),
            mode,
        ),
        device_list=[chosen.available[i] for i in chosen.selection.indices]
        + [m.replace(caps=_with_mode(m.caps, mode)) for m in chosen.selection.mig],
        mig_devices=[m.replace(caps=_with_mode(m.caps, mode)) for m in chosen.mig_devices],
        ld_dirs=ld_dirs_for(mounts, lib_dir, lib_dir32),
        capabilities=capabilities,
        version_source=version_source,
        lib_dir32=lib_dir32,
        placeholder=True,
        ld_cache=_ld_cache_note(finder, roots),
        unmatched=unmatched,
        warnings=warnings,
    )


def _with_mode(nodes: list[DeviceNode], mode: str | None) -> list[DeviceNode]:
    """The profile's `devices.mode` (octal) for the nodes the hook creates, when it sets one;
    else each keeps its host node's mode."""
    if not mode:
        return nodes
    value = int(mode, 8)
    return [n.replace(mode=value) for n in nodes]


def _ld_cache_note(finder: _LibraryFinder, roots: Roots) -> str:
    if not finder.cache_path:
        return "not used (profile ld_cache: null)"
    where = finder.cache_path + ("" if roots.source_root == "/" else " in the source root")
    return where if finder.cache_found else f"{where}: missing, library dirs only"
