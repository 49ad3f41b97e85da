"""NVIDIA GPUs by UUID and MIG devices in real podman + runc containers, on the hook path
(annotation, image env, allow-list) and the CDI path (`--device nvidia.com/...=GPU-...`).

Stand-in: no GPU here. The host is tests/support/nvidia_mig.py's: the driver's proc files,
a stand-in libnvidia-ml.so.1 (compiled by the tests, loaded by the hook's NVML child),
GPU nodes of major 195 (which no driver here registers: ENXIO when the device cgroup allows
them, EPERM when it does not) and MIG capability nodes that are real char devices of the
running kernel: a container opens its own instance's cap nodes, and gets EPERM from the
device cgroup on a sibling instance's and on the management capabilities (bind-mounted into
it by podman `-v`, so the node is there and only the cgroup can refuse it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import base_config
from tests.support import nvidia_mig, podman

GPU0, GPU1 = nvidia_mig.GPU0, nvidia_mig.GPU1
MIG0, MIG1 = GPU0.mig
ENXIO = "No such device or address"
EPERM = "Operation not permitted"
OCIHOOK = str(Path(sys.executable).with_name("ocihook"))
NVIDIA_NODES = ("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm")


@pytest.fixture
def mig_host(hook_setup, tmp_path_factory, synth_root):
    """The stand-in MIG host as the hook's source and device root."""
    nvidia_mig.check_majors_unused()
    host = nvidia_mig.build(tmp_path_factory.mktemp("mig") / "root")
    host.root.chmod(0o755)

    def configure(**overrides) -> nvidia_mig.MigHost:
        settings = base_config(hook_setup.dir, synth_root, profile="nvidia", **overrides)
        settings["source_root"] = settings["device_root"] = str(host.root)
        settings["ldconfig"] = {"enabled": False}
        hook_setup.write_config(**settings)
        return host

    return configure


def _script(paths: list[str]) -> str:
    """Open each path read-only ('OPEN <path> ok' or the shell's error), then list /dev."""
    opens = "; ".join(f"(exec 3<{p}) 2>&1 && echo 'OPEN {p} ok'" for p in paths)
    return f"{opens}; find /dev -type c | sort"


def _outcome(output: str, path: str) -> str:
    for line in output.splitlines():
        if f" {path}: " in line or f"OPEN {path} " in line:
            return line
    raise AssertionError(f"no outcome for {path} in:\n{output}")


def _vendor_nodes(output: str) -> set[str]:
    return {
        line for line in output.splitlines() if line.startswith(("/dev/nvidia", "/dev/nvidia-caps"))
    }


def _check_mig(result, host: nvidia_mig.MigHost, mig: nvidia_mig.Mig, sibling: nvidia_mig.Mig):
    """The container of MIG device `mig`: its GPU's node (ENXIO: allowed, no driver), its cap
    nodes open, the sibling's cap node and mig/config EPERM; no other vendor node."""
    assert result.returncode == 0, result.stderr
    own = host.instance_nodes(GPU0, mig)
    others = [host.instance_nodes(GPU0, sibling)[0], host.cap_node("mig/config")]
    assert _outcome(result.stdout, "/dev/nvidia0").endswith(ENXIO), result.stdout
    for path in own:
        assert _outcome(result.stdout, path) == f"OPEN {path} ok", result.stdout
    for path in others:
        assert _outcome(result.stdout, path).endswith(EPERM), result.stdout
    expected = {"/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}
    assert _vendor_nodes(result.stdout) == expected | set(own) | set(others)


def _bind(host: nvidia_mig.MigHost, paths: list[str]) -> list[str]:
    """podman -v of host nodes the request did not ask for (only the cgroup may refuse them)."""
    return [arg for p in paths for arg in ("-v", f"{host.root}{p}:{p}")]


@pytest.mark.parametrize("name", ["uuid", "index pair"])
def test_annotation_mig_device(name, mig_host, hook_setup, image_busybox):
    host = mig_host()
    mig, sibling = MIG1, MIG0
    others = [host.instance_nodes(GPU0, sibling)[0], host.cap_node("mig/config")]
    own = host.instance_nodes(GPU0, mig)
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _script(["/dev/nvidia0", *own, *others])],
        devices=mig.uuid if name == "uuid" else f"0:{mig.index}",
        extra=_bind(host, others),
    )
    _check_mig(result, host, mig, sibling)
    (record,) = hook_setup.records()
    rules = {(d["major"], d["minor"]) for d in json.loads(record.read_text())["devices"]}
    assert host.caps["mig/config"].numbers not in rules
    assert host.caps["mig/monitor"].numbers not in rules


def _check_gpu1(result) -> None:
    """The container of GPU 1: /dev/nvidia1 (ENXIO: allowed, no driver) and the control
    nodes; GPU 0's node (bound in by podman) is refused by the cgroup; no cap node."""
    assert result.returncode == 0, result.stderr
    assert _outcome(result.stdout, "/dev/nvidia1").endswith(ENXIO), result.stdout
    assert _outcome(result.stdout, "/dev/nvidia0").endswith(EPERM), result.stdout
    expected = {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"}
    assert _vendor_nodes(result.stdout) == expected | {"/dev/nvidia-uvm-tools"}


def test_annotation_gpu_uuid(mig_host, hook_setup, image_busybox):
    """GPU 1 by its UUID."""
    host = mig_host()
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _script(["/dev/nvidia1", "/dev/nvidia0"])],
        devices=GPU1.uuid,
        extra=_bind(host, ["/dev/nvidia0"]),
    )
    _check_gpu1(result)


def test_a_uuid_the_host_lacks_fails_the_start_with_the_hosts_uuids(
    mig_host, hook_setup, image_busybox
):
    mig_host()
    missing = "GPU-00000000-0000-0000-0000-000000000000"
    result = hook_setup.run(image_busybox, ["true"], devices=missing)
    assert result.returncode != 0
    assert (
        f"ocihook: annotation ocihook.io/devices: device '{missing}' does not exist "
        f"(available: 0 {GPU0.uuid}, 1 {GPU1.uuid})"
    ) in result.stderr
    assert hook_setup.records() == []


@pytest.mark.parametrize("name", ["uuid", "index pair"])
def test_env_request_as_the_device_plugins_env_strategy(name, mig_host, hook_setup, image_busybox):
    """NVIDIA's device plugin (deviceListStrategy envvar) sets NVIDIA_VISIBLE_DEVICES to the
    UUIDs it allocated (or, by Slurm-style index, `G:M`): with request.env the hook honours
    it, MIG devices included. No annotation: the registration runs for every container."""
    host = mig_host(request={"env": True})
    hook_setup.gate_always()
    mig, sibling = MIG0, MIG1
    own = host.instance_nodes(GPU0, mig)
    others = [host.instance_nodes(GPU0, sibling)[0], host.cap_node("mig/config")]
    value = mig.uuid if name == "uuid" else f"0:{mig.index}"
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _script(["/dev/nvidia0", *own, *others])],
        extra=["-e", f"NVIDIA_VISIBLE_DEVICES={value}", *_bind(host, others)],
    )
    _check_mig(result, host, mig, sibling)
    (record,) = hook_setup.records()
    assert json.loads(record.read_text())["request"] == value


def test_env_request_gpu_uuid(mig_host, hook_setup, image_busybox):
    """NVIDIA_VISIBLE_DEVICES naming a whole GPU by its UUID, on the env path."""
    host = mig_host(request={"env": True})
    hook_setup.gate_always()
    value = GPU1.uuid
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _script(["/dev/nvidia1", "/dev/nvidia0"])],
        extra=["-e", f"NVIDIA_VISIBLE_DEVICES={value}", *_bind(host, ["/dev/nvidia0"])],
    )
    _check_gpu1(result)
    (record,) = hook_setup.records()
    assert json.loads(record.read_text())["request"] == value


@pytest.mark.parametrize(
    ("tenant", "devices", "allowed"),
    [("a", MIG1.uuid, True), ("a", "0:1", False), ("b", MIG1.uuid, False), ("a", GPU1.uuid, True)],
)
def test_allow_list_by_uuid(tenant, devices, allowed, mig_host, hook_setup, image_busybox):
    """An allow-list entry that names UUIDs covers requests by those UUIDs (the same MIG
    device by its index pair is another name: refused, fail closed)."""
    allow = [{"annotations": {"^tenant$": "^a$"}, "devices": [MIG1.uuid, GPU1.uuid]}]
    mig_host(request={"allow": allow, "trusted_annotations": ["tenant"]})
    result = hook_setup.run(
        image_busybox, ["true"], devices=devices, extra=["--annotation", f"tenant={tenant}"]
    )
    if allowed:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0
        assert "is not allowed by the config's request.allow" in result.stderr, result.stderr


# -- CDI ---------------------------------------------------------------------------------


@pytest.fixture
def cdi_kind():
    """A kind of this test's own under nvidia.com in /var/run/cdi (podman reads no other
    dir; another run's spec must not clash), removed afterwards."""
    name = f"nvidia.com/t{uuid.uuid4().hex[:12]}"
    path = Path("/var/run/cdi") / (name.replace("/", "_") + ".yaml")
    yield name, path
    path.unlink(missing_ok=True)


def _install_spec(hook_setup, kind: tuple[str, Path]) -> None:
    result = subprocess.run(
        [OCIHOOK, "cdi", "generate", "--config", str(hook_setup.config), "--kind", kind[0]]
        + ["--hook-path", OCIHOOK, "--output", str(kind[1])],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", ["uuid", "index pair"])
def test_cdi_mig_device_by_name(name, mig_host, hook_setup, cdi_kind, image_busybox):
    """podman 4.3 applies the spec's MIG device (`KIND=MIG-...` or `KIND=0:1`, as the
    device plugin's CDI strategies ask): the same nodes and cgroup as the hook's."""
    host = mig_host()
    _install_spec(hook_setup, cdi_kind)
    mig, sibling = MIG1, MIG0
    own = host.instance_nodes(GPU0, mig)
    others = [host.instance_nodes(GPU0, sibling)[0], host.cap_node("mig/config")]
    device = mig.uuid if name == "uuid" else f"0:{mig.index}"
    result = podman.run(
        image_busybox,
        ["/bin/sh", "-c", _script(["/dev/nvidia0", *own, *others])],
        extra=["--device", f"{cdi_kind[0]}={device}", *_bind(host, others)],
    )
    _check_mig(result, host, mig, sibling)


def test_cdi_gpu_by_uuid(mig_host, hook_setup, cdi_kind, image_busybox):
    host = mig_host()
    _install_spec(hook_setup, cdi_kind)
    result = podman.run(
        image_busybox,
        ["/bin/sh", "-c", _script(["/dev/nvidia1", "/dev/nvidia0"])],
        extra=["--device", f"{cdi_kind[0]}={GPU1.uuid}", *_bind(host, ["/dev/nvidia0"])],
    )
    assert result.returncode == 0, result.stderr
    assert _outcome(result.stdout, "/dev/nvidia1").endswith(ENXIO), result.stdout
    assert _outcome(result.stdout, "/dev/nvidia0").endswith(EPERM), result.stdout
    assert {p for p in _vendor_nodes(result.stdout) if p.startswith(NVIDIA_NODES)} >= {
        "/dev/nvidia1",
        "/dev/nvidiactl",
    }
    assert not any("nvidia-caps" in p for p in _vendor_nodes(result.stdout))


# -- NVIDIA's numbering: index 0 is the first GPU in PCI order, whatever its minor -----------


@pytest.fixture
def reordered_host(hook_setup, tmp_path_factory, synth_root):
    """The stand-in host whose GPUs' minors run 2, 1, 3, 0 in PCI bus order
    (nvidia_mig.REORDERED): GPU 0 (0000:1b:00.0) has /dev/nvidia2."""
    nvidia_mig.check_majors_unused()
    host = nvidia_mig.build(tmp_path_factory.mktemp("order") / "root", nvidia_mig.REORDERED)
    host.root.chmod(0o755)

    def configure(**overrides) -> nvidia_mig.MigHost:
        settings = base_config(hook_setup.dir, synth_root, profile="nvidia", **overrides)
        settings["source_root"] = settings["device_root"] = str(host.root)
        settings["ldconfig"] = {"enabled": False}
        hook_setup.write_config(**settings)
        return host

    return configure


@pytest.mark.parametrize("path", ["annotation", "env", "allow-list", "cdi"])
def test_index_0_opens_the_first_gpu_in_pci_order(
    path, reordered_host, hook_setup, cdi_kind, image_busybox
):
    """Index 0 by the annotation, NVIDIA_VISIBLE_DEVICES (request.env), an allow-list
    entry naming 0, and CDI's nvidia.com/...=0: the container opens /dev/nvidia2 (ENXIO:
    allowed, no driver); the three other GPUs' nodes, bound in by podman, get EPERM from
    the device cgroup."""
    own, others = "/dev/nvidia2", ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia3"]
    command = ["/bin/sh", "-c", _script([own, *others])]
    if path == "annotation":
        host = reordered_host()
        result = hook_setup.run(image_busybox, command, devices="0", extra=_bind(host, others))
    elif path == "env":
        host = reordered_host(request={"env": True})
        hook_setup.gate_always()
        extra = ["-e", "NVIDIA_VISIBLE_DEVICES=0", *_bind(host, others)]
        result = hook_setup.run(image_busybox, command, extra=extra)
    elif path == "allow-list":
        allow = [{"annotations": {"^tenant$": "^a$"}, "devices": [0]}]
        host = reordered_host(request={"allow": allow, "trusted_annotations": ["tenant"]})
        extra = ["--annotation", "tenant=a", *_bind(host, others)]
        result = hook_setup.run(image_busybox, command, devices="0", extra=extra)
    else:
        host = reordered_host()
        _install_spec(hook_setup, cdi_kind)
        extra = ["--device", f"{cdi_kind[0]}=0", *_bind(host, others)]
        result = podman.run(image_busybox, command, extra=extra)
    assert result.returncode == 0, result.stderr
    assert _outcome(result.stdout, own).endswith(ENXIO), result.stdout
    for other in others:
        assert _outcome(result.stdout, other).endswith(EPERM), result.stdout
    if path != "cdi":
        (record,) = hook_setup.records()
        indices = {d["path"]: d["index"] for d in json.loads(record.read_text())["devices"]}
        assert indices[own] == 0 and not set(others) & set(indices)
