"""`ocihook plan`: discovery against a tree laid out like a real driver install (no root needed)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import hosts, synthetic
from tests.support.golden import golden_text
from tests.support.plans import run_plan

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests/golden/plan-nvidia.json"
NVIDIA_VERSION = "550.54.14"
NVIDIA_LIBS = {
    "libcuda.so": ["1"],
    "libnvidia-ml.so": ["1"],
    "libnvidia-cfg.so": ["1"],
    "libcudadebugger.so": ["1"],
    "libnvidia-opencl.so": ["1"],
    "libnvidia-ptxjitcompiler.so": ["1"],
    "libnvidia-allocator.so": ["1"],
    "libnvidia-pkcs11-openssl3.so": [],
    "libnvidia-nvvm.so": ["4"],
    "libnvidia-gpucomp.so": [],
}


def nvidia_tree(root: Path) -> Path:
    """Files where the NVIDIA .run installer / distro packages put them (the libraries are
    ELF stand-ins with their class and DT_SONAME, tests/support/elfgen.py; the rest dummies)."""
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib32 = root / "usr/lib/i386-linux-gnu"
    for d in (
        lib,
        lib32,
        root / "usr/bin",
        root / "dev",
        root / "run/nvidia-persistenced",
        root / f"lib/firmware/nvidia/{NVIDIA_VERSION}",
    ):
        d.mkdir(parents=True, exist_ok=True)
    for base, sonames in NVIDIA_LIBS.items():
        real = f"{base}.{NVIDIA_VERSION}"
        soname = f"{base}.{sonames[0]}" if sonames else real
        (lib / real).write_bytes(hosts.library(soname, 64, "dummy"))
        (lib32 / real).write_bytes(hosts.library(soname, 32, "dummy 32-bit"))
        for soname in sonames:
            os.symlink(real, lib / f"{base}.{soname}")
        os.symlink(
            f"{base}.{sonames[0]}" if sonames else real, lib / base
        )  # dev link: not injected
    (lib / "libnvidia-egl-wayland.so.1.1.13").write_bytes(b"graphics: not in compute/utility")
    for name in (
        "nvidia-smi",
        "nvidia-debugdump",
        "nvidia-persistenced",
        "nvidia-cuda-mps-control",
        "nvidia-cuda-mps-server",
        "nvidia-settings",
    ):
        (root / "usr/bin" / name).write_bytes(b"#!binary")
        (root / "usr/bin" / name).chmod(0o755)
    for name in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
        (root / f"lib/firmware/nvidia/{NVIDIA_VERSION}" / name).write_bytes(b"fw")
    (root / "lib/firmware/nvidia/535.0.0").mkdir()
    (root / "lib/firmware/nvidia/535.0.0/gsp_ga10x.bin").write_bytes(b"old driver's firmware")
    for name, (major, minor) in hosts.NODES.items():
        os.mknod(root / "dev" / name, 0o666 | 0o020000, os.makedev(major, minor))
        os.chmod(root / "dev" / name, 0o666)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "run/nvidia-persistenced/socket"))
    sock.close()
    return root


@pytest.fixture
def nvidia_config(tmp_path) -> Path:
    root = nvidia_tree(tmp_path / "driver")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(root, profile="nvidia")))
    return config


@pytest.mark.root
def test_nvidia_plan_matches_golden(nvidia_config, tmp_path):
    result = run_plan(
        nvidia_config, "--json", "--devices", "all", "--lib-dir", "/usr/lib/x86_64-linux-gnu"
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(tmp_path / "driver"), "<source>")
    assert json.loads(text) == json.loads(golden_text(GOLDEN, text))


@pytest.mark.root
def test_nvidia_plan_selects_one_gpu_and_keeps_control_nodes(nvidia_config):
    result = run_plan(nvidia_config, "--json", "--devices", "1")
    assert result.returncode == 0, result.stderr
    nodes = {d["path"]: d["index"] for d in json.loads(result.stdout)["devices"]}
    assert nodes == {
        "/dev/nvidia1": 1,
        "/dev/nvidiactl": None,
        "/dev/nvidia-uvm": None,
        "/dev/nvidia-uvm-tools": None,
    }


@pytest.mark.root
def test_plan_text_output_lists_everything(nvidia_config):
    result = run_plan(nvidia_config, "--devices", "0")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "library dir:  /usr/lib64 (placeholder: the hook uses the image's own" in out
    assert "  /usr/lib64/  <-  /usr/lib/x86_64-linux-gnu/\n    library   libnvidia-ml.so.5" in out
    assert "\n    library   libcuda.so.550.54.14\n" in out
    assert "    libcuda.so.1 -> libcuda.so.550.54.14" in out
    assert "  index 0:\n    /dev/nvidia0           mode 0666  allow c 195:0 rw\n" in out
    assert "  /lib/firmware/nvidia/550.54.14/\n    firmware  gsp_ga10x.bin" in out
    assert "driver:       550.54.14 (from libnvidia-ml.so.*, no kernel module version)" in out
    assert "  binaries: nv-fabricmanager" in out
    assert out.count("/dev/nvidiactl") == 1  # each device once, with its cgroup rule
    assert max(len(line) for line in out.splitlines()) <= 100


@pytest.mark.root
def test_plan_unknown_index_is_a_clear_error(nvidia_config):
    result = run_plan(nvidia_config, "--devices", "7")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "ocihook: --devices: device index 7 does not exist (available: 0,1)"
    )


@pytest.mark.parametrize(
    "pattern",
    [
        "libcuda.so.*",
        "lib*.so.?",
        "*",
        "*.so.*.*",
        "libnvidia-*-openssl3.so.*",
        "a*b*c",
        "?",
        "libc[ua]da.so.*",
        "x",
        "*ml.so.1",
        "**",
        "lib*-*-openssl3.so.*",
        "*a*a*",
        "a*",
        "*c",
        "lib*.so.1*",
    ],
)
def test_glob_match_agrees_with_fnmatch(pattern):
    import fnmatch

    from ocihook.globmatch import glob_match

    names = [
        "libcuda.so.1",
        "libcuda.so.550.54.14",
        "libnvidia-pkcs11-openssl3.so.550",
        "abc",
        "aXbYc",
        "ab",
        "",
        "x",
        "libnvidia-ml.so.1",
        "libcuda.so",
        "a",
        "aa",
        "aaa",
        "libnvidia-ml.so.1.so.1",
    ]
    for name in names:
        assert glob_match(name, pattern) == fnmatch.fnmatchcase(name, pattern), (name, pattern)


def test_synthetic_plan_json_is_what_the_executor_consumes(synth_root, tmp_path):
    """`plan --json` on the synthetic driver: flags per mount, strategy per node, typed rules;
    with --userns the nodes are bind-mounted (nosuid) instead of made with mknod."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(synth_root)))
    plain = json.loads(run_plan(config, "--json", "--lib-dir", "/usr/lib64").stdout)
    userns = json.loads(run_plan(config, "--json", "--userns", "--lib-dir", "/usr/lib64").stdout)
    kinds = {m["kind"]: m["flags"] for m in plain["mounts"]}
    assert kinds["library"] == ["ro", "nosuid", "nodev"]
    assert kinds["firmware"] == ["ro", "nosuid", "nodev", "noexec"]
    assert all(
        m["target"].startswith("/usr/lib64/") for m in plain["mounts"] if m["kind"] == "library"
    )
    assert {d["strategy"] for d in plain["devices"]} == {"mknod"}
    assert {d["strategy"] for d in userns["devices"]} == {"bind"}
    assert {tuple(d["bind_flags"]) for d in userns["devices"]} == {("nosuid",)}
    rules = [(r["type"], r["major"], r["minor"], r["access"]) for r in plain["cgroup_rules"]]
    nodes = [(d["type"], d["major"], d["minor"], d["access"]) for d in plain["devices"]]
    assert rules == nodes and rules


@settings(max_examples=3000, deadline=None)
@given(
    name=st.text(alphabet="ab.", max_size=8),
    pattern=st.text(alphabet="ab*.?", max_size=7),
)
def test_glob_match_agrees_with_fnmatch_on_any_star_pattern(name, pattern):
    import fnmatch

    from ocihook.globmatch import glob_match

    assert glob_match(name, pattern) == fnmatch.fnmatchcase(name, pattern)
