"""Run real containers with podman + runc and a hooks dir of our own."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent

BASE = ["podman", "--runtime", "runc"]
# No network; ulimits within this machine's hard limit (podman's defaults exceed it).
LIMITS = ["--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
RUN_FLAGS = ["--rm", *LIMITS]
ANNOTATION = "ocihook.io/devices"


def write_hooks_dir(
    hooks_dir: Path, hook: Path, config: Path, cache_dir: Path, gate: str = "annotation"
) -> Path:
    """A hooks.d dir like the shipped one, pointing at `hook` with `config`."""
    hooks_dir.mkdir(parents=True, exist_ok=True)
    when = (
        {"annotations": {r"^ocihook\.io/devices$": ".+"}}
        if gate == "annotation"
        else {"always": True}
    )
    document = {
        "version": "1.0.0",
        "hook": {
            "path": str(hook),
            "args": ["ocihook-hook", "--config", str(config), "--cache-dir", str(cache_dir)],
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
            "timeout": 30,
        },
        "when": when,
        "stages": ["prestart", "poststop"],
    }
    (hooks_dir / "ocihook.json").write_text(json.dumps(document, indent=2))
    return hooks_dir


def run(
    image: str,
    command: list[str],
    hooks_dir: Path | None = None,
    devices: str | None = None,
    extra: list[str] | None = None,
    runtime: str = "runc",
    timeout: int = 120,
) -> subprocess.CompletedProcess:
    args = ["podman", "--runtime", runtime]
    if hooks_dir is not None:
        args += ["--hooks-dir", str(hooks_dir)]
    args += ["run", *RUN_FLAGS]
    if devices is not None:
        args += ["--annotation", f"{ANNOTATION}={devices}"]
    args += list(extra or [])
    args += [image, *command]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def remove(name: str) -> None:
    subprocess.run(["podman", "rm", "-f", name], capture_output=True)


def write_hook_executable(path: Path, python: str) -> Path:
    """packaging/ocihook-hook as installed, with `python` (run with -I) in its shebang."""
    body = (REPO / "packaging/ocihook-hook").read_text().split("\n", 1)[1]
    path.write_text(f"#!{python} -I\n{body}")
    path.chmod(0o755)
    return path
