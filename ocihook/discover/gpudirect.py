"""The device nodes of a profile capability's `nodes` (the NVIDIA profile's GPUDirect
capabilities: gdrcopy's /dev/gdrdrv, gds's /dev/nvidia-fs*, rdma's /dev/infiniband/*).

Each entry names a path under /dev (a glob in its last component) and the driver its nodes
must belong to: `major`, a char major's name in /proc/devices, or `misc`, a misc device's
name in /proc/misc (major 10 and that minor). Every match is checked against it, so a stale
node of an unloaded module, or another driver's node at that path, is refused. An entry
that matches nothing fails the container in one line naming what is missing, unless it is
`optional`. Read only when a container asks for such a capability by name.
"""

from __future__ import annotations

import os

from ocihook.discover.roots import Roots, host_path
from ocihook.errors import OcihookError
from ocihook.globmatch import is_glob
from ocihook.plan.model import DeviceNode


def wanted(
    profile: dict, capabilities: list[str], switched: tuple[str, ...] = ()
) -> list[tuple[str, dict]]:
    """(capability, node entry) of the selected capabilities, in profile order; the entries
    of those only an image's switch asked for (`switched`: NVIDIA_GDS=enabled) optional, as
    NVIDIA's runtime gives them where the host has them and nothing where it has none."""
    found = []
    for name, part in profile["capabilities"].items():
        if name not in capabilities:
            continue
        for entry in part.get("nodes") or ():
            entry = dict(entry) if isinstance(entry, dict) else {"path": entry}
            if name in switched:
                entry["optional"] = entry["switched"] = True
            found.append((name, entry))
    return found


def by_name_only(profile: dict) -> list[str]:
    """The capabilities a container gets only by naming them (never by `all`)."""
    return [name for name, part in profile["capabilities"].items() if part.get("by_name")]


def plan_nodes(
    roots: Roots, entries: list[tuple[str, dict]], access: str, skipped: list | None = None
) -> list[DeviceNode]:
    """The nodes of `entries` (each once), checked against their driver's numbers; what a
    switched entry (wanted's) found nothing of is said in `skipped`."""
    from ocihook.discover.devices import device_node
    from ocihook.discover.procdevices import MISC_MAJOR, char_majors, misc_minors

    majors: dict | None = None
    minors: dict | None = None
    nodes: dict[str, DeviceNode] = {}
    for capability, entry in entries:
        pattern = entry["path"]
        parent, name = os.path.split(pattern)
        if is_glob(parent):
            raise OcihookError(
                f"profile: capability {capability}: glob characters only in the last "
                f"component: {pattern}"
            )
        paths = [f"{parent}/{n}" for n in roots.listing(roots.device_fd, parent).match(name)]
        if "major" in entry:
            majors = char_majors(roots) if majors is None else majors
            numbers = majors.get(entry["major"], set())
            table = host_path(roots.device_root, "/proc/devices")
            driver = f"{table} has no char major '{entry['major']}'"
            expect = (sorted(numbers), None)
        else:
            minors = misc_minors(roots) if minors is None else minors
            minor = minors.get(entry["misc"])
            numbers = set() if minor is None else {MISC_MAJOR}
            table = host_path(roots.device_root, "/proc/misc")
            driver = f"{table} has no misc device '{entry['misc']}'"
            expect = ([MISC_MAJOR], minor)
        if not paths or not numbers:
            if entry.get("switched") and skipped is not None:
                what = host_path(roots.device_root, pattern)
                why = "no such node" if numbers else f"{driver} (its kernel module is not loaded)"
                skipped.append(f"capability {capability} (its switch): {what}: {why}: not given")
            if entry.get("optional", False):
                continue
            what = host_path(roots.device_root, pattern)
            if not numbers:
                reason = f"{driver} (its kernel module is not loaded)"
                raise OcihookError(
                    f"capability {capability}: {what}: "
                    + (f"not found, and {reason}" if not paths else reason)
                )
            raise OcihookError(
                f"capability {capability}: {what} not found (its driver is loaded: "
                "the host has no node for it)"
            )
        for path in paths:
            if path in nodes:
                continue
            node = device_node(roots, path, None, access)
            if node is None:
                if is_glob(name) or entry.get("optional", False):
                    continue
                raise OcihookError(
                    f"capability {capability}: {host_path(roots.device_root, path)}: not found"
                )
            if (
                node.type != "c"
                or node.major not in numbers
                or (expect[1] is not None and node.minor != expect[1])
            ):
                want = "/".join(map(str, expect[0])) + (
                    f":{expect[1]}" if expect[1] is not None else ""
                )
                name_of = entry.get("major") or entry.get("misc")
                raise OcihookError(
                    f"capability {capability}: {node.host_path} is {node.type} "
                    f"{node.major}:{node.minor}, not a node of '{name_of}' (c {want})"
                )
            nodes[path] = node
    return list(nodes.values())
