"""Run real containers with podman + runc and a hooks dir of our own."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent

BASE = ["podman", "--runtime", "runc"]
# No network; ulimits within this machine's hard limit (podman's defaults exceed it).
LIMITS = ["--network", "none", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
RUN_FLAGS = ["--rm", *LIMITS]
ANNOTATION = "ocihook.io/devices"


def write_hooks_dir(
    hooks_dir: Path,
    hook: Path,
    config: Path,
    cache_dir: Path,
    gate: str = "annotation",
    precreate: bool = False,
    poststop: bool = False,
) -> Path:
    """A hooks.d dir like the shipped one, pointing at `hook` with `config`; with
    `precreate`, also the precreate registration (hooks.d/ocihook-precreate.json, a file of
    its own: podman only); with `poststop`, the poststop stage too (not shipped: records end
    by liveness, docs/audit.md; an admin may add it for exact exit times)."""
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
        "stages": ["createRuntime", "poststop"] if poststop else ["createRuntime"],
    }
    (hooks_dir / "ocihook.json").write_text(json.dumps(document, indent=2))
    if precreate:
        document = dict(document, stages=["precreate"])  # never with poststop
        document["hook"] = dict(document["hook"])
        document["hook"]["args"] = [
            "ocihook-hook", "--stage", "precreate", *document["hook"]["args"][1:]
        ]  # fmt: skip
        (hooks_dir / "ocihook-precreate.json").write_text(json.dumps(document, indent=2))
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


def unique_name(prefix: str) -> str:
    """A container name no other run on this machine uses: `prefix` and a random suffix. A
    fixed name fails a test when any container of that name is left in podman's storage (by
    an earlier run, or by podman itself)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def remove(name: str) -> None:
    subprocess.run(["podman", "rm", "-f", name], capture_output=True)


def write_hook_executable(path: Path, python: str, checkout: Path = REPO) -> Path:
    """packaging/ocihook-hook as installed (packaging/hook_executable.py) for `python`, which
    runs it with -IS: `checkout`'s package (default: this one) first on its sys.path, then
    `python`'s site dirs."""
    subprocess.run(
        [sys.executable, str(checkout / "packaging/hook_executable.py"), str(path)]
        + ["--python", python, "--package-dir", str(checkout)],
        check=True,
    )
    return path


@contextmanager
def placed(directory: str | Path, name: str, document: dict):
    """A hooks.d file in directory for the duration (a real hooks dir of the host, too):
    written under another name and renamed (a runtime never reads it half-written), removed
    afterwards, whatever happens, with the dirs made for it (one that still holds another
    run's file at the end stays)."""
    directory = Path(directory)
    made = []
    for parent in reversed([directory, *directory.parents]):
        try:
            parent.mkdir()
        except FileExistsError:
            continue
        made.append(parent)
    path = directory / name
    partial = directory / f".{name}.partial"  # no .json: podman and CRI-O pass it over
    try:
        partial.write_text(json.dumps(document))
        partial.rename(path)
        yield path
    finally:
        for leftover in (path, partial):
            leftover.unlink(missing_ok=True)
        for parent in reversed(made):
            try:
                parent.rmdir()
            except OSError:
                pass  # another run's file is in it (or that run removed it first)
