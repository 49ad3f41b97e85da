"""NVIDIA's own container toolkit as a reference (../shared/tools/nvidia-container-toolkit:
nvidia-ctk, nvidia-cdi-hook 1.20, built from NVIDIA's source): tests run its hooks on the
same trees as ocihook's code and compare the decisions. Never a part of the product."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
TOOLS = REPO.parent / "shared" / "tools" / "nvidia-container-toolkit"


def cdi_hook() -> str | None:
    """nvidia-cdi-hook: the shared tools' build, else one on PATH; None without one."""
    built = TOOLS / "nvidia-cdi-hook"
    return str(built) if built.is_file() else shutil.which("nvidia-cdi-hook")


def unmet() -> str | None:
    if cdi_hook() is None:
        return f"needs NVIDIA's nvidia-cdi-hook ({TOOLS} or PATH)"
    return None


def enable_cuda_compat(rootfs: Path, host_driver: str, work: Path) -> str | None:
    """Run NVIDIA's `nvidia-cdi-hook enable-cuda-compat --host-driver-version` for the image
    tree `rootfs` (a bundle of its own in `work`, the state on stdin, as a runtime runs it):
    the compat dir it added to the image's ld.so.conf.d (and removes it again), or None
    when it added none."""
    bundle = work / "bundle"
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(
        json.dumps({"ociVersion": "1.0.2", "root": {"path": str(rootfs)}})
    )
    state = {
        "ociVersion": "1.0.2",
        "id": "ref",
        "status": "creating",
        "pid": 1,
        "bundle": str(bundle),
    }
    conf = rootfs / "etc/ld.so.conf.d"
    before = set(conf.glob("00-compat-*.conf")) if conf.is_dir() else set()
    result = subprocess.run(
        [cdi_hook(), "--quiet", "enable-cuda-compat", f"--host-driver-version={host_driver}"],
        input=json.dumps(state), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    added = set(conf.glob("00-compat-*.conf")) - before if conf.is_dir() else set()
    dirs = [line for path in added for line in path.read_text().split()]
    for path in added:
        path.unlink()
    return dirs[0] if dirs else None
