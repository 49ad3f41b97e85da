"""scripts/gpu_check.py, the prepared check for a real NVIDIA GPU machine, run here against
a stand-in (no GPU here): the MIG host of tests/support/nvidia_mig.py, the truth that
nvidia-smi would give written from its layout, and, in the apply step, the host's `find`
listing the chroot's /dev instead of `nvidia-smi -L` (so it shows that the chroot holds
exactly the planned nodes, not what a GPU driver makes of them). Its nvml step loads the
stand-in libnvidia-ml through ocihook's sandboxed child, as it would load the real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import nvidia_mig, synthetic

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts/gpu_check.py"


def truth(layout=nvidia_mig.LAYOUT) -> dict:
    """What smi_truth would read from nvidia-smi on a host with this layout."""
    return {
        "gpus": [
            {
                "index": index,
                "uuid": gpu.uuid,
                "bus_id": gpu.address,
                "mig_enabled": gpu.mig is not None,
                "mig": [{"index": m.index, "uuid": m.uuid} for m in gpu.mig or ()],
            }
            for index, gpu in enumerate(layout)
        ]
    }


def run_check(tmp_path: Path, facts: dict) -> subprocess.CompletedProcess:
    host = nvidia_mig.build(tmp_path / "root")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(host.root, profile="nvidia")))
    (tmp_path / "truth.json").write_text(json.dumps(facts))
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--stand-in", str(tmp_path / "truth.json")]
        + ["--config", str(config), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


@pytest.mark.root
def test_gpu_check_passes_on_the_stand_in(tmp_path):
    result = run_check(tmp_path, truth())
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == f"{len([x for x in lines if x.startswith('ok ')])} passed, 0 failed"
    for step in ("nvml: GPU 0 MIG devices", "plan MIG 0:1", "plan UUID of GPU 1", "apply MIG 0:1"):
        assert any(line.startswith(f"ok     {step}") for line in lines), step
    out = tmp_path / "out"
    assert {"facts.txt", "nvml.json", "plan-all.txt", "apply-00.txt"} <= set(os.listdir(out))


@pytest.mark.root
def test_gpu_check_fails_where_ocihook_and_nvidia_smi_disagree(tmp_path):
    """The check can fail: a truth whose GPU 1 UUID and MIG order differ from the host's."""
    facts = truth()
    facts["gpus"][1]["uuid"] = "GPU-00000000-0000-0000-0000-000000000001"
    facts["gpus"][0]["mig"].reverse()
    result = run_check(tmp_path, facts)
    assert result.returncode == 1
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED")]
    assert any(line.startswith("FAILED nvml: GPU 1 UUID") for line in failed), failed
    assert any(line.startswith("FAILED nvml: GPU 0 MIG devices") for line in failed), failed
    assert any(
        line.startswith("FAILED plan: GPU 0000:86:00.0 has nvidia-smi's UUID") for line in failed
    )


def test_the_shell_wrapper_parses_and_says_what_it_lacks(tmp_path):
    subprocess.run(["sh", "-n", str(REPO / "scripts/gpu-check.sh")], check=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        ["sh", str(REPO / "scripts/gpu-check.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 2
    wanted = "gpu-check: no nvidia-smi on PATH" if os.geteuid() == 0 else "gpu-check: run as root"
    assert result.stderr.strip() == wanted
