"""A stand-in NVIDIA host with IMEX channels and GPUDirect nodes (no GPU, no NVLink, no
GDRCopy, GDS or RDMA hardware here).

hosts.ubuntu's fake driver install plus the nodes and the kernel's tables they belong to:

- `dev/nvidia-caps-imex-channels/channel<N>` (major of `nvidia-caps-imex-channels`, minor N),
- `dev/gdrdrv` (major `gdrdrv`), `dev/nvidia-fs<N>` (major `nvidia-fs`),
- `dev/nvidia-nvswitch<N>` and `dev/nvidia-nvswitchctl` (major `nvidia-nvswitch`, minor 255),
- `dev/infiniband/uverbs<N>`, `umad<N>`, `issm<N>` (majors `infiniband_verbs`,
  `infiniband_mad`) and `dev/infiniband/rdma_cm` (misc, `rdma_cm` in proc/misc),

with `proc/devices` and `proc/misc` of the fake device root naming them, and udev's database
under `run/udev` (what GPUDirect Storage's cuFile reads). `build` takes the
numbers: fixed fake ones for plan goldens (FAKE), or real char devices of the running
kernel (tests/support/host_devices.py's rule) for containers that open them (`standins`):
a node the device cgroup allows opens, one it does not gets EPERM.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import host_devices, hosts
from tests.support.host_devices import HostDevice

IMEX_DIR = "/dev/nvidia-caps-imex-channels"

# Fixed numbers for plans (majors no driver here registers; a plan never opens a node).
FAKE_NODES = {
    f"{IMEX_DIR}/channel0": (509, 0),
    f"{IMEX_DIR}/channel1": (509, 1),
    f"{IMEX_DIR}/channel7": (509, 7),
    "/dev/gdrdrv": (507, 0),
    "/dev/nvidia-fs0": (506, 0),
    "/dev/nvidia-fs1": (506, 1),
    "/dev/infiniband/uverbs0": (231, 192),
    "/dev/infiniband/umad0": (231, 0),
    "/dev/infiniband/issm0": (231, 64),
    "/dev/infiniband/rdma_cm": (10, 58),
    "/dev/nvidia-nvswitch0": (505, 0),
    "/dev/nvidia-nvswitchctl": (505, 255),
}
FAKE_MAJORS = {
    "nvidia-caps-imex-channels": 509,
    "gdrdrv": 507,
    "nvidia-fs": 506,
    "infiniband_verbs": 231,
    "infiniband_mad": 231,
    "nvidia-nvswitch": 505,
}
FAKE_MISC = {"rdma_cm": 58}
CUFILE = "libcufile.so.1.9.1"


@dataclass
class DirectHost:
    root: Path
    nodes: dict[str, tuple[int, int]]
    devices: dict[str, HostDevice] = field(default_factory=dict)  # path -> its stand-in


def build(
    root: Path,
    nodes: dict[str, tuple[int, int]] | None = None,
    majors: dict[str, int] | None = None,
    misc: dict[str, int] | None = None,
    cufile: bool = False,
) -> DirectHost:
    """hosts.ubuntu plus `nodes` (in-root path -> numbers, mode 0666) and the proc tables
    (`majors`: name -> char major in proc/devices; `misc`: name -> minor in proc/misc);
    defaults: every FAKE node and table. `cufile`: GDS's libcufile (a stand-in ELF of its
    own version, not the driver's) and /etc/cufile.json."""
    nodes = dict(FAKE_NODES) if nodes is None else nodes
    majors = dict(FAKE_MAJORS) if majors is None else majors
    misc = dict(FAKE_MISC) if misc is None else misc
    hosts.ubuntu(root)
    for path, (major, minor) in nodes.items():
        node = root / path.lstrip("/")
        node.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        node.chmod(0o666)
    lines = ["Character devices:", "  1 mem", "195 nvidia-frontend", "510 nvidia-uvm"]
    lines += [f"{major:3d} {name}" for name, major in majors.items()]
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/devices").write_text("\n".join(lines) + "\n\nBlock devices:\n  7 loop\n")
    if cufile:
        lib = root / "usr/lib/x86_64-linux-gnu"
        (lib / CUFILE).write_bytes(hosts.library("libcufile.so.0"))
        (lib / "libcufile.so.0").symlink_to(CUFILE)
        (root / "etc/cufile.json").write_text('{"logging": {"level": "ERROR"}}\n')
    (root / "proc/misc").write_text("".join(f"{m:3d} {n}\n" for n, m in misc.items()))
    udev = root / "run/udev/data"
    udev.mkdir(parents=True, exist_ok=True)
    (udev / "c195:0").write_text("E:ID_PATH=pci-0000:3b:00.0\n")
    return DirectHost(root, nodes)


def standins(root: Path, cufile: bool = False) -> DirectHost:
    """The host with real char devices standing in for its nodes: two IMEX channels (one
    major, the channel numbers are their minors), gdrdrv, nvidia-fs0, uverbs0 and rdma_cm
    (a misc device: its minor named rdma_cm in proc/misc)."""
    picked = host_devices.pick_same_major(4, "stand-ins for IMEX channels and GPUDirect nodes")
    one, two, three, four = picked
    assert one.major == host_devices.MISC_MAJOR, (
        f"the stand-in for rdma_cm must be a misc device (major 10): picked {one}"
    )
    devices = {
        f"{IMEX_DIR}/channel{one.minor}": one,
        f"{IMEX_DIR}/channel{two.minor}": two,
        "/dev/gdrdrv": three,
        "/dev/nvidia-fs0": four,
        "/dev/infiniband/uverbs0": two,
        "/dev/infiniband/rdma_cm": one,
    }
    major = one.major
    host = build(
        root,
        {path: d.numbers for path, d in devices.items()},
        {
            "nvidia-caps-imex-channels": major,
            "gdrdrv": three.major,
            "nvidia-fs": four.major,
            "infiniband_verbs": two.major,
        },
        {"rdma_cm": one.minor},
        cufile,
    )
    host.devices = devices
    return host
