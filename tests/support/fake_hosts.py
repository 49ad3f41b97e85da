"""Fake device roots laid out like real accelerator hosts: sysfs class entries linked into a
`sys/devices/pci...` tree (as the kernel links them), drivers bound by a `driver` link,
and real char device nodes (mknod) in `dev/`.

Majors and minors are the kernel's where they are fixed (drm 226, infiniband 231, accel
261) and typical dynamic ones elsewhere (kfd, habanalabs control nodes). None of these
majors is registered on the test machine (checked by `unregistered_majors` where a
container opens them), so a container that the device cgroup lets open such a node gets
ENXIO (no driver), one it does not let gets EPERM. rdma_cm is a misc device (10:58), a
minor no misc driver of the test machine has (checked by `misc_minor_registered`): ENODEV
when allowed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

DRM, INFINIBAND, ACCEL = 226, 231, 261
KFD_MAJOR, HL_MAJOR = 511, 508  # dynamic majors: differ between hosts
RDMA_CM = (10, 58)  # misc, dynamic minor
FAKE_MAJORS = frozenset({DRM, INFINIBAND, ACCEL, KFD_MAJOR, HL_MAJOR})

AMD_SERVER_PCI = ("0000:c1:00.0", "0000:41:00.0")  # probe order: c1 got card1/renderD128
GAUDI_PCI = (  # an eight-card Gaudi box, in the (permuted) order the driver numbered them
    "0000:43:00.0",
    "0000:19:00.0",
    "0000:44:00.0",
    "0000:1a:00.0",
    "0000:cb:00.0",
    "0000:9b:00.0",
    "0000:cc:00.0",
    "0000:9c:00.0",
)


class FakeHost:
    """Builds one fake device root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "dev").mkdir(parents=True, exist_ok=True)

    def pci_device(
        self,
        address: str,
        driver: str | None,
        ids: tuple[str, str] = ("0x0000", "0x0000"),
        attributes: dict[str, str] | None = None,
    ) -> Path:
        """sys/devices/pci<domain>:<bus>/<root port>/<address>, bound to `driver`, with its
        PCI vendor and device `ids` and the driver's sysfs `attributes` (name -> text; a
        name with '/' is in a subdir, as xe's tile0/physical_vram_size_bytes)."""
        domain = address[:4]
        bus = f"pci{domain}:{address[5:7]}"
        port = f"{domain}:{address[5:7]}:01.0"
        path = self.root / "sys/devices" / bus / port / address
        path.mkdir(parents=True, exist_ok=True)
        if driver:
            drv = self.root / "sys/bus/pci/drivers" / driver
            drv.mkdir(parents=True, exist_ok=True)
            _link(path / "driver", drv)
            _link(drv / address, path)
        (path / "vendor").write_text(f"{ids[0]}\n")
        (path / "device").write_text(f"{ids[1]}\n")
        for name, text in (attributes or {}).items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(f"{text}\n")
        return path

    def kfd_node(self, number: int, address: str | None, properties: dict[str, int]) -> None:
        """sys/class/kfd/kfd/topology/nodes/<number>/properties, as amdgpu's KFD writes it
        (a CPU node without `address`; a GPU's `location_id` names its PCI function)."""
        values = dict(properties)
        if address:
            bus, slot, function = int(address[5:7], 16), int(address[8:10], 16), int(address[11])
            values.update(domain=int(address[:4], 16), location_id=bus << 8 | slot << 3 | function)
        node = self.root / "sys/class/kfd/kfd/topology/nodes" / str(number)
        node.mkdir(parents=True, exist_ok=True)
        (node / "properties").write_text("".join(f"{k} {v}\n" for k, v in values.items()))

    def class_entry(self, device: Path, cls: str, name: str, node: str | None, dev: tuple):
        """sys/class/<cls>/<name> -> the entry under `device` (whose `device` link points
        back), and the char node /dev/<node> with major:minor `dev`."""
        entry = device / cls / name
        entry.mkdir(parents=True, exist_ok=True)
        _link(entry / "device", device)
        (entry / "dev").write_text(f"{dev[0]}:{dev[1]}\n")
        (entry / "uevent").write_text(f"MAJOR={dev[0]}\nMINOR={dev[1]}\nDEVNAME={node or name}\n")
        class_dir = self.root / "sys/class" / cls
        class_dir.mkdir(parents=True, exist_ok=True)
        _link(class_dir / name, entry)
        if node:
            self.node(node, *dev)

    def node(self, path: str, major: int, minor: int, mode: int = 0o666) -> None:
        target = self.root / "dev" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(target, mode | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(target, mode)

    def connector(self, device: Path, card: str, name: str) -> None:
        """A DRM connector (card1-DP-1): a class entry that is no device node."""
        entry = device / "drm" / card / f"{card}-{name}"
        entry.mkdir(parents=True, exist_ok=True)
        _link(self.root / "sys/class/drm" / f"{card}-{name}", entry)


def _link(at: Path, to: Path) -> None:
    """A relative symlink, like sysfs's."""
    at.symlink_to(os.path.relpath(to, at.parent))


# What amdgpu shows of an AMD Instinct MI210 (sysfs, KFD topology): 104 CUs, gfx90a, 64 GB.
AMD_MI210 = {
    "mem_info_vram_total": str(64 << 30),
    "vbios_version": "113-D67301-063",
    "product_name": "AMD Instinct MI210",
}
AMD_MI210_KFD = {"simd_count": 416, "simd_per_cu": 4, "gfx_target_version": 90010}


def amd_server(root: Path) -> Path:
    """A server with an ASPEED BMC display (card0, driver ast) and two AMD GPUs (MI210s)
    whose card numbers are in probe order, not PCI order; /dev/kfd shared."""
    host = FakeHost(root)
    host.kfd_node(0, None, {"simd_count": 0, "cpu_cores_count": 64})
    bmc = host.pci_device("0000:02:00.0", "ast", ("0x1a03", "0x2000"))
    host.class_entry(bmc, "drm", "card0", "dri/card0", (DRM, 0))
    host.connector(bmc, "card0", "VGA-1")
    for number, address in enumerate(AMD_SERVER_PCI):
        gpu = host.pci_device(address, "amdgpu", ("0x1002", "0x740f"), AMD_MI210)
        host.kfd_node(number + 1, address, AMD_MI210_KFD)
        host.class_entry(
            gpu, "drm", f"card{number + 1}", f"dri/card{number + 1}", (DRM, number + 1)
        )
        host.class_entry(
            gpu, "drm", f"renderD{128 + number}", f"dri/renderD{128 + number}", (DRM, 128 + number)
        )
        host.connector(gpu, f"card{number + 1}", "DP-1")
    (root / "sys/class/drm/version").write_text("drm 1.1.0 20060810\n")
    host.node("kfd", KFD_MAJOR, 0)
    return root


def intel_host(root: Path) -> Path:
    """An integrated GPU on i915 (Alder Lake-P, no memory of its own) and a discrete one on
    xe (Arc A770, 16 GB on one tile), and an AMD GPU (not Intel's)."""
    host = FakeHost(root)
    igpu = host.pci_device("0000:00:02.0", "i915", ("0x8086", "0x46a6"))
    host.class_entry(igpu, "drm", "card0", "dri/card0", (DRM, 0))
    host.class_entry(igpu, "drm", "renderD128", "dri/renderD128", (DRM, 128))
    dgpu = host.pci_device(
        "0000:03:00.0",
        "xe",
        ("0x8086", "0x56a0"),
        {"tile0/physical_vram_size_bytes": str(16 << 30)},
    )
    host.class_entry(dgpu, "drm", "card1", "dri/card1", (DRM, 1))
    host.class_entry(dgpu, "drm", "renderD129", "dri/renderD129", (DRM, 129))
    other = host.pci_device("0000:01:00.0", "amdgpu", ("0x1002", "0x73bf"))
    host.class_entry(other, "drm", "card2", "dri/card2", (DRM, 2))
    host.class_entry(other, "drm", "renderD130", "dri/renderD130", (DRM, 130))
    return root


def gaudi_accel(root: Path) -> Path:
    """Eight Gaudi cards on the accel class: /dev/accel/accelN + accel_controlDN."""
    host = FakeHost(root)
    for number, address in enumerate(GAUDI_PCI):
        card = host.pci_device(address, "habanalabs")
        host.class_entry(card, "accel", f"accel{number}", f"accel/accel{number}", (ACCEL, number))
        host.class_entry(
            card,
            "accel",
            f"accel_controlD{number}",
            f"accel/accel_controlD{number}",
            (HL_MAJOR, number),
        )
    return root


def gaudi_legacy(root: Path) -> Path:
    """The same eight cards on an older driver: class habanalabs, /dev/hlN + hl_controlDN."""
    host = FakeHost(root)
    for number, address in enumerate(GAUDI_PCI):
        card = host.pci_device(address, "habanalabs")
        host.class_entry(card, "habanalabs", f"hl{number}", f"hl{number}", (HL_MAJOR, 2 * number))
        host.class_entry(
            card,
            "habanalabs",
            f"hl_controlD{number}",
            f"hl_controlD{number}",
            (HL_MAJOR, 2 * number + 1),
        )
    return root


def rdma_host(root: Path) -> Path:
    """A dual-port ConnectX (two PCI functions, mlx5_core) and a Broadcom RoCE NIC
    (bnxt_en, no MAD node); /dev/infiniband/rdma_cm shared."""
    host = FakeHost(root)
    ports = [
        (host.pci_device("0000:3b:00.0", "mlx5_core"), 0),
        (host.pci_device("0000:3b:00.1", "mlx5_core"), 1),
    ]
    for device, number in ports:
        host.class_entry(
            device,
            "infiniband_verbs",
            f"uverbs{number}",
            f"infiniband/uverbs{number}",
            (INFINIBAND, 192 + number),
        )
        host.class_entry(
            device,
            "infiniband_mad",
            f"umad{number}",
            f"infiniband/umad{number}",
            (INFINIBAND, number),
        )
    nic = host.pci_device("0000:5e:00.0", "bnxt_en")
    host.class_entry(nic, "infiniband_verbs", "uverbs2", "infiniband/uverbs2", (INFINIBAND, 194))
    host.node("infiniband/rdma_cm", *RDMA_CM)
    return root


TREES = {
    "amd-server": ("amd", amd_server),
    "intel": ("intel", intel_host),
    "gaudi-accel": ("habana", gaudi_accel),
    "gaudi-legacy": ("habana", gaudi_legacy),
    "rdma": ("rdma", rdma_host),
}


def unregistered_majors(majors: frozenset[int] = FAKE_MAJORS) -> set[int]:
    """The `majors` (default: the fake trees') that no driver of this machine registered."""
    registered = set()
    with open("/proc/devices") as devices:
        for line in devices:
            if line.startswith("Block"):
                break
            word = line.split(maxsplit=1)[0] if line.strip() else ""
            if word.isdigit():
                registered.add(int(word))
    return set(majors) - registered


def misc_minor_registered(minor: int) -> bool:
    """Whether a misc driver of this machine has `minor` (/proc/misc)."""
    with open("/proc/misc") as misc:
        return any(line.split()[:1] == [str(minor)] for line in misc)
