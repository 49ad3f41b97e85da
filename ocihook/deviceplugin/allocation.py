"""The Allocate answer for one container, as plain data (the server turns it into the
kubelet's ContainerAllocateResponse; the enforcing guest's check applies it with podman).

The channel (docs/kubernetes.md, "The allocation channel"):

- `devices`: every node of the allocated devices and the shared control nodes as device
  specs, so that the runtime itself creates them and allows them in the container's device
  cgroup: they are in the container's own config, where `UpdateContainerResources`
  (`crictl update`, the CPU manager) and a systemd daemon-reload find them, whatever the
  hook's own cgroup edits do. The hook sees them in config.json and leaves them to the
  runtime (apply/owned.py).
- `annotations`: `ocihook.io/devices: <ids>` (the config's request.annotation). kubelet puts
  a device plugin's annotations on the *container's* CRI config; CRI-O records exactly those
  (with kubelet's own) as JSON in `io.kubernetes.cri-o.Annotations`, written over any pod
  annotation of that key. In Kubernetes mode the hook reads its request only from there, so
  a pod's own annotation or env gets nothing; the hook then adds what only it does: the
  driver's files, soname links, the ld cache, labels, the allow-list.
- `cdi_devices` (kubernetes.cdi: true): the same devices as CDI names of the spec that
  `ocihook cdi generate` writes, for a runtime that applies CDI itself (kubelet's
  DevicePluginCDIDevices gate), and as a `cdi.k8s.io/` container annotation for a kubelet
  without that gate.
"""

from __future__ import annotations

from ocihook.deviceplugin.inventory import Inventory
from ocihook.errors import OcihookError

CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
PERMISSIONS = frozenset("rwm")


def container_allocation(config: dict, inventory: Inventory, ids: list[str]) -> dict:
    """What a container that was allocated `ids` gets: devices, annotations, CDI names."""
    known = inventory.by_id()
    unknown = [device_id for device_id in ids if device_id not in known]
    if unknown:
        raise OcihookError(
            f"Allocate: device {unknown[0]!r:.80} is not one of {inventory.resource}'s "
            f"({', '.join(known) or 'none'})"
        )
    if not ids:
        raise OcihookError("Allocate: a container request with no device")
    specs: dict[str, dict] = {}
    for device_id in ids:
        for node in known[device_id].nodes:
            specs.setdefault(node.path, _spec(node))
    for node in inventory.control:
        specs.setdefault(node.path, _spec(node))
    request = ",".join(ids)
    answer: dict = {
        "envs": {},
        "mounts": [],
        "devices": list(specs.values()),
        "annotations": {config["request"]["annotation"]: request},
        "cdi_devices": [],
    }
    if config["kubernetes"]["cdi"]:
        from ocihook.cdi.spec import default_kind

        profile = config["profile"]
        kind = default_kind(profile["name"], profile["devices"].get("cdi_kind"))
        answer["cdi_devices"] = [f"{kind}={device_id}" for device_id in ids]
        key = CDI_ANNOTATION_PREFIX + kind.replace("/", "_")
        answer["annotations"] = {key: ",".join(answer["cdi_devices"])}
        answer["devices"] = []  # the spec has the nodes: the runtime takes them from there
    return answer


def _spec(node: object) -> dict:
    access = node.access
    if not access or not set(access) <= PERMISSIONS:
        raise OcihookError(f"device {node.host_path}: access {access!r:.20} is not of r, w, m")
    return {"container_path": node.path, "host_path": node.host_path, "permissions": access}
