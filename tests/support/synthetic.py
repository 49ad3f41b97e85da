"""A synthetic accelerator driver: real ELF libraries and binary, firmware, real char devices.

The device nodes stand for accelerators: they are real character devices of this
machine that a container may not open unless its device cgroup allows them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).parent
REPO = HERE.parent.parent
BUILD = REPO / "build" / "synth-cache"
VERSION = "1.2.3"
MULTIARCH = "usr/lib/x86_64-linux-gnu"
PROFILES = REPO / "packaging" / "profiles"

# name -> (major, minor): real char devices that runc's default device rules deny.
DEVICES = {"synth0": (10, 237), "synth1": (10, 235), "synth2": (10, 234)}
# More per-device nodes for a driver sized like a real one (benchmarks): vcs devices.
MORE_DEVICES = {
    "synth3": (7, 0),
    "synth4": (7, 1),
    "synth5": (7, 64),
    "synth6": (7, 128),
    "synth7": (7, 129),
}
CONTROL = {"synthctl": (10, 232), "synth-uvm": (10, 229)}
MORE_CONTROL = {"synth-uvm-tools": (10, 259)}
LIBRARIES = ("libsynth", "libsynth-ml")
# A soname placeholder of fixed length, patched in place to make many distinct libraries.
PLACEHOLDER = b"libsynthextra00000000.so.1"


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
    for name, (major, minor) in {**(devices or DEVICES), **(control or CONTROL)}.items():
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
