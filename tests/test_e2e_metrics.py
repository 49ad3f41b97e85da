"""The exporter after real podman + runc containers (issue 42): `ocihook exporter` on the
hook's config, scraped with a real HTTP client and read with the Prometheus client
library's parser, counts what the hook did from what it left in its state dir: containers
injected (on the prestart and the precreate route), refused (a device the host lacks, a
request that is no request) and rolled back (a driver whose soname link names another
soname: refused in the container, after the mounts, and undone), the hook's duration as a
histogram, and the device a running container holds.

Stand-ins: the accelerator is the synthetic driver (real char devices of this machine that
runc's default rules deny; tests/support/synthetic.py)."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.conftest import base_config
from tests.support import podman, synthetic
from tests.support.metrics import Exporter, value
from tests.test_e2e_sonames import LIBDIR, REAL

SMI = ["/usr/bin/synth-smi"]
pytestmark = pytest.mark.devstack("prometheus_client")  # RHEL 9's Python stack has none


def soname_mismatch_driver(tmp_path):
    """libsynth.so.1 -> a library whose DT_SONAME is libsynth.so.2 (test_e2e_sonames)."""
    root = synthetic.build_driver(tmp_path / "driver")
    lib = root / LIBDIR / REAL
    lib.write_bytes(lib.read_bytes().replace(b"libsynth.so.1\0", b"libsynth.so.2\0"))
    return root


def test_a_scrape_counts_real_containers_injected_refused_and_rolled_back(
    hook_setup, synth_root, image_rhel, tmp_path
):
    exporter = Exporter(hook_setup.config, tmp_path / "exporter.log", "--audit-log", "")
    name = podman.unique_name("metrics-holder")
    try:
        before = exporter.samples()
        assert value(before, "ocihook_containers_injected_total") is None
        assert hook_setup.run(image_rhel, SMI, devices="0").returncode == 0
        assert hook_setup.run(image_rhel, SMI, devices="7").returncode != 0
        assert hook_setup.run(image_rhel, SMI, devices="x!y").returncode != 0
        hook_setup.write_config(**base_config(hook_setup.dir, soname_mismatch_driver(tmp_path)))
        rolled = hook_setup.run(image_rhel, SMI, devices="0")
        assert rolled.returncode != 0 and "DT_SONAME libsynth.so.2" in rolled.stderr
        hook_setup.write_config(**base_config(hook_setup.dir, synth_root))
        podman.write_hooks_dir(
            hook_setup.hooks_dir, hook_setup.hook, hook_setup.config, hook_setup.cache_dir,
            precreate=True,
        )  # fmt: skip
        assert hook_setup.run(image_rhel, SMI, devices="2").returncode == 0
        held = subprocess.run(
            ["podman", "--runtime", "runc", "--hooks-dir", str(hook_setup.hooks_dir), "run", "-d"]
            + ["--name", name, *podman.LIMITS, "--annotation", f"{podman.ANNOTATION}=1"]
            + [image_rhel, "sleep", "600"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert held.returncode == 0, held.stderr
        got = exporter.samples()
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", name], capture_output=True, timeout=120)
    try:
        assert value(got, "ocihook_containers_injected_total", route="prestart") == 1
        assert value(got, "ocihook_containers_injected_total", route="precreate") == 2
        refused = "ocihook_containers_refused_total"
        assert value(got, refused, route="prestart", reason="plan") == 1  # index 7
        assert value(got, refused, route="prestart", reason="request") == 1  # x!y
        rolled_back = "ocihook_containers_rolled_back_total"
        assert value(got, rolled_back, route="prestart", reason="container") == 1
        count, total = "ocihook_hook_duration_seconds_count", "ocihook_hook_duration_seconds_sum"
        assert value(got, count, route="precreate", outcome="injected") == 2
        assert value(got, count, route="prestart", outcome="refused") == 2
        assert 0 < value(got, total, route="prestart", outcome="injected") < 30
        buckets = [
            (float(dict(labels)["le"]), v)
            for (metric, labels), v in got.items()
            if metric == "ocihook_hook_duration_seconds_bucket"
            and dict(labels)["outcome"] == "injected"
            and dict(labels)["route"] == "precreate"
        ]
        counts = [v for _, v in sorted(buckets)]
        assert counts == sorted(counts) and counts[-1] == 2  # cumulative, +Inf: all
        assert value(got, "ocihook_device_allocated", device="1") == 1  # the running one
        assert value(got, "ocihook_device_allocated", device="0") == 0  # gone
        assert value(got, "ocihook_records", status="running") == 1
        # No poststop stage: the two that ended still say running in their records; their
        # processes are gone, so the exporter counts them orphaned (liveness).
        assert value(got, "ocihook_records", status="orphaned") == 2
        assert value(got, "ocihook_exporter_errors_total", source="records") == 0
        after = _until(exporter, lambda s: value(s, "ocihook_records", status="running") is None)
        assert value(after, "ocihook_device_allocated", device="1") == 0  # removed: gone
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
