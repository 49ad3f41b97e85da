"""The `devices` section: the device nodes of the devices the request chose (build.py chose
them, devices.choose, before the driver files were read) and the profile's control nodes
(devices.plan_nodes), the requested NVIDIA IMEX channels (imex.py) and the selected
capabilities' `nodes` (gpudirect.py); the profile's `devices.mode` on every one."""

from __future__ import annotations

from ocihook.discover import devices
from ocihook.discover.found import Found
from ocihook.discover.roots import Roots
from ocihook.plan.model import DeviceNode
from ocihook.request.parse import DeviceRequest


def discover(found: Found) -> None:
    roots, profile, chosen = found.roots, found.profile, found.chosen
    spec = profile["devices"]
    mode = spec.get("mode")
    nodes = devices.plan_nodes(
        roots, spec, chosen.selection, chosen.available, found.parts["control"]
    )
    found.nodes += _with_mode(
        nodes + _extra_nodes(roots, profile, found.capabilities, found.request, found.warnings),
        mode,
    )
    found.device_list += [chosen.available[i] for i in chosen.selection.indices]
    found.device_list += [m.replace(caps=_with_mode(m.caps, mode)) for m in chosen.selection.mig]
    found.mig_devices += [m.replace(caps=_with_mode(m.caps, mode)) for m in chosen.mig_devices]


def _extra_nodes(
    roots: Roots,
    profile: dict,
    capabilities: list[str],
    request: DeviceRequest,
    warnings: list[str],
) -> list[DeviceNode]:
    """The nodes beyond the devices' and control nodes: the requested NVIDIA IMEX channels
    (imex.py) and those of the selected capabilities' `nodes` (gpudirect.py), each module
    imported only when asked for."""
    spec = profile["devices"]
    found: list[DeviceNode] = []
    if request.imex != ():
        from ocihook.discover import imex

        found += imex.plan_channels(roots, spec, request.imex, spec["access"], request.imex_origin)
    if any(profile["capabilities"].get(c, {}).get("nodes") for c in capabilities):
        from ocihook.discover import gpudirect

        entries = gpudirect.wanted(profile, capabilities, request.switched)
        found += gpudirect.plan_nodes(roots, entries, spec["access"], warnings)
    return found


def _with_mode(nodes: list[DeviceNode], mode: str | None) -> list[DeviceNode]:
    """The profile's `devices.mode` (octal) for the nodes the hook creates, when it sets one;
    else each keeps its host node's mode."""
    if not mode:
        return nodes
    value = int(mode, 8)
    return [n.replace(mode=value) for n in nodes]
