"""CUDA forward compatibility and the NVIDIA_REQUIRE_* check in real podman + runc
containers (stand-ins: tests/support/cuda_images.py; no GPU, no NVIDIA driver here).

The host's stand-in libcuda is of driver 535.104.05 (CUDA 12.2). An image with the
cuda-compat package of a newer branch (550.54.15) must load its compat libcuda (the hook's
ld cache lists /usr/local/cuda/compat first); one of an older branch (530.30.02), the host's.
A requirement the host does not meet refuses the container in one line podman shows;
NVIDIA_DISABLE_REQUIRE=true starts it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import base_config
from tests.support import cuda_images, hostile, images
from tests.support.golden import golden_text
from tests.support.plans import run_plan

GOLDEN = Path(__file__).parent / "golden"

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def cuda_host(tmp_path_factory):
    work = tmp_path_factory.mktemp("cuda-work")
    return cuda_images.host_tree(tmp_path_factory.mktemp("cuda-host") / "root", work)


@pytest.fixture(scope="module")
def cuda_image(tmp_path_factory):
    """image name per compat version (None: no compat package) and the branches its note
    lists (None: no note), built once."""
    built: dict = {}

    def get(compat: str | None, branches: tuple[int, ...] | None = None) -> str:
        key = (compat, branches)
        if key not in built:
            work = tmp_path_factory.mktemp("cuda-image-work")
            note = cuda_images.fwd_note(list(branches)) if branches is not None else None
            root = cuda_images.cuda_image_tree(
                tmp_path_factory.mktemp("cuda-image") / "root", work, compat, note
            )
            name = f"ocihook-test-cuda-{compat or 'none'}"
            if branches is not None:
                name += "-note-" + "-".join(map(str, branches))
            built[key] = images.import_image(root, name)
        return built[key]

    return get


@pytest.fixture
def nvidia_setup(hook_setup, synth_root, cuda_host):
    def configure(**cuda):
        settings = base_config(hook_setup.dir, synth_root, profile="nvidia")
        settings["source_root"] = settings["device_root"] = str(cuda_host)
        settings["cuda"] = cuda
        hook_setup.write_config(**settings)

    return configure


def _loaded(output: str) -> tuple[str, str]:
    lines = dict(line.split(" ", 1) for line in output.splitlines() if " " in line)
    assert "LOADED" in lines, output
    return lines["LOADED"].strip(), lines["STANDIN"].strip()


def test_newer_compat_libraries_are_the_ones_loaded(hook_setup, nvidia_setup, cuda_image):
    nvidia_setup()
    image = cuda_image(cuda_images.NEWER)
    result = hook_setup.run(image, ["/usr/bin/loaded-driver"], devices="0")
    assert result.returncode == 0, result.stderr + result.stdout
    path, which = _loaded(result.stdout)
    assert path == f"{cuda_images.COMPAT_DIR}/libcuda.so.{cuda_images.NEWER}"
    assert which == f"compat {cuda_images.NEWER}"


def test_older_compat_libraries_leave_the_hosts_loaded(hook_setup, nvidia_setup, cuda_image):
    nvidia_setup()
    result = hook_setup.run(cuda_image(cuda_images.OLDER), ["/usr/bin/loaded-driver"], devices="0")
    assert result.returncode == 0, result.stderr + result.stdout
    path, which = _loaded(result.stdout)
    assert path == f"{cuda_images.MULTIARCH}/libcuda.so.{cuda_images.HOST_DRIVER}"
    assert which == f"host {cuda_images.HOST_DRIVER}"


@pytest.mark.parametrize(
    "compat, branches, loaded",
    [
        # the note lists the host's 535: a newer library of the same branch is taken (the
        # branch comparison alone would not take it)
        ("535.216.01", (535, 550, 570), "compat"),
        ("575.57.08", (535, 550, 560, 565, 570, 575), "compat"),
        # the note does not list 535: not taken, newer branch or not
        ("575.57.08", (550, 560, 565, 570, 575), "host"),
    ],
)
def test_the_compat_librarys_note_decides(
    hook_setup, nvidia_setup, cuda_image, compat, branches, loaded
):
    """NVIDIA's current rule on the 535.104.05 host: the compat libcuda is loaded first where
    its fwd_compatibility note lists the host's branch and it is newer, else the host's."""
    nvidia_setup()
    result = hook_setup.run(cuda_image(compat, branches), ["/usr/bin/loaded-driver"], devices="0")
    assert result.returncode == 0, result.stderr + result.stdout
    path, which = _loaded(result.stdout)
    if loaded == "compat":
        assert (path, which) == (
            f"{cuda_images.COMPAT_DIR}/libcuda.so.{compat}",
            f"compat {compat}",
        )
    else:
        assert which == f"host {cuda_images.HOST_DRIVER}", result.stdout


@pytest.mark.parametrize("writer", ["native", "ldconfig"])
def test_compat_through_etc_alternatives(
    hook_setup, synth_root, cuda_host, tmp_path_factory, writer
):
    """NVIDIA's images reach /usr/local/cuda through /etc/alternatives (absolute links): the
    probe resolves them inside the image, and the compat libcuda its note allows is the one
    loaded, with either ld cache writer."""
    work = tmp_path_factory.mktemp("alternatives-work")
    root = cuda_images.cuda_image_tree(
        tmp_path_factory.mktemp("alternatives") / "root",
        work,
        "575.57.08",
        cuda_images.fwd_note([535, 550, 560, 565, 570, 575]),
        alternatives=True,
    )
    assert os.path.islink(root / "usr/local/cuda")
    image = images.import_image(root, "ocihook-test-cuda-alternatives")
    settings = base_config(hook_setup.dir, synth_root, profile="nvidia")
    settings["source_root"] = settings["device_root"] = str(cuda_host)
    settings["ldconfig"] = {"writer": writer}
    hook_setup.write_config(**settings)
    result = hook_setup.run(image, ["/usr/bin/loaded-driver"], devices="0")
    assert result.returncode == 0, result.stderr + result.stdout
    assert _loaded(result.stdout)[1] == "compat 575.57.08"


def test_disabled_compat_leaves_the_hosts_loaded(hook_setup, nvidia_setup, cuda_image):
    nvidia_setup(compat="disabled")
    result = hook_setup.run(cuda_image(cuda_images.NEWER), ["/usr/bin/loaded-driver"], devices="0")
    assert result.returncode == 0, result.stderr + result.stdout
    assert _loaded(result.stdout)[1] == f"host {cuda_images.HOST_DRIVER}"


def test_the_sandboxed_ldconfig_puts_the_compat_dir_first(
    hook_setup, synth_root, cuda_host, cuda_image
):
    """ldconfig.writer: ldconfig (the host's ldconfig, sandboxed): the compat dir is its
    first command-line dir, and ldconfig keeps the first of equal entries."""
    settings = base_config(hook_setup.dir, synth_root, profile="nvidia")
    settings["source_root"] = settings["device_root"] = str(cuda_host)
    settings["ldconfig"] = {"writer": "ldconfig"}
    hook_setup.write_config(**settings)
    result = hook_setup.run(cuda_image(cuda_images.NEWER), ["/usr/bin/loaded-driver"], devices="0")
    assert result.returncode == 0, result.stderr + result.stdout
    assert _loaded(result.stdout)[1] == f"compat {cuda_images.NEWER}"


REQUIRE = "NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=470,driver<471"


def test_an_unmet_requirement_refuses_the_container(hook_setup, nvidia_setup, cuda_image):
    nvidia_setup()
    result = hook_setup.run(
        cuda_image(None), ["/usr/bin/loaded-driver"], devices="0", extra=["-e", REQUIRE]
    )
    assert result.returncode != 0, result.stdout
    lines = [line for line in result.stderr.splitlines() if "ocihook:" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].endswith(
        "ocihook: NVIDIA_REQUIRE_CUDA: the image requires cuda>=12.4 (or its other term), not "
        f"met on this host (driver {cuda_images.HOST_DRIVER}, CUDA 12.2; GPU 0: brand unknown): "
        "a driver 550.54.14 or newer (CUDA 12.4) meets it: update the driver, use an image of "
        "an older CUDA, or set NVIDIA_DISABLE_REQUIRE=true"
    ), result.stderr
    assert "STANDIN" not in result.stdout


def test_disable_require_starts_it(hook_setup, nvidia_setup, cuda_image):
    nvidia_setup()
    result = hook_setup.run(
        cuda_image(None),
        ["/usr/bin/loaded-driver"],
        devices="0",
        extra=["-e", REQUIRE, "-e", "NVIDIA_DISABLE_REQUIRE=true"],
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert _loaded(result.stdout)[1] == f"host {cuda_images.HOST_DRIVER}"


def test_the_config_switch_turns_the_check_off(hook_setup, nvidia_setup, cuda_image):
    nvidia_setup(require=False)
    result = hook_setup.run(
        cuda_image(None), ["/usr/bin/loaded-driver"], devices="0", extra=["-e", REQUIRE]
    )
    assert result.returncode == 0, result.stderr + result.stdout


def test_a_met_requirement_starts_it(hook_setup, nvidia_setup, cuda_image):
    nvidia_setup()
    result = hook_setup.run(
        cuda_image(None),
        ["/usr/bin/loaded-driver"],
        devices="0",
        extra=["-e", "NVIDIA_REQUIRE_CUDA=cuda>=12.2"],
    )
    assert result.returncode == 0, result.stderr + result.stdout


# As NVIDIA's CUDA images state it: their CUDA, or a datacenter brand on a driver branch
# their compat package serves (here the host's, 535).
REQUIRE_WITH_BRANCH = "NVIDIA_REQUIRE_CUDA=cuda>=12.4 brand=tesla,driver>=535,driver<536"


def test_a_requirement_naming_the_hosts_branch_starts_it_with_the_compat_libraries(
    hook_setup, nvidia_setup, cuda_image
):
    """The image's CUDA 12.4 compat libraries on the 12.2 host: as in NVIDIA's check, the
    host's CUDA is the driver's (cuda>=12.4 fails), and the term naming the host's branch
    holds (brand: no NVML on this stand-in host, unknown, which satisfies it); its programs
    get the compat libcuda."""
    nvidia_setup()
    result = hook_setup.run(
        cuda_image(cuda_images.NEWER),
        ["/usr/bin/loaded-driver"],
        devices="0",
        extra=["-e", REQUIRE_WITH_BRANCH],
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert _loaded(result.stdout)[1] == f"compat {cuda_images.NEWER}"


# -- what the image gets nothing from: the CVE classes ---------------------------------------


def test_no_image_library_is_mounted(hook_setup, nvidia_setup, cuda_image, cuda_host):
    """CVE-2025-23359 class (an image path turned into a mount): with the compat libraries
    in use nothing is mounted at or from the compat dir; every mount's source is the host
    driver's (the record lists them), and the compat library is the image's own file."""
    nvidia_setup()
    result = hook_setup.run(
        cuda_image(cuda_images.NEWER),
        ["/bin/sh", "-c", "/usr/bin/loaded-driver; grep -c /usr/local/cuda /proc/self/mountinfo"],
        devices="0",
    )
    assert _loaded(result.stdout)[1] == f"compat {cuda_images.NEWER}", result.stderr
    assert result.stdout.strip().splitlines()[-1] == "0", result.stdout
    (record,) = hook_setup.records()
    body = json.loads(record.read_text())
    sources = [m["source"] for m in body["mounts"]]
    assert sources and all(s.startswith(str(cuda_host) + "/") for s in sources), sources
    assert body["ld_dirs"] == [cuda_images.COMPAT_DIR, cuda_images.MULTIARCH]


def test_the_image_env_reaches_no_host_process(
    hook_setup, synth_root, cuda_host, cuda_image, tmp_path
):
    """CVE-2025-23266 (a hook that ran with the container's LD_PRELOAD): the image's env is
    read for NVIDIA_REQUIRE_* only. LD_PRELOAD, LD_LIBRARY_PATH and PYTHONPATH point at host
    traps that leave a marker on the host when loaded; the hook and its sandboxed ldconfig
    (a host-side child) run, the container starts, no marker."""
    marker = tmp_path / "loaded-on-the-host"
    preload = hostile.preload_trap(tmp_path / "preload", marker)
    python = hostile.python_trap(tmp_path / "python", marker)
    settings = base_config(hook_setup.dir, synth_root, profile="nvidia")
    settings["source_root"] = settings["device_root"] = str(cuda_host)
    settings["ldconfig"] = {"writer": "ldconfig"}
    hook_setup.write_config(**settings)
    env = [
        f"LD_PRELOAD={preload}",
        f"LD_LIBRARY_PATH={preload.parent}",
        f"PYTHONPATH={python}",
        REQUIRE_WITH_BRANCH,
    ]
    result = hook_setup.run(
        cuda_image(cuda_images.NEWER),
        ["/usr/bin/loaded-driver"],
        devices="0",
        extra=[arg for item in env for arg in ("-e", item)],
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert _loaded(result.stdout)[1] == f"compat {cuda_images.NEWER}"
    assert not marker.exists(), "a host-side process loaded what the image's env named"


def test_compat_dir_symlinked_to_the_host(hook_setup, nvidia_setup, tmp_path_factory):
    """An image whose /usr/local/cuda/compat is an absolute symlink to a host dir holding a
    newer "compat" libcuda (a stand-in): resolved inside the image it names nothing, the
    host's libcuda is loaded, and the host dir is unchanged."""
    work = tmp_path_factory.mktemp("hostile-work")
    host_dir = hostile.make_canary(tmp_path_factory.mktemp("host-compat") / "compat")
    cuda_images.standin_libcuda(host_dir / "libcuda.so.999.1", "host-side trap", work)
    os.symlink("libcuda.so.999.1", host_dir / "libcuda.so.1")
    before = hostile.snapshot(host_dir)
    root = cuda_images.cuda_image_tree(tmp_path_factory.mktemp("hostile") / "root", work, None)
    (root / "usr/local/cuda").mkdir(parents=True)
    os.symlink(str(host_dir), root / "usr/local/cuda/compat")
    image = images.import_image(root, "ocihook-test-cuda-hostile")
    nvidia_setup()
    result = hook_setup.run(image, ["/usr/bin/loaded-driver"], devices="0")
    assert result.returncode == 0, result.stderr + result.stdout
    assert _loaded(result.stdout)[1] == f"host {cuda_images.HOST_DRIVER}"
    assert hostile.snapshot(host_dir) == before


# -- plan shows the choice --------------------------------------------------------------------


@pytest.mark.parametrize(
    "compat, branches, use, rule",
    [
        (cuda_images.NEWER, None, True, "branch"),
        (cuda_images.OLDER, None, False, "branch"),
        (None, None, False, None),
        ("575.57.08", (550, 560, 565, 570, 575), False, "note"),
    ],
)
def test_plan_with_an_image_shows_the_decision(
    hook_setup, nvidia_setup, cuda_host, compat, branches, use, rule, tmp_path_factory
):
    """`ocihook plan --rootfs IMAGE` says what was decided and by which rule: the library's
    note, or (without one) the driver branches."""
    work = tmp_path_factory.mktemp("plan-work")
    note = cuda_images.fwd_note(list(branches)) if branches else None
    root = cuda_images.cuda_image_tree(tmp_path_factory.mktemp("plan") / "root", work, compat, note)
    nvidia_setup()
    text = run_plan(hook_setup.config, "--devices", "0", "--rootfs", str(root))
    assert text.returncode == 0, text.stderr
    shown = text.stdout.replace(str(cuda_host), "<host>")
    name = f"plan-cuda-compat-{compat or 'none'}{'-note' if branches else ''}.txt"
    assert shown == golden_text(GOLDEN / name, shown)
    data = json.loads(
        run_plan(hook_setup.config, "--devices", "0", "--rootfs", str(root), "--json").stdout
    )
    assert (data["cuda_compat"]["use"], data["cuda_compat"]["rule"]) == (use, rule)
    if branches:
        assert data["cuda_compat"]["note"] == {"cuda": "12.9", "drivers": list(branches)}


def test_an_image_without_an_ld_cache_gets_one_with_the_compat_dir_first(
    hook_setup, nvidia_setup, tmp_path_factory
):
    """No /etc/ld.so.cache in the image: the native writer cannot merge, the sandboxed
    ldconfig writes one, the compat dir first (NVIDIA's hook would do nothing here)."""
    work = tmp_path_factory.mktemp("nocache-work")
    root = cuda_images.cuda_image_tree(
        tmp_path_factory.mktemp("nocache") / "root", work, cuda_images.NEWER
    )
    (root / "etc/ld.so.cache").unlink()
    image = images.import_image(root, "ocihook-test-cuda-nocache")
    nvidia_setup()
    result = hook_setup.run(image, ["/usr/bin/loaded-driver"], devices="0")
    assert result.returncode == 0, result.stderr + result.stdout
    assert _loaded(result.stdout)[1] == f"compat {cuda_images.NEWER}"


def test_plan_of_an_image_without_a_glibc_loader(hook_setup, nvidia_setup, tmp_path_factory):
    """No loader, no ld cache, no compat probe: the compat dir is not even looked at."""
    root = images.busybox_rootfs(tmp_path_factory.mktemp("busybox") / "root")
    compat = root / cuda_images.COMPAT_DIR.lstrip("/")
    work = tmp_path_factory.mktemp("busybox-work")
    cuda_images.standin_libcuda(compat / f"libcuda.so.{cuda_images.NEWER}", "compat", work)
    os.symlink(f"libcuda.so.{cuda_images.NEWER}", compat / "libcuda.so.1")
    nvidia_setup()
    result = run_plan(hook_setup.config, "--devices", "0", "--rootfs", str(root), "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)["cuda_compat"]
    assert found["use"] is False and found["library"] is None
    assert found["reason"] == "the image has no glibc loader (no ld cache)"
