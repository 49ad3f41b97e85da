"""`ocihook exporter`: the node's metrics without the device plugin."""

from __future__ import annotations

import signal
import threading

import click

from ocihook.cli.commands import config_option
from ocihook.cli.deviceplugin import DEFAULT_METRICS_PORT, metrics_options, start_metrics
from ocihook.errors import OcihookError


@click.command("exporter")
@config_option
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=DEFAULT_METRICS_PORT,
    show_default=True,
    help="Port of the metrics server (/metrics).",
)
@metrics_options
@click.option(
    "--host-root",
    default="/",
    show_default=True,
    help="Where the node's root is mounted: the state dir, the audit log and the roots are "
    "read under it.",
)
@click.option(
    "--health-interval",
    type=click.FloatRange(1, 3600),
    default=None,
    help="Seconds between device health checks [the config's kubernetes.health_interval: 10].",
)
def exporter(
    config_path: str,
    metrics_port: int,
    metrics_address: str,
    audit_log: str,
    host_root: str,
    health_interval: float | None,
) -> None:
    """Serve the node's Prometheus metrics on its own: for a host without Kubernetes (podman),
    or a node whose devices another vendor's device plugin offers. `ocihook device-plugin`
    serves the same metrics itself (--metrics-port): run one or the other.

    Metrics: each device present, healthy and held by a running container, with what its
    driver tells as labels; containers injected, refused and rolled back and the hook's
    duration, by route (from the hook's records in the state dir: the hook itself writes
    nothing for the exporter); SELinux denials `ocihook audit` ties to the hook's
    containers and files, by class; the exporter's own errors. Every metric is in
    docs/kubernetes.md. Runs until SIGTERM.
    """
    from ocihook.config.compiled import compile_config

    if not host_root.startswith("/"):
        raise OcihookError(f"--host-root {host_root}: must be an absolute path")
    config, _ = compile_config(config_path)
    from ocihook.metrics.devices import Watch

    interval = health_interval or float(config["kubernetes"]["health_interval"])
    watch = Watch(config, host_root, interval)
    start_metrics(config, host_root, metrics_address, metrics_port, audit_log, watch.snapshot)
    watch.start()
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    while not stop.wait(3600):
        pass
    watch.stop()
