"""Hostile images in real podman + runc containers: the rootfs aims the hook at the host.

Library dirs, target files, /dev and their parents are replaced by symlinks to a canary
host dir (absolute, `../..`, `/proc/self/root/...`, `/proc/1/root/...`: pid 1 of the
container's procfs is runc init, whose root is still the host's at prestart), by fifos
and device nodes. Every case: the canary is untouched, nothing new appears on the host
(/dev, /dev/shm, the driver's source root), the host mount table is unchanged, and the
container either fails with one clear `ocihook:` line or runs without the attack's effect.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import hostile


@pytest.fixture(scope="session")
def rhel_base(tmp_path_factory) -> Path:
    return hostile.rhel_tree(tmp_path_factory.mktemp("hostile") / "base")


@pytest.fixture
def canary(tmp_path) -> Path:
    return hostile.make_canary(tmp_path / "canary")


@pytest.fixture
def watch(canary, synth_root):
    """Snapshot the host places an attack aims at; demand they are unchanged afterwards."""
    places = (canary, synth_root)
    before = hostile.snapshot(*places)
    dev_before = hostile.host_dev_entries(), set(os.listdir("/dev/shm"))  # podman's lock changes
    yield
    assert hostile.snapshot(*places) == before
    assert (hostile.host_dev_entries(), set(os.listdir("/dev/shm"))) == dev_before


def build(
    rhel_base: Path,
    tmp_path: Path,
    edits: dict[str, tuple[str, str]],
    writes: dict[str, str] | None = None,
) -> str:
    """A copy of the RHEL-like tree with `edits` (path -> (kind, target)) applied and `writes`
    (path -> text) written, imported as an image."""
    root = tmp_path / "image"
    subprocess.run(["cp", "-a", str(rhel_base), str(root)], check=True)
    for path, (kind, target) in edits.items():
        hostile.replace(root / path.lstrip("/"), kind, target)
    for path, text in (writes or {}).items():
        (root / path.lstrip("/")).write_text(text)
    name = f"ocihook-hostile-{tmp_path.name.lower()[-40:].strip('_')}"
    image = hostile.import_tree(root, name.replace("[", "-").replace("]", ""))
    shutil.rmtree(root)
    return image


def run_attack(
    hook_setup, image: str, command: list[str] | None = None, runtime_may_fail=False, **kwargs
):
    result = hook_setup.run(
        image, command or ["/bin/sh", "-c", "ls -la /usr/lib64 /usr/bin /dev"], "all", **kwargs
    )
    subprocess.run(["podman", "rmi", "-f", image], capture_output=True)
    if result.returncode != 0 and not (runtime_may_fail and "runc create failed" in result.stderr):
        ocihook_lines = [line for line in result.stderr.splitlines() if "ocihook: " in line]
        assert ocihook_lines, result.stderr
        assert "internal error" not in result.stderr, result.stderr
    return result


def _symlink_targets(canary: Path) -> dict[str, str]:
    return {
        "absolute": str(canary),
        "dotdot": "../../../../../../../.." + str(canary),
        "proc-self-root": "/proc/self/root" + str(canary),
        "proc-1-root": "/proc/1/root" + str(canary),
    }


STYLES = ["absolute", "dotdot", "proc-self-root", "proc-1-root"]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(
    "path", ["/usr/lib64", "/usr", "/usr/bin", "/usr/lib64/libsynth.so.1.2.3", "/usr/bin/synth-smi"]
)
def test_symlink_to_the_host(hook_setup, rhel_base, tmp_path, canary, watch, path, style):
    target = _symlink_targets(canary)[style]
    if path.endswith((".so.1.2.3", "synth-smi")):
        target += "/" + ("libsynth.so.1.2.3" if path.endswith(".so.1.2.3") else "marker")
    image = build(rhel_base, tmp_path, {path: ("symlink", target)})
    result = run_attack(hook_setup, image)
    assert "host canary" not in result.stdout


@pytest.mark.parametrize("kind", ["fifo", "chardev", "blockdev"])
@pytest.mark.parametrize(
    "path", ["/usr/lib64/libsynth.so.1.2.3", "/usr/bin/synth-smi", "/usr/lib64/libsynth.so.1"]
)
def test_target_is_not_a_file(hook_setup, rhel_base, tmp_path, watch, path, kind):
    image = build(rhel_base, tmp_path, {path: (kind, "")})
    result = run_attack(hook_setup, image, ["/bin/true"])
    if not path.endswith(".so.1"):
        assert result.returncode != 0
        assert "not mounting over it" in result.stderr, result.stderr


@pytest.mark.parametrize("kind", ["fifo", "chardev", "file"])
def test_library_dir_is_not_a_directory(hook_setup, rhel_base, tmp_path, watch, kind):
    image = build(rhel_base, tmp_path, {"/usr/lib64": (kind, "")})
    run_attack(hook_setup, image, ["/bin/true"])


# runc 1.1.5 itself (no hook involved) creates its /dev links through an image's /dev symlink,
# by path, on the host: a runtime bug outside the hook. The test allows exactly those.
RUNC_DEV_LINKS = {"fd", "ptmx", "stdin", "stdout", "stderr"}


@pytest.mark.parametrize("style", STYLES)
def test_dev_is_a_symlink_to_the_host(hook_setup, rhel_base, tmp_path, canary, style):
    before = hostile.snapshot(canary)
    dev_before = hostile.host_dev_entries()
    image = build(rhel_base, tmp_path, {"/dev": ("symlink", _symlink_targets(canary)[style])})
    run_attack(hook_setup, image, ["/bin/true"], runtime_may_fail=True)
    for name in RUNC_DEV_LINKS:
        if (canary / name).is_symlink():
            (canary / name).unlink()
    after = hostile.snapshot(canary)
    after[str(canary)] = before[str(canary)]  # its mtime: runc's links came and went
    assert after == before
    assert hostile.host_dev_entries() == dev_before


def test_library_dir_aimed_at_a_host_volume(hook_setup, rhel_base, tmp_path, canary, watch):
    """/usr/lib64 -> /data, where /data is a host directory bind-mounted into the container:
    in-root resolution alone would create mount points and links in the host directory."""
    image = build(rhel_base, tmp_path, {"/usr/lib64": ("symlink", "/data")})
    result = run_attack(hook_setup, image, ["/bin/true"], extra=["-v", f"{canary}:/data"])
    assert result.returncode != 0
    assert "shared with the host" in result.stderr, result.stderr
