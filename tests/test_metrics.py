"""The exporter's sources and its text (ocihook/metrics/): what it counts from the hook's
records and failure records, from the audit log (tied to containers as `ocihook audit`
ties them: the same report is the oracle), its own errors, and the devices' state; every
scrape read back with the Prometheus client library's parser. The podman end to end (real
containers injected, refused and rolled back): tests/test_e2e_metrics.py."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

from ocihook import records
from ocihook.errors import OcihookError
from ocihook.metrics.collector import METRICS, NodeCollector
from tests.support import synthetic
from tests.support.cli import invoke
from tests.support.metrics import Exporter, samples, text_of, value
from tests.test_audit_report import CID, OTHER, record

pytestmark = pytest.mark.devstack("prometheus_client")  # RHEL 9's Python stack has none

DATA = Path(__file__).parent / "data" / "avc"
CONFIG = {"profile": {"name": "synthetic"}, "records": {"max_count": 1000, "max_age": 3600}}


def collector(state: Path, audit_log: Path | None = None) -> tuple[NodeCollector, object]:
    node = NodeCollector(CONFIG, "/", str(state), str(audit_log) if audit_log else None, None)
    return node, node


def scrape(node) -> dict:
    return samples(text_of(node))


def injection(cid: str, route: str, duration: float, status: str = "running") -> dict:
    """A record of a container whose process runs (this test's own: pid and start time)."""
    body = record(cid, "s0:c1,c2", os.getpid())
    body.update(version=records.RECORD_VERSION, status=status, route=route, duration=duration)
    body["pid_start"] = records.process_start(os.getpid())
    return body


def fail(state: Path, cid: str, reason: str, changed: bool, error: Exception) -> None:
    config = {**CONFIG, "state_dir": str(state)}
    records.write_failure(config, cid, records.PRESTART, reason, changed, time.monotonic(), error)


def test_only_what_appears_after_the_start_is_counted(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / f"{OTHER}.json").write_text(json.dumps(injection(OTHER, "prestart", 0.02)))
    fail(state, "old", "plan", False, OcihookError("before the exporter"))
    _, registry = collector(state)
    first = scrape(registry)
    assert value(first, "ocihook_containers_injected_total") is None  # the baseline
    assert value(first, "ocihook_records", status="running") == 1
    a, b = "a" * 64, "b" * 64
    (state / f"{a}.json").write_text(json.dumps(injection(a, "precreate", 0.03)))
    (state / f"{b}.json").write_text(json.dumps(injection(b, "prestart", 0.2, "exited")))
    fail(state, "c" * 64, "plan", False, OcihookError("device index 7 does not exist"))
    fail(state, "d" * 64, "container", True, OcihookError("mount failed"))
    fail(state, "e" * 64, "container", True, ValueError("a bug"))
    got = scrape(registry)
    assert value(got, "ocihook_containers_injected_total", route="precreate") == 1
    assert value(got, "ocihook_containers_injected_total", route="prestart") == 1
    assert value(got, "ocihook_containers_refused_total", reason="plan") == 1
    assert value(got, "ocihook_containers_rolled_back_total", reason="container") == 1
    assert value(got, "ocihook_containers_rolled_back_total", reason="internal") == 1
    count = "ocihook_hook_duration_seconds_count"
    assert value(got, count, route="prestart", outcome="injected") == 1
    assert value(got, "ocihook_hook_duration_seconds_sum", route="precreate") == 0.03
    bucket = "ocihook_hook_duration_seconds_bucket"
    assert value(got, bucket, route="prestart", outcome="injected", le="0.1") == 0
    assert value(got, bucket, route="prestart", outcome="injected", le="0.25") == 1
    assert value(got, count, route="prestart", outcome="rolled_back") == 2
    assert value(got, "ocihook_records", status="running") == 2
    assert value(got, "ocihook_records", status="exited") == 1
    assert value(got, "ocihook_exporter_errors_total", source="records") == 0
    assert scrape(registry) == got  # nothing new: nothing counted twice
    (state / f"{a}.json").unlink()  # pruned: the counter stays, the snapshot follows
    again = scrape(registry)
    assert value(again, "ocihook_containers_injected_total", route="precreate") == 1
    assert value(again, "ocihook_records", status="running") == 1


def test_a_running_record_whose_process_is_gone_counts_as_orphaned(tmp_path):
    """No poststop stage in the shipped registration: a record says running until the hook's
    next sweep; the exporter reads it by liveness, as `ocihook audit` does."""
    import subprocess

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid no longer runs
    live, dead = "a" * 64, "b" * 64
    (state / f"{live}.json").write_text(json.dumps(injection(live, "prestart", 0.02)))
    body = injection(dead, "prestart", 0.02)
    body["pid"], body["pid_start"] = gone.pid, None
    (state / f"{dead}.json").write_text(json.dumps(body))
    _, registry = collector(state)
    got = scrape(registry)
    assert value(got, "ocihook_records", status="running") == 1
    assert value(got, "ocihook_records", status="orphaned") == 1


def test_a_failure_record_is_what_the_runtime_was_told(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    fail(state, "f" * 64, "request", False, OcihookError("annotation x: not allowed"))
    (path,) = (state / records.FAILED_DIR).iterdir()
    body = json.loads(path.read_text())
    assert body["outcome"] == "refused" and body["reason"] == "request"
    assert body["error"] == "ocihook: annotation x: not allowed"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct((state / records.FAILED_DIR).stat().st_mode & 0o777) == "0o700"


def test_failure_records_are_pruned_as_records_are(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    config = {"state_dir": str(state), "records": {"max_count": 3, "max_age": 3600}}
    for number in range(5):
        records.write_failure(
            config, f"{number:064d}", "prestart", "plan", False, time.monotonic(), OSError()
        )
        stamp = time.time() - 100 + number  # in order, all younger than max_age
        os.utime(state / records.FAILED_DIR / f"{number:064d}.json", (stamp, stamp))
    kept = sorted(p.name[-6:-5] for p in (state / records.FAILED_DIR).iterdir())
    assert kept == ["2", "3", "4"]  # the newest 3 (the last write pruned the rest)


def test_unreadable_records_and_audit_log_are_counted_errors_not_failed_scrapes(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    log = tmp_path / "audit.log"
    log.write_text("")
    _, registry = collector(state, log)
    (state / "broken.json").write_text("{not json")
    (state / "dir.json").mkdir()
    (state / f"{CID}.json").write_text(json.dumps(injection(CID, "prestart", 0.01)))
    log.unlink()
    log.mkdir()  # the audit log is a directory now: it cannot be read
    got = scrape(registry)
    assert value(got, "ocihook_exporter_errors_total", source="records") == 2
    assert value(got, "ocihook_exporter_errors_total", source="audit_log") == 1
    assert value(got, "ocihook_containers_injected_total", route="prestart") == 1
    got = scrape(registry)  # each scrape that meets them counts them again
    assert value(got, "ocihook_exporter_errors_total", source="records") == 4
    assert value(got, "ocihook_exporter_errors_total", source="audit_log") == 2
    names = {name for name, _ in got}
    for metric in METRICS:  # every family is there, if only as its header
        assert any(name.startswith(metric) for name in names) or metric in (
            "ocihook_device_present",
            "ocihook_device_healthy",
            "ocihook_device_allocated",
            "ocihook_containers_refused",
            "ocihook_containers_rolled_back",
            "ocihook_hook_duration_seconds",
            "ocihook_selinux_denials",
            "ocihook_deviceplugin_allocations",
        )


def _audit_counts(state: Path, log: Path) -> dict[tuple[str, str], int]:
    """The oracle: `ocihook audit --json` on the same log and records, by class and cause."""
    code, out, _ = invoke(["audit", "--json", "--state-dir", str(state), str(log)])
    assert code in (0, 1), out
    counts: dict[tuple[str, str], int] = {}
    for finding in json.loads(out)["findings"]:
        if finding["result"] == "denied":
            key = (finding["tclass"], finding["cause"])
            counts[key] = counts.get(key, 0) + 1
    return counts


def _denials(got: dict) -> dict[tuple[str, str], int]:
    return {
        (dict(labels)["tclass"], dict(labels)["cause"]): int(v)
        for (name, labels), v in got.items()
        if name == "ocihook_selinux_denials_total"
    }


def test_denials_are_counted_as_ocihook_audit_ties_them_across_a_rotation(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / f"{CID}.json").write_text(json.dumps(record(CID, "s0:c123,c456", 4200)))
    (state / f"{OTHER}.json").write_text(json.dumps(record(OTHER, "s0:c7,c9", 5200)))
    log = tmp_path / "audit.log"
    log.write_bytes(b"")
    _, registry = collector(state, log)
    lines = (DATA / "audit.log").read_bytes().splitlines(keepends=True)
    half = len(lines) // 2
    while lines[half].split(b"msg=audit(")[1][:20] == lines[half - 1].split(b"msg=audit(")[1][:20]:
        half += 1  # never split one event's records
    with open(log, "ab") as out:
        out.writelines(lines[:half])
    first = _denials(scrape(registry))
    assert first, "the first half has denials of the records' containers"
    with open(log, "ab") as out:  # more lines, then auditd rotates: log -> log.1, a new log
        out.writelines(lines[half:])
    log.rename(tmp_path / "audit.log.1")
    log.write_bytes(b"")
    both = _denials(scrape(registry))
    whole = tmp_path / "whole.log"
    whole.write_bytes(b"".join(lines))
    assert both == _audit_counts(state, whole)
    assert sum(both.values()) > sum(first.values())
    assert ("chr_file", "device-type") in both and ("file", "source-unlabelled") in both


@pytest.mark.root
def test_the_exporter_serves_a_device_made_unhealthy_and_healed(tmp_path):
    """A real HTTP scrape of `ocihook exporter` (health every second): device 1's node is
    removed from the device root, then put back."""
    root = synthetic.build_driver(tmp_path / "driver")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(root, tmp_path)))
    exporter = Exporter(config, tmp_path / "exporter.log", "--health-interval", "1")
    try:
        got = exporter.samples()
        for device in ("0", "1", "2"):
            assert value(got, "ocihook_device_healthy", device=device) == 1
            assert value(got, "ocihook_device_present", device=device) == 1
            assert value(got, "ocihook_device_allocated", device=device) == 0
        node = root / "dev/synth1"
        moved = tmp_path / "synth1.away"
        shutil.move(node, moved)
        got = _until(exporter, lambda s: value(s, "ocihook_device_healthy", device="1") == 0)
        assert value(got, "ocihook_device_present", device="1") == 0
        assert value(got, "ocihook_device_healthy", device="0") == 1
        shutil.move(moved, node)
        got = _until(exporter, lambda s: value(s, "ocihook_device_healthy", device="1") == 1)
        assert value(got, "ocihook_device_present", device="1") == 1
    finally:
        assert exporter.stop() == 0


def _until(exporter: Exporter, condition, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        got = exporter.samples()
        if condition(got) or time.monotonic() > deadline:
            assert condition(got), got
            return got
        time.sleep(0.3)


@pytest.mark.root
def test_a_port_in_use_is_one_line(tmp_path):
    import socket
    import subprocess
    import sys

    root = synthetic.build_driver(tmp_path / "driver")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(root, tmp_path)))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "ocihook.cli.main", "exporter", "--config", str(config)]
            + ["--metrics-address", "127.0.0.1", "--metrics-port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"ocihook: metrics: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
