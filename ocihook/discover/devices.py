"""Which devices the host has, and which nodes each one is made of (reads, never writes).

A profile's `devices` section names per-device node patterns in one of two styles:

- `{index}` patterns (`/dev/nvidia{index}`): a device per number in the first pattern's
  node names; every pattern that exists for that number is one of its nodes. The index is
  that number, but for NVIDIA (`devices.nvidia`): there index N is the N-th GPU in PCI bus
  order of the driver's information files (NVML's, nvidia-smi's and CUDA's numbering;
  nvidia.number_gpus), whatever minor its node has, read only when a request needs it;
- `{n}` patterns with `sysfs` (`/dev/dri/card{n}`, `/dev/dri/renderD{n}`): the devices are
  the entries of `sys/class/<class>` under the device root whose name matches a pattern
  and whose device is bound to one of the profile's kernel `drivers`. Entries of the same
  (PCI) device are one device with several nodes; index N is the N-th such device in PCI
  address order, so a BMC's display (`card0` on ast) never shifts an accelerator's index,
  or with `sysfs.index: number` the kernel's number of its first node (`accel3`: 3, as
  Habana's runtime reads HABANA_VISIBLE_DEVICES).

Only links are read (one in-root resolution of `<entry>/device` and one readlink of its
`driver` per entry): no uevent parsing, no subprocess. Majors and minors come from the
nodes themselves when the plan is built (dynamic majors differ between hosts).
"""

from __future__ import annotations

import os
import stat

from ocihook.discover.roots import Roots, host_path, in_root, resolve_final
from ocihook.errors import OcihookError
from ocihook.linux import securepath
from ocihook.plan.model import DeviceNode
from ocihook.request.parse import DeviceRequest, Selection, name_kind, select_devices
from ocihook.structs import Struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

MAX_NUMBER_DIGITS = 4


class Device(Struct):
    """One device: its index, its bus address (PCI, when sysfs or the driver's files say),
    driver, nodes and UUID (NVIDIA's, when read)."""

    __slots__ = ("index", "address", "driver", "nodes", "uuid", "number")
    _defaults = {"uuid": None, "number": None}
    index: int | None  # None: NVIDIA's order not read (a request for all, or by node name)
    address: str | None  # "0000:c1:00.0"; None when neither sysfs nor the driver says
    driver: str | None  # the kernel driver bound to it ("amdgpu"), None if unknown
    nodes: list[str]  # in-root paths of its nodes under the device root
    uuid: str | None  # "GPU-8d2f...": NVIDIA's (devices.nvidia), None if not read or none
    number: int | None  # the number in its nodes' names ({index} patterns: NVIDIA's minor)

    def to_dict(self) -> dict:
        """The plan's view: the node number is in the nodes' names already."""
        data = super().to_dict()
        del data["number"]
        return data


class Chosen(Struct):
    """What a request selects on this host: the devices found (index -> Device), the whole
    devices and MIG devices selected, every MIG device known (for `ocihook plan` and the
    CDI spec: read only when asked for), and warnings for people."""

    __slots__ = ("available", "selection", "mig_devices", "warnings")
    available: dict
    selection: Selection
    mig_devices: list
    warnings: list[str]


def _number(name: str, prefix: str, suffix: str) -> str | None:
    """The digits that `name` has in place of the placeholder, or None."""
    digits = name[len(prefix) : len(name) - len(suffix)]
    if (
        name.startswith(prefix)
        and name.endswith(suffix)
        and 0 < len(digits) <= MAX_NUMBER_DIGITS
        and digits.isascii()
        and digits.isdigit()
    ):
        return digits
    return None


def _split(pattern: str, placeholder: str) -> tuple[str, str, str]:
    """("/dev/dri", "renderD", "") of "/dev/dri/renderD{n}"."""
    parent, name = os.path.split(pattern)
    prefix, found, suffix = name.partition(placeholder)
    if not found:
        raise OcihookError(f"profile: devices node {pattern!r} has no {placeholder} in its name")
    return parent, prefix, suffix


def node_patterns(spec: dict) -> list[str]:
    """The per-device patterns of a profile's `devices` (`node` is one more `nodes` entry)."""
    patterns = list(spec.get("nodes") or [])
    if spec.get("node"):
        patterns.insert(0, spec["node"])
    return patterns


def available_devices(
    roots: Roots,
    spec: dict,
    identify: bool = False,
    numbered: bool = True,
    names: object = None,
) -> dict[int, Device]:
    """index -> Device for every device of the profile's kind present under the device root.
    NVIDIA (devices.nvidia): `numbered` or `identify` read the driver's information files
    (NVML, `names`, where they are absent) for the GPUs' order, PCI addresses and UUIDs;
    else the devices are keyed by their nodes' numbers with index None (a request for all
    or by node name needs no order)."""
    patterns = node_patterns(spec)
    if not patterns:
        return {}
    if spec.get("sysfs"):
        return _sysfs_devices(roots, spec["sysfs"], patterns)
    found = _indexed_devices(roots, patterns)
    if spec.get("nvidia") is None:
        return found
    if not (numbered or identify):
        for device in found.values():
            device.index = None
        return found
    from ocihook.discover import nvidia

    return nvidia.number_gpus(roots, nvidia.settings(spec), found, names)


def choose(
    roots: Roots,
    spec: dict,
    request: DeviceRequest,
    nvml_dirs: Callable[[str], list[str]] | None = None,
    version: str | None = None,
    describe: str | None = None,
) -> Chosen:
    """The devices `request` selects. NVIDIA's names come from the driver's files and NVML
    only when needed: the GPUs' order for a request by index (the files; NVML where there
    are none), a GPU UUID the files do not show, a MIG device (nvidia.Names). With
    `describe` ("plan": best effort, what NVML could not tell is a warning; "strict": an
    error), every device's address and UUID and every MIG device of the host are read too,
    for the read-only commands (`ocihook plan`, `cdi generate`)."""
    warnings: list[str] = []
    mig_devices: list = []
    names = None
    if spec.get("nvidia") is not None:
        from ocihook.discover import nvidia

        names = nvidia.Names(roots, spec, nvml_dirs, version)
    numbered = bool(describe or request.indices or request.needs_mig)
    available = available_devices(
        roots, spec, bool(describe) or request.needs_identity, numbered, names
    )
    if names is not None:
        from ocihook.discover import nvidia

        wanted = [n for n in request.names if name_kind(n) == "gpu-uuid"]
        known = {d.uuid for d in available.values()}
        unknown = [d for d in available.values() if d.uuid is None]
        if unknown and (
            any(n not in known for n in wanted) or (describe and _has_gpu_files(roots, spec))
        ):
            try:
                names.fill_uuids(available)
            except OcihookError as error:
                if wanted and any(n not in known for n in wanted):
                    missing = ", ".join(str(d.index) for d in unknown)
                    raise OcihookError(
                        f"{request.origin}: device {wanted[0]!r:.60}: the driver shows no UUID "
                        f"of GPU {missing}, and {error}"
                    ) from None
                if describe == "strict":
                    raise
                warnings.append(f"GPU UUIDs not read: {error}")
        if request.needs_mig or (
            describe
            and nvidia.host_has_mig(
                roots, names.nvidia, sorted(d.number for d in available.values())
            )
        ):
            try:
                mig_devices = names.mig_devices(available)
            except OcihookError as error:
                if request.needs_mig:
                    raise OcihookError(f"{request.origin}: MIG devices: {error}") from None
                if describe == "strict":
                    raise
                warnings.append(f"MIG devices not listed: {error}")
    selection = select_devices(request, available, mig_devices if request.needs_mig else None)
    return Chosen(available, selection, mig_devices, warnings)


def _has_gpu_files(roots: Roots, spec: dict) -> bool:
    """Whether the driver lists GPUs at all (a tree without its proc files has no UUIDs to
    miss)."""
    from ocihook.discover import nvidia

    return bool(roots.listing(roots.device_fd, nvidia.settings(spec)["gpus"]).entries)


def _indexed_devices(roots: Roots, patterns: list[str]) -> dict[int, Device]:
    """`{index}` style: the first pattern says which numbers exist, the others add nodes;
    number -> Device (index: the number)."""
    devices: dict[int, Device] = {}
    for position, pattern in enumerate(patterns):
        parent, prefix, suffix = _split(pattern, "{index}")
        for entry in roots.listing(roots.device_fd, parent).entries:
            digits = _number(entry, prefix, suffix)
            if digits is None:
                continue
            index = int(digits)
            if index not in devices:
                if position:
                    continue  # only the first pattern makes a device exist
                devices[index] = Device(index, None, None, [], None, index)
            devices[index].nodes.append(f"{parent}/{entry}")
    return devices


def _device_of(roots: Roots, entry_path: str, drivers: dict[str, str | None]) -> str | None:
    """The device (its sysfs dir name, a PCI address for PCI devices) behind a class entry;
    remembers the driver bound to it in `drivers`."""
    try:
        fd = securepath.resolve(roots.device_fd, f"{entry_path}/device")
    except (FileNotFoundError, NotADirectoryError):
        return None  # a class entry without a parent device (virtual)
    except OSError as error:
        raise OcihookError(f"sysfs {entry_path}/device: {error.strerror}") from None
    try:
        address = os.path.basename(os.readlink(securepath.fd_path(fd)))
        if address not in drivers:
            try:
                drivers[address] = os.path.basename(os.readlink("driver", dir_fd=fd))
            except OSError:
                drivers[address] = None  # no driver bound
    finally:
        os.close(fd)
    return address


def _is_pci_address(text: str) -> bool:
    """ "0000:c1:00.0": domain:bus:device.function, lower-case hex."""
    return (
        len(text) == 12
        and text[4] == ":"
        and text[7] == ":"
        and text[10] == "."
        and all(c in "0123456789abcdef" for c in text[:4] + text[5:7] + text[8:10] + text[11])
    )


def _sysfs_devices(roots: Roots, sysfs: dict, patterns: list[str]) -> dict[int, Device]:
    """`{n}` style: class entries grouped by device, filtered by driver, in address order."""
    split = [_split(pattern, "{n}") for pattern in patterns]
    wanted = set(sysfs.get("drivers") or ())
    drivers: dict[str, str | None] = {}
    nodes: dict[str, list[tuple[int, int, str]]] = {}
    for cls in sysfs["classes"]:
        class_dir = f"/sys/class/{cls}"
        for entry in sorted(roots.listing(roots.device_fd, class_dir).entries):
            for position, (parent, prefix, suffix) in enumerate(split):
                digits = _number(entry, prefix, suffix)
                if digits is None:
                    continue
                address = _device_of(roots, f"{class_dir}/{entry}", drivers)
                if address is not None and (not wanted or drivers[address] in wanted):
                    nodes.setdefault(address, []).append(
                        (position, int(digits), f"{parent}/{entry}")
                    )
                break
    order = sorted(nodes, key=lambda a: (not _is_pci_address(a), a))
    devices = {}
    for position, address in enumerate(order):
        entries = sorted(nodes[address])
        # `index: number`: the kernel's number of the device's first node (Habana's tools
        # number cards by accelN); else the position in PCI address order
        index = entries[0][1] if sysfs.get("index") == "number" else position
        if index in devices:
            raise OcihookError(
                f"sysfs: devices {devices[index].address} and {address} both have number {index}"
            )
        devices[index] = Device(
            index, address, drivers[address], [p for *_, p in entries], None, entries[0][1]
        )
    return dict(sorted(devices.items()))


def device_node(roots: Roots, inner: str, index: int | None, access: str) -> DeviceNode | None:
    """The node at in-root path `inner` of the device root, or None when it is missing."""
    final = resolve_final(roots.device_fd, inner)
    if final is None:
        return None
    st = final[1]
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        raise OcihookError(f"device {host_path(roots.device_root, inner)}: not a device node")
    return DeviceNode(
        path=inner,
        host_path=host_path(roots.device_root, in_root(roots.device_real, final[0])),
        type=kind,
        major=os.major(st.st_rdev),
        minor=os.minor(st.st_rdev),
        mode=stat.S_IMODE(st.st_mode),
        index=index,
        access=access,
        gid=st.st_gid,
    )


def plan_nodes(
    roots: Roots,
    spec: dict,
    selection: Selection,
    available: dict[int, Device],
    extra_control: list | None = None,
) -> list[DeviceNode]:
    """The nodes of the selected devices (a MIG device's: its GPU's nodes, then its cap
    nodes; each node once), then the shared control nodes (the profile's, then
    `extra_control`: those of the selected driver capabilities)."""
    nodes: dict[str, DeviceNode] = {}

    def add_device(device: Device) -> None:
        for path in device.nodes:
            if path in nodes:
                continue
            node = device_node(roots, path, device.index, spec["access"])
            if node is None:
                raise OcihookError(
                    f"device {device.index}: node {host_path(roots.device_root, path)} not found"
                )
            nodes[path] = node

    for key in selection.indices:
        add_device(available[key])
    for mig in selection.mig:
        add_device(available[mig.index])
        for node in mig.caps:
            nodes.setdefault(node.path, node)
    listed = list(nodes.values())
    extra = [c for c in extra_control or [] if c not in spec["control"]]
    for control in spec["control"] + extra:
        entry = {"path": control} if isinstance(control, str) else control
        node = device_node(roots, entry["path"], None, spec["access"])
        if node is None:
            if entry.get("optional", False):
                continue
            raise OcihookError(
                f"control device {host_path(roots.device_root, entry['path'])} not found"
            )
        listed.append(node)
    return listed
