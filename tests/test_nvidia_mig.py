"""NVIDIA GPUs by UUID and MIG devices, on a stand-in host (no GPU here): `ocihook plan`
against the driver's proc files laid out as the real driver lays them out, real char
devices for the MIG capability nodes, and a stand-in libnvidia-ml.so.1 compiled by the
tests, loaded by ocihook's forked NVML child through ctypes for real (tests/support/
nvidia_mig.py). What runs in real containers: tests/test_e2e_nvidia_mig.py."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.support import golden, hosts, nvidia_mig, synthetic
from tests.support.plans import run_plan

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests/golden"
GPU0, GPU1 = nvidia_mig.GPU0, nvidia_mig.GPU1
MIG0, MIG1 = GPU0.mig


def setup(tmp_path: Path, timeout: float | None = None, **build) -> tuple[Path, nvidia_mig.MigHost]:
    host = nvidia_mig.build(tmp_path / "root", **build)
    settings = synthetic.config(host.root, profile="nvidia")
    if timeout is not None:
        settings["profile"] = profile_with(nvml_timeout=timeout)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(settings))
    return config, host


def profile_with(**nvidia) -> dict:
    """The shipped nvidia profile with `devices.nvidia` settings changed."""
    profile = yaml.safe_load((synthetic.PROFILES / "nvidia.yaml").read_text())
    profile["devices"]["nvidia"].update(nvidia)
    return profile


def stable(text: str, host: nvidia_mig.MigHost) -> str:
    """The plan text with the host's picked cap devices named by their cap file (the picked
    numbers differ between kernels) and the tree's path as <root>."""
    text = text.replace(str(host.root), "<root>")
    for cap, device in host.caps.items():
        text = re.sub(rf"nvidia-cap{device.minor}(?!\d)", f"nvidia-cap<{cap}>", text)
        text = text.replace(f"c {device.major}:{device.minor} ", f"c <caps>:<{cap}> ")
    return text


def stable_spec(spec: dict) -> dict:
    """The CDI spec with the picked cap devices' numbers (which differ between kernels) named
    like their paths: `<caps>` for the major, the cap file for the minor."""
    for device in spec["devices"]:
        for node in device["containerEdits"].get("deviceNodes", []):
            cap = re.search(r"nvidia-cap<([^>]+)>", node["path"])
            if cap:
                node["major"], node["minor"] = "<caps>", f"<{cap.group(1)}>"
    return spec


def plan(config: Path, devices: str) -> dict:
    result = run_plan(config, "--json", "--devices", devices)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def one_line_error(config: Path, devices: str, timeout: float = 60) -> str:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "plan", "--config", str(config)]
        + ["--devices", devices],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
    )
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ocihook: "), result.stderr
    return lines[0]


LAYOUTS = {
    # golden name: (build options, request)
    "all": ({}, "all"),
    "request": ({}, f"{MIG1.uuid},{GPU1.uuid}"),
    "no-proc-uuids": ({"proc_uuids": False}, "all"),
}


@pytest.mark.root
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_plan_matches_golden(layout, tmp_path):
    """Stand-in: the layout's plan text, cap devices named by their cap file."""
    build, request = LAYOUTS[layout]
    config, host = setup(tmp_path, **build)
    result = run_plan(config, "--devices", request)
    assert result.returncode == 0, result.stderr
    text = stable(result.stdout, host)
    assert text == golden.golden_text(GOLDEN / f"plan-nvidia-mig-{layout}.txt", text)


@pytest.mark.root
def test_uuid_and_address_come_from_the_drivers_information_files(tmp_path):
    """Stand-in: each GPU's PCI address and UUID, from its information file."""
    config, _ = setup(tmp_path)
    found = {d["index"]: (d["address"], d["uuid"]) for d in plan(config, "all")["device_list"]}
    assert found == {0: (GPU0.address, GPU0.uuid), 1: (GPU1.address, GPU1.uuid)}
    for name in (GPU1.uuid, GPU1.uuid.upper().replace("GPU-", "GPU-"), GPU1.address):
        assert [d["index"] for d in plan(config, name)["device_list"]] == [1]


@pytest.mark.root
@pytest.mark.parametrize("name", ["MIG1", "0:1"])
def test_a_mig_device_gets_its_gpus_node_its_cap_nodes_and_the_control_nodes(name, tmp_path):
    """Stand-in: by UUID or by NVML's index pair (0:1 is GI 3 here: NVML's order, not the
    GI ids'), exactly the parent /dev/nvidia0, the GI's and CI's cap nodes and the control
    nodes, each with a cgroup rule; no other instance's and no management cap."""
    config, host = setup(tmp_path)
    view = plan(config, MIG1.uuid if name == "MIG1" else name)
    gi, ci = host.instance_nodes(GPU0, MIG1)
    nodes = [d["path"] for d in view["devices"]]
    assert nodes == [
        "/dev/nvidia0",
        gi,
        ci,
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    rules = {(r["type"], r["major"], r["minor"]) for r in view["cgroup_rules"]}
    wanted = {("c", *hosts.NODES[n]) for n in ("nvidia0", "nvidiactl", "nvidia-uvm")}
    wanted |= {("c", *hosts.NODES["nvidia-uvm-tools"])}
    wanted |= {("c", *host.caps[f"gpu0/mig/gi{MIG1.gi}/{p}access"].numbers) for p in ("", "ci0/")}
    assert rules == wanted
    (mig,) = view["device_list"]
    assert (mig["name"], mig["uuid"], mig["gi"], mig["ci"]) == ("0:1", MIG1.uuid, 3, 0)
    for cap in ("mig/config", "mig/monitor", f"gpu0/mig/gi{MIG0.gi}/access"):
        assert host.caps[cap].numbers not in {
            (r["major"], r["minor"]) for r in view["cgroup_rules"]
        }


def _mapping_processes(library: Path) -> list[int]:
    """Processes that have the stand-in library mapped."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            if str(library) in Path(f"/proc/{pid}/maps").read_text():
                found.append(int(pid))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.root
def test_a_hung_nvml_is_killed_at_the_time_limit(tmp_path):
    """Stand-in NVML whose nvmlInit_v2 never returns: one line after the profile's
    nvml_timeout, and no process left holding the library."""
    config, host = setup(tmp_path, timeout=1, nvml="hang")
    started = time.monotonic()
    line = one_line_error(config, "0:0", timeout=30)
    assert time.monotonic() - started < 20
    library = host.root / nvidia_mig.LIBRARY_DIR / f"libnvidia-ml.so.{hosts.VERSION}"
    assert line == (
        f"ocihook: --devices: MIG devices: NVML {library}: no answer within 1 s (the child was "
        "killed); is the driver hung or a GPU initializing?"
    )
    assert _mapping_processes(library) == []


@pytest.mark.root
def test_a_failing_nvml_is_one_line(tmp_path):
    """Stand-in NVML whose nvmlInit_v2 returns NVML_ERROR_DRIVER_NOT_LOADED."""
    config, host = setup(tmp_path, nvml="fail")
    library = host.root / nvidia_mig.LIBRARY_DIR / f"libnvidia-ml.so.{hosts.VERSION}"
    assert one_line_error(config, MIG0.uuid) == (
        f"ocihook: --devices: MIG devices: NVML {library}: nvmlInit_v2 failed: Driver Not Loaded"
    )


@pytest.mark.root
def test_a_missing_nvml_is_one_line(tmp_path):
    config, host = setup(tmp_path)
    for library in (host.root / nvidia_mig.LIBRARY_DIR).glob("libnvidia-ml.so*"):
        library.unlink()
    assert one_line_error(config, "0:0") == (
        f"ocihook: --devices: MIG devices: NVML (libnvidia-ml.so.1 of driver {hosts.VERSION}) "
        f"not found in the source root {host.root}'s library dirs"
    )


@pytest.mark.root
def test_nvml_runs_only_for_requests_that_name_a_mig_device(tmp_path):
    """Stand-in NVML that writes a probe file when it is initialized: requests by index,
    node name, PCI address or UUID (which the information files show) never load it; a MIG
    request does. The plan command itself lists MIG devices (it describes the host)."""

    probe = tmp_path / "probe.txt"
    config, host = setup(tmp_path, nvml="probe", probe=probe)
    from ocihook.config.compiled import compile_config
    from ocihook.discover.build import build_plan
    from ocihook.discover.roots import Roots
    from ocihook.request.parse import parse_request

    compiled, _ = compile_config(str(config))
    for request in ("0", "nvidia1", "all", GPU1.uuid, GPU0.address):
        with Roots(compiled["source_root"], compiled["device_root"]) as roots:
            build_plan(compiled, roots, parse_request(request, "t"))  # as the hook calls it
        assert not probe.exists(), f"NVML was loaded for request {request}"
    with Roots(compiled["source_root"], compiled["device_root"]) as roots:
        result = build_plan(compiled, roots, parse_request("0:1", "t"))
    assert probe.exists()
    assert [d.name for d in result.device_list] == ["0:1"]


@pytest.mark.root
def test_the_nvml_child_runs_without_capabilities_or_the_hooks_fds(tmp_path):
    """Stand-in NVML that writes its process's /proc/self/status and open fds: no
    capability in any set, no_new_privs, uid 0, and only /dev/null, the library and the
    answer pipe open."""
    probe = tmp_path / "probe.txt"
    config, host = setup(tmp_path, nvml="probe", probe=probe)
    plan(config, "0:0")
    status = dict(line.split(":", 1) for line in probe.read_text().splitlines() if ":" in line[:20])
    for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[key].strip(), 16) == 0, key
    assert status["NoNewPrivs"].strip() == "1"
    assert status["Uid"].split()[0] == "0"
    fds = [
        line.split(" -> ")[1] for line in probe.read_text().splitlines() if line.startswith("fd ")
    ]
    library = host.root / nvidia_mig.LIBRARY_DIR / f"libnvidia-ml.so.{hosts.VERSION}"
    assert sorted(fds) == sorted(
        ["/dev/null"] * 3 + [str(library)] + [p for p in fds if p.startswith("pipe:")]
    )
    assert len([p for p in fds if p.startswith("pipe:")]) == 1


@pytest.mark.root
def test_without_uuid_lines_nvml_tells_the_uuids(tmp_path):
    """Stand-in: the driver's files show no UUID (the driver writes none when it cannot read
    it): a UUID request asks NVML, and selects."""
    config, _ = setup(tmp_path, proc_uuids=False)
    assert [d["uuid"] for d in plan(config, GPU1.uuid)["device_list"]] == [GPU1.uuid]


@pytest.mark.root
def test_without_uuid_lines_and_nvml_a_uuid_request_is_one_line(tmp_path):
    config, host = setup(tmp_path, proc_uuids=False, nvml="fail")
    library = host.root / nvidia_mig.LIBRARY_DIR / f"libnvidia-ml.so.{hosts.VERSION}"
    assert one_line_error(config, GPU1.uuid) == (
        f"ocihook: --devices: device '{GPU1.uuid}': the driver shows no UUID of GPU 0, 1, and "
        f"NVML {library}: nvmlInit_v2 failed: Driver Not Loaded"
    )


@pytest.mark.root
def test_a_cap_file_naming_a_management_minor_is_refused(tmp_path):
    """A capability file whose minor is mig/config's (a tampered driver volume) would give
    the container the right to reconfigure every MIG device: refused."""
    config, host = setup(tmp_path)
    config_minor = host.caps["mig/config"].minor
    access = host.root / f"proc/driver/nvidia/capabilities/gpu0/mig/gi{MIG0.gi}/ci0/access"
    access.write_text(f"DeviceFileMinor: {config_minor}\nDeviceFileMode: 292\n")
    line = one_line_error(config, "0:0")
    assert line.endswith("has the minor of mig/config, which no container may get"), line


@pytest.mark.root
def test_a_cap_node_that_is_another_device_is_refused(tmp_path):
    config, host = setup(tmp_path)
    node = host.root / host.instance_nodes(GPU0, MIG0)[0].lstrip("/")
    node.unlink()
    os.mknod(node, 0o444 | 0o020000, os.makedev(*hosts.NODES["nvidia1"]))
    line = one_line_error(config, MIG0.uuid)
    assert "not the char device" in line and str(node) in line, line


@pytest.mark.root
def test_a_missing_cap_node_is_planned_from_the_cap_file(tmp_path):
    """No /dev/nvidia-caps node on the host (nvidia-modprobe not run yet): the node is made
    with the cap file's minor and DeviceFileMode (0444)."""
    config, host = setup(tmp_path)
    gi, _ = host.instance_nodes(GPU0, MIG0)
    (host.root / gi.lstrip("/")).unlink()
    node = next(d for d in plan(config, "0:0")["devices"] if d["path"] == gi)
    number = host.caps[f"gpu0/mig/gi{MIG0.gi}/access"]
    assert (node["major"], node["minor"], node["mode"]) == (number.major, number.minor, 0o444)


@pytest.mark.root
def test_cdi_spec_names_every_gpu_and_mig_device_as_nvidias_generator_does(tmp_path):
    """Stand-in: `ocihook cdi generate` writes a device per index and UUID, per MIG device
    (index pair and UUID) with its GPU's and its cap nodes, and `all` (every whole GPU),
    kind nvidia.com/gpu (tests/golden/cdi-nvidia-mig.json)."""
    import subprocess
    import sys

    config, host = setup(tmp_path)
    settings = yaml.safe_load(config.read_text())
    settings["selinux"] = {"mode": "enabled"}  # the links' label choice alike on every host
    config.write_text(yaml.safe_dump(settings))
    result = subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "cdi", "generate", "--config", str(config)]
        + ["--format", "json", "--hook-path", "/usr/bin/ocihook"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    spec = stable_spec(json.loads(stable(result.stdout, host)))
    assert spec["kind"] == "nvidia.com/gpu"
    names = [d["name"] for d in spec["devices"]]
    assert names == ["0", GPU0.uuid, "1", GPU1.uuid, "0:0", MIG0.uuid, "0:1", MIG1.uuid, "all"]
    by_name = {
        d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in spec["devices"]
    }
    assert by_name["all"] == ["/dev/nvidia0", "/dev/nvidia1"]
    assert (
        by_name[MIG1.uuid]
        == by_name["0:1"]
        == [
            "/dev/nvidia0",
            f"/dev/nvidia-caps/nvidia-cap<gpu0/mig/gi{MIG1.gi}/access>",
            f"/dev/nvidia-caps/nvidia-cap<gpu0/mig/gi{MIG1.gi}/ci0/access>",
        ]
    )
    assert spec == golden.golden_json(GOLDEN / "cdi-nvidia-mig.json", spec)


@pytest.mark.root
def test_cdi_generate_fails_when_nvml_cannot_name_the_hosts_mig_devices(tmp_path):
    """The device plugin would ask for names the spec lacks: one line, no spec."""
    import subprocess
    import sys

    config, _ = setup(tmp_path, nvml="fail")
    result = subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "cdi", "generate", "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Driver Not Loaded" in result.stderr


@pytest.mark.root
def test_plan_lists_what_nvml_could_not_tell_as_a_warning(tmp_path):
    config, _ = setup(tmp_path, nvml="fail")
    result = run_plan(config, "--devices", "0")
    assert result.returncode == 0, result.stderr
    assert "warning: MIG devices not listed: NVML " in result.stdout


@pytest.mark.root
def test_plan_as_a_user_asks_nvml_too(tmp_path):
    """`ocihook plan` run by a user (no CAP_SETPCAP: no bounding set to drop) still asks
    the stand-in NVML in its child, with every capability set empty."""
    import subprocess

    config, _ = setup(tmp_path)
    for path in (tmp_path, *tmp_path.parents):  # the user may enter the stand-in's tree
        if path == Path("/tmp"):
            break
        os.chmod(path, os.stat(path).st_mode | 0o005)
    result = subprocess.run(
        ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
        + [sys.executable, "-m", "ocihook.cli.main", "plan", "--config", str(config)]
        + ["--devices", "0:1"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    assert f"MIG 0:1 {MIG1.uuid} (on index 0, GI 3, CI 0):" in result.stdout


@pytest.mark.root
def test_check_lists_uuids_and_mig_devices(tmp_path):
    """Stand-in: `ocihook check` names each GPU with its address and UUID, and each MIG
    device with its UUID, GI, CI and nodes."""
    import subprocess

    config, host = setup(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "check", "--config", str(config)]
        + ["--hooks-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    lines = result.stdout.splitlines()
    assert f"ok      device 1: {GPU1.address} nvidia {GPU1.uuid} /dev/nvidia1" in lines
    gi, ci = host.instance_nodes(GPU0, MIG1)
    assert f"ok      MIG device 0:1: {MIG1.uuid} GI 3 CI 0 /dev/nvidia0 {gi} {ci}" in lines
