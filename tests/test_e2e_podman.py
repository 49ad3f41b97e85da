"""The product's main job, end to end: real podman + runc containers get the driver injected."""

from __future__ import annotations

import json

from ocihook.records import is_running
from tests.support import podman, synthetic


def test_all_devices_driver_runs_and_opens_device(hook_setup, image_rhel):
    result = hook_setup.run(image_rhel, ["/usr/bin/synth-smi"], devices="all")
    assert result.returncode == 0, result.stderr
    assert "libsynth 1.2.3 loaded from /usr/lib64/libsynth.so.1" in result.stdout
    for node in synthetic.DEVICE_NAMES + synthetic.CONTROL_NAMES:
        assert synthetic.opened(node) in result.stdout


def test_no_request_injects_nothing(hook_setup, image_busybox):
    result = hook_setup.run(image_busybox, ["/bin/sh", "-c", "ls /dev; ls /usr/bin"])
    assert result.returncode == 0, result.stderr
    assert "synth" not in result.stdout
    assert hook_setup.records() == []


def test_device_opens_only_with_the_hooks_cgroup_rule(hook_setup, synth_root, image_busybox):
    """Control case: the same node bind-mounted by podman (no cgroup rule) cannot be opened."""
    node = synth_root / "dev/synth0"
    control = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", "exec 3<>/dev/synth0 && echo OPENED"],
        extra=["-v", f"{node}:/dev/synth0"],
    )
    assert "OPENED" not in control.stdout
    assert "Operation not permitted" in control.stderr
    injected = hook_setup.run(
        image_busybox, ["/bin/sh", "-c", "exec 3<>/dev/synth0 && echo OPENED"], devices="0"
    )
    assert injected.returncode == 0, injected.stderr
    assert "OPENED" in injected.stdout


def test_index_1_gets_only_device_1_and_control_nodes(hook_setup, image_busybox):
    result = hook_setup.run(image_busybox, ["/bin/sh", "-c", "ls /dev | grep synth"], devices="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["synth-uvm", "synth1", "synthctl"]


def test_debian_layout_finds_library_through_ld_cache(hook_setup, image_debian):
    result = hook_setup.run(
        image_debian,
        [
            "/bin/sh",
            "-c",
            "/usr/bin/synth-smi /dev/synth0 && grep -c libsynth.so.1 /etc/ld.so.cache",
        ],
        devices="0",
    )
    assert result.returncode == 0, result.stderr
    assert "loaded from /usr/lib/x86_64-linux-gnu/libsynth.so.1" in result.stdout
    assert synthetic.opened("synth0") in result.stdout
    assert result.stdout.strip().splitlines()[-1] != "0"


def test_rhel_layout_needs_the_ld_cache(hook_setup, image_rhel, synth_root):
    """Without the hook's ldconfig the RHEL-layout image cannot find the library at all."""
    hook_setup.write_config(**_config(hook_setup, synth_root, ldconfig={"enabled": False}))
    without = hook_setup.run(image_rhel, ["/usr/bin/synth-smi"], devices="0")
    assert without.returncode != 0
    assert "libsynth.so.1: cannot open shared object file" in without.stderr
    hook_setup.write_config(**_config(hook_setup, synth_root))
    with_cache = hook_setup.run(image_rhel, ["/usr/bin/synth-smi"], devices="0")
    assert with_cache.returncode == 0, with_cache.stderr


def test_read_only_container(hook_setup, image_rhel):
    result = hook_setup.run(
        image_rhel,
        ["/bin/sh", "-c", "/usr/bin/synth-smi /dev/synth0; touch /usr/x 2>&1 || echo READONLY"],
        devices="0",
        extra=["--read-only"],
    )
    assert result.returncode == 0, result.stderr
    assert synthetic.opened("synth0") in result.stdout
    assert "READONLY" in result.stdout


def test_injected_files_are_read_only_nosuid_nodev(hook_setup, image_busybox):
    script = (
        "grep -E ' /(usr/lib64|usr/lib|usr/bin|lib/firmware)/[^ ]*synth' /proc/self/mountinfo;"
        "echo x > /usr/bin/synth-smi 2>/dev/null || echo NOWRITE"
    )
    result = hook_setup.run(image_busybox, ["/bin/sh", "-c", script], devices="all")
    assert result.returncode == 0, result.stderr
    mounts = [line for line in result.stdout.splitlines() if "synth" in line]
    assert mounts, result.stdout
    for line in mounts:
        options = line.split()[5].split(",")
        assert {"ro", "nosuid", "nodev"} <= set(options), line
        assert ("noexec" in options) == ("/lib/firmware/" in line), line
    assert "NOWRITE" in result.stdout


def test_record_written_and_kept_after_the_container(hook_setup, image_busybox):
    """The record stays after `podman rm`; the shipped registration has no poststop stage, so
    it still says running while its process is gone (liveness: records.is_running)."""
    name = podman.unique_name("ocihook-record-test")
    result = hook_setup.run(
        image_busybox, ["/bin/sleep", "60"], devices="0", extra=["-d", "--name", name]
    )
    try:
        assert result.returncode == 0, result.stderr
        records = hook_setup.records()
        assert len(records) == 1
        record = json.loads(records[0].read_text())
        assert record["profile"] == "synthetic"
        assert {m["target"] for m in record["mounts"]} >= {
            "/usr/lib/libsynth.so.1.2.3",
            "/usr/bin/synth-smi",
        }
        assert [d["path"] for d in record["devices"]] == [
            "/dev/synth0",
            "/dev/synthctl",
            "/dev/synth-uvm",
        ]
        assert record["cgroup"] and record["cgroup"][0]["rule"] == (
            synthetic.suite_devices()["synth0"].rule("rw")
        )
        assert f"{record['id']}: injected" in hook_setup.log.read_text()
    finally:
        podman.remove(name)
    (path,) = hook_setup.records()
    body = json.loads(path.read_text())
    assert body["status"] == "running" and not is_running(body)


def _config(hook_setup, synth_root, **overrides):
    from tests.conftest import base_config

    return base_config(hook_setup.dir, synth_root, **overrides)
