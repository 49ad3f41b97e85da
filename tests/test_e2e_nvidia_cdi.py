"""NVIDIA's stock images on the CDI path (`ocihook cdi generate`, `podman --device`): the CUDA
compat decision (the update-ldcache hook probes each image), the NVIDIA_REQUIRE_* check (a
check-requirements hook that refuses in one line) and IMEX channels under NVIDIA's names
(`nvidia.com/imex-channel=N`), in real podman + runc containers.

Stand-ins (no GPU, no NVIDIA driver here): tests/support/cuda_images.py's host (driver
535.104.05, gcc-built libcudas that say which one was loaded, compat ones with NVIDIA's
fwd_compatibility note), tests/support/nvidia_mig.py's R550 host (a stand-in NVML that
answers the GPUs' brand and compute capability when the spec is generated) and
tests/support/nvidia_direct.py's (real char devices of this machine as IMEX channels).
podman 4.3 reads /var/run/cdi only: each spec goes there under a file of the test's own and
is removed afterwards.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tests.conftest import base_config
from tests.support import cuda_images, images, nvidia_direct, nvidia_mig, podman
from tests.test_e2e_nvidia_require import CUDA_12_6_3_ENV, GEFORCE

OCIHOOK = str(Path(sys.executable).with_name("ocihook"))
SPEC_DIR = Path("/var/run/cdi")
R575_BRANCHES = (535, 550, 560, 565, 570, 575)

pytestmark = [pytest.mark.root, pytest.mark.podman]


@pytest.fixture
def spec_dir():
    """/var/run/cdi, and the spec files the test wrote there removed afterwards."""
    existed = SPEC_DIR.exists()
    written: list[Path] = []
    yield written
    for path in written:
        path.unlink(missing_ok=True)
    if not existed:
        try:
            SPEC_DIR.rmdir()
        except OSError:
            pass  # another run's spec is in it


def _generate(config: Path, spec_dir: list, *args: str) -> dict:
    """`ocihook cdi generate` into /var/run/cdi (a file name of this test's own)."""
    SPEC_DIR.mkdir(exist_ok=True)
    path = SPEC_DIR / f"ocihook-test-{uuid.uuid4().hex[:12]}.yaml"
    spec_dir.append(path)
    result = subprocess.run(
        [OCIHOOK, "cdi", "generate", "--config", str(config), "--hook-path", OCIHOOK,
         "--output", str(path), *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(path.read_text())


def _config(tmp_path: Path, root: Path, **overrides) -> Path:
    settings = base_config(tmp_path, root, profile="nvidia", **overrides)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def _kind() -> str:
    return f"ocihook.io/t{uuid.uuid4().hex[:12]}"


def _env(env: dict) -> list[str]:
    return [arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]


def _hook_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "ocihook:" in line]


# -- CUDA compat: the update-ldcache hook probes the image --------------------------------------


@pytest.fixture(scope="module")
def cuda_host(tmp_path_factory):
    work = tmp_path_factory.mktemp("cdi-cuda-work")
    root = cuda_images.host_tree(tmp_path_factory.mktemp("cdi-cuda-host") / "root", work)
    return root


@pytest.fixture(scope="module")
def note_image(tmp_path_factory):
    built: dict = {}

    def get(compat: str, branches: tuple[int, ...]) -> str:
        if (compat, branches) not in built:
            work = tmp_path_factory.mktemp("cdi-image-work")
            root = cuda_images.cuda_image_tree(
                tmp_path_factory.mktemp("cdi-image") / "root",
                work,
                compat,
                cuda_images.fwd_note(list(branches)),
            )
            name = f"ocihook-test-cdi-cuda-{compat}-{'-'.join(map(str, branches))}"
            built[compat, branches] = images.import_image(root, name)
        return built[compat, branches]

    return get


@pytest.mark.parametrize(
    "branches, loaded",
    [(R575_BRANCHES, "compat 575.57.08"), ((550, 570, 575), f"host {cuda_images.HOST_DRIVER}")],
    ids=["the note lists 535", "it does not"],
)
def test_a_compat_library_the_note_allows_is_loaded_first(
    tmp_path, cuda_host, note_image, spec_dir, branches, loaded
):
    """The spec's update-ldcache hook carries the compat probe (the compat dir, the host
    driver 535.104.05) and takes the decision per image, by NVIDIA's rule: the image's
    compat libcuda is the one `dlopen("libcuda.so.1")` maps where its note lists 535."""
    config = _config(tmp_path, cuda_host)
    kind = _kind()
    spec = _generate(config, spec_dir, "--kind", kind)
    (update,) = [h for h in spec["containerEdits"]["hooks"] if "update-ldcache" in h["args"]]
    assert update["args"][update["args"].index("--cuda-compat") + 1] == cuda_images.COMPAT_DIR
    result = podman.run(
        note_image("575.57.08", branches),
        ["/usr/bin/loaded-driver"],
        extra=["--device", f"{kind}=0"],
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert f"STANDIN {loaded}" in result.stdout.splitlines(), result.stdout


# -- NVIDIA_REQUIRE_*: the check-requirements hook ---------------------------------------------


@pytest.fixture(scope="module")
def r550_hosts(tmp_path_factory):
    """The stand-in R550 host, its GPUs H200s (NVML: brand nvidia, 9.0) or GeForce ones."""
    nvidia_mig.check_majors_unused()
    layouts = {
        "h200": (nvidia_mig.GPU0, nvidia_mig.GPU1),
        "geforce": tuple(
            dataclasses.replace(g, brand=GEFORCE, arch=(8, 9))
            for g in (nvidia_mig.GPU0, nvidia_mig.GPU1)
        ),
    }
    built = {}
    for name, layout in layouts.items():
        host = nvidia_mig.build(tmp_path_factory.mktemp(f"cdi-{name}") / "root", layout)
        host.root.chmod(0o755)
        built[name] = host
    return built


def test_the_stock_12_6_3_image_starts_on_an_r550_host(
    tmp_path, r550_hosts, spec_dir, image_debian
):
    """The facts were read when the spec was written (NVML's brand and compute capability
    of each GPU, the driver's version and CUDA); the hook reads the image's env at start:
    cuda>=12.6 fails on CUDA 12.4, brand=nvidia,driver>=550,driver<551 holds."""
    config = _config(tmp_path, r550_hosts["h200"].root, ldconfig={"enabled": False})
    kind = _kind()
    spec = _generate(config, spec_dir, "--kind", kind)
    (check,) = [h for h in spec["containerEdits"]["hooks"] if "check-requirements" in h["args"]]
    assert "0=195:0,nvidia,9.0" in check["args"]
    result = podman.run(
        image_debian, ["echo", "RAN"], extra=["--device", f"{kind}=0", *_env(CUDA_12_6_3_ENV)]
    )
    assert result.returncode == 0, result.stderr
    assert "RAN" in result.stdout


@pytest.mark.parametrize(
    "host, env, line",
    [
        (
            "h200",
            {"NVIDIA_REQUIRE_CUDA": "cuda>=12.8", "CUDA_VERSION": "12.8.1"},
            "ocihook: NVIDIA_REQUIRE_CUDA: the image requires cuda>=12.8, not met on this host "
            "(driver 550.54.14, CUDA 12.4): a driver 570.26 or newer (CUDA 12.8) meets it: update "
            "the driver, use an image of an older CUDA, or set NVIDIA_DISABLE_REQUIRE=true",
        ),
        (
            "geforce",
            CUDA_12_6_3_ENV,
            "ocihook: NVIDIA_REQUIRE_CUDA: the image requires cuda>=12.6 (or one of its 36 other "
            "terms), not met on this host (driver 550.54.14, CUDA 12.4; GPU 1: brand geforce): a "
            "driver 560.28.03 or newer (CUDA 12.6) meets it: update the driver, use an image of an "
            "older CUDA, or set NVIDIA_DISABLE_REQUIRE=true",
        ),
    ],
    ids=["a newer driver needed", "a GeForce GPU"],
)
def test_an_unmet_requirement_is_refused_in_one_line(
    tmp_path, r550_hosts, spec_dir, image_debian, host, env, line
):
    """On the CDI path too, what NVIDIA's own CDI modes do not check
    (NVIDIA/nvidia-container-toolkit#1470): the container never runs, podman shows the
    hook's one line."""
    config = _config(tmp_path, r550_hosts[host].root, ldconfig={"enabled": False})
    kind = _kind()
    _generate(config, spec_dir, "--kind", kind)
    result = podman.run(image_debian, ["echo", "RAN"], extra=["--device", f"{kind}=1", *_env(env)])
    assert result.returncode != 0 and "RAN" not in result.stdout
    (shown,) = _hook_lines(result.stderr)
    assert shown.endswith(line), result.stderr
    disabled = podman.run(
        image_debian,
        ["echo", "RAN"],
        extra=["--device", f"{kind}=1", *_env({**env, "NVIDIA_DISABLE_REQUIRE": "true"})],
    )
    assert disabled.returncode == 0 and "RAN" in disabled.stdout, disabled.stderr


# -- IMEX channels under NVIDIA's names -------------------------------------------------------


def test_an_imex_channel_by_nvidias_cdi_name(tmp_path, spec_dir, image_busybox):
    """`cdi generate --kind nvidia.com/imex-channel` writes the host's channels as NVIDIA's
    generator names them; `--device nvidia.com/imex-channel=N` gives that channel's node
    (it opens: a real char device standing in), and the device cgroup refuses a sibling
    channel bind-mounted in."""
    nvidia_mig.check_majors_unused()
    host = nvidia_direct.standins(tmp_path / "direct")
    host.root.chmod(0o755)
    config = _config(tmp_path, host.root)
    spec = _generate(config, spec_dir, "--kind", "nvidia.com/imex-channel")
    own, sibling = sorted(p for p in host.devices if p.startswith(nvidia_direct.IMEX_DIR))
    number = own.rsplit("channel", 1)[1]
    assert spec["kind"] == "nvidia.com/imex-channel"
    assert {d["name"] for d in spec["devices"]} == {
        number,
        sibling.rsplit("channel", 1)[1],
        "all",
    }
    script = "; ".join(
        [*(f"(exec 3<>{p}) 2>&1 && echo 'OPEN {p} ok'" for p in (own, sibling)), "true"]
    )
    result = podman.run(
        image_busybox,
        ["/bin/sh", "-c", script],
        extra=[
            "--device",
            f"nvidia.com/imex-channel={number}",
            "-v",
            f"{host.root}{sibling}:{sibling}",
        ],
    )
    assert result.returncode == 0, result.stderr
    assert f"OPEN {own} ok" in result.stdout, result.stdout
    assert "Operation not permitted" in result.stdout, result.stdout
