"""What the device plugin offers: the profile's devices on this node, each under the name the
hook and `ocihook cdi generate` accept, with its nodes and NUMA node, read through the one
pipeline (a plan for `all`, described as `ocihook plan` describes the host).

Device IDs: NVIDIA's GPU UUID where the driver shows one (`GPU-...`), a MIG device's UUID
(`MIG-...`, or its `G:M` name) in place of a GPU that has MIG devices, else the index
(`0`, `1`, ...). Every one is a request the hook resolves to exactly that device.
Nothing here speaks gRPC: allocation.py, health.py and topology.py take this plain data,
and the server (server.py) only carries it to the kubelet, so a DRA driver could take the
same inventory, health and allocation.
"""

from __future__ import annotations

from ocihook.deviceplugin.topology import numa_node
from ocihook.errors import OcihookError
from ocihook.pipeline import open_roots, plan_container
from ocihook.plan.decide import Target
from ocihook.plan.model import DeviceNode
from ocihook.request.parse import parse_request
from ocihook.structs import Struct

RESOURCE_VENDOR = "ocihook.io"
MAX_ID_LENGTH = 63  # the kubelet's limit on a device ID


class PluginDevice(Struct):
    """One device the kubelet may allocate: `id` (a name the hook accepts), its index, its
    nodes (for a MIG device its GPU's and its two cap nodes), its NUMA node (None: unknown),
    and for NVIDIA the minor of its GPU (what the NVML probe answers by)."""

    __slots__ = ("id", "index", "nodes", "numa", "gpu_minor")
    _defaults = {"gpu_minor": None}
    id: str
    index: int | None
    nodes: list[DeviceNode]
    numa: int | None
    gpu_minor: int | None


class Inventory(Struct):
    """The resource, its devices, the shared control nodes every allocation gets, the device
    root they were read from and the plan's warnings."""

    __slots__ = (
        "resource",
        "profile",
        "devices",
        "control",
        "device_root",
        "warnings",
        "host_root",
    )
    _defaults = {"host_root": "/"}
    resource: str
    profile: str
    devices: list[PluginDevice]
    control: list[DeviceNode]
    device_root: str
    warnings: list[str]
    host_root: str  # where the node's root is mounted ("/": here)

    def by_id(self) -> dict[str, PluginDevice]:
        return {device.id: device for device in self.devices}


def resource_name(config: dict) -> str:
    """The config's kubernetes.resource, else ocihook.io/<profile name> (a vendor's own
    plugin keeps its name, e.g. nvidia.com/gpu: both can run on one node)."""
    configured = config["kubernetes"]["resource"]
    if configured:
        return configured
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in config["profile"]["name"])
    return f"{RESOURCE_VENDOR}/{name.strip('-_.') or 'device'}"


def under(host_root: str, path: str) -> str:
    """`path` of the node as seen where the node's root is mounted at `host_root`."""
    return path if host_root == "/" else host_root.rstrip("/") + "/" + path.lstrip("/")


def on_node(host_root: str, node: DeviceNode) -> DeviceNode:
    """The node with its host path as the node (the kubelet, the runtime) names it."""
    prefix = host_root.rstrip("/")
    if not prefix or not node.host_path.startswith(prefix + "/"):
        return node
    return node.replace(host_path=node.host_path[len(prefix) :])


def take_inventory(config: dict, host_root: str = "/") -> Inventory:
    """The node's devices for `config`'s profile (one OcihookError line when the driver or
    the device root cannot be read). `host_root`: where the node's root is mounted (the
    DaemonSet's container: /host); the config's roots are read under it, and the device
    specs name the nodes as the node does."""
    if host_root != "/":
        config = dict(config)
        for key in ("source_root", "device_root"):
            config[key] = under(host_root, config[key])
    request = parse_request("all", "device plugin")
    with open_roots(config) as roots:
        plan = plan_container(config, roots, request, Target.static(), describe="plan").plan
        by_path = {node.path: node for node in plan.devices}
        numbers = {device.index: device.number for device in plan.device_list}
        devices: list[PluginDevice] = []
        owned: set[str] = set()
        with_mig = {mig.index for mig in plan.mig_devices}
        for device in plan.device_list:
            nodes = [by_path[path] for path in device.nodes if path in by_path]
            owned.update(device.nodes)
            if device.index in with_mig:
                continue  # offered as its MIG devices, below
            devices.append(
                PluginDevice(
                    device.uuid or str(device.index),
                    device.index,
                    nodes,
                    numa_node(roots, device.address, nodes),
                    device.number if device.uuid else None,
                )
            )
        for mig in plan.mig_devices:
            nodes = [by_path.get(path) or cap for path, cap in _mig_nodes(mig)]
            owned.update(mig.nodes)
            parent = [d for d in plan.device_list if d.index == mig.index]
            address = parent[0].address if parent else None
            devices.append(
                PluginDevice(
                    mig.uuid or mig.name,
                    mig.index,
                    nodes,
                    numa_node(roots, address, nodes),
                    numbers.get(mig.index),
                )
            )
        control = [node for node in plan.devices if node.path not in owned]
    if host_root != "/":
        control = [on_node(host_root, node) for node in control]
        for device in devices:
            device.nodes = [on_node(host_root, node) for node in device.nodes]
    for device in devices:
        if len(device.id) > MAX_ID_LENGTH:
            raise OcihookError(f"device {device.id!r:.80}: longer than {MAX_ID_LENGTH} characters")
    return Inventory(
        resource_name(config),
        config["profile"]["name"],
        devices,
        control,
        config["device_root"],
        list(plan.warnings),
        host_root,
    )


def _mig_nodes(mig: object) -> list[tuple[str, DeviceNode | None]]:
    """A MIG device's nodes: (path, its cap node where it is one of the two caps)."""
    caps = {cap.path: cap for cap in mig.caps}
    return [(path, caps.get(path)) for path in mig.nodes]


def describe(inventory: Inventory, health: dict[str, str | None] | None = None) -> dict:
    """The inventory as a plain document (`ocihook device-plugin --list --json`)."""
    return {
        "resource": inventory.resource,
        "profile": inventory.profile,
        "device_root": inventory.device_root,
        "devices": [
            {
                "id": device.id,
                "index": device.index,
                "nodes": [node.host_path for node in device.nodes],
                "numa_node": device.numa,
                "health": "Healthy" if not (health or {}).get(device.id) else "Unhealthy",
                "reason": (health or {}).get(device.id),
            }
            for device in inventory.devices
        ],
        "control": [node.host_path for node in inventory.control],
        "warnings": inventory.warnings,
    }
