"""NVIDIA's GPU numbering: a plain index is the GPU's position in PCI bus order of the
driver's information files (NVML's, nvidia-smi's and CUDA's), whatever minor its node has,
on stand-in hosts whose minors run 2, 1, 3, 0 in PCI order, and with a GPU gone from the
middle (tests/support/nvidia_mig.py: the driver's proc files, GPU nodes of major 195 that
no driver here registers, real char devices for the cap nodes, a stand-in NVML). What runs
in real containers: tests/test_e2e_nvidia_mig.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ocihook.config.compiled import compile_config
from ocihook.discover.devices import available_devices
from ocihook.discover.roots import Roots
from ocihook.errors import OcihookError
from tests.support import golden, nvidia_mig
from tests.test_nvidia_mig import GOLDEN, REPO, one_line_error, plan, setup, stable, stable_spec

pytestmark = pytest.mark.root

REORDERED, MIDDLE_GONE = nvidia_mig.REORDERED, nvidia_mig.MIDDLE_GONE
# index -> the node of that GPU (PCI order), on each host
REORDERED_NODES = {0: "/dev/nvidia2", 1: "/dev/nvidia1", 2: "/dev/nvidia3", 3: "/dev/nvidia0"}
MIDDLE_GONE_NODES = {0: "/dev/nvidia2", 1: "/dev/nvidia3", 2: "/dev/nvidia0"}
LAYOUTS = {"reordered": REORDERED, "middle-gone": MIDDLE_GONE}


def gpu_nodes(view: dict) -> list[str]:
    return [d["path"] for d in view["devices"] if d["path"][len("/dev/nvidia") :].isdigit()]


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_plan_matches_golden(layout, tmp_path):
    """Every index with its PCI address, UUID and node, and the MIG devices on their GPUs."""
    config, host = setup(tmp_path, layout=LAYOUTS[layout])
    result = subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "plan", "--config", str(config)]
        + ["--devices", "all"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    text = stable(result.stdout, host)
    assert text == golden.golden_text(GOLDEN / f"plan-nvidia-{layout}.txt", text)


@pytest.mark.parametrize(
    ("layout", "nodes"), [(REORDERED, REORDERED_NODES), (MIDDLE_GONE, MIDDLE_GONE_NODES)]
)
def test_each_index_is_the_gpu_in_pci_order(layout, nodes, tmp_path):
    config, _ = setup(tmp_path, layout=layout)
    in_order = sorted(layout, key=lambda g: g.address)
    for index, node in nodes.items():
        view = plan(config, str(index))
        assert gpu_nodes(view) == [node]
        (device,) = view["device_list"]
        gpu = in_order[index]
        assert (device["index"], device["address"], device["uuid"]) == (
            index,
            gpu.address,
            gpu.uuid,
        )
        assert node == f"/dev/nvidia{gpu.minor}"
        # the same GPU by address and by UUID is the same index
        for name in (gpu.address, gpu.uuid, node.rsplit("/", 1)[1]):
            assert [d["index"] for d in plan(config, name)["device_list"]] == [index]
    assert gpu_nodes(plan(config, "0-1")) == [nodes[0], nodes[1]]
    available = ",".join(map(str, nodes))
    assert one_line_error(config, str(len(nodes))) == (
        f"ocihook: --devices: device index {len(nodes)} does not exist (available: {available})"
    )


@pytest.mark.parametrize(
    ("layout", "pairs"),
    [
        (REORDERED, {"0:0": (0, "/dev/nvidia2"), "2:0": (2, "/dev/nvidia3")}),
        (MIDDLE_GONE, {"0:0": (0, "/dev/nvidia2"), "1:0": (1, "/dev/nvidia3")}),
    ],
)
def test_mig_index_pairs_and_plain_indexes_agree(layout, pairs, tmp_path):
    """G of G:M is the plain index of the MIG device's GPU: the same node either way."""
    config, host = setup(tmp_path, layout=layout)
    for name, (index, node) in pairs.items():
        view = plan(config, name)
        (mig,) = view["device_list"]
        assert (mig["name"], mig["index"]) == (name, index)
        assert gpu_nodes(view) == [node] == gpu_nodes(plan(config, str(index)))
        gpu = next(g for g in layout if f"/dev/nvidia{g.minor}" == node)
        assert mig["uuid"] == gpu.mig[0].uuid
        assert mig["nodes"][1:] == host.instance_nodes(gpu, gpu.mig[0])


def test_cdi_names_index_0_the_first_gpu_in_pci_order(tmp_path):
    """`cdi generate`: nvidia.com/gpu=0 is the GPU at 0000:1b:00.0 (/dev/nvidia2), and its
    MIG device is 0:0 (tests/golden/cdi-nvidia-reordered.json)."""
    config, host = setup(tmp_path, layout=REORDERED)
    result = subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "cdi", "generate", "--config", str(config)]
        + ["--format", "json", "--hook-path", "/usr/bin/ocihook"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    spec = stable_spec(json.loads(stable(result.stdout, host)))
    by_name = {
        d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]
    }
    for index, node in REORDERED_NODES.items():
        gpu = sorted(REORDERED, key=lambda g: g.address)[index]
        assert by_name[str(index)] == by_name[gpu.uuid] == [node]
    assert by_name["0:0"][0] == "/dev/nvidia2"
    assert by_name["2:0"][0] == "/dev/nvidia3"
    assert by_name["all"] == ["/dev/nvidia2", "/dev/nvidia1", "/dev/nvidia3", "/dev/nvidia0"]
    assert spec == golden.golden_json(GOLDEN / "cdi-nvidia-reordered.json", spec)


def count(config: Path) -> int:
    """NFD's device count (`ocihook features`): available_devices in NVIDIA's numbering."""
    compiled, _ = compile_config(str(config))
    with Roots(compiled["source_root"], compiled["device_root"]) as roots:
        return len(available_devices(roots, compiled["profile"]["devices"]))


def test_a_node_without_an_information_file_is_no_gpu(tmp_path):
    """A stale /dev/nvidia1 after its GPU went: not counted, no index."""
    config, host = setup(tmp_path, layout=MIDDLE_GONE)
    nvidia_mig.gpu_nodes(host.root, REORDERED)  # /dev/nvidia1 back, no file for it
    assert count(config) == 3
    assert [d["index"] for d in plan(config, "all")["device_list"]] == [0, 1, 2]
    assert gpu_nodes(plan(config, "2")) == ["/dev/nvidia0"]


def test_a_gpu_without_a_node_keeps_its_index(tmp_path):
    """The driver lists GPU 1 but its node is missing: the others keep NVIDIA's indices."""
    config, host = setup(tmp_path, layout=REORDERED)
    (host.root / "dev/nvidia1").unlink()
    assert count(config) == 3
    assert gpu_nodes(plan(config, "2")) == ["/dev/nvidia3"]
    assert one_line_error(config, "1") == (
        "ocihook: --devices: device index 1 does not exist (available: 0,2,3)"
    )


def test_an_excluded_gpu_has_no_index(tmp_path):
    """`GPU Excluded: Yes` (NVreg_ExcludedGpus): NVML lists it not, so neither does the
    numbering; index 0 is the next GPU in PCI order."""
    config, host = setup(tmp_path, layout=REORDERED)
    info = host.root / "proc/driver/nvidia/gpus" / REORDERED[0].address / "information"
    info.write_text(info.read_text().replace("GPU Excluded:\t No", "GPU Excluded:\t Yes"))
    assert gpu_nodes(plan(config, "0")) == ["/dev/nvidia1"]
    assert [d["index"] for d in plan(config, "all")["device_list"]] == [0, 1, 2]


def test_without_information_files_nvmls_index(tmp_path):
    """No files in /proc/driver/nvidia/gpus: the stand-in NVML's index (its order here is
    the layout's, PCI order) numbers the GPUs."""
    config, host = setup(tmp_path, layout=REORDERED)
    shutil.rmtree(host.root / "proc/driver/nvidia/gpus")
    for index, node in REORDERED_NODES.items():
        assert gpu_nodes(plan(config, str(index))) == [node]


def test_without_information_files_or_nvml_the_node_numbers(tmp_path):
    """Neither the files nor NVML (it fails): the /dev/nvidiaN numbers, as before."""
    config, host = setup(tmp_path, layout=REORDERED, nvml="fail")
    shutil.rmtree(host.root / "proc/driver/nvidia/gpus")
    for index in range(4):
        assert gpu_nodes(plan(config, str(index))) == [f"/dev/nvidia{index}"]


@pytest.mark.parametrize(
    ("request_text", "reads"),
    [("all", False), ("nvidia3", False), ("none", False), ("0", True), ("0000:8a:00.0", True)],
)
def test_the_information_files_are_read_only_for_a_request_that_needs_the_order(
    request_text, reads, tmp_path
):
    """The hook's path (devices.choose without describe): a request for all or by node name
    selects by the nodes alone; one by index or address reads the files (here one that the
    driver would never write, so reading it is an error)."""
    from ocihook.discover.devices import choose
    from ocihook.request.parse import parse_request

    config, host = setup(tmp_path, layout=REORDERED)
    info = host.root / "proc/driver/nvidia/gpus" / REORDERED[1].address / "information"
    info.write_text("Device Minor: \t none\n")
    compiled, _ = compile_config(str(config))
    spec = compiled["profile"]["devices"]
    with Roots(compiled["source_root"], compiled["device_root"]) as roots:
        request = parse_request(request_text, "test")
        if reads:
            with pytest.raises(OcihookError, match="no valid 'Device Minor:' line"):
                choose(roots, spec, request)
            return
        chosen = choose(roots, spec, request)
    selected = [chosen.available[key] for key in chosen.selection.indices]
    assert all(d.index is None and d.address is None for d in selected)
    wanted = {"all": [0, 1, 2, 3], "nvidia3": [3], "none": []}[request_text]
    assert [d.number for d in selected] == wanted
