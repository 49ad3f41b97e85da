"""The exporter as the tests see it: `ocihook exporter` in a process of its own on a free
loopback port, scraped with a real HTTP client (urllib) and read back with the Prometheus
client library's own parser of the text format. The client library is the development
stack's (the `devstack` mark: RHEL 9's Python stack has none), imported where it is used."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(url: str, timeout: float = 30) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return response.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """(sample name, its labels) -> value, through the client library's parser (which
    raises on text that is not the exposition format)."""
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def text_of(collector: object) -> str:
    """One scrape of `collector` in this process, in the text format (the library's own
    registry and generate_latest, as its HTTP server answers)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def value(found: dict, name: str, **labels: str) -> float | None:
    """The one sample of `name` whose labels include `labels` (None: none; two fail)."""
    hits = [v for (n, have), v in found.items() if n == name and set(labels.items()) <= set(have)]
    assert len(hits) <= 1, f"{name}{labels}: {len(hits)} samples"
    return hits[0] if hits else None


class Exporter:
    """`ocihook exporter --config CONFIG` on a free port of 127.0.0.1."""

    def __init__(self, config: Path, log: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.log = log
        args = [sys.executable, "-m", "ocihook.cli.main", "exporter", "--config", str(config)]
        args += ["--metrics-address", "127.0.0.1", "--metrics-port", str(self.port), *extra]
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                args, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the exporter exited: {log.read_text()[-2000:]}")
            try:
                scrape(self.url, timeout=5)
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"the exporter never answered: {log.read_text()[-2000:]}")

    def samples(self) -> dict:
        return samples(scrape(self.url))

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError("the exporter did not stop on SIGTERM") from None
