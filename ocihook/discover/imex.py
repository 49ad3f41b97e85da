"""The nodes of requested NVIDIA IMEX channels (imex.py has the request's rules), read
under the device root by fd: only the host's nodes, each the char device of the
`nvidia-caps-imex-channels` major (/proc/devices) and minor N."""

from __future__ import annotations

import os

from ocihook.discover.devices import device_node
from ocihook.discover.procdevices import char_majors
from ocihook.discover.roots import Roots, host_path
from ocihook.errors import OcihookError
from ocihook.plan.model import DeviceNode
from ocihook.request.imex import number, settings


def host_channels(roots: Roots, spec: dict) -> dict[int, str]:
    """channel number -> its node's in-root path, for every channel node under the device
    root (by name only: plan_channels checks what each is)."""
    nvidia = settings(spec)
    if nvidia is None:
        return {}
    parent, name = os.path.split(nvidia["imex_node"])
    prefix, _, suffix = name.partition("{minor}")
    present = {}
    for entry in roots.listing(roots.device_fd, parent).entries:
        digits = entry[len(prefix) : len(entry) - len(suffix)]
        if entry.startswith(prefix) and entry.endswith(suffix) and number(digits) is not None:
            present[int(digits)] = f"{parent}/{entry}"
    return present


def plan_channels(
    roots: Roots, spec: dict, channels: tuple[int, ...] | None, access: str, origin: str
) -> list[DeviceNode]:
    """The nodes of the requested channels (None: every channel node of the host), each
    checked to be the char device (major of imex_major, minor N)."""
    nvidia = settings(spec)
    if nvidia is None:
        raise OcihookError(f"{origin}: IMEX channels: the profile has no NVIDIA devices")
    parent, name = os.path.split(nvidia["imex_node"])
    prefix = name.partition("{minor}")[0]
    present = host_channels(roots, spec)
    have = ",".join(map(str, sorted(present))) or "none"
    wanted = sorted(present) if channels is None else list(channels)
    if not wanted:
        raise OcihookError(
            f"{origin}: IMEX channels 'all': the host has no channel nodes "
            f"({host_path(roots.device_root, parent)}/{prefix}N)"
        )
    missing = [c for c in wanted if c not in present]
    if missing:
        raise OcihookError(
            f"{origin}: IMEX channel {','.join(map(str, missing))[:80]} does not exist "
            f"(the host has: {have[:400]})"
        )
    majors = char_majors(roots).get(nvidia["imex_major"], set())
    if not majors:
        raise OcihookError(
            f"{origin}: IMEX channels: {host_path(roots.device_root, '/proc/devices')} has no "
            f"char major '{nvidia['imex_major']}' (the nvidia driver has no IMEX support loaded)"
        )
    nodes = []
    for channel in wanted:
        node = device_node(roots, present[channel], None, access)
        if node is None or node.type != "c" or node.major not in majors or node.minor != channel:
            where = host_path(roots.device_root, present[channel])
            raise OcihookError(
                f"{origin}: IMEX channel {channel}: {where} is not the char device "
                f"{'/'.join(map(str, sorted(majors)))}:{channel}"
            )
        nodes.append(node)
    return nodes
