"""NUMA topology: each device's NUMA node from sysfs under the device root, and the
preferred allocation that keeps a multi-device request on one NUMA node where it can
(`GetPreferredAllocation`; the kubelet's Topology Manager reads the same `TopologyInfo`)."""

from __future__ import annotations

from ocihook.discover.roots import Roots, read_small_file
from ocihook.errors import OcihookError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ocihook.plan.model import DeviceNode

MAX_NUMA_NODE = 1023


def _is_pci_address(text: str) -> bool:
    hexdigits = "0123456789abcdef"
    return (
        len(text) == 12
        and text[4] == ":"
        and text[7] == ":"
        and text[10] == "."
        and all(c in hexdigits for c in text[:4] + text[5:7] + text[8:10] + text[11])
    )


def numa_node(roots: Roots, address: str | None, nodes: list[DeviceNode]) -> int | None:
    """The NUMA node of a device: its PCI function's `numa_node`, else that of the device
    behind its first node (`/sys/dev/char/M:m/device/numa_node`); None when sysfs says -1
    (one node, or the firmware does not tell) or has no such file."""
    paths = []
    if address and _is_pci_address(address):
        paths.append(f"/sys/bus/pci/devices/{address}/numa_node")
    for node in nodes:
        kind = "char" if node.type == "c" else "block"
        paths.append(f"/sys/dev/{kind}/{node.major}:{node.minor}/device/numa_node")
    for path in paths:
        try:
            text = read_small_file(roots, path, 16)
        except OcihookError:
            continue
        if text is None:
            continue
        value = text.strip()
        number = int(value) if value.isascii() and value.lstrip("-").isdigit() else None
        if number is None or number > MAX_NUMA_NODE:
            raise OcihookError(
                f"{roots.device_root.rstrip('/')}{path}: not a NUMA node: {value!r:.20}"
            )
        return None if number < 0 else number
    return None


def preferred(
    available: list[str], must_include: list[str], size: int, numa: dict[str, int | None]
) -> list[str]:
    """`size` devices out of `available`, `must_include` first: the NUMA node that holds
    most of what must be included and can still make up the rest wins (ties: the lower
    node), then its devices in the order given; devices of unknown NUMA node come last."""
    chosen = list(dict.fromkeys(must_include))[:size]
    rest = [d for d in available if d not in chosen]
    if len(chosen) >= size or not rest:
        return chosen[:size]
    nodes = sorted({numa.get(d) for d in rest if numa.get(d) is not None})
    need = size - len(chosen)

    def score(node: int) -> tuple[int, int, int]:
        fits = sum(1 for d in rest if numa.get(d) == node) >= need
        holds = sum(1 for d in chosen if numa.get(d) == node)
        return (not fits, -holds, node)

    order = {node: rank for rank, node in enumerate(sorted(nodes, key=score))}
    ranked = sorted(rest, key=lambda d: order.get(numa.get(d), len(order)))
    return chosen + ranked[:need]


def topology_of(numa: int | None) -> list[int]:
    """The NUMA node ids of a device's TopologyInfo (none: the kubelet treats it as any)."""
    return [] if numa is None else [numa]
