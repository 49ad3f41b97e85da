"""`ocihook device-plugin` without a cluster: the pieces as plain data (preferred allocation,
NUMA nodes from a sysfs tree, the Allocate answer, the hook's Kubernetes-mode request), and
the daemon itself over real gRPC on unix sockets against a stand-in kubelet (this file's
`Kubelet`: the Registration service the kubelet serves, and a client of the plugin's
socket, as the kubelet's device manager is). The real kubelet: tests/test_e2e_kube.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path

import pytest
import yaml

from ocihook.config.compiled import DEFAULTS, compile_config
from ocihook.deviceplugin import allocation, topology
from ocihook.deviceplugin.inventory import Inventory, PluginDevice, resource_name
from ocihook.discover.roots import Roots
from ocihook.errors import OcihookError
from ocihook.plan.model import DeviceNode
from ocihook.request import assemble, parse
from ocihook.request.state import CRIO_CONTAINER_ANNOTATIONS, may_ask
from tests.support import devstack, synthetic

REPO = Path(__file__).resolve().parent.parent
STUBS = "ocihook.deviceplugin.v1beta1.api_pb2_grpc"
NEEDS_GRPC = pytest.mark.devstack("grpc", STUBS)


def node(path: str, minor: int, index: int | None, access: str = "rw") -> DeviceNode:
    return DeviceNode(path, f"/host{path}", "c", 10, minor, 0o666, index, access)


def inventory(numa=(0, 1, 0)) -> Inventory:
    devices = [
        PluginDevice(str(i), i, [node(f"/dev/synth{i}", 200 + i, i)], n) for i, n in enumerate(numa)
    ]
    return Inventory("ocihook.io/synthetic", "synthetic", devices, [node("/dev/synthctl", 9, None)],
                     "/host", [])  # fmt: skip


def config(**kubernetes) -> dict:
    settings = json.loads(json.dumps(DEFAULTS))
    settings["kubernetes"].update(kubernetes)
    settings["profile"] = {"name": "synthetic", "devices": {"cdi_kind": None}}
    return settings


# -- topology --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "available, must, size, expected",
    [
        (["0", "1", "2"], [], 2, ["0", "2"]),  # node 0 holds two
        (["0", "1", "2"], ["1"], 2, ["1", "0"]),  # must-include first, then the lower node
        (["0", "1", "2", "3"], [], 2, ["1", "3"]),  # node 1 can hold both, node 0 cannot
        (["0", "1", "2"], [], 1, ["0"]),
        (["1", "x"], [], 2, ["1", "x"]),  # unknown NUMA node last
        (["0", "1", "2"], ["2", "0"], 2, ["2", "0"]),
    ],
)
def test_the_preferred_allocation_keeps_to_one_numa_node(available, must, size, expected):
    numa = {"0": 0, "1": 1, "2": 0, "3": 1, "x": None}
    if available == ["0", "1", "2", "3"]:
        numa = {"0": 0, "1": 1, "2": 2, "3": 1}
    assert topology.preferred(available, must, size, numa) == expected


def test_numa_node_from_sysfs_under_the_device_root(tmp_path):
    """The PCI function's numa_node first, then the char device's; -1 and absence: None;
    anything else is one line."""
    root = tmp_path
    pci = root / "sys/bus/pci/devices/0000:c1:00.0"
    pci.mkdir(parents=True)
    (pci / "numa_node").write_text("3\n")
    char = root / "sys/dev/char/10:200/device"
    char.mkdir(parents=True)
    (char / "numa_node").write_text("-1\n")
    nodes = [node("/dev/synth0", 200, 0)]
    with Roots(str(root), str(root)) as roots:
        assert topology.numa_node(roots, "0000:c1:00.0", nodes) == 3
        assert topology.numa_node(roots, None, nodes) is None
        assert topology.numa_node(roots, None, [node("/dev/synth9", 209, 9)]) is None
        (char / "numa_node").write_text("1\n")
        assert topology.numa_node(roots, None, nodes) == 1
        (char / "numa_node").write_text("banana\n")
        with pytest.raises(OcihookError, match="not a NUMA node: 'banana'"):
            topology.numa_node(roots, None, nodes)


# -- the Allocate answer ---------------------------------------------------------------------


def test_allocate_answers_device_specs_and_the_container_annotation():
    answer = allocation.container_allocation(config(), inventory(), ["2", "0"])
    assert answer["annotations"] == {"ocihook.io/devices": "2,0"}
    assert answer["devices"] == [
        {"container_path": "/dev/synth2", "host_path": "/host/dev/synth2", "permissions": "rw"},
        {"container_path": "/dev/synth0", "host_path": "/host/dev/synth0", "permissions": "rw"},
        {"container_path": "/dev/synthctl", "host_path": "/host/dev/synthctl", "permissions": "rw"},
    ]
    assert answer["cdi_devices"] == [] and answer["envs"] == {} and answer["mounts"] == []


def test_allocate_with_cdi_names_the_specs_devices():
    answer = allocation.container_allocation(config(cdi=True), inventory(), ["1"])
    assert answer["cdi_devices"] == ["ocihook.io/synthetic=1"]
    assert answer["annotations"] == {"cdi.k8s.io/ocihook.io_synthetic": "ocihook.io/synthetic=1"}
    assert answer["devices"] == []


@pytest.mark.parametrize(
    "ids, message",
    [
        (["7"], "Allocate: device '7' is not one of ocihook.io/synthetic's (0, 1, 2)"),
        ([], "Allocate: a container request with no device"),
    ],
)
def test_allocate_refuses_what_it_does_not_have(ids, message):
    with pytest.raises(OcihookError) as caught:
        allocation.container_allocation(config(), inventory(), ids)
    assert str(caught.value) == message


def test_resource_name_defaults_to_the_profile():
    assert resource_name(config()) == "ocihook.io/synthetic"
    assert resource_name(config(resource="example.com/npu")) == "example.com/npu"


# -- the hook in Kubernetes mode ----------------------------------------------------------


def crio(annotations: dict) -> dict:
    return {CRIO_CONTAINER_ANNOTATIONS: json.dumps(annotations)}


def test_kubernetes_mode_reads_only_the_containers_own_annotations():
    pod_forged = {"ocihook.io/devices": "all", **crio({"io.kubernetes.container.hash": "1"})}
    assert parse.allocated_devices(pod_forged, "ocihook.io/devices").empty
    allocated = {"ocihook.io/devices": "all", **crio({"ocihook.io/devices": "1,2"})}
    request = parse.allocated_devices(allocated, "ocihook.io/devices")
    assert request.indices == (1, 2)
    assert request.origin == "device plugin allocation (ocihook.io/devices)"
    assert parse.allocated_devices({}, "ocihook.io/devices").empty


@pytest.mark.parametrize("text", ["{", "[]", '{"a": 1}', "x" * (1 << 20 | 1)])
def test_kubernetes_mode_refuses_a_crio_record_it_cannot_read(text):
    with pytest.raises(OcihookError, match="not the JSON object of strings CRI-O writes"):
        parse.allocated_devices({CRIO_CONTAINER_ANNOTATIONS: text}, "ocihook.io/devices")


def test_the_hook_starts_its_work_only_for_an_allocation():
    settings = config(device_plugin=True)
    assert not may_ask({"annotations": {"ocihook.io/devices": "all"}}, settings)
    assert not may_ask({"annotations": crio({"io.kubernetes.container.hash": "1"})}, settings)
    assert may_ask({"annotations": crio({"ocihook.io/devices": "0"})}, settings)


def test_kubernetes_mode_takes_capabilities_and_imex_channels_only_from_the_allocation(
    tmp_path,
):
    """A pod author who got one device cannot add GPUDirect's nodes (a capability naming
    them) or IMEX channels by annotations of the pod: in Kubernetes mode they are read from
    the container's own CRI annotations only, as the devices are."""
    from ocihook.request.state import Container

    settings = synthetic.config(tmp_path, kubernetes={"device_plugin": True})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(settings))
    loaded, _files = compile_config(str(path))
    request = loaded["request"]
    pod = {request["capabilities_annotation"]: "all", request["imex_annotation"]: "all"}
    annotations = {**pod, **crio({"ocihook.io/devices": "1"})}
    container = Container.__new__(Container)
    container.annotations, container.env = annotations, {}
    asked = assemble.container_request(container, loaded)
    assert asked.indices == (1,) and asked.capabilities is None and not asked.imex
    container.annotations = {**pod, **crio({"ocihook.io/devices": "1", **pod})}
    allocated = assemble.container_request(container, loaded)
    assert allocated.capabilities is not None


def test_kubernetes_mode_and_env_requests_do_not_mix(tmp_path):
    path = tmp_path / "config.yaml"
    settings = synthetic.config(tmp_path, request={"env": True}, kubernetes={"device_plugin": True})
    path.write_text(yaml.safe_dump(settings))
    with pytest.raises(OcihookError, match="request.env: true with kubernetes.device_plugin: true"):
        compile_config(str(path))


# -- the daemon over gRPC, against a stand-in kubelet ---------------------------------------


class Kubelet:
    """The kubelet's side: Registration on kubelet.sock, and a client of the plugin."""

    def __init__(self, directory: Path) -> None:
        import grpc

        from ocihook.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc

        self.grpc, self.api, self.stubs = grpc, api_pb2, api_pb2_grpc
        self.dir = directory
        self.registered: list = []
        kubelet = self

        class Registration(api_pb2_grpc.RegistrationServicer):
            def Register(self, request, context):
                kubelet.registered.append(request)
                return api_pb2.Empty()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_RegistrationServicer_to_server(Registration(), self.server)
        self.server.add_insecure_port(f"unix://{directory}/kubelet.sock")
        self.server.start()

    def wait_registered(self, count: int, timeout: float = 30) -> object:
        deadline = time.monotonic() + timeout
        while len(self.registered) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(self.registered) >= count, self.registered
        return self.registered[count - 1]

    def plugin(self, endpoint: str):
        channel = self.grpc.insecure_channel(f"unix://{self.dir}/{endpoint}")
        return channel, self.stubs.DevicePluginStub(channel)

    def stop(self) -> None:
        self.server.stop(0).wait()


def start_plugin(config_path: Path, kubelet_dir: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ocihook.cli.main", "device-plugin", "--config", str(config_path),
         "--kubelet-dir", str(kubelet_dir), "--health-interval", "1", "--metrics-port", "0"],
        cwd=REPO, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip


def wait_text(path: Path, text: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        time.sleep(0.1)
    raise AssertionError(f"never said {text!r}: {path.read_text()}")


@pytest.fixture
def driver(tmp_path, synth_root) -> Path:
    """A synthetic driver of the test's own (its nodes are removed and put back)."""
    root = synthetic.build_driver(tmp_path / "driver")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(synthetic.config(root, kubernetes={"device_plugin": True})))
    return path


@NEEDS_GRPC
def test_the_daemon_registers_streams_health_and_allocates(tmp_path, driver):
    kubelet_dir = tmp_path / "device-plugins"
    kubelet_dir.mkdir()
    log = tmp_path / "plugin.log"
    plugin = start_plugin(driver, kubelet_dir, log)
    try:
        wait_text(log, "no kubelet at")  # started before the kubelet: says so, waits
        kubelet = Kubelet(kubelet_dir)
        try:
            request = kubelet.wait_registered(1)
            assert (request.version, request.resource_name) == ("v1beta1", "ocihook.io/synthetic")
            assert request.options.get_preferred_allocation_available
            channel, stub = kubelet.plugin(request.endpoint)
            api = kubelet.api
            stream = stub.ListAndWatch(api.Empty())
            first = next(stream)
            assert [(d.ID, d.health) for d in first.devices] == [
                ("0", "Healthy"), ("1", "Healthy"), ("2", "Healthy")
            ]  # fmt: skip
            answer = stub.Allocate(
                api.AllocateRequest(
                    container_requests=[api.ContainerAllocateRequest(devices_ids=["1"])]
                )
            ).container_responses[0]
            root = driver.parent / "driver"
            assert dict(answer.annotations) == {"ocihook.io/devices": "1"}
            assert [d.host_path for d in answer.devices] == [
                f"{root}/dev/synth1", f"{root}/dev/synthctl", f"{root}/dev/synth-uvm"
            ]  # fmt: skip
            node = root / "dev/synth1"
            st = node.stat()
            node.unlink()
            changed = next(stream)
            assert [(d.ID, d.health) for d in changed.devices][1] == ("1", "Unhealthy")
            one = api.AllocateRequest(
                container_requests=[api.ContainerAllocateRequest(devices_ids=["1"])]
            )
            with pytest.raises(kubelet.grpc.RpcError) as refused:
                stub.Allocate(one)
            assert "device 1 is unhealthy: node" in refused.value.details()
            os.mknod(node, st.st_mode, st.st_rdev)
            assert [(d.ID, d.health) for d in next(stream).devices][1] == ("1", "Healthy")
            # the kubelet restarts: it removes the plugins' sockets; the plugin registers again
            (kubelet_dir / request.endpoint).unlink()
            again = kubelet.wait_registered(2)
            assert again.endpoint == request.endpoint
            channel.close()
        finally:
            kubelet.stop()
    finally:
        plugin.send_signal(signal.SIGTERM)
        assert plugin.wait(timeout=30) == 0, log.read_text()
    text = log.read_text()
    assert "device 1 unhealthy: node" in text and "device 1 healthy again" in text
    assert "the kubelet restarted: registering again" in text
    assert text.rstrip().endswith("ocihook device-plugin: stopped")
    assert "ocihook.io_synthetic.sock" not in os.listdir(kubelet_dir)  # its socket removed


@NEEDS_GRPC
@pytest.mark.devstack("prometheus_client")
def test_the_daemon_serves_metrics_of_its_devices_and_allocations(tmp_path, driver):
    """--metrics-port: the plugin's own view over a real HTTP scrape, each device healthy
    and present, then device 2 unhealthy; its Allocate answers counted by channel."""
    from tests.support.metrics import free_port, samples, scrape, value

    kubelet_dir = tmp_path / "device-plugins"
    kubelet_dir.mkdir()
    log = tmp_path / "plugin.log"
    port = free_port()
    plugin = subprocess.Popen(
        [sys.executable, "-m", "ocihook.cli.main", "device-plugin", "--config", str(driver),
         "--kubelet-dir", str(kubelet_dir), "--health-interval", "1",
         "--metrics-address", "127.0.0.1", "--metrics-port", str(port), "--audit-log", ""],
        cwd=REPO, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        kubelet = Kubelet(kubelet_dir)
        try:
            request = kubelet.wait_registered(1)
            wait_text(log, f"metrics on http://127.0.0.1:{port}/metrics")
            got = samples(scrape(url))
            for device in ("0", "1", "2"):
                assert value(got, "ocihook_device_healthy", device=device) == 1
            channel, stub = kubelet.plugin(request.endpoint)
            api = kubelet.api
            stub.Allocate(
                api.AllocateRequest(
                    container_requests=[api.ContainerAllocateRequest(devices_ids=["0"])]
                )
            )
            node = driver.parent / "driver/dev/synth2"
            st = node.stat()
            node.unlink()
            try:
                deadline = time.monotonic() + 30
                while value(samples(scrape(url)), "ocihook_device_healthy", device="2") != 0:
                    assert time.monotonic() < deadline, "device 2 never turned unhealthy"
                    time.sleep(0.3)
                got = samples(scrape(url))
            finally:
                os.mknod(node, st.st_mode, st.st_rdev)
            assert value(got, "ocihook_device_present", device="2") == 0
            assert value(got, "ocihook_device_healthy", device="1") == 1
            allocations = "ocihook_deviceplugin_allocations_total"
            assert value(got, allocations, channel="hook", result="allocated") == 1
            channel.close()
        finally:
            kubelet.stop()
    finally:
        plugin.send_signal(signal.SIGTERM)
        assert plugin.wait(timeout=30) == 0, log.read_text()


def test_a_vanished_device_root_makes_every_device_unhealthy(tmp_path, driver):
    from ocihook.deviceplugin import health
    from ocihook.deviceplugin.inventory import take_inventory

    settings, _ = compile_config(str(driver))
    taken = take_inventory(settings)
    assert set(health.check(settings, taken).values()) == {None}
    root = Path(settings["device_root"])
    root.rename(root.with_name("gone"))
    try:
        reasons = health.check(settings, taken)
        assert set(reasons) == {"0", "1", "2"}
        assert all(r and r.startswith("device root: ") for r in reasons.values()), reasons
    finally:
        root.with_name("gone").rename(root)
    assert set(health.check(settings, taken).values()) == {None}


def test_a_node_with_other_numbers_is_unhealthy(tmp_path, driver):
    from ocihook.deviceplugin import health
    from ocihook.deviceplugin.inventory import take_inventory

    settings, _ = compile_config(str(driver))
    taken = take_inventory(settings)
    node = Path(settings["device_root"]) / "dev/synth0"
    other = os.stat(Path(settings["device_root"]) / "dev/synth2").st_rdev
    node.unlink()
    os.mknod(node, 0o666 | 0o020000, other)
    reason = health.check(settings, taken)["0"]
    assert reason.startswith(f"node {node} is c {os.major(other)}:{os.minor(other)}, not c "), (
        reason
    )


def test_without_grpc_the_command_says_where_to_run_it(tmp_path):
    """A Python without grpcio (RHEL 9's RPM stack): one line, before anything is done."""
    script = (
        "import sys; sys.modules['grpc'] = None\n"
        "from ocihook.cli.deviceplugin import _grpc_missing; print(_grpc_missing())"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True)
    assert "needs grpcio and protobuf" in out.stdout and "DaemonSet's image" in out.stdout


def test_grpc_is_never_on_the_hooks_path():
    assert devstack.module("ocihook.hook") is not None
    script = "import sys, ocihook.hook, ocihook.request.parse; print(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True)
    assert "grpc" not in out.stdout and "ocihook.deviceplugin" not in out.stdout, out.stdout


@pytest.mark.root
@pytest.mark.parametrize("nvml", ["answer", "fail"])
def test_nvidia_ids_are_uuids_and_mig_devices_and_nvml_is_the_probe(tmp_path, nvml):
    """The stand-in NVIDIA host (tests/support/nvidia_mig.py: proc files, cap nodes, a
    stand-in NVML that answers or fails through NVML's own calls): a GPU with MIG devices is
    offered as its MIG devices (their UUIDs), the other GPU by its UUID; the Allocate answer
    of a MIG device holds its GPU's node and its two cap nodes. A failing NVML makes every
    NVIDIA device unhealthy, saying so."""
    from ocihook.deviceplugin import health
    from ocihook.deviceplugin.inventory import take_inventory
    from tests.support import nvidia_mig

    host = nvidia_mig.build(tmp_path / "root", nvml="answer")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(synthetic.config(host.root, profile="nvidia")))
    settings, _ = compile_config(str(path))
    taken = take_inventory(settings)
    gpu0, gpu1 = nvidia_mig.GPU0, nvidia_mig.GPU1
    assert [d.id for d in taken.devices] == [gpu1.uuid, *(m.uuid for m in gpu0.mig)]
    assert taken.resource == "ocihook.io/nvidia"
    mig = taken.by_id()[gpu0.mig[0].uuid]
    answer = allocation.container_allocation(settings, taken, [mig.id])
    nodes = [d["container_path"] for d in answer["devices"]]
    assert nodes[0] == "/dev/nvidia0" and sum("nvidia-caps" in n for n in nodes) >= 2, nodes
    assert "/dev/nvidia1" not in nodes
    if nvml == "fail":
        library = host.root / nvidia_mig.LIBRARY_DIR / f"libnvidia-ml.so.{nvidia_mig.hosts.VERSION}"
        library.write_bytes(nvidia_mig.standin_library(nvidia_mig.LAYOUT, "fail").read_bytes())
    reasons = health.check(settings, taken)
    if nvml == "answer":
        assert set(reasons.values()) == {None}, reasons
    else:
        assert all(r and r.startswith("NVML: ") for r in reasons.values()), reasons
