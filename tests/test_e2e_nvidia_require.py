"""NVIDIA's stock CUDA images' requirement check (NVIDIA_REQUIRE_*) in real podman + runc
containers, on the hook path.

Stand-ins: no GPU, no NVIDIA driver here. The host is tests/support/nvidia_mig.py's: driver
550.54.14 (an R550 host: CUDA 12.4), the driver's proc files, GPU nodes of major 195 that
no driver here registers, and a stand-in libnvidia-ml.so.1 (gcc-built, loaded by the hook's
NVML child) that answers the GPUs' brand and compute capability as an H200 does (brand
NVIDIA, 9.0), or as the layout of a test says. The image's environment is a stand-in of
nvidia/cuda:12.6.3's (its real NVIDIA_REQUIRE_CUDA, CUDA_VERSION, NVIDIA_VISIBLE_DEVICES and
NVIDIA_DRIVER_CAPABILITIES); the config is the default one but for its roots.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from tests.conftest import base_config
from tests.support import nvidia_mig
from tests.test_require import CUDA_12_6_3

GPU0, GPU1 = nvidia_mig.GPU0, nvidia_mig.GPU1
CUDA_12_6_3_ENV = {
    "NVIDIA_REQUIRE_CUDA": CUDA_12_6_3,
    "CUDA_VERSION": "12.6.3",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
}
GEFORCE = 5  # nvmlBrandType_t NVML_BRAND_GEFORCE
TESLA = 2


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """layout name -> a stand-in NVIDIA host (built once per module)."""
    nvidia_mig.check_majors_unused()
    layouts = {
        "h200": (GPU0, GPU1),
        "geforce": tuple(dataclasses.replace(g, brand=GEFORCE, arch=(8, 9)) for g in (GPU0, GPU1)),
        "v100": tuple(dataclasses.replace(g, brand=TESLA, arch=(7, 0)) for g in (GPU0, GPU1)),
    }
    built = {}
    for name, layout in layouts.items():
        host = nvidia_mig.build(tmp_path_factory.mktemp(name) / "root", layout)
        host.root.chmod(0o755)
        built[name] = host
    return built


@pytest.fixture
def nvidia_host(hook_setup, synth_root, hosts):
    """Point the hook's default config at one of the stand-in hosts."""

    def configure(name: str = "h200") -> nvidia_mig.MigHost:
        host = hosts[name]
        settings = base_config(hook_setup.dir, synth_root, profile="nvidia")
        settings["source_root"] = settings["device_root"] = str(host.root)
        hook_setup.write_config(**settings)
        return host

    return configure


def _env(env: dict) -> list[str]:
    return [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]


def _hook_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "ocihook:" in line]


def test_the_stock_12_6_3_image_starts_on_an_r550_host(hook_setup, nvidia_host, image_debian):
    """cuda>=12.6 does not hold on CUDA 12.4; its term brand=nvidia,driver>=550,driver<551
    does, with the brand NVML reports (the hook's NVML child asked the stand-in: its log
    line says what it read), as libnvidia-container decides it."""
    nvidia_host()
    result = hook_setup.run(image_debian, ["/bin/true"], devices="0", extra=_env(CUDA_12_6_3_ENV))
    assert result.returncode == 0, result.stderr
    log = hook_setup.log.read_text()
    (line,) = [line for line in log.splitlines() if "NVIDIA_REQUIRE_*: NVML" in line]
    assert "0: ('nvidia', '9.0')" in line, line


def test_a_geforce_gpu_is_refused_it_in_one_line(hook_setup, nvidia_host, image_debian):
    """The same image on GeForce GPUs (NVML's brand): none of its terms holds. One line,
    naming the term and the facts, and the driver that would meet it (a newer one would:
    CUDA 12.6's); the container never ran, the hook wrote no record."""
    nvidia_host("geforce")
    result = hook_setup.run(image_debian, ["echo", "RAN"], devices="1", extra=_env(CUDA_12_6_3_ENV))
    assert result.returncode != 0 and "RAN" not in result.stdout
    (line,) = _hook_lines(result.stderr)
    assert line.endswith(
        "ocihook: NVIDIA_REQUIRE_CUDA: the image requires cuda>=12.6 (or one of its 36 other "
        "terms), not met on this host (driver 550.54.14, CUDA 12.4; GPU 1: brand geforce): a "
        "driver 560.28.03 or newer (CUDA 12.6) meets it: update the driver, use an image of an "
        "older CUDA, or set NVIDIA_DISABLE_REQUIRE=true"
    ), result.stderr
    assert hook_setup.records() == []


def test_an_image_needing_a_newer_driver_is_refused_in_one_line(
    hook_setup, nvidia_host, image_debian
):
    nvidia_host()
    result = hook_setup.run(
        image_debian,
        ["echo", "RAN"],
        devices="0",
        extra=_env({"NVIDIA_REQUIRE_CUDA": "cuda>=12.8", "CUDA_VERSION": "12.8.1"}),
    )
    assert result.returncode != 0 and "RAN" not in result.stdout
    (line,) = _hook_lines(result.stderr)
    assert re.search(
        r"ocihook: NVIDIA_REQUIRE_CUDA: the image requires cuda>=12\.8, not met on this host "
        r"\(driver 550\.54\.14, CUDA 12\.4\): a driver 570\.26 or newer \(CUDA 12\.8\) meets it",
        line,
    ), result.stderr


@pytest.mark.parametrize(
    "layout, started", [("h200", True), ("v100", False)], ids=["arch 9.0", "arch 7.0"]
)
def test_an_arch_requirement_reads_the_gpus_compute_capability(
    hook_setup, nvidia_host, image_debian, layout, started
):
    """arch>=8.0: NVML's compute capability of the selected GPU. On a V100 (7.0) no driver
    update helps, and the line does not advise one."""
    nvidia_host(layout)
    result = hook_setup.run(
        image_debian, ["echo", "RAN"], devices="0", extra=_env({"NVIDIA_REQUIRE_ARCH": "arch>=8.0"})
    )
    if started:
        assert result.returncode == 0 and "RAN" in result.stdout, result.stderr
        return
    (line,) = _hook_lines(result.stderr)
    assert line.endswith(
        "ocihook: NVIDIA_REQUIRE_ARCH: the image requires arch>=8.0, not met on this host "
        "(driver 550.54.14, CUDA 12.4; GPU 0: arch 7.0): no newer driver meets it: use another "
        "image or GPU, or set NVIDIA_DISABLE_REQUIRE=true"
    ), result.stderr


def test_a_malformed_requirement_is_one_line(hook_setup, nvidia_host, image_debian):
    nvidia_host()
    result = hook_setup.run(
        image_debian,
        ["echo", "RAN"],
        devices="0",
        extra=_env({"NVIDIA_REQUIRE_CUDA": "cuda>=13.0 cuda=>12"}),
    )
    assert result.returncode != 0 and "RAN" not in result.stdout
    (line,) = _hook_lines(result.stderr)
    assert line.endswith("ocihook: NVIDIA_REQUIRE_CUDA: 'cuda=>12': '=>' is no operator")
    assert "Traceback" not in result.stderr
