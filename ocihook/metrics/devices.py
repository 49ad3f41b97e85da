"""The devices as the metrics show them: the device plugin's inventory (its IDs), whether
each is present (its own nodes in the device root with the numbers they had) and healthy
(deviceplugin/health.py's verdict), whether a running container holds it (its nodes in a
running container's record), and what its driver tells (discover/facts.py) as labels."""

from __future__ import annotations

import sys
import threading
import time

from ocihook.deviceplugin import health
from ocihook.deviceplugin.inventory import Inventory, take_inventory, under
from ocihook.discover.roots import Roots
from ocihook.errors import OcihookError
from ocihook.structs import Struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

# The label names of every per-device metric, in this order (empty: the driver does not tell).
LABELS = (
    "device",
    "index",
    "vendor",
    "product",
    "device_id",
    "family",
    "compute_capability",
    "compute_units",
    "memory_mib",
    "firmware",
    "numa_node",
)


class DeviceState(Struct):
    __slots__ = ("labels", "present", "healthy", "allocated")
    labels: dict[str, str]
    present: bool
    healthy: bool
    allocated: bool


def fact_labels(facts: dict | None) -> dict[str, str]:
    """A device's facts (discover.facts.DeviceFacts as a dict) as label values."""
    facts = facts or {}

    def text(key: str) -> str:
        value = facts.get(key)
        return "" if value is None else str(value)

    memory = facts.get("memory")
    return {
        "vendor": text("vendor"),
        "product": text("product"),
        "device_id": text("device_id"),
        "family": text("family"),
        "compute_capability": text("compute_capability"),
        "compute_units": text("compute_units"),
        "memory_mib": "" if memory is None else str(memory >> 20),
        "firmware": text("firmware"),
    }


def read_facts(config: dict, host_root: str) -> tuple[dict[int, dict], str | None]:
    """index -> the device's facts, and why some could not be read (None: all were)."""
    from ocihook.discover.facts import gather
    from ocihook.pipeline import open_roots, plan_container
    from ocihook.plan.decide import Target
    from ocihook.request.parse import parse_request

    config = _under(config, host_root)
    try:
        with open_roots(config) as roots:
            request = parse_request("all", "exporter")
            plan = plan_container(config, roots, request, Target.command_line()).plan
            found = gather(config, roots, plan)
    except OcihookError as error:
        return {}, str(error)
    by_index = {d.index: d.to_dict() for d in found.devices if d.index is not None}
    return by_index, found.problem


def _under(config: dict, host_root: str) -> dict:
    if host_root == "/":
        return config
    config = dict(config)
    for key in ("source_root", "device_root"):
        config[key] = under(host_root, config[key])
    return config


def present(config: dict, inventory: Inventory) -> dict[str, bool]:
    """device id -> whether its own nodes are in the device root as the inventory saw them."""
    try:
        roots = Roots(
            under(inventory.host_root, config["source_root"]),
            under(inventory.host_root, config["device_root"]),
        )
    except (OSError, OcihookError):
        return {device.id: False for device in inventory.devices}
    with roots:
        return {
            device.id: not any(health.node_problem(roots, node) for node in device.nodes)
            for device in inventory.devices
        }


def states(
    config: dict,
    inventory: Inventory,
    unhealthy: dict[str, str | None],
    held: set[tuple[str, int, int]],
    facts: dict[int, dict],
) -> list[DeviceState]:
    """Every device of the inventory with its labels and state."""
    here = present(config, inventory)
    result = []
    for device in inventory.devices:
        labels = {
            "device": device.id,
            "index": "" if device.index is None else str(device.index),
            **fact_labels(facts.get(device.index)),
            "numa_node": "" if device.numa is None else str(device.numa),
        }
        nodes = {(node.type, node.major, node.minor) for node in device.nodes}
        result.append(
            DeviceState(
                labels,
                here.get(device.id, False),
                not unhealthy.get(device.id),
                bool(nodes) and nodes <= held,
            )
        )
    return result


class Watch:
    """For `ocihook exporter` (no device plugin): the inventory, taken when the driver is
    there (retried), and the devices' health, checked every `interval` seconds in a thread
    (what the device plugin's health loop does)."""

    def __init__(self, config: dict, host_root: str, interval: float) -> None:
        self.config = config
        self.host_root = host_root
        self.interval = interval
        self.inventory: Inventory | None = None
        self.unhealthy: dict[str, str | None] = {}
        self.problem: str | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._loop, daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def snapshot(self) -> tuple[Inventory | None, dict[str, str | None]]:
        return self.inventory, dict(self.unhealthy)

    def _loop(self) -> None:
        said = None
        while not self._stop.is_set():
            try:
                if self.inventory is None:
                    self.inventory = take_inventory(self.config, self.host_root)
                self.unhealthy = health.check(self.config, self.inventory)
                self.problem = None
            except OcihookError as error:
                self.problem = str(error)
                if self.problem != said:
                    log(f"no devices yet: {error} (retrying every {self.interval:g} s)")
                said = self.problem
            self._stop.wait(self.interval)


def log(message: str) -> None:
    sys.stderr.write(f"ocihook exporter: {message}\n")
    sys.stderr.flush()


def plugin_snapshot(state) -> Callable[[], tuple[Inventory | None, dict[str, str | None]]]:
    """The device plugin's view (deviceplugin.server.State) as a snapshot function."""

    def snapshot() -> tuple[Inventory | None, dict[str, str | None]]:
        with state.changed:
            return state.inventory, dict(state.health)

    return snapshot


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()
