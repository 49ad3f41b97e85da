"""Which devices the host has, and which nodes each one is made of (reads, never writes).

A profile's `devices` section names per-device node patterns in one of two styles:

- `{index}` patterns (`/dev/nvidia{index}`): the device's index is the number in the
  node's name; every pattern that exists for that number is one of its nodes;
- `{n}` patterns with `sysfs` (`/dev/dri/card{n}`, `/dev/dri/renderD{n}`): the devices are
  the entries of `sys/class/<class>` under the device root whose name matches a pattern
  and whose device is bound to one of the profile's kernel `drivers`. Entries of the same
  (PCI) device are one device with several nodes; index N is the N-th such device in PCI
  address order, so a BMC's display (`card0` on ast) never shifts an accelerator's index.

Only links are read (one in-root resolution of `<entry>/device` and one readlink of its
`driver` per entry): no uevent parsing, no subprocess. Majors and minors come from the
nodes themselves when the plan is built (dynamic majors differ between hosts).
"""

from __future__ import annotations

import os
import stat

from ocihook import securepath
from ocihook.errors import OcihookError
from ocihook.plan import DeviceNode
from ocihook.roots import Roots, host_path, in_root, resolve_final
from ocihook.slots import Struct

MAX_NUMBER_DIGITS = 4


class Device(Struct):
    """One device: its index, its bus address (PCI, when sysfs says), driver and nodes."""

    __slots__ = ("index", "address", "driver", "nodes")
    index: int
    address: str | None  # "0000:c1:00.0"; None when the profile has no sysfs section
    driver: str | None  # the kernel driver bound to it ("amdgpu"), None if unknown
    nodes: list[str]  # in-root paths of its nodes under the device root


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


def available_devices(roots: Roots, spec: dict) -> dict[int, Device]:
    """index -> Device for every device of the profile's kind present under the device root."""
    patterns = node_patterns(spec)
    if not patterns:
        return {}
    if spec.get("sysfs"):
        return _sysfs_devices(roots, spec["sysfs"], patterns)
    return _indexed_devices(roots, patterns)


def _indexed_devices(roots: Roots, patterns: list[str]) -> dict[int, Device]:
    """`{index}` style: the first pattern says which indices exist, the others add nodes."""
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
                devices[index] = Device(index, None, None, [])
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
    return {
        index: Device(index, address, drivers[address], [p for *_, p in sorted(nodes[address])])
        for index, address in enumerate(order)
    }


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
    )


def plan_nodes(
    roots: Roots,
    spec: dict,
    indices: list[int],
    available: dict[int, Device],
    extra_control: list | None = None,
) -> list[DeviceNode]:
    """The nodes of the selected devices, then the shared control nodes (the profile's, then
    `extra_control`: those of the selected driver capabilities)."""
    nodes = []
    for index in indices:
        for path in available[index].nodes:
            node = device_node(roots, path, index, spec["access"])
            if node is None:
                raise OcihookError(
                    f"device {index}: node {host_path(roots.device_root, path)} not found"
                )
            nodes.append(node)
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
        nodes.append(node)
    return nodes
