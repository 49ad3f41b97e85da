"""`ocihook plan` with the nvidia profile on trees laid out like real hosts (golden plans).

Stand-ins: the driver files are dummies with an ELF header (nothing loads them here) and
the device nodes are real char devices of this machine; each tree has its own binary
ld.so.cache (tests/support/hosts.py), which the hook parses itself.
Update the goldens with OCIHOOK_UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import hosts, synthetic
from tests.support.golden import golden_text
from tests.support.plans import run_plan

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests/golden/layouts"
MULTI, I386 = "/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu"


def plan(
    root: Path, *args: str, tmp: Path, profile: str | dict = "nvidia", **settings
) -> subprocess.CompletedProcess:
    config = tmp / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(root, profile=profile, **settings)))
    return run_plan(config, *args)


def plan_json(root: Path, *args: str, tmp: Path, **kwargs) -> dict:
    result = plan(root, "--json", *args, tmp=tmp, **kwargs)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def mounts(data: dict) -> dict[str, str]:
    """container path -> source (inside the source root)"""
    return {m["target"]: m["source"] for m in data["mounts"]}


# layout -> plan arguments for its golden
GOLDEN_ARGS = {
    "ubuntu": ["--capabilities", "all", "--lib-dir", MULTI],
    "rhel": ["--capabilities", "compute,utility,compat32", "--lib-dir", "/usr/lib64"],
    "debian": ["--lib-dir", MULTI],
    "nvidia-nnn": [],
    "gcp": ["--devices", "0"],
    "stale": ["--lib-dir", MULTI],
    "mps": ["--lib-dir", "/usr/lib64"],
    "legacy-tls": ["--capabilities", "all", "--lib-dir", MULTI],
    "biarch-conf": ["--capabilities", "compute,utility,compat32", "--lib-dir", MULTI],
    "runfile": ["--lib-dir", "/usr/lib64"],
    "arch": ["--capabilities", "compute,utility,compat32", "--lib-dir", "/usr/lib"],
}
# layout -> config settings for its golden
GOLDEN_CONFIG = {"mps": {"variables": {"CUDA_MPS_PIPE_DIRECTORY": hosts.MPS_PIPE_DIR}}}


@pytest.mark.parametrize("layout", sorted(hosts.LAYOUTS))
def test_golden_plan(layout, tmp_path):
    root = hosts.LAYOUTS[layout](tmp_path / "host")
    result = plan(root, *GOLDEN_ARGS[layout], tmp=tmp_path, **GOLDEN_CONFIG.get(layout, {}))
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(root), "<root>")
    golden = GOLDEN / f"{layout}.txt"
    assert text == golden_text(golden, text)
    assert max(len(line) for line in text.splitlines()) <= 100


def test_ubuntu_multiarch_all_capabilities(tmp_path):
    root = hosts.ubuntu(tmp_path / "host")
    data = plan_json(root, "--capabilities", "all", "--lib-dir", MULTI, tmp=tmp_path)
    got = mounts(data)
    v = hosts.VERSION
    assert data["driver_version"] == v
    assert data["version_source"] == f"kernel module, {root}/sys/module/nvidia/version"
    assert got[f"{MULTI}/libcuda.so.{v}"] == f"{MULTI}/libcuda.so.{v}"
    assert got[f"{I386}/libcuda.so.{v}"] == f"{I386}/libcuda.so.{v}"  # compat32: 32-bit dir
    assert got[f"{MULTI}/vdpau/libvdpau_nvidia.so.{v}"] == f"{MULTI}/vdpau/libvdpau_nvidia.so.{v}"
    assert f"{MULTI}/libnvidia-egl-gbm.so.1.1.1" in got  # its own version, kept
    # NVIDIA's firmware path, not the merged-/usr target of the /lib symlink
    assert (
        got[f"/lib/firmware/nvidia/{v}/gsp_ga10x.bin"]
        == f"/usr/lib/firmware/nvidia/{v}/gsp_ga10x.bin"
    )
    assert "/usr/share/vulkan/icd.d/nvidia_icd.json" in got
    assert "/usr/share/glvnd/egl_vendor.d/10_nvidia.json" in got
    mps = [m for m in data["mounts"] if m["target"] == "/tmp/nvidia-mps"]
    assert mps and mps[0]["kind"] == "directory" and mps[0]["writable"] is True
    assert data["ld_dirs"] == [MULTI, I386]
    assert {"target": f"{I386}/libcuda.so.1", "points_to": f"libcuda.so.{v}"} in data["links"]
    assert "/usr/bin/nv-fabricmanager" in got
    assert f"{MULTI}/libnvidia-nscq.so.{v}" in got
    assert f"{MULTI}/libnvidia-tileiras.so.{v}" in got
    assert "/dev/nvidia-modeset" in [d["path"] for d in data["devices"]]  # display
    assert not any("libc.so" in t or "libGL.so" in t for t in got)  # not the driver's


def test_default_capabilities_are_compute_and_utility(tmp_path):
    root = hosts.ubuntu(tmp_path / "host")
    data = plan_json(root, "--lib-dir", MULTI, tmp=tmp_path)
    got = mounts(data)
    assert data["capabilities"] == ["compute", "utility"]
    assert f"{MULTI}/libcuda.so.{hosts.VERSION}" in got
    assert f"{MULTI}/libnvidia-ml.so.{hosts.VERSION}" in got
    for absent in ("libGLX_nvidia", "libnvcuvid", "vdpau", "i386", "vulkan", "egl_vendor"):
        assert not any(absent in t for t in got), absent
    assert "/dev/nvidia-modeset" not in [d["path"] for d in data["devices"]]


def test_video_capability_only(tmp_path):
    root = hosts.ubuntu(tmp_path / "host")
    data = plan_json(root, "--capabilities", "video", "--lib-dir", MULTI, tmp=tmp_path)
    names = {os.path.basename(t) for t in mounts(data)}
    v = hosts.VERSION
    assert f"libnvcuvid.so.{v}" in names and f"libvdpau_nvidia.so.{v}" in names
    assert f"libcuda.so.{v}" not in names


def test_unknown_capability_is_one_line(tmp_path):
    root = hosts.ubuntu(tmp_path / "host")
    result = plan(root, "--capabilities", "compute,teleport", tmp=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "ocihook: --capabilities: unknown driver capability 'teleport' (the profile has: "
        "utility, compute, video, graphics, display, ngx, compat32, gdrcopy, gds, rdma, nvswitch)"
    )


def test_rhel_version_from_proc_and_32bit_in_usr_lib(tmp_path):
    root = hosts.rhel(tmp_path / "host")
    data = plan_json(
        root, "--capabilities", "compute,utility,compat32", "--lib-dir", "/usr/lib64", tmp=tmp_path
    )
    got = mounts(data)
    v = hosts.VERSION
    assert data["version_source"] == f"kernel module, {root}/proc/driver/nvidia/version"
    assert got[f"/usr/lib/libcuda.so.{v}"] == f"/usr/lib/libcuda.so.{v}"
    assert got[f"/usr/lib64/libcuda.so.{v}"] == f"/usr/lib64/libcuda.so.{v}"
    assert data["ld_dirs"] == ["/usr/lib64", "/usr/lib"]


def test_debian_alternatives(tmp_path):
    root = hosts.debian(tmp_path / "host")
    data = plan_json(root, "--lib-dir", MULTI, tmp=tmp_path)
    got = mounts(data)
    v = hosts.VERSION
    assert got[f"{MULTI}/libnvidia-ml.so.{v}"] == f"{MULTI}/nvidia/current/libnvidia-ml.so.{v}"
    assert {"target": f"{MULTI}/libnvidia-ml.so.1", "points_to": f"libnvidia-ml.so.{v}"} in data[
        "links"
    ]
    assert got["/usr/bin/nvidia-smi"] == "/usr/lib/nvidia/current/nvidia-smi"
    assert f"/lib/firmware/nvidia/{v}/gsp_ga10x.bin" in got


def test_usr_lib_nvidia_nnn_finds_both_dirs(tmp_path):
    root = hosts.nvidia_nnn(tmp_path / "host")
    got = mounts(plan_json(root, tmp=tmp_path))
    v = hosts.VERSION
    assert got[f"/usr/lib64/libnvidia-ml.so.{v}"] == f"/usr/lib/nvidia-550/libnvidia-ml.so.{v}"
    assert got[f"/usr/lib64/libnvidia-ptxjitcompiler.so.{v}"] == (
        f"{MULTI}/libnvidia-ptxjitcompiler.so.{v}"
    )
    assert got["/usr/bin/nvidia-smi"] == "/usr/lib/nvidia-550/bin/nvidia-smi"


def test_gcp_var_lib_nvidia(tmp_path):
    root = hosts.gcp(tmp_path / "host")
    got = mounts(plan_json(root, tmp=tmp_path))
    v = hosts.VERSION
    assert got[f"/usr/lib64/libcuda.so.{v}"] == f"/var/lib/nvidia/lib64/libcuda.so.{v}"
    assert got["/usr/bin/nvidia-smi"] == "/var/lib/nvidia/bin/nvidia-smi"


def test_stale_driver_only_running_version(tmp_path):
    root = hosts.stale(tmp_path / "host")
    data = plan_json(root, "--lib-dir", MULTI, tmp=tmp_path)
    sources = [m["source"] for m in data["mounts"]]
    assert data["driver_version"] == hosts.VERSION
    assert not any(hosts.OLD in s or s.endswith(".away") for s in sources), sources
    assert f"{MULTI}/libcuda.so.{hosts.VERSION}" in sources
    assert f"/lib/firmware/nvidia/{hosts.VERSION}/gsp_ga10x.bin" in sources
    assert data["warnings"] == []


def test_no_kernel_module_several_versions_warns(tmp_path):
    root = hosts.stale(tmp_path / "host", kernel=None)
    result = plan(root, "--lib-dir", MULTI, tmp=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (
        f"warning: no kernel module version ({root}/sys/module/nvidia/version, "
        f"{root}/proc/driver/nvidia/version) and several driver versions in the source root "
        f"({hosts.OLD}, {hosts.VERSION}): using {hosts.OLD}, the first the ld cache lists"
    ) in result.stdout
    data = plan_json(root, "--lib-dir", MULTI, tmp=tmp_path)
    versions = {m["source"].rpartition(".so.")[2] for m in data["mounts"] if ".so." in m["source"]}
    assert versions == {hosts.OLD}  # one driver, never a mix


def test_upgraded_not_rebooted_is_refused(tmp_path):
    root = hosts.ubuntu(tmp_path / "host")
    (root / "sys/module/nvidia/version").write_text("560.28.03\n")
    result = plan(root, tmp=tmp_path)
    assert result.returncode == 1
    assert result.stderr == (
        f"ocihook: driver 560.28.03 is loaded ({root}/sys/module/nvidia/version) but {root} "
        f"has libnvidia-ml.so.* only of {hosts.VERSION}: the driver was upgraded without "
        "reloading its kernel module; reboot (or reload it)\n"
    )


def test_no_ld_cache_falls_back_to_library_dirs(tmp_path):
    root = hosts.ubuntu(tmp_path / "host")
    (root / "etc/ld.so.cache").unlink()
    result = plan(root, "--lib-dir", MULTI, tmp=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "ld.so.cache:  /etc/ld.so.cache in the source root: missing, library dirs only" in (
        result.stdout
    )
    assert f"    library   libcuda.so.{hosts.VERSION}\n" in result.stdout


def test_ld_cache_escaping_the_source_root_stays_inside(tmp_path):
    """A driver volume's ld cache that names a host path: resolved inside the volume."""
    root = hosts.gcp(tmp_path / "host")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"libcuda.so.{hosts.VERSION}").write_bytes(b"host file")
    os.symlink(f"libcuda.so.{hosts.VERSION}", outside / "libcuda.so.1")
    hosts.write_ld_cache(
        root / "etc/ld.so.cache", [("libcuda.so.1", f"{outside}/libcuda.so.1", hosts.X86_64)]
    )
    os.symlink(str(tmp_path), root / "escape")
    got = mounts(plan_json(root, tmp=tmp_path))
    assert not any(str(outside) in s for s in got.values())
    assert got[f"/usr/lib64/libcuda.so.{hosts.VERSION}"] == (
        f"/var/lib/nvidia/lib64/libcuda.so.{hosts.VERSION}"
    )


def test_library_dirs_first_overrides_the_ld_cache(tmp_path):
    """The stale tree's cache lists the old driver's dir first; library_dirs_first puts the
    profile's dirs ahead of it (and, without a kernel module, decides the version)."""
    root = hosts.stale(tmp_path / "host", kernel=None)
    profile = yaml.safe_load((REPO / "packaging/profiles/nvidia.yaml").read_text())
    profile.update(library_dirs=[MULTI], library_dirs_first=True)
    data = plan_json(root, "--lib-dir", MULTI, tmp=tmp_path, profile=profile)
    assert data["driver_version"] == hosts.VERSION
    assert (
        mounts(data)[f"{MULTI}/libcuda.so.{hosts.VERSION}"] == f"{MULTI}/libcuda.so.{hosts.VERSION}"
    )
    profile.update(ld_cache=None, library_dirs=["/opt/nvidia-old/lib"])
    data = plan_json(root, "--lib-dir", MULTI, tmp=tmp_path, profile=profile)
    assert data["driver_version"] == hosts.OLD
    assert data["ld_cache"] == "not used (profile ld_cache: null)"


def test_check_shows_the_version_source_and_warnings(tmp_path):
    root = hosts.stale(tmp_path / "host", kernel=None)
    plan(root, tmp=tmp_path)  # writes the config
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ocihook.cli.main",
            "check",
            "--config",
            str(tmp_path / "config.yaml"),
        ]
        + ["--hooks-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert (
        f"ok      source root {root}: 5 files, 2 links, 5 device nodes (capabilities compute, "
        f"utility); driver {hosts.OLD} (from libnvidia-ml.so.*, no kernel module version)\n"
    ) in result.stdout
    assert "WARNING no kernel module version" in result.stdout


def test_fifo_as_ld_cache_is_refused_at_once(tmp_path):
    """A driver volume that plants a FIFO where the cache goes must not hang the hook."""
    root = hosts.gcp(tmp_path / "host")
    (root / "etc/ld.so.cache").unlink()
    os.mkfifo(root / "etc/ld.so.cache")
    result = plan(root, tmp=tmp_path)
    assert result.returncode == 1
    assert result.stderr == f"ocihook: source {root}/etc/ld.so.cache: not a regular file\n"


@pytest.mark.parametrize("cache", [False, True], ids=["no-ld-cache", "ld-cache"])
def test_arch_lib64_symlink_one_file_each(cache, tmp_path):
    """Arch's /usr/lib64 -> lib: a library reached through the symlinked folder and its
    soname link beside it are one file (its canonical path), mounted once, with no warning
    that its link points to itself."""
    root = hosts.arch(tmp_path / "host", cache=cache)
    data = plan_json(root, "--lib-dir", "/usr/lib", tmp=tmp_path)
    v = hosts.VERSION
    sources = [m["source"] for m in data["mounts"]]
    assert f"/usr/lib/libnvidia-ml.so.{v}" in sources
    assert f"/usr/lib/libcuda.so.{v}" in sources
    assert not any(s.startswith("/usr/lib64/") for s in sources), sources
    assert len(sources) == len(set(sources))
    assert data["warnings"] == []
    assert {"target": "/usr/lib/libnvidia-ml.so.1", "points_to": f"libnvidia-ml.so.{v}"} in (
        data["links"]
    )


def test_arch_soname_link_to_another_file_still_warns(tmp_path):
    """The same layout where libnvidia-ml.so.1 really points to another (older) file: the
    warning stays, naming both files."""
    root = hosts.arch(tmp_path / "host")
    lib = root / "usr/lib"
    (lib / f"libnvidia-ml.so.{hosts.OLD}").write_bytes(
        hosts.library("libnvidia-ml.so.1", 64, "old copy")
    )
    (lib / "libnvidia-ml.so.1").unlink()
    os.symlink(f"libnvidia-ml.so.{hosts.OLD}", lib / "libnvidia-ml.so.1")
    data = plan_json(root, "--lib-dir", "/usr/lib", tmp=tmp_path)
    assert data["warnings"] == [
        f"{root}/usr/lib64/libnvidia-ml.so.1 points to libnvidia-ml.so.{hosts.OLD}: "
        f"the container's to libnvidia-ml.so.{hosts.VERSION}"
    ]
    sources = [m["source"] for m in data["mounts"]]
    assert f"/usr/lib/libnvidia-ml.so.{hosts.VERSION}" in sources
    assert not any(hosts.OLD in s for s in sources)
