"""Resolve a driver profile against the source root into a Plan (reads, never writes):
`build_plan`, the plan-building entry point of the hook and of every read-only command.

Discovery is driven by the profile's sections: `build_plan` resolves what every section
depends on (the capabilities, their entries, the library dirs, the driver version, the
devices the request selects), then calls each section's discoverer (DISCOVERERS), which
collects plain data (found.Found), and reads that into the Plan.

All lookups go through the file descriptors of the source and device roots (discover/roots.py) with
in-root resolution: a driver volume's symlinks can only point inside that volume.
"""

from __future__ import annotations

import os

from ocihook.discover import binaries, devicenodes, devices, files, firmware, libraries
from ocihook.discover.found import Found
from ocihook.discover.libfinder import LibraryFinder
from ocihook.discover.libraries import ld_cache_note
from ocihook.discover.roots import Roots, host_path
from ocihook.errors import OcihookError
from ocihook.linux import securepath
from ocihook.plan.kinds import SECTIONS
from ocihook.plan.model import PLACEHOLDER_LIB_DIR, PLACEHOLDER_LIB_DIR32, Plan, ld_dirs_for
from ocihook.request.parse import DeviceRequest

# Each section's discoverer: the profile lists that name driver files (kinds.SECTIONS,
# read in that order), then `devices`, the device nodes.
DISCOVERERS = {
    "libraries": libraries.discover,
    "binaries": binaries.discover,
    "firmware": firmware.discover,
    "files": files.discover,
    "devices": devicenodes.discover,
}


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


def driver_version(
    roots: Roots, profile: dict, finder: LibraryFinder
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
    config: dict,
    roots: Roots,
    request: DeviceRequest,
    verify: bool = False,
    describe: str | None = None,
) -> Plan:
    """The plan-building entry point: everything a container asking for `request` gets from
    the source and device roots (the devices it selects, the driver files of its
    capabilities, or the profile's default ones), with libraries under placeholder dirs.
    `plan.decide.finalize` places them and decides the rest for one target (plan.decide).
    `verify` (`plan`, `check`): read every library the profile lists (see LibraryFinder).
    `describe` ("plan" or "strict", for the read-only commands): also every device's
    address and UUID and every MIG device of the host (devices.choose)."""
    found = _resolve(config, roots, request, verify, describe)
    for section in SECTIONS:  # the driver files, in the order of kinds.SECTIONS
        DISCOVERERS[section](found)
    _some_driver_files(found)  # before the device nodes: that refusal comes first
    DISCOVERERS["devices"](found)
    return _plan(found)


def _some_driver_files(found: Found) -> None:
    """Refuses a source root where none of the libraries and binaries listed is found."""
    if not found.mounts and (found.parts["libraries"] or found.parts["binaries"]):
        raise OcihookError(
            f"profile {found.profile['name']}: no driver files found in source root "
            f"{found.roots.source_root}"
        )


def _resolve(
    config: dict, roots: Roots, request: DeviceRequest, verify: bool, describe: str | None
) -> Found:
    """What the sections depend on, before any is read: the capabilities and their entries,
    the library dirs, the driver version and the devices the request selects (NVML, which
    names them, is found by the library dirs; its warnings come first)."""
    profile = config["profile"]
    capabilities = request.capabilities
    if capabilities is None:
        capabilities = list(profile["default_capabilities"])
    parts = select_parts(profile, capabilities)
    finder = LibraryFinder(roots, profile, verify)
    version, version_source, warnings = driver_version(roots, profile, finder)
    chosen = devices.choose(
        roots, profile["devices"], request, lambda name: finder.dirs(name, 64), version, describe
    )
    return Found(
        config,
        profile,
        roots,
        request,
        capabilities,
        parts,
        finder,
        version,
        version_source,
        chosen,
        warnings=warnings + chosen.warnings,
    )


def _plan(found: Found) -> Plan:
    """The Plan of what the discoverers found, libraries under the placeholder lib dirs."""
    roots = found.roots
    return Plan(
        profile=found.profile["name"],
        source_root=roots.source_root,
        device_root=roots.device_root,
        request=_describe(found.request),
        lib_dir=PLACEHOLDER_LIB_DIR,
        driver_version=found.version,
        mounts=found.mounts,
        links=found.links,
        devices=found.nodes,
        device_list=found.device_list,
        mig_devices=found.mig_devices,
        ld_dirs=ld_dirs_for(found.mounts, PLACEHOLDER_LIB_DIR, PLACEHOLDER_LIB_DIR32),
        capabilities=found.capabilities,
        version_source=found.version_source,
        lib_dir32=PLACEHOLDER_LIB_DIR32,
        placeholder=True,
        ld_cache=ld_cache_note(found.finder, roots),
        unmatched=found.unmatched,
        warnings=found.warnings,
    )


def _describe(request: DeviceRequest) -> str:
    """The request as the plan and the record show it (IMEX channels after the devices)."""
    if request.imex == ():
        return request.describe()
    from ocihook.request.imex import describe

    return f"{request.describe()}; IMEX channels {describe(request.imex)}"
