"""`ocihook plan` on fake hosts laid out like real AMD, Intel, Gaudi and RDMA machines.

Each tree has sysfs class entries linked into a `sys/devices/pci...` tree with `driver`
links, and real char device nodes (mknod) whose majors and minors the plan must read back.
The golden files are the whole text plan (`OCIHOOK_UPDATE_GOLDEN=1` rewrites them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import fake_hosts, synthetic
from tests.support.golden import golden_text
from tests.support.plans import run_plan

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests/golden"


def write_config(tmp_path: Path, tree: str, **extra) -> tuple[Path, Path]:
    profile, build = fake_hosts.TREES[tree]
    root = build(tmp_path / tree)
    config = tmp_path / f"{tree}.yaml"
    settings = synthetic.config(root, **{"profile": profile, **extra})
    config.write_text(yaml.safe_dump(settings))
    return config, root


def plan_json(config: Path, devices: str) -> dict:
    result = run_plan(config, "--json", "--devices", devices)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def indices(config: Path, devices: str = "all") -> dict[int, tuple[str, list[str]]]:
    return {
        d["index"]: (d["address"], d["nodes"]) for d in plan_json(config, devices)["device_list"]
    }


@pytest.mark.root
@pytest.mark.parametrize("tree", sorted(fake_hosts.TREES))
def test_plan_matches_golden(tree, tmp_path):
    config, root = write_config(tmp_path, tree)
    result = run_plan(config, "--devices", "all")
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(root), "<root>")
    golden = GOLDEN / f"plan-devices-{tree}.txt"
    assert text == golden_text(golden, text)


@pytest.mark.root
def test_amd_server_bmc_card0_is_no_accelerator(tmp_path):
    """card0 (ASPEED BMC, driver ast) and the connectors (card1-DP-1) are not devices;
    the index follows PCI order (41 before c1) although c1 was probed first (card1)."""
    config, _ = write_config(tmp_path, "amd-server")
    assert indices(config) == {
        0: ("0000:41:00.0", ["/dev/dri/card2", "/dev/dri/renderD129"]),
        1: ("0000:c1:00.0", ["/dev/dri/card1", "/dev/dri/renderD128"]),
    }
    nodes = {
        d["path"]: (d["major"], d["minor"], d["index"]) for d in plan_json(config, "1")["devices"]
    }
    assert nodes == {
        "/dev/dri/card1": (226, 1, 1),
        "/dev/dri/renderD128": (226, 128, 1),
        "/dev/kfd": (fake_hosts.KFD_MAJOR, 0, None),
    }


@pytest.mark.root
def test_majors_are_read_from_the_nodes(tmp_path):
    """kfd's major is dynamic: the plan follows the node, not a table."""
    config, root = write_config(tmp_path, "amd-server")
    os.unlink(root / "dev/kfd")
    os.mknod(root / "dev/kfd", 0o666 | 0o020000, os.makedev(237, 0))
    rules = plan_json(config, "0")["cgroup_rules"]
    lines = [f"{r['type']} {r['major']}:{r['minor']} {r['access']}" for r in rules]
    assert lines == ["c 226:2 rw", "c 226:129 rw", "c 237:0 rw"]


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ("0000:c1:00.0", [1]),
        ("C1:00.0", [1]),
        ("renderD129", [0]),
        ("card1", [1]),
        ("/dev/dri/renderD128", [1]),
        ("renderD129,0000:c1:00.0", [0, 1]),
        ("1, renderD129", [0, 1]),
        ("0,card2", [0]),
    ],
)
@pytest.mark.root
def test_select_by_pci_address_node_name_and_mixed(tmp_path, request_, expected):
    config, _ = write_config(tmp_path, "amd-server")
    assert sorted(indices(config, request_)) == expected


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            "card0",
            "ocihook: --devices: device 'card0' does not exist (available: "
            "0 (0000:41:00.0 card2 renderD129), 1 (0000:c1:00.0 card1 renderD128))",
        ),
        ("0000:02:00.0", "ocihook: --devices: device '0000:02:00.0' does not exist"),
        ("0000:c1:00.9", "ocihook: --devices: invalid device request '0000:c1:00.9'"),
        ("../kfd", "ocihook: --devices: invalid device request '../kfd'"),
        ("/dev/../etc/passwd", "ocihook: --devices: invalid device request"),
        ("2", "ocihook: --devices: device index 2 does not exist (available: 0,1)"),
    ],
)
@pytest.mark.root
def test_selection_errors_name_what_exists(tmp_path, request_, message):
    config, _ = write_config(tmp_path, "amd-server")
    result = run_plan(config, "--devices", request_)
    assert result.returncode == 1
    assert result.stderr.startswith(message), result.stderr


@pytest.mark.root
def test_gaudi_both_naming_schemes_same_indices(tmp_path):
    """Eight cards numbered out of PCI order: index N is the card of accelN (hlN), as
    Habana's runtime reads HABANA_VISIBLE_DEVICES=N, whichever node names the driver uses."""
    accel, _ = write_config(tmp_path, "gaudi-accel")
    legacy, _ = write_config(tmp_path, "gaudi-legacy")
    new, old = indices(accel), indices(legacy)
    assert len(new) == len(old) == 8
    for number, address in enumerate(fake_hosts.GAUDI_PCI):
        assert new[number] == (
            address,
            [f"/dev/accel/accel{number}", f"/dev/accel/accel_controlD{number}"],
        )
        assert old[number] == (address, [f"/dev/hl{number}", f"/dev/hl_controlD{number}"])
    assert sorted(indices(accel, "accel_controlD5")) == sorted(indices(legacy, "hl5"))


@pytest.mark.root
def test_rdma_groups_ports_and_mad_nodes(tmp_path):
    config, _ = write_config(tmp_path, "rdma")
    assert indices(config) == {
        0: ("0000:3b:00.0", ["/dev/infiniband/uverbs0", "/dev/infiniband/umad0"]),
        1: ("0000:3b:00.1", ["/dev/infiniband/uverbs1", "/dev/infiniband/umad1"]),
        2: ("0000:5e:00.0", ["/dev/infiniband/uverbs2"]),
    }
    paths = [d["path"] for d in plan_json(config, "uverbs2")["devices"]]
    assert paths == ["/dev/infiniband/uverbs2", "/dev/infiniband/rdma_cm"]


@pytest.mark.root
def test_intel_counts_i915_and_xe_not_amdgpu(tmp_path):
    config, _ = write_config(tmp_path, "intel")
    assert {i: a for i, (a, _) in indices(config).items()} == {
        0: "0000:00:02.0",
        1: "0000:03:00.0",
    }


@pytest.mark.root
def test_unbound_device_is_not_counted(tmp_path):
    """A GPU whose driver was unbound (no `driver` link) is no device of the profile."""
    config, root = write_config(tmp_path, "amd-server")
    link = next((root / "sys/devices").glob("*/*/0000:41:00.0/driver"))
    link.unlink()
    assert list(indices(config)) == [0]
    assert indices(config)[0][0] == "0000:c1:00.0"


@pytest.mark.root
def test_sysfs_links_resolve_inside_the_device_root(tmp_path):
    """An absolute class link is resolved in the device root, never on the host's /sys."""
    config, root = write_config(tmp_path, "amd-server")
    entry = root / "sys/class/drm/card1"
    target = os.readlink(entry)
    entry.unlink()
    entry.symlink_to("/sys/" + target.split("../", 2)[-1].lstrip("/"))
    assert "/dev/dri/card1" in indices(config)[1][1]


@pytest.mark.root
def test_no_devices_of_the_kind_is_an_empty_list(tmp_path):
    config, _ = write_config(tmp_path, "rdma", profile="amd")
    result = run_plan(config, "--devices", "0")
    assert result.returncode == 1
    assert "device index 0 does not exist (available: none)" in result.stderr


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ({"sysfs": {"classes": ["drm"]}, "nodes": ["/dev/dri/card{index}"]}, "does not match"),
        ({"sysfs": {"classes": ["drm"]}}, "'nodes' is a required property"),
        ({"nodes": ["/dev/dri/card{n}"]}, "does not match"),
        ({"sysfs": {"classes": [".."]}, "nodes": ["/dev/x{n}"]}, "does not match"),
        ({"sysfs": {"classes": []}, "nodes": ["/dev/x{n}"]}, "sysfs.classes: []"),
    ],
)
def test_profile_schema_rejects_inconsistent_devices(tmp_path, devices, message):
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump({"profile": {"name": "x", "devices": devices}, "source_root": "/"})
    )
    result = run_plan(config)
    assert result.returncode == 1
    assert message in result.stderr, result.stderr
    assert result.stderr.startswith("ocihook: config")


@pytest.mark.root
def test_devices_only_profile_needs_no_driver_files(tmp_path):
    """A profile with no libraries plans devices alone (ROCm, oneAPI, ... in the image)."""
    config, _ = write_config(tmp_path, "intel")
    document = plan_json(config, "all")
    assert document["mounts"] == [] and document["ldconfig"] is False
    assert len(document["devices"]) == 4


def _real_numbered_class_entry() -> tuple[str, str, str, str, str] | None:
    """(class, name prefix, number, device dir name, driver) of a class entry of this
    machine's own /sys with a /dev node, a parent device and a bound driver."""
    for cls in sorted(os.listdir("/sys/class")):
        for name in sorted(os.listdir(f"/sys/class/{cls}")):
            entry = f"/sys/class/{cls}/{name}"
            prefix = name.rstrip("0123456789")
            if not (prefix and prefix != name and prefix.isalpha()):
                continue
            if not all(os.path.exists(f"{entry}/{p}") for p in ("dev", "device/driver")):
                continue
            if not os.path.exists(f"/dev/{name}"):
                continue
            device = os.path.basename(os.path.realpath(f"{entry}/device"))
            driver = os.path.basename(os.path.realpath(f"{entry}/device/driver"))
            return cls, prefix, name[len(prefix) :], device, driver
    return None


def test_enumeration_reads_the_real_kernel_sysfs(tmp_path):
    """Not a stand-in: the same code on this machine's own /sys and /dev (device_root /),
    for whatever class device with a bound driver the machine has (a serial port here),
    agrees with the kernel's own links and `dev` file."""
    found = _real_numbered_class_entry()
    assert found, "no numbered class device with a driver in /sys/class on this machine"
    cls, prefix, number, device, driver = found
    config = tmp_path / "config.yaml"
    profile = {
        "name": "real",
        "devices": {
            "sysfs": {"classes": [cls], "drivers": [driver]},
            "nodes": [f"/dev/{prefix}{{n}}"],
        },
    }
    config.write_text(yaml.safe_dump({"profile": profile, "source_root": "/"}))
    document = plan_json(config, f"{prefix}{number}")
    assert [(d["address"], d["driver"]) for d in document["device_list"]] == [(device, driver)]
    node = next(d for d in document["devices"] if d["path"] == f"/dev/{prefix}{number}")
    with open(f"/sys/class/{cls}/{prefix}{number}/dev") as dev:
        assert f"{node['major']}:{node['minor']}" == dev.read().strip()


def _check(config: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "check", "--config", str(config)]
        + ["--hooks-dir", str(config.parent / "no-hooks")],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    return result.stdout


@pytest.mark.root
def test_check_lists_each_device(tmp_path):
    config, _ = write_config(tmp_path, "amd-server")
    out = _check(config)
    assert "ok      device 0: 0000:41:00.0 amdgpu /dev/dri/card2 /dev/dri/renderD129\n" in out
    assert "ok      device 1: 0000:c1:00.0 amdgpu /dev/dri/card1 /dev/dri/renderD128\n" in out


@pytest.mark.root
def test_check_fails_when_the_profile_finds_no_device(tmp_path):
    """The amd server under the intel profile: its DRM devices are ast and amdgpu."""
    config, root = write_config(tmp_path, "amd-server", profile="intel")
    assert (
        f"FAILED  device root {root}: no device of profile intel "
        "(sysfs classes drm, drivers i915, xe)\n"
    ) in _check(config)
