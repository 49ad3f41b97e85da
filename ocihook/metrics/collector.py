"""The metric families, built at each scrape from what hookstats.py, denials.py and
devices.py read (the Prometheus client library's custom collector: its families, its
text format). A scrape refreshes every source first; what a source could not read is an
error of that scrape (`ocihook_exporter_errors_total{source}`), said once on stderr
while it lasts, and never fails the scrape.

Every metric is listed, with its labels, in docs/kubernetes.md ("Metrics").
"""

from __future__ import annotations

import sys
import threading

from ocihook import __version__
from ocihook.metrics import devices as device_view
from ocihook.metrics.denials import Denials
from ocihook.metrics.hookstats import HookStats

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

SOURCES = ("records", "audit_log", "devices")
# Every metric family name the exporter serves (without the _total, _bucket, ... suffixes
# the text format adds): the dashboard's queries are checked against it.
METRICS = (
    "ocihook_exporter_info",
    "ocihook_exporter_errors",
    "ocihook_device_present",
    "ocihook_device_healthy",
    "ocihook_device_allocated",
    "ocihook_containers_injected",
    "ocihook_containers_refused",
    "ocihook_containers_rolled_back",
    "ocihook_hook_duration_seconds",
    "ocihook_records",
    "ocihook_selinux_denials",
    "ocihook_deviceplugin_allocations",
)


class NodeCollector:
    """Collects the node's metrics; `devices` gives (inventory, health) or None (no device
    view), `allocations` the device plugin's Allocate counts by channel (or None)."""

    def __init__(
        self,
        config: dict,
        host_root: str,
        state_dir: str,
        audit_log: str | None,
        devices: Callable[[], tuple] | None,
        allocations: Callable[[], dict[tuple[str, str], int]] | None = None,
    ) -> None:
        self.config = config
        self.host_root = host_root
        self.hookstats = HookStats(state_dir)
        self.denials = Denials(audit_log) if audit_log else None
        self.devices = devices
        self.allocations = allocations
        self.facts: dict[int, dict] = {}
        self.errors = dict.fromkeys(SOURCES, 0)
        self._said: dict[str, str | None] = dict.fromkeys(SOURCES)
        self._lock = threading.Lock()
        self.refresh()  # the baseline: what is there now is not counted

    def load_facts(self) -> None:
        """The devices' facts (NVML asked once, with its time limit); said when incomplete."""
        facts, problem = device_view.read_facts(self.config, self.host_root)
        self.facts = facts
        if problem:
            device_view.log(f"device facts incomplete: {problem}")

    def refresh(self) -> list:
        """Refresh every source; the device states (empty without a device view)."""
        problems = {source: [] for source in SOURCES}
        problems["records"] = self.hookstats.refresh()
        if self.denials is not None:
            bodies = list(self.hookstats.bodies.values())
            problems["audit_log"] = self.denials.refresh(bodies)
        states = []
        if self.devices is not None:
            inventory, unhealthy = self.devices()
            if inventory is not None:
                try:
                    states = device_view.states(
                        self.config, inventory, unhealthy, self.hookstats.held, self.facts
                    )
                except Exception as error:  # noqa: BLE001 - a scrape never fails
                    problems["devices"] = [f"devices: {type(error).__name__}: {error}"]
        for source, lines in problems.items():
            self.errors[source] += len(lines)
            first = lines[0] if lines else None
            if first != self._said[source] and first is not None:
                more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
                sys.stderr.write(f"ocihook exporter: {first}{more}\n")
            self._said[source] = first
        return states

    def describe(self) -> list:
        return []  # registering must not scrape (the registry calls describe or collect)

    def collect(self) -> Iterator:
        with self._lock:
            states = self.refresh()
            yield from self._families(states)

    def _families(self, states: list) -> Iterator:
        from prometheus_client.core import (  # the server's: only a scrape needs it
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        stats = self.hookstats
        info = GaugeMetricFamily(
            "ocihook_exporter_info", "ocihook's version and profile", labels=["version", "profile"]
        )
        info.add_metric([__version__, self.config["profile"]["name"]], 1)
        yield info
        errors = CounterMetricFamily(
            "ocihook_exporter_errors",
            "Problems met while reading a source at a scrape (an unreadable record or audit "
            "log, a device view that failed)",
            labels=["source"],
        )
        for source in SOURCES:
            errors.add_metric([source], self.errors[source])
        yield errors
        for name, text, attribute in (
            ("present", "1 while the device's own nodes are in the device root", "present"),
            ("healthy", "1 while the device is healthy (as the device plugin says)", "healthy"),
            ("allocated", "1 while a running container's record holds it", "allocated"),
        ):
            family = GaugeMetricFamily(
                f"ocihook_device_{name}", text, labels=list(device_view.LABELS)
            )
            for state in states:
                values = [state.labels[label] for label in device_view.LABELS]
                family.add_metric(values, 1 if getattr(state, attribute) else 0)
            yield family
        injected = CounterMetricFamily(
            "ocihook_containers_injected",
            "Containers the hook injected devices into, since the exporter started",
            labels=["route"],
        )
        for route, count in sorted(stats.injected.items()):
            injected.add_metric([route], count)
        yield injected
        for outcome, text in (
            ("refused", "Container starts the hook refused before changing anything"),
            ("rolled_back", "Container starts the hook failed after changes, undone"),
        ):
            family = CounterMetricFamily(
                f"ocihook_containers_{outcome}",
                f"{text}, since the exporter started, by the step that failed",
                labels=["route", "reason"],
            )
            for (route, kind, reason), count in sorted(stats.failed.items()):
                if kind == outcome:
                    family.add_metric([route, reason], count)
            yield family
        duration = HistogramMetricFamily(
            "ocihook_hook_duration_seconds",
            "Seconds the hook took from seeing a request to its record, by outcome",
            labels=["route", "outcome"],
        )
        for (route, outcome), histogram in sorted(stats.durations.items()):
            duration.add_metric([route, outcome], histogram.cumulative(), histogram.sum)
        yield duration
        held = GaugeMetricFamily(
            "ocihook_records", "The hook's records in the state dir, by status", labels=["status"]
        )
        for status, count in sorted(stats.status.items()):
            held.add_metric([status], count)
        yield held
        denials = CounterMetricFamily(
            "ocihook_selinux_denials",
            "AVC denials `ocihook audit` ties to the hook's containers, injected files or the "
            "hook, by object class and cause, since the exporter started",
            labels=["tclass", "cause"],
        )
        if self.denials is not None:
            for (tclass, cause), count in sorted(self.denials.counts.items()):
                denials.add_metric([tclass, cause], count)
        yield denials
        allocations = CounterMetricFamily(
            "ocihook_deviceplugin_allocations",
            "Containers the device plugin allocated devices to, by channel (hook: device "
            "specs and the hook's annotation; cdi: CDI names, the hook does not run) and "
            "result",
            labels=["channel", "result"],
        )
        counts = self.allocations() if self.allocations is not None else {}
        for (channel, result), count in sorted(counts.items()):
            allocations.add_metric([channel, result], count)
        yield allocations
