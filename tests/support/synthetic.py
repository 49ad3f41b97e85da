"""A synthetic accelerator driver: real ELF libraries and binary, firmware, real char devices.

The device nodes stand for accelerators: real char devices of the running kernel that a
container may not open unless its device cgroup allows them, picked by
tests/support/host_devices.py (never a fixed number: kernels differ). DEVICES, CONTROL,
UNREQUESTED and the bench's MORE_* are computed on first use, so a kernel with too few
devices fails there with host_devices' one-line message.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.support import host_devices
from tests.support.host_devices import HostDevice

HERE = Path(__file__).parent
REPO = HERE.parent.parent
BUILD = REPO / "build" / "synth-cache"
VERSION = "1.2.3"
MULTIARCH = "usr/lib/x86_64-linux-gnu"
PROFILES = REPO / "packaging" / "profiles"

# The synthetic driver's nodes, in the order they take host devices (host_devices.pick):
# per-device nodes, control nodes, then a device nobody asks for (for EPERM checks).
DEVICE_NAMES = ("synth0", "synth1", "synth2")
CONTROL_NAMES = ("synthctl", "synth-uvm")
SUITE_NAMES = DEVICE_NAMES + CONTROL_NAMES + ("unrequested",)
# More nodes for a driver sized like a real one (benchmarks), after the suite's.
MORE_DEVICE_NAMES = ("synth3", "synth4", "synth5", "synth6", "synth7")
MORE_CONTROL_NAMES = ("synth-uvm-tools",)
LIBRARIES = ("libsynth", "libsynth-ml")
# A soname placeholder of fixed length, patched in place to make many distinct libraries.
PLACEHOLDER = b"libsynthextra00000000.so.1"


def host_devices_for(names: tuple[str, ...], purpose: str) -> dict[str, HostDevice]:
    """Node name -> the host device it takes, for the first len(names) picks."""
    return dict(zip(names, host_devices.pick(len(names), purpose)))


def suite_devices() -> dict[str, HostDevice]:
    """synth0..2, synthctl, synth-uvm and "unrequested" -> their host devices."""
    return host_devices_for(SUITE_NAMES, "synthetic driver")


def bench_devices() -> dict[str, HostDevice]:
    """The suite's devices and the bench's MORE_* nodes -> their host devices."""
    names = SUITE_NAMES + MORE_DEVICE_NAMES + MORE_CONTROL_NAMES
    return host_devices_for(names, "bench (full-size driver)")


def __getattr__(name: str):
    """DEVICES, CONTROL (name -> (major, minor)), UNREQUESTED (a HostDevice), MORE_DEVICES,
    MORE_CONTROL: picked from the running kernel on first use."""
    if name in ("DEVICES", "CONTROL", "UNREQUESTED"):
        picked = suite_devices()
    elif name in ("MORE_DEVICES", "MORE_CONTROL"):
        picked = bench_devices()
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name == "UNREQUESTED":
        return picked["unrequested"]
    names = {
        "DEVICES": DEVICE_NAMES,
        "CONTROL": CONTROL_NAMES,
        "MORE_DEVICES": MORE_DEVICE_NAMES,
        "MORE_CONTROL": MORE_CONTROL_NAMES,
    }[name]
    return {n: picked[n].numbers for n in names}


def opened(name: str) -> str:
    """What synth-smi prints when it opened /dev/`name` (a suite node) read-write."""
    device = suite_devices()[name]
    return f"opened /dev/{name} ({device.major}:{device.minor}) read-write"


def _compile() -> Path:
    """Compile libsynth and synth-smi once; cached by the sources' hash."""
    sources = sorted((HERE / "synth").glob("*.c"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources) + VERSION.encode())
    out = BUILD / digest.hexdigest()[:16]
    if (out / "synth-smi").exists():
        return out
    tmp = out.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cc = ["gcc", "-O2", "-Wall", f'-DSYNTH_VERSION="{VERSION}"']
    src = HERE / "synth"
    for name in LIBRARIES:
        soname = f"{name}.so.1"
        subprocess.run(
            cc
            + [
                "-shared",
                "-fPIC",
                f"-Wl,-soname,{soname}",
                "-o",
                str(tmp / f"{name}.so.{VERSION}"),
                str(src / "libsynth.c"),
            ],
            check=True,
        )
    subprocess.run(
        cc
        + [
            "-shared",
            "-fPIC",
            f"-Wl,-soname,{PLACEHOLDER.decode()}",
            "-o",
            str(tmp / "extra.so"),
            str(src / "libsynth.c"),
        ],
        check=True,
    )
    subprocess.run(
        cc
        + [
            "-o",
            str(tmp / "synth-smi"),
            str(src / "synth-smi.c"),
            str(tmp / f"libsynth.so.{VERSION}"),
            "-Wl,--no-as-needed",
        ],
        check=True,
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def i386_library(path: Path, soname: str, work: Path, needs_libc: bool = True) -> None:
    """A real 32-bit x86 shared object with DT_SONAME `soname` (binutils only: no 32-bit
    gcc runtime here), linked against a stub libc.so.6 when `needs_libc` (as ldconfig's
    libc6 flag needs)."""
    (work / "f32.s").write_text(".globl f\nf:\n ret\n")
    subprocess.run(["as", "--32", "-o", str(work / "f32.o"), str(work / "f32.s")], check=True)
    stub = work / "stub32" / "libc.so.6"
    if not stub.exists():
        stub.parent.mkdir(parents=True, exist_ok=True)
        ld = ["ld", "-m", "elf_i386", "-shared", "-soname", "libc.so.6"]
        subprocess.run(ld + ["-o", str(stub), str(work / "f32.o")], check=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    ld = ["ld", "-m", "elf_i386", "-shared", "-soname", soname, "-o", str(path)]
    subprocess.run(ld + [str(work / "f32.o")] + ([str(stub)] if needs_libc else []), check=True)


def _mknod(path: Path, major: int, minor: int) -> None:
    os.mknod(path, 0o666 | 0o020000, os.makedev(major, minor))
    os.chmod(path, 0o666)


def build_driver(
    root: Path,
    layout: str = "debian",
    extra_libraries: int = 0,
    extra_binaries: int = 0,
    devices: dict | None = None,
    control: dict | None = None,
    firmware: int = 2,
) -> Path:
    """Lay out a driver install under `root` (which becomes the profile's source root)."""
    built = _compile()
    libdir = root / (MULTIARCH if layout == "debian" else "usr/lib64")
    libdir.mkdir(parents=True, exist_ok=True)
    for name in LIBRARIES:
        real = f"{name}.so.{VERSION}"
        shutil.copy2(built / real, libdir / real)
        os.symlink(real, libdir / f"{name}.so.1")
    extra = (built / "extra.so").read_bytes()
    for i in range(extra_libraries):
        soname = b"libsynthextra%08d.so.1" % i
        real = f"libsynthextra{i:08d}.so.{VERSION}"
        (libdir / real).write_bytes(extra.replace(PLACEHOLDER, soname))
        os.symlink(real, libdir / soname.decode())
    bindir = root / "usr/bin"
    bindir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built / "synth-smi", bindir / "synth-smi")
    for i in range(extra_binaries):
        shutil.copy2(built / "synth-smi", bindir / f"synth-tool{i}")
    fwdir = root / "lib/firmware/synth" / VERSION
    fwdir.mkdir(parents=True, exist_ok=True)
    for i in range(firmware):
        (fwdir / f"gsp_{i}.bin").write_bytes(os.urandom(64))
    devdir = root / "dev"
    devdir.mkdir(exist_ok=True)
    if devices is None or control is None:
        picked = suite_devices()
        default = {n: picked[n].numbers for n in DEVICE_NAMES + CONTROL_NAMES}
        devices = {n: default[n] for n in DEVICE_NAMES} if devices is None else devices
        control = {n: default[n] for n in CONTROL_NAMES} if control is None else control
    for name, (major, minor) in {**devices, **control}.items():
        _mknod(devdir / name, major, minor)
    return root


def config(
    root: Path,
    setup_dir: Path | None = None,
    profile: str | dict = "synthetic",
    debug: bool = True,
    **overrides,
) -> dict:
    """The one hook config the tests and benchmarks start from: `profile` from the repo's
    profiles, driver files and devices under `root`; with `setup_dir`, state and log there."""
    settings: dict = {
        "profile": profile,
        "profile_dirs": [str(PROFILES)],
        "source_root": str(root),
        "device_root": str(root),
    }
    if setup_dir is not None:
        settings["state_dir"] = str(setup_dir / "state")
        settings["log"] = {"target": str(setup_dir / "ocihook.log"), "debug": debug}
    settings.update(overrides)
    return settings
