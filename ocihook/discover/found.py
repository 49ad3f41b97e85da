"""Found: what discovery knows of one request and what the sections' discoverers collect for
its plan, plain data (build.py makes it, walks the sections, and reads it into the Plan).

Each discoverer (libraries.py, binaries.py, firmware.py, files.py, devicenodes.py) reads its
section of `parts` (or the profile's `devices`) and appends to the lists here.
"""

from __future__ import annotations

from ocihook.discover.roots import host_path
from ocihook.plan.model import Mount
from ocihook.structs import Struct

TYPE_CHECKING = False  # typing costs imports at container start: annotations only
if TYPE_CHECKING:
    from ocihook.discover.devices import Chosen
    from ocihook.discover.libfinder import LibraryFinder
    from ocihook.discover.roots import Roots
    from ocihook.request.parse import DeviceRequest


class Found(Struct):
    __slots__ = (
        "config",
        "profile",
        "roots",
        "request",
        "capabilities",
        "parts",
        "finder",
        "version",
        "version_source",
        "chosen",
        "mounts",
        "links",
        "placed",
        "nodes",
        "device_list",
        "mig_devices",
        "unmatched",
        "warnings",
    )
    _defaults = {
        "mounts": [],
        "links": [],
        "placed": {},
        "nodes": [],
        "device_list": [],
        "mig_devices": [],
        "unmatched": [],
        "warnings": [],
    }
    # What is known before the sections are read:
    config: dict  # the compiled config
    profile: dict
    roots: Roots
    request: DeviceRequest
    capabilities: list[str]  # the request's, or the profile's default ones
    parts: dict  # each section's entries for the capabilities (build.select_parts)
    finder: LibraryFinder  # the library dirs (ld cache, ld.so.conf, the profile's)
    version: str | None  # the driver version (build.driver_version)
    version_source: str | None
    chosen: Chosen  # the devices the request selects (devices.choose)
    # What the discoverers collect, in the order of the sections:
    mounts: list[Mount]
    links: list
    placed: dict[str, Mount]  # the path-named lists' (firmware, files) mounts by target
    nodes: list  # DeviceNode
    device_list: list  # the chosen devices and MIG devices, as the plan lists them
    mig_devices: list  # every MIG device of the host (when read: `describe`)
    unmatched: list[str]  # profile entries that matched nothing ("binaries: nvidia-smi")
    warnings: list[str]


def add_mount(
    mounts: dict[str, Mount],
    roots: Roots,
    inner: str,
    target: str,
    kind: str,
    writable: bool = False,
) -> Mount | None:
    """A mount of the source root's file `inner` at `target`, into `mounts` (by target):
    the first file found for a target wins. The new mount; None: the target had one."""
    if target in mounts:
        return None
    mount = Mount(inner, host_path(roots.source_root, inner), target, kind, writable)
    mounts[target] = mount
    return mount
