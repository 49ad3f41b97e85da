"""Device health: a device is Healthy while every node of it, and every shared control node,
is in the device root with the type and major:minor it had when the inventory was taken,
and, where the profile has one, the vendor's own probe passes (NVIDIA: NVML, in the
sandboxed child with a time limit that `ocihook plan` uses, lists the GPU). The device root
is opened afresh at each check: one that vanished or was replaced is seen."""

from __future__ import annotations

import os
import stat

from ocihook.deviceplugin.inventory import Inventory
from ocihook.discover.roots import Roots, resolve_final
from ocihook.errors import OcihookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ocihook.plan.model import DeviceNode


def node_problem(roots: Roots, node: DeviceNode) -> str | None:
    """Why `node` is not what the inventory saw (None: it is)."""
    try:
        final = resolve_final(roots.device_fd, node.path)
    except OcihookError as error:
        return str(error)
    if final is None:
        return f"node {node.host_path} is gone"
    st = final[1]
    kind = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else None
    found = (kind, os.major(st.st_rdev), os.minor(st.st_rdev)) if kind else None
    if found != (node.type, node.major, node.minor):
        what = f"{found[0]} {found[1]}:{found[2]}" if found else "not a device node"
        return f"node {node.host_path} is {what}, not {node.type} {node.major}:{node.minor}"
    return None


def nvml_minors(config: dict, roots: Roots) -> set[int]:
    """The minors of the GPUs NVML lists now (discover.nvidia.Names: the driver's NVML,
    found as discovery finds it, asked in the time-limited child)."""
    from ocihook.discover import nvidia
    from ocihook.discover.build import driver_version
    from ocihook.discover.libfinder import LibraryFinder

    profile = config["profile"]
    finder = LibraryFinder(roots, profile, False)
    version, _, _ = driver_version(roots, profile, finder)
    names = nvidia.Names(roots, profile["devices"], lambda name: finder.dirs(name, 64), version)
    return {gpu.minor for gpu in names.nvml()}


def check(config: dict, inventory: Inventory) -> dict[str, str | None]:
    """device id -> why it is unhealthy (None: Healthy)."""
    from ocihook.deviceplugin.inventory import under

    host_root = inventory.host_root
    try:
        roots = Roots(
            under(host_root, config["source_root"]), under(host_root, config["device_root"])
        )
    except (OSError, OcihookError) as error:
        reason = str(error) if isinstance(error, OcihookError) else error.strerror
        return {device.id: f"device root: {reason}" for device in inventory.devices}
    with roots:
        shared = next(filter(None, (node_problem(roots, n) for n in inventory.control)), None)
        result: dict[str, str | None] = {}
        for device in inventory.devices:
            own = (node_problem(roots, node) for node in device.nodes)
            result[device.id] = shared or next(filter(None, own), None)
        probed = [d for d in inventory.devices if d.gpu_minor is not None and not result[d.id]]
        if probed and config["profile"]["devices"].get("nvidia") is not None:
            try:
                listed = nvml_minors(config, roots)
            except OcihookError as error:
                listed, reason = set(), f"NVML: {error}"
            else:
                reason = None
            for device in probed:
                if device.gpu_minor not in listed:
                    result[device.id] = reason or f"NVML lists no GPU of minor {device.gpu_minor}"
    return result
