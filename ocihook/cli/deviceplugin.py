"""`ocihook device-plugin`: the kubelet's device plugin for the configured profile."""

from __future__ import annotations

import click

from ocihook.cli.commands import config_option
from ocihook.cli.output import emit_json, json_option
from ocihook.errors import OcihookError

DEFAULT_KUBELET_DIR = "/var/lib/kubelet/device-plugins"  # deviceplugin.server's (grpc-free)
DEFAULT_METRICS_PORT = 9479  # metrics.server's (prometheus_client-free); above 9000: OpenShift
DEFAULT_AUDIT_LOG = "/var/log/audit/audit.log"


def metrics_options(function):
    """--metrics-port, --metrics-address and --audit-log, shared with `ocihook exporter`."""
    function = click.option(
        "--audit-log",
        default=DEFAULT_AUDIT_LOG,
        show_default=True,
        help="The audit log whose SELinux denials of the hook's containers are counted, "
        "read under --host-root ('' for none).",
    )(function)
    function = click.option(
        "--metrics-address",
        default="0.0.0.0",
        show_default=True,
        help="Address the metrics server listens on (127.0.0.1: this host only; :: for IPv6).",
    )(function)
    return function


def start_metrics(
    config: dict,
    host_root: str,
    address: str,
    port: int,
    audit_log: str,
    devices,
    allocations=None,
) -> None:
    """Serve the node's metrics on address:port in this process (ocihook/metrics/): the
    records of the config's state dir and the audit log, both under `host_root`, and the
    devices' view `devices` gives. One line when it cannot."""
    from ocihook.deviceplugin.inventory import under
    from ocihook.metrics import server

    problem = server.missing()
    if problem:
        raise OcihookError(f"metrics: {problem} (--metrics-port 0 turns them off)")
    from ocihook.metrics.collector import NodeCollector

    collector = NodeCollector(
        config,
        host_root,
        under(host_root, config["state_dir"]),
        under(host_root, audit_log) if audit_log else None,
        devices,
        allocations,
    )
    server.serve(collector, address, port)
    import threading

    threading.Thread(target=collector.load_facts, daemon=True).start()
    click.echo(
        f"ocihook {click.get_current_context().info_name}: metrics on "
        f"http://{address}:{port}/metrics",
        err=True,
    )


def _grpc_missing() -> str | None:
    """Why the gRPC side cannot load here (None: it can)."""
    try:
        import grpc  # noqa: F401
        from google import protobuf  # noqa: F401
    except ImportError as error:
        return f"needs grpcio and protobuf ({error}): run it from the DaemonSet's image"
    try:
        from ocihook.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc  # noqa: F401
    except ImportError:
        return "its gRPC stubs were not generated (make stubs: scripts/deviceplugin_stubs.py)"
    except Exception as error:  # the stubs' own version checks raise RuntimeError & co
        return f"its gRPC stubs do not load: {str(error).splitlines()[0]}"
    return None


def _check_resource(name: str) -> None:
    """An extended resource name as the kubelet takes it: DOMAIN/NAME."""
    import re

    if not re.fullmatch(
        r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", name
    ) or name.startswith("kubernetes.io/"):
        raise OcihookError(
            f"resource {name!r:.80}: not an extended resource name (DOMAIN/NAME, e.g. "
            "ocihook.io/synthetic, outside kubernetes.io)"
        )


@click.command("device-plugin")
@config_option
@click.option(
    "--kubelet-dir",
    default=DEFAULT_KUBELET_DIR,
    show_default=True,
    help="The kubelet's device plugin dir: kubelet.sock is there, and the plugin's socket "
    "goes beside it.",
)
@click.option(
    "--resource",
    default=None,
    help="Extended resource name [the config's kubernetes.resource, else ocihook.io/<profile>].",
)
@click.option(
    "--health-interval",
    type=click.FloatRange(1, 3600),
    default=None,
    help="Seconds between health checks [the config's kubernetes.health_interval: 10].",
)
@click.option(
    "--host-root",
    default="/",
    show_default=True,
    help="Where the node's root is mounted (the DaemonSet's container: /host): the config's "
    "source_root and device_root are read under it; the kubelet is told the node's paths.",
)
@click.option(
    "--list",
    "list_only",
    is_flag=True,
    help="Print the devices it would offer (IDs, nodes, NUMA node, health) and exit.",
)
@json_option(help="With --list: print them as one JSON document.")
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_METRICS_PORT,
    show_default=True,
    help="Serve the node's Prometheus metrics on this port (/metrics; 0: not at all). A "
    "port that cannot be had is said in one line, and the plugin goes on without them.",
)
@metrics_options
def device_plugin(
    config_path: str,
    kubelet_dir: str,
    resource: str | None,
    health_interval: float | None,
    host_root: str,
    list_only: bool,
    as_json: bool,
    metrics_port: int,
    metrics_address: str,
    audit_log: str,
) -> None:
    """Offer the profile's devices to the kubelet as an extended resource (device plugin
    API v1beta1) and hand each container exactly what was allocated to it.

    One device per index (NVIDIA: per GPU UUID, and per MIG device in place of its GPU),
    named as the hook and `ocihook cdi generate` name it. A device is Healthy while its nodes
    are in the device root with the major:minor they had (and, for NVIDIA, NVML lists it);
    its NUMA node comes from sysfs. Allocate answers with device specs (the runtime creates
    and allows the nodes) and the `ocihook.io/devices` container annotation that the hook
    reads in Kubernetes mode (kubernetes.device_plugin: true in the config). Re-registers when
    the kubelet restarts. Serves the node's metrics (devices, the hook's records, SELinux
    denials) on --metrics-port. Runs until SIGTERM (docs/kubernetes.md).
    """
    from ocihook.config.compiled import compile_config

    config, _ = compile_config(config_path)
    if resource:
        config["kubernetes"]["resource"] = resource
    from ocihook.deviceplugin.inventory import describe, resource_name, take_inventory

    _check_resource(resource_name(config))
    if not host_root.startswith("/"):
        raise OcihookError(f"--host-root {host_root}: must be an absolute path")
    if list_only:
        from ocihook.deviceplugin import health

        inventory = take_inventory(config, host_root)
        document = describe(inventory, health.check(config, inventory))
        if as_json:
            emit_json(document)
            return
        click.echo(f"resource {document['resource']} (profile {document['profile']})")
        for device in document["devices"]:
            numa = "-" if device["numa_node"] is None else device["numa_node"]
            state = device["health"] + (f" ({device['reason']})" if device["reason"] else "")
            click.echo(f"  {device['id']}: numa {numa}, {state}: {' '.join(device['nodes'])}")
        click.echo(f"  control nodes: {' '.join(document['control']) or 'none'}")
        return
    missing = _grpc_missing()
    if missing:
        raise OcihookError(f"device-plugin: {missing}")
    from ocihook.deviceplugin.server import run

    interval = health_interval or float(config["kubernetes"]["health_interval"])
    metrics = None
    if metrics_port:

        def metrics(state) -> None:  # once the plugin has its inventory and health
            from ocihook.deviceplugin.server import log
            from ocihook.metrics.devices import plugin_snapshot

            try:
                start_metrics(
                    config,
                    host_root,
                    metrics_address,
                    metrics_port,
                    audit_log,
                    plugin_snapshot(state),
                    state.allocation_counts,
                )
            except OcihookError as error:  # the kubelet's devices matter more: go on
                log(f"{error}; serving no metrics")

    raise SystemExit(run(config, kubelet_dir, interval, host_root, metrics))
