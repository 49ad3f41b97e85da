"""The device plugin's gRPC side: serve `v1beta1.DevicePlugin` on a unix socket in the
kubelet's device plugin dir, register it with the kubelet (`v1beta1.Registration` on
kubelet.sock), stream the devices' health (ListAndWatch), answer GetPreferredAllocation and
Allocate from inventory.py, topology.py and allocation.py, and start over when the kubelet
restarts (it deletes every socket in the dir and makes a new kubelet.sock) or is not there
yet (retried, said once).

Nothing is kept between runs: the device IDs are the hook's names of the devices, stable
across restarts, and the kubelet keeps its own checkpoint of what it allocated, so a plugin
that restarts and registers again hands out no device twice.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from concurrent import futures
from functools import partial

import grpc

from ocihook.deviceplugin import allocation, health, topology
from ocihook.deviceplugin.inventory import Inventory, take_inventory
from ocihook.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from ocihook.errors import OcihookError

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_KUBELET_DIR = "/var/lib/kubelet/device-plugins"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
REGISTER_TIMEOUT = 10.0
RETRY_SECONDS = 5.0
WATCH_SECONDS = 1.0


def log(message: str) -> None:
    sys.stderr.write(f"ocihook device-plugin: {message}\n")
    sys.stderr.flush()


class State:
    """The inventory and the health of its devices, shared by the health loop and the gRPC
    handlers; `generation` moves (and waiters wake) whenever the list the kubelet sees
    changes."""

    def __init__(self, config: dict, inventory: Inventory) -> None:
        self.config = config
        self.inventory = inventory
        self.health: dict[str, str | None] = {d.id: None for d in inventory.devices}
        self.generation = 0
        self.changed = threading.Condition()
        self.stopping = threading.Event()
        self.channel = "cdi" if config["kubernetes"].get("cdi") else "hook"
        self.allocations: dict[tuple[str, str], int] = {}  # (channel, result) -> containers

    def allocated(self, result: str, count: int = 1) -> None:
        with self.changed:
            key = (self.channel, result)
            self.allocations[key] = self.allocations.get(key, 0) + count

    def allocation_counts(self) -> dict[tuple[str, str], int]:
        with self.changed:
            return dict(self.allocations)

    def refresh(self) -> None:
        """Check health now; log and publish what changed."""
        try:
            found = health.check(self.config, self.inventory)
        except OcihookError as error:  # the check itself failed: every device is unhealthy
            found = {d.id: str(error) for d in self.inventory.devices}
        with self.changed:
            changed = False
            for device_id, reason in found.items():
                before = self.health.get(device_id)
                if bool(before) != bool(reason):
                    changed = True
                    log(
                        f"device {device_id} unhealthy: {reason}"
                        if reason
                        else f"device {device_id} healthy again"
                    )
                self.health[device_id] = reason
            if changed:
                self.generation += 1
                self.changed.notify_all()

    def devices(self) -> list:
        return [
            api_pb2.Device(
                ID=device.id,
                health=UNHEALTHY if self.health.get(device.id) else HEALTHY,
                topology=api_pb2.TopologyInfo(
                    nodes=[api_pb2.NUMANode(ID=n) for n in topology.topology_of(device.numa)]
                ),
            )
            for device in self.inventory.devices
        ]

    def stop(self) -> None:
        self.stopping.set()
        with self.changed:
            self.changed.notify_all()


def _moved(state: State, seen: int) -> bool:
    return state.generation != seen or state.stopping.is_set()


class DevicePlugin(api_pb2_grpc.DevicePluginServicer):
    """The kubelet's calls, answered from the shared State."""

    def __init__(self, state: State) -> None:
        self.state = state

    def GetDevicePluginOptions(self, request, context):
        return api_pb2.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(self, request, context):
        state = self.state
        with state.changed:
            seen = state.generation
            first = state.devices()
        yield api_pb2.ListAndWatchResponse(devices=first)
        while context.is_active() and not state.stopping.is_set():
            with state.changed:
                state.changed.wait_for(partial(_moved, state, seen), timeout=1.0)
                if state.generation == seen:
                    continue
                seen = state.generation
                devices = state.devices()
            yield api_pb2.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request, context):
        numa = {d.id: d.numa for d in self.state.inventory.devices}
        responses = []
        for wanted in request.container_requests:
            chosen = topology.preferred(
                list(wanted.available_deviceIDs),
                list(wanted.must_include_deviceIDs),
                wanted.allocation_size,
                numa,
            )
            log(f"preferred allocation of {wanted.allocation_size}: {','.join(chosen)}")
            responses.append(api_pb2.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request, context):
        responses = []
        for wanted in request.container_requests:
            ids = list(wanted.devices_ids)
            try:
                answer = allocation.container_allocation(
                    self.state.config, self.state.inventory, ids
                )
            except OcihookError as error:
                log(str(error))
                self.state.allocated("refused")
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
            sick = [i for i in ids if self.state.health.get(i)]
            if sick:
                message = f"Allocate: device {sick[0]} is unhealthy: {self.state.health[sick[0]]}"
                log(message)
                self.state.allocated("refused")
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, message)
            log(f"allocated {','.join(ids)}")
            self.state.allocated("allocated")
            responses.append(_response(answer))
        return api_pb2.AllocateResponse(container_responses=responses)

    def PreStartContainer(self, request, context):
        return api_pb2.PreStartContainerResponse()


def _response(answer: dict):
    return api_pb2.ContainerAllocateResponse(
        envs=answer["envs"],
        mounts=[api_pb2.Mount(**m) for m in answer["mounts"]],
        devices=[api_pb2.DeviceSpec(**d) for d in answer["devices"]],
        annotations=answer["annotations"],
        cdi_devices=[api_pb2.CDIDevice(name=name) for name in answer["cdi_devices"]],
    )


def _inode(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def socket_name(inventory: Inventory) -> str:
    return f"{inventory.resource.replace('/', '_')}.sock"


def register(kubelet_dir: str, endpoint: str, resource: str) -> None:
    """Register with the kubelet; grpc.RpcError when it refuses or is not there."""
    target = f"unix:{KUBELET_SOCKET}"  # relative: the daemon works in the kubelet dir
    with grpc.insecure_channel(target) as channel:
        api_pb2_grpc.RegistrationStub(channel).Register(
            api_pb2.RegisterRequest(
                version=API_VERSION,
                endpoint=endpoint,
                resource_name=resource,
                options=api_pb2.DevicePluginOptions(get_preferred_allocation_available=True),
            ),
            timeout=REGISTER_TIMEOUT,
        )


def _rpc_reason(error: grpc.RpcError) -> str:
    details = error.details() if hasattr(error, "details") else None
    return (details or str(error)).splitlines()[0][:300]


def serve_once(state: State, kubelet_dir: str) -> bool:
    """One registration's life: serve, register, then watch until the kubelet restarts (our
    socket gone or kubelet.sock replaced: True, start over) or we are told to stop (False)."""
    name = socket_name(state.inventory)
    path = os.path.join(kubelet_dir, name)
    kubelet = os.path.join(kubelet_dir, KUBELET_SOCKET)
    if os.path.lexists(path):
        os.unlink(path)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    api_pb2_grpc.add_DevicePluginServicer_to_server(DevicePlugin(state), server)
    try:  # relative to the kubelet dir (run() works there): a unix path has at most 107 bytes
        server.add_insecure_port(f"unix:{name}")
        server.start()
    except RuntimeError as error:
        raise OcihookError(f"cannot serve on {path}: {str(error).splitlines()[0]}") from None
    ours, theirs = _inode(path), _inode(kubelet)
    try:
        try:
            register(kubelet_dir, name, state.inventory.resource)
        except grpc.RpcError as error:
            log(f"registration with the kubelet at {kubelet} failed: {_rpc_reason(error)}")
            return not state.stopping.wait(RETRY_SECONDS)
        count = len(state.inventory.devices)
        log(
            f"registered {state.inventory.resource} ({count} devices) with the kubelet at {kubelet}"
        )
        while not state.stopping.wait(WATCH_SECONDS):
            if _inode(path) != ours or _inode(kubelet) != theirs:
                log("the kubelet restarted: registering again")
                return True
        return False
    finally:
        server.stop(grace=1).wait()
        if ours is not None and _inode(path) == ours:  # still ours: not a new kubelet's dir
            try:
                os.unlink(path)
            except OSError:
                pass


def wait_for_kubelet(state: State, kubelet_dir: str) -> bool:
    """Until kubelet.sock exists (False: told to stop meanwhile); said once."""
    kubelet = os.path.join(kubelet_dir, KUBELET_SOCKET)
    said = False
    while not os.path.exists(kubelet):
        if not said:
            log(f"no kubelet at {kubelet}: waiting for it (checked every {RETRY_SECONDS:g} s)")
            said = True
        if state.stopping.wait(RETRY_SECONDS):
            return False
    return True


def health_loop(state: State, interval: float) -> None:
    while not state.stopping.wait(interval):
        state.refresh()


def run(config: dict, kubelet_dir: str, interval: float, host_root: str = "/", metrics=None) -> int:
    """The daemon: inventory, health loop, registration loop; SIGTERM/SIGINT end it.
    `metrics(state)`, when given, starts the metrics server once the state is there."""
    kubelet_dir = os.path.abspath(kubelet_dir)
    if not os.path.isdir(kubelet_dir):
        raise OcihookError(f"--kubelet-dir {kubelet_dir}: no such directory")
    os.chdir(kubelet_dir)  # sockets by their names: unix paths are limited to 107 bytes
    inventory = _first_inventory(config, host_root)
    state = State(config, inventory)
    state.refresh()
    if metrics is not None:
        metrics(state)
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: state.stop())
    checker = threading.Thread(target=health_loop, args=(state, interval), daemon=True)
    checker.start()
    ids = ", ".join(d.id for d in inventory.devices) or "none"
    log(f"{inventory.resource}: devices {ids}; health every {interval:g} s")
    while not state.stopping.is_set():
        if not wait_for_kubelet(state, kubelet_dir):
            break
        if not serve_once(state, kubelet_dir):
            break
    log("stopped")
    return 0


def _first_inventory(config: dict, host_root: str) -> Inventory:
    """The inventory; a driver that is not there yet is waited for (said once)."""
    said = None
    while True:
        try:
            return take_inventory(config, host_root)
        except OcihookError as error:
            if str(error) != said:
                log(f"no devices yet: {error} (retrying every {RETRY_SECONDS:g} s)")
                said = str(error)
            time.sleep(RETRY_SECONDS)
