"""The sandboxed ldconfig against hostile images: ld.so.conf, ld.so.conf.d and ld.so.cache
aimed at host paths (absolute, /proc/1/root/..., /proc/self/root/...). ldconfig must not
scan, link or write outside the rootfs; a dynamic ldconfig is refused."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.conftest import base_config
from tests.support import hostile
from tests.test_attacks_rootfs import build, rhel_base  # noqa: F401  (session fixture)


def _sha(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture
def lib_canary(tmp_path) -> Path:
    """A host dir holding a real shared library (with a soname) but no soname link: a
    ldconfig that scanned it without -X would create libcanary.so.1 there."""
    canary = hostile.make_canary(tmp_path / "canary")
    source = tmp_path / "c.c"
    source.write_text("int canary(void) { return 1; }\n")
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcanary.so.1",
            "-o",
            str(canary / "libcanary.so.1.0"),
            str(source),
        ],
        check=True,
    )
    return canary


def test_hostile_ld_so_conf(hook_setup, rhel_base, tmp_path, lib_canary):  # noqa: F811
    before = hostile.snapshot(lib_canary)
    host_cache = _sha("/etc/ld.so.cache")
    targets = [str(lib_canary), f"/proc/1/root{lib_canary}", f"/proc/self/root{lib_canary}"]
    conf = "\n".join(targets + [f"include /proc/1/root{lib_canary}/*.conf"]) + "\n"
    image = build(
        rhel_base,
        tmp_path,
        {
            "/etc/ld.so.conf.d/evil.conf": ("file", ""),
            "/etc/ld.so.cache": ("symlink", "/proc/1/root/etc/ld.so.cache"),
        },
        writes={
            "/etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n" + conf,
            "/etc/ld.so.conf.d/evil.conf": conf,
        },
    )
    result = hook_setup.run(
        image, ["/bin/sh", "-c", "/usr/bin/synth-smi && ls -l /etc/ld.so.cache"], "all"
    )
    subprocess.run(["podman", "rmi", "-f", image], capture_output=True)
    assert result.returncode == 0, result.stderr
    assert "libsynth 1.2.3 loaded" in result.stdout
    assert "->" not in result.stdout.splitlines()[-1]  # the cache link was replaced in the root
    assert hostile.snapshot(lib_canary) == before
    assert _sha("/etc/ld.so.cache") == host_cache


def test_dynamic_ldconfig_is_refused(hook_setup, image_rhel, synth_root):
    hook_setup.write_config(
        **base_config(hook_setup.dir, synth_root, ldconfig={"path": "/bin/true"})
    )
    result = hook_setup.run(image_rhel, ["/bin/true"], "all")
    assert result.returncode != 0
    assert "must be a static executable" in result.stderr, result.stderr
    assert hook_setup.records() == []
