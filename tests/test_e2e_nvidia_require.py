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


# -- CRI-O: the hook path and the CDI path ------------------------------------------------------


def _crio_env(env: dict) -> list[dict]:
    return [{"key": key, "value": value} for key, value in env.items()]


def _crio_line(stderr: str) -> str:
    """The hook's line as crictl shows it (inside runc's "error running hook" message)."""
    found = set(re.findall(r"stderr: (ocihook: .*?)(?:\\\\n|\\n|\n|\")", stderr))
    assert len(found) == 1, stderr
    return found.pop()


@pytest.fixture
def crio_nvidia(crio, crio_setup, hosts):
    """The session's CRI-O with the hook's config pointed at a stand-in NVIDIA host."""

    def configure(name: str = "h200", **overrides) -> nvidia_mig.MigHost:
        host = hosts[name]
        settings = base_config(crio_setup.dir, crio_setup.synth_root, profile="nvidia", **overrides)
        settings["source_root"] = settings["device_root"] = str(host.root)
        crio_setup.write_config(**settings)
        return host

    return configure


def test_crio_the_stock_12_6_3_image_starts_on_an_r550_host(crio, crio_setup, crio_nvidia):
    crio_nvidia()
    pod = crio_setup.pod("cuda", "team-a", {"ocihook.io/devices": "0"})
    container = pod.run(
        "cuda", crio.images["debian"], ["echo", "RAN"], envs=_crio_env(CUDA_12_6_3_ENV)
    )
    assert pod.wait_exited(container)["exitCode"] == 0
    assert "RAN" in pod.logs(container).stdout
    assert set(crio_setup.records()) == {container}


def test_crio_an_image_needing_a_newer_driver_is_refused_in_one_line(crio, crio_setup, crio_nvidia):
    """The hook path: `crictl create` fails with the hook's one line; nothing is left."""
    crio_nvidia()
    pod = crio_setup.pod("cuda", "team-a", {"ocihook.io/devices": "0"})
    env = {"NVIDIA_REQUIRE_CUDA": "cuda>=12.8", "CUDA_VERSION": "12.8.1"}
    config = pod.container_config("cuda", crio.images["debian"], ["echo"], envs=_crio_env(env))
    result = pod.create(config)
    assert result.returncode != 0
    assert _crio_line(result.stderr) == (
        "ocihook: NVIDIA_REQUIRE_CUDA: the image requires cuda>=12.8, not met on this host "
        "(driver 550.54.14, CUDA 12.4): a driver 570.26 or newer (CUDA 12.8) meets it: update "
        "the driver, use an image of an older CUDA, or set NVIDIA_DISABLE_REQUIRE=true"
    )
    assert crio_setup.records() == {}


def test_crio_cdi_path_refuses_it_in_one_line_too(crio, crio_setup, crio_nvidia):
    """The CDI path (the CRI's CDI device field, the spec `ocihook cdi generate` wrote in
    CRI-O's spec dir): its check-requirements hook refuses the same image in one line; the
    stock 12.6.3 image starts."""
    import subprocess
    import sys
    from pathlib import Path

    crio_nvidia(ldconfig={"enabled": False})
    ocihook = str(Path(sys.executable).with_name("ocihook"))
    kind = "ocihook.io/nvreq"
    path = crio.cdi_dir / "ocihook.io_nvreq.yaml"
    generated = subprocess.run(
        [ocihook, "cdi", "generate", "--config", str(crio_setup.config), "--kind", kind,
         "--hook-path", ocihook, "--output", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    try:
        pod = crio_setup.pod("cuda", "team-a")
        device = [{"name": f"{kind}=0"}]
        env = {"NVIDIA_REQUIRE_CUDA": "cuda>=12.8", "CUDA_VERSION": "12.8.1"}
        config = pod.container_config(
            "newer", crio.images["debian"], ["echo"], envs=_crio_env(env), CDI_devices=device
        )
        created = pod.create(config)
        started = (
            crio.crictl("start", created.stdout.strip()) if created.returncode == 0 else created
        )
        assert started.returncode != 0
        assert _crio_line(started.stderr).startswith(
            "ocihook: NVIDIA_REQUIRE_CUDA: the image requires cuda>=12.8, not met on this host "
            "(driver 550.54.14, CUDA 12.4): a driver 570.26 or newer (CUDA 12.8) meets it"
        )
        stock = pod.run(
            "stock",
            crio.images["debian"],
            ["echo", "RAN"],
            envs=_crio_env(CUDA_12_6_3_ENV),
            CDI_devices=device,
        )
        assert pod.wait_exited(stock)["exitCode"] == 0
        assert "RAN" in pod.logs(stock).stdout
    finally:
        path.unlink(missing_ok=True)
    assert crio_setup.records() == {}  # no ocihook.io/devices: only the CDI path ran
