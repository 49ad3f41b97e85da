"""bench/run.py --quick runs end to end; every row and ratio is sane (no timing asserts).

The NVIDIA rows run NVIDIA's own CDI path (the spec nvidia-ctk writes, its hooks
nvidia-cdi-hook, from ../shared/tools/nvidia-container-toolkit); the CDI stand-in row (the
spec `ocihook cdi generate` writes, ocihook's Python cdi-hook) is an extra row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root, pytest.mark.podman, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent

ROWS = (
    "floor",
    "hook_none",
    "hook_full",
    "hook_full_rootfs",
    "hook_poststop",
    "ready_plain",
    "ready_flags",
    "ready_cdi",
    "ready_hook",
    "start_plain",
    "start_flags",
    "start_cdi",
    "start_hook",
    "ready_precreate",
    "start_precreate",
    "ready_floor1",
    "start_floor1",
    "ready_floor2",
    "start_floor2",
    "ready_nvidia",
    "start_nvidia",
    "mounts_0",
    "mounts_3000",
    "host_rhel",
    "host_rhel_libs",
)
TARGETS = {
    "hook_none/floor": 1.1,
    "hook_full/floor": 2.5,
    "hook_full_rootfs/floor": 2.5,
    "ready_hook/ready_flags": 1.1,
    "start_hook/start_flags": 1.1,
    "ready_precreate/ready_flags": 1.1,
    "start_precreate/start_flags": 1.1,
    "ready_hook/ready_nvidia": 0.85,
    "start_hook/start_nvidia": 0.9,
    "ready_precreate/ready_nvidia": 0.85,
    "start_precreate/start_nvidia": 0.9,
}
INFO = ("ready_precreate/ready_hook", "start_precreate/start_hook")
INFO += ("ready_floor1/ready_nvidia", "start_floor1/start_nvidia")
INFO += ("ready_floor2/ready_nvidia", "start_floor2/start_nvidia")
INFO += ("ready_floor2/ready_flags", "start_floor2/start_flags", "ready_precreate/ready_floor2")
INFO += ("ready_hook/ready_cdi", "start_hook/start_cdi", "ready_nvidia/ready_cdi")
INFO += ("mounts_3000/mounts_0", "host_rhel_libs/host_rhel")
ADDED = "(start_hook-start_plain)/(start_nvidia-start_plain)"
READY_ADDED = "(ready_hook-ready_plain)/(ready_nvidia-ready_plain)"


@pytest.mark.nvidia_toolkit
def test_quick_bench_writes_every_row(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench/run.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "median ms" in result.stdout
    data = json.loads(out.read_text())
    assert data["mode"] == "quick"
    sizes = data["params"]["sizes"]
    rows = data["rows"]
    assert set(rows) == set(ROWS) | {f"scale_{n}" for n in sizes}
    for name, row in rows.items():
        assert row["n"] == len(row["samples_ms"]) >= 2, name
        assert 0 < row["min_ms"] <= row["median_ms"] <= row["max_ms"], name
        assert (
            row["min_ms"] == min(row["samples_ms"])
            or abs(row["min_ms"] - min(row["samples_ms"])) < 0.01
        )
    assert rows["hook_full"]["mounts"] >= 50 + 8 + 4
    assert rows["hook_full"]["devices"] == 11
    assert rows["hook_full"]["links"] >= 50
    for key in ("mounts", "links", "devices", "ld_dirs"):  # the same injection, on the disk
        assert rows["hook_full_rootfs"][key] == rows["hook_full"][key], key
    assert rows["hook_poststop"]["status"] == "exited"
    # the host-table rows: three runs per child, one child per table and round
    assert rows["mounts_0"]["n"] == rows["mounts_3000"]["n"] == 3 * data["params"]["mounts_rounds"]
    # the CDI specs carry the same files (as mounts) and the links/ld cache hooks
    assert rows["start_cdi"]["mounts"] == rows["hook_full"]["mounts"]
    assert rows["start_cdi"]["hooks"] == 2
    assert set(rows["start_cdi"]) >= {"kind", "shared_nodes"}
    nvidia = rows["start_nvidia"]  # NVIDIA's own spec (nvidia-ctk) and hooks (nvidia-cdi-hook)
    assert nvidia["mounts"] == rows["hook_full"]["mounts"]
    assert nvidia["device_nodes"] == rows["hook_full"]["devices"]
    assert nvidia["links"] == rows["hook_full"]["links"]
    assert nvidia["hooks"] == ["nvidia-cdi-hook create-symlinks", "nvidia-cdi-hook update-ldcache"]
    # the precreate route's floors: podman ran their no-op hooks, in the order of the stages
    assert rows["start_floor1"]["stages_run"] == ["precreate"]
    assert rows["start_floor2"]["stages_run"] == ["precreate", "createRuntime"]
    for n in sizes:
        assert rows[f"scale_{n}"]["library_files"] == n
    ratios = data["ratios"]
    assert data["errors"] == {}
    scale = [key for key in ratios if key.startswith("scale_")]
    assert set(ratios) == set(TARGETS) | set(INFO) | {ADDED, READY_ADDED} | set(scale)
    assert len(scale) == 1
    for variant in (
        "plain",
        "flags",
        "nvidia",
        "cdi",
        "hook",
        "precreate",
        "floor1",
        "floor2",
    ):  # the container runs before podman exits
        assert rows[f"ready_{variant}"]["median_ms"] < rows[f"start_{variant}"]["median_ms"]
    median = {name: row["median_ms"] for name, row in rows.items()}
    added = (median["start_hook"] - median["start_plain"]) / (
        median["start_nvidia"] - median["start_plain"]
    )
    assert abs(ratios[ADDED]["value"] - added) < 1e-9
    assert ratios[ADDED]["target"] == 0.8
    assert ratios[READY_ADDED]["target"] == 0.8
    for key, target in TARGETS.items():
        assert ratios[key]["target"] == target, key
    for key in INFO:
        assert ratios[key]["target"] is None and ratios[key]["met"] is None, key
    assert "targets" in result.stdout and "CDI stand-in" in result.stdout
    assert "NVIDIA CDI" in result.stdout and "load average" in result.stdout
    for key, ratio in ratios.items():
        if key in (ADDED, READY_ADDED):
            assert ratio["met"] == (ratio["value"] <= ratio["target"])
            continue
        num, den = key.split("/")
        expected = rows[num]["median_ms"] / rows[den]["median_ms"]
        assert abs(ratio["value"] - expected) < 1e-9, key
        if ratio["target"] is not None:
            assert ratio["met"] == (ratio["value"] <= ratio["target"]), key


def test_baseline_rows_run_another_checkout_interleaved(tmp_path):
    """--baseline installs another checkout (here: a copy of this one's package, as a git
    worktree of an older commit would be) and times its hook rows in the same rounds."""
    import shutil

    other = tmp_path / "baseline"
    shutil.copytree(REPO / "ocihook", other / "ocihook", ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copytree(REPO / "packaging", other / "packaging")
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench/run.py"), "--quick", "--only", "hook"]
        + ["--baseline", str(other), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(out.read_text())
    assert data["baseline"] == str(other)
    rows = data["rows"]
    assert {"hook_none@baseline", "hook_full@baseline"} <= set(rows)
    assert rows["hook_full@baseline"]["mounts"] == rows["hook_full"]["mounts"] > 0
    for key in ("hook_none/hook_none@baseline", "hook_full/hook_full@baseline"):
        ratio = data["ratios"][key]
        assert ratio["value"] > 0 and ratio["target"] is None
    bad = subprocess.run(
        [sys.executable, str(REPO / "bench/run.py"), "--quick", "--baseline", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "not an ocihook checkout" in bad.stderr
