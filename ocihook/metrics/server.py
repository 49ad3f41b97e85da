"""Serve the node's metrics over HTTP (the Prometheus client library's server: `/metrics`,
the text format, gzip when asked), from the device plugin's process or `ocihook exporter`.

The default port is above 9000: OpenShift's monitoring scrapes no lower port. The server
runs in a daemon thread; the process's own end (SIGTERM) ends it.
"""

from __future__ import annotations

from ocihook.errors import OcihookError, describe

DEFAULT_PORT = 9479
DEFAULT_ADDRESS = "0.0.0.0"


def missing() -> str | None:
    """Why the metrics cannot be served here (None: they can)."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError as error:
        return f"needs the Prometheus client library prometheus_client ({error})"
    return None


def serve(collector: object, address: str, port: int) -> None:
    """Listen on address:port and answer every scrape from `collector` (one line when the
    port cannot be had)."""
    problem = missing()
    if problem:
        raise OcihookError(f"metrics: {problem}")
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        start_http_server(port, addr=address, registry=registry)
    except OSError as error:
        raise OcihookError(
            f"metrics: cannot listen on {address}:{port}: {describe(error)}"
        ) from None
