"""A stand-in NVIDIA host with UUIDs and MIG devices (no GPU here).

One MIG GPU with two GPU instances (one MIG device each) and a GPU without MIG, on the
fake Ubuntu driver install of tests/support/hosts.py, plus what the real driver adds:

- `proc/driver/nvidia/gpus/<PCI address>/information` with `GPU UUID:` and `Device Minor:`
  lines (optionally without the UUID line, as the driver writes it when it cannot read one);
- `proc/driver/nvidia/capabilities/gpu0/mig/gi<G>/access`, `.../ci<C>/access` and
  `mig/config`, `mig/monitor` with `DeviceFileMinor:`/`DeviceFileMode:`;
- `proc/devices` naming the `nvidia-caps` major;
- `dev/nvidia-caps/nvidia-cap<minor>` nodes that are REAL char devices of the running kernel
  (tests/support/host_devices.py's rule, all of one major as nvidia-caps is one major), so
  a container that opens its own cap node succeeds and one that opens a sibling instance's
  gets EPERM from the device cgroup: a real check;
- a stand-in `libnvidia-ml.so.1` (tests/support/nvml_standin.c, compiled here with gcc)
  in place of the driver's NVML, answering the layout below through NVML's own calls, or
  hanging, or failing, so that ocihook's ctypes path in its forked child runs for real.

The GPU nodes /dev/nvidia0 and /dev/nvidia1 are hosts.py's (major 195, which no driver
here registers: ENXIO when the cgroup allows them, EPERM when it does not).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.support import host_devices, hosts
from tests.support.host_devices import HostDevice

HERE = Path(__file__).parent
REPO = HERE.parent.parent
BUILD = REPO / "build" / "nvml-standin"
LIBRARY_DIR = "usr/lib/x86_64-linux-gnu"
MODES = {"answer": 0, "hang": 1, "fail": 2, "probe": 3}
CUDA = 12040  # what the stand-in's nvmlSystemGetCudaDriverVersion answers (hosts.VERSION: 12.4)


@dataclass(frozen=True)
class Mig:
    index: int  # NVML's index of the MIG device on its GPU
    uuid: str
    gi: int
    ci: int
    slices: tuple[int, int] = (1, 1)  # GPU and compute instance slices (nvmlDeviceAttributes_t)
    memory_mb: int = 9856  # an H100 80GB's 1g.10gb


@dataclass(frozen=True)
class Gpu:
    address: str
    minor: int
    uuid: str
    mig: tuple[Mig, ...] | None  # None: no MIG support (NVML: Not Supported)
    brand: int = 14  # nvmlBrandType_t: NVML_BRAND_NVIDIA, an H100/H200's; -1: Not Supported
    arch: tuple[int, int] = (9, 0)  # compute capability (Hopper); (-1, 0): Not Supported
    name: str = "NVIDIA H100 80GB HBM3"
    memory: int = 81559 << 20  # bytes (an H100 80GB's 81559 MiB); 0: Not Supported


# NVML's MIG device index order is NVML's own: here index 0 is GI 5 and index 1 is GI 3, so
# a plan that took GI order for NVML's would pick the wrong instance.
GPU0 = Gpu(
    "0000:3b:00.0",
    0,
    "GPU-3b6d0a1c-5e2f-4a7b-9c8d-0e1f2a3b4c5d",
    (
        Mig(0, "MIG-5a1b2c3d-4e5f-5a6b-8c7d-9e0f1a2b3c4d", 5, 0),
        Mig(1, "MIG-3c9d8e7f-6a5b-5c4d-9e3f-2a1b0c9d8e7f", 3, 0, (3, 3), 40192),  # 3g.40gb
    ),
)
GPU1 = Gpu("0000:86:00.0", 1, "GPU-86f0e1d2-c3b4-4a59-8876-5f4e3d2c1b0a", None)
LAYOUT = (GPU0, GPU1)

# Four GPUs whose minors run 2, 1, 3, 0 in PCI bus order (as after a driver reload or a GPU
# re-plugged): NVML, nvidia-smi and CUDA call the GPU at 0000:1b:00.0 GPU 0; its node is
# /dev/nvidia2. MIG on GPUs 0 and 2, so that `0:0` and `2:0` must land on nvidia2 and
# nvidia3. A numbering by minor would hand index 0 the GPU at 0000:b2:00.0.
REORDERED = (
    Gpu(
        "0000:1b:00.0",
        2,
        "GPU-1b2c3d4e-0a1b-4c2d-8e3f-1a2b3c4d5e6f",
        (Mig(0, "MIG-1b0c0d0e-1a2b-5c3d-9e4f-0a1b2c3d4e5f", 1, 0),),
    ),
    Gpu("0000:3d:00.0", 1, "GPU-3d4e5f60-1b2c-4d3e-9f40-2b3c4d5e6f70", None),
    Gpu(
        "0000:8a:00.0",
        3,
        "GPU-8a9bacbd-2c3d-4e4f-a051-3c4d5e6f7081",
        (Mig(0, "MIG-8a0b0c0d-2b3c-5d4e-8f50-1b2c3d4e5f60", 2, 0),),
    ),
    Gpu("0000:b2:00.0", 0, "GPU-b2c3d4e5-3d4e-4f50-8162-4d5e6f708192", None),
)
# The same host with the GPU of minor 1 gone from the middle (fallen off the bus: no file,
# no node): the others are GPUs 0, 1, 2 in PCI order, as NVML numbers them.
MIDDLE_GONE = (REORDERED[0], REORDERED[2], REORDERED[3])
# cap file (under capabilities/) -> its DeviceFileMode, in the order cap nodes take devices
CAP_MODES = {"mig/config": 0o400, "mig/monitor": 0o444}
INSTANCE_MODE = 0o444


def cap_files(layout: tuple[Gpu, ...] = LAYOUT) -> list[str]:
    """The capability files, relative to capabilities/: each MIG device's GI and CI access
    file (in NVML's order), then the two management capabilities."""
    files = []
    for gpu in layout:
        for mig in gpu.mig or ():
            files.append(f"gpu{gpu.minor}/mig/gi{mig.gi}/access")
            files.append(f"gpu{gpu.minor}/mig/gi{mig.gi}/ci{mig.ci}/access")
    return files + list(CAP_MODES)


def _header(layout: tuple[Gpu, ...], mode: str, probe: Path | None, cuda: int = CUDA) -> str:
    gpus, migs = [], []
    for gpu in layout:
        enabled = -1 if gpu.mig is None else 1
        first = len(migs)
        for mig in gpu.mig or ():
            size = f"{mig.slices[0]}, {mig.slices[1]}, {mig.memory_mb}ULL"
            migs.append(f'{{{mig.index}, "{mig.uuid}", {mig.gi}, {mig.ci}, {size}}}')
        count = len(migs) - first
        facts = f'{gpu.brand}, {gpu.arch[0]}, {gpu.arch[1]}, "{gpu.name}", {gpu.memory}ULL'
        gpus.append(f'{{{gpu.minor}, "{gpu.uuid}", {enabled}, {first}, {count}, {facts}}}')
    lines = [
        f"#define STANDIN_GPUS {', '.join(gpus)}",
        f"#define STANDIN_MIGS {', '.join(migs)}",
        f"#define STANDIN_MODE {MODES[mode]}",
        f"#define STANDIN_CUDA {cuda}",
    ]
    if probe is not None:
        lines.append(f'#define STANDIN_PROBE "{probe}"')
    return "\n".join(lines) + "\n"


def standin_library(
    layout: tuple[Gpu, ...] = LAYOUT,
    mode: str = "answer",
    probe: Path | None = None,
    cuda: int = CUDA,
) -> Path:
    """The stand-in libnvidia-ml.so.1 for `layout` (compiled once per layout, mode and CUDA
    version)."""
    source = (HERE / "nvml_standin.c").read_bytes()
    header = _header(layout, mode, probe, cuda)
    out = BUILD / hashlib.sha256(source + header.encode()).hexdigest()[:16]
    library = out / "libnvidia-ml.so.1"
    if library.exists():
        return library
    tmp = out.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / "nvml_layout.h").write_text(header)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wl,-soname,libnvidia-ml.so.1"]
        + ["-I", str(tmp), "-o", str(tmp / "libnvidia-ml.so.1"), str(HERE / "nvml_standin.c")],
        check=True,
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return library


@dataclass
class MigHost:
    root: Path
    layout: tuple[Gpu, ...]
    caps: dict[str, HostDevice]  # cap file (relative to capabilities/) -> its real device

    def cap_node(self, cap: str) -> str:
        """The in-root path of a cap file's node: /dev/nvidia-caps/nvidia-cap<minor>."""
        return f"/dev/nvidia-caps/nvidia-cap{self.caps[cap].minor}"

    def instance_nodes(self, gpu: Gpu, mig: Mig) -> list[str]:
        """A MIG device's GI and CI cap nodes."""
        base = f"gpu{gpu.minor}/mig/gi{mig.gi}"
        return [self.cap_node(f"{base}/access"), self.cap_node(f"{base}/ci{mig.ci}/access")]


def gpu_nodes(root: Path, layout: tuple[Gpu, ...]) -> None:
    """/dev/nvidia<minor> (major 195, as hosts.py's) for exactly the layout's GPUs."""
    dev = root / "dev"
    minors = {gpu.minor for gpu in layout}
    for node in dev.glob("nvidia[0-9]*"):
        if int(node.name[len("nvidia") :]) not in minors:
            node.unlink()
    for minor in sorted(minors):
        node = dev / f"nvidia{minor}"
        if not node.exists():
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
            node.chmod(0o666)


def check_majors_unused() -> None:
    """The stand-in GPU nodes' majors (195, and nvidia-uvm's 510) belong to no driver of
    this machine: opening them must fail with ENXIO, never reach a real device."""
    registered = Path("/proc/devices").read_text().split("Block devices:")[0].split()
    assert "195" not in registered and "510" not in registered, (
        "a driver of this machine has major 195 or 510: opening the fake GPU nodes would "
        "reach it instead of failing with ENXIO"
    )


def build(
    root: Path,
    layout: tuple[Gpu, ...] = LAYOUT,
    nvml: str = "answer",
    probe: Path | None = None,
    proc_uuids: bool = True,
    cuda: int = CUDA,
) -> MigHost:
    """The fake Ubuntu NVIDIA host of hosts.ubuntu with the driver's proc files, real cap
    nodes and the stand-in NVML (`nvml`: answer, hang, fail or probe: write the child's
    /proc/self/status to `probe`); `proc_uuids=False` leaves the UUID lines out."""
    hosts.ubuntu(root)
    gpu_nodes(root, layout)
    library = root / LIBRARY_DIR / f"libnvidia-ml.so.{hosts.VERSION}"
    shutil.copyfile(standin_library(layout, nvml, probe, cuda), library)
    library.chmod(0o755)
    proc = root / "proc/driver/nvidia"
    for gpu in layout:
        info = proc / "gpus" / gpu.address / "information"
        info.parent.mkdir(parents=True, exist_ok=True)
        uuid_line = f"GPU UUID: \t {gpu.uuid}\n" if proc_uuids else ""
        info.write_text(
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 1234\n"
            f"{uuid_line}Video BIOS: \t 96.00.74.00.0d\nBus Type: \t PCIe\n"
            f"DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {gpu.address}\n"
            f"Device Minor: \t {gpu.minor}\nGPU Firmware: \t {hosts.VERSION}\nGPU Excluded:\t No\n"
        )
    files = cap_files(layout)
    devices = host_devices.pick_same_major(len(files), "stand-in NVIDIA capability nodes")
    caps = dict(zip(files, devices))
    for cap, device in caps.items():
        mode = CAP_MODES.get(cap, INSTANCE_MODE)
        path = proc / "capabilities" / cap
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"DeviceFileMinor: {device.minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"
        )
        node = root / "dev/nvidia-caps" / f"nvidia-cap{device.minor}"
        node.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(node, mode | stat.S_IFCHR, os.makedev(device.major, device.minor))
        node.chmod(mode)
    major = devices[0].major
    (root / "proc/devices").write_text(
        "Character devices:\n  1 mem\n195 nvidia-frontend\n"
        f"{major:3d} nvidia-caps\n510 nvidia-uvm\n\nBlock devices:\n  7 loop\n"
    )
    return MigHost(root, layout, caps)
