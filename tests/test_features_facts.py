"""`ocihook features`' advanced labels: what the driver tells of the devices, on fake hosts
laid out as the real drivers lay out sysfs (tests/support/fake_hosts.py: AMD's amdgpu with
its KFD topology, Intel's i915 and xe) and on stand-in NVIDIA hosts (no GPU here: the
driver's proc files and a stand-in libnvidia-ml.so.1 that ocihook's forked NVML child loads
for real, tests/support/nvidia_mig.py). Goldens: tests/golden/features-*.json, the JSON
document less what depends on this machine (ready, its reason, selinux)."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ocihook.cli.features import advanced_labels
from ocihook.discover.nvml import mig_profile
from tests.support import fake_hosts, golden, nvidia_mig, synthetic
from tests.test_features import nfd_labels

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests/golden"
MACHINE = ("ocihook.io/ready", "ocihook.io/selinux")


def features_json(config: Path, timeout: float = 120) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "features", "--json", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    assert result.returncode in (0, 1), result.stderr  # 1: not ready (no hooks.d here)
    return json.loads(result.stdout)


def stable(document: dict) -> dict:
    """The document less what depends on this machine rather than on the host's driver."""
    labels = {k: v for k, v in document["labels"].items() if k not in MACHINE}
    return {"labels": labels, "facts": document["facts"]}


def nvidia_config(tmp_path: Path, layout=nvidia_mig.LAYOUT, **build) -> Path:
    host = nvidia_mig.build(tmp_path / "root", layout, **build)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(host.root, profile="nvidia")))
    return config


def fake_config(tmp_path: Path, tree: str) -> Path:
    profile, build = fake_hosts.TREES[tree]
    root = build(tmp_path / tree)
    config = tmp_path / f"{tree}.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(root, profile=profile)))
    return config


def check_golden(name: str, document: dict) -> None:
    value = stable(document)
    assert value == golden.golden_json(GOLDEN / f"features-{name}.json", value)


@pytest.mark.root
@pytest.mark.parametrize("tree", ["amd-server", "intel"])
def test_sysfs_facts_match_golden(tree, tmp_path):
    """AMD: product, device id, gfx family and compute units (KFD), VRAM and VBIOS; Intel:
    device ids, xe's memory and tiles (the i915 iGPU has neither, so no node-wide memory
    label: a label says what every device has)."""
    check_golden(tree, features_json(fake_config(tmp_path, tree)))


NVIDIA_HOSTS = {
    "nvidia-mig": {},  # one MIG GPU (1g.10gb and 3g.40gb devices), one GPU without MIG
    "nvidia-reordered": {"layout": nvidia_mig.REORDERED},  # minors 2,1,3,0 in PCI order
}


@pytest.mark.root
@pytest.mark.parametrize("name", sorted(NVIDIA_HOSTS))
def test_nvidia_facts_from_the_nvml_child_match_golden(name, tmp_path):
    """Stand-in NVML: the GPUs' name, memory, compute capability, MIG capability and MIG
    profiles, the driver's CUDA version; the information files' VBIOS."""
    check_golden(name, features_json(nvidia_config(tmp_path, **NVIDIA_HOSTS[name])))


@pytest.mark.root
def test_labels_follow_nfds_rules_and_reach_the_features_file(tmp_path):
    """The features.d file NFD reads has the advanced labels, each within Kubernetes' label
    rules (test_features.nfd_labels: NFD's documented parser)."""
    config = nvidia_config(tmp_path)
    out = tmp_path / "features.d" / "ocihook"
    result = subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "features", "--config", str(config)]
        + ["--output", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode in (0, 1), result.stderr
    labels = nfd_labels(out.parent, datetime.datetime.now(datetime.timezone.utc))
    assert labels["ocihook.io/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["ocihook.io/mig-1g.10gb.count"] == "1"
    assert labels["ocihook.io/mig-3g.40gb.count"] == "1"
    assert labels["ocihook.io/cuda.driver.major"] == "12"


@pytest.mark.root
def test_a_hung_nvml_leaves_the_nvidia_facts_out_within_its_time_limit(tmp_path):
    """NVML hangs in nvmlInit: the child is killed at the profile's nvml_timeout (1 s
    here), the facts NVML gives are absent and `problem` says why; the rest is there."""
    config = nvidia_config(tmp_path, nvml="hang")
    settings = yaml.safe_load(config.read_text())
    profile = yaml.safe_load((synthetic.PROFILES / "nvidia.yaml").read_text())
    profile["devices"]["nvidia"]["nvml_timeout"] = 1
    settings["profile"] = profile
    config.write_text(yaml.safe_dump(settings))
    started = time.monotonic()
    document = features_json(config, timeout=60)
    assert time.monotonic() - started < 30
    facts = document["facts"]
    assert "no answer within 1 s" in facts["problem"]
    assert [d["memory"] for d in facts["devices"]] == [None, None]
    assert document["labels"]["ocihook.io/gpu.firmware"] == "96.00.74.00.0d"  # the file's
    assert "ocihook.io/gpu.memory" not in document["labels"]


# NVIDIA's names of MIG profiles (nvidia-smi mig -lgip) with each one's memory in MiB, on an
# A100 40GB (40536 MiB) and an H100 80GB (81559 MiB).
A100_40GB = {
    "1g.5gb": (1, 1, 4864),
    "2g.10gb": (2, 2, 9984),
    "3g.20gb": (3, 3, 19968),
    "4g.20gb": (4, 4, 19968),
    "7g.40gb": (7, 7, 40192),
    "1c.3g.20gb": (3, 1, 19968),
}
H100_80GB = {
    "1g.10gb": (1, 1, 9856),
    "1g.20gb": (1, 1, 19968),
    "2g.20gb": (2, 2, 19968),
    "3g.40gb": (3, 3, 40192),
    "7g.80gb": (7, 7, 80384),
}


@pytest.mark.parametrize(
    "total, profiles", [(40536 << 20, A100_40GB), (81559 << 20, H100_80GB)], ids=["a100", "h100"]
)
def test_mig_profile_names_are_nvidias(total, profiles):
    for name, (gi, ci, memory) in profiles.items():
        assert mig_profile(gi, ci, memory, total) == name


def _device(**facts) -> dict:
    base = {
        "index": 0,
        "address": None,
        "vendor": None,
        "device_id": None,
        "product": None,
        "family": None,
        "memory": None,
        "compute_capability": None,
        "compute_units": None,
        "tiles": None,
        "firmware": None,
        "mig_capable": None,
        "mig_profiles": {},
    }
    return {**base, **facts}


def test_a_label_says_what_every_device_has():
    """Text facts only when all devices agree, numbers the least of them, the lowest
    compute capability; a product name becomes a valid label value."""
    facts = {
        "devices": [
            _device(product="NVIDIA A100-SXM4-40GB", memory=40 << 30, compute_capability="8.0"),
            _device(product="NVIDIA H100 80GB HBM3", memory=80 << 30, compute_capability="9.0"),
        ],
        "cuda_driver": "12.4",
        "problem": None,
    }
    assert advanced_labels(facts) == {
        "gpu.memory": "40960",
        "gpu.compute.major": "8",
        "gpu.compute.minor": "0",
        "cuda.driver.major": "12",
        "cuda.driver.minor": "4",
    }
    same = {"devices": [_device(product="AMD Instinct MI300X (OAM)")] * 2, "cuda_driver": None}
    assert advanced_labels(same) == {"gpu.product": "AMD-Instinct-MI300X-_OAM"}
