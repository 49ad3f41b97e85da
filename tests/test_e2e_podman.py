"""The product's main job, end to end: real podman + runc containers get the driver injected."""

from __future__ import annotations


def test_all_devices_driver_runs_and_opens_device(hook_setup, image_rhel):
    result = hook_setup.run(image_rhel, ["/usr/bin/synth-smi"], devices="all")
    assert result.returncode == 0, result.stderr
    assert "libsynth 1.2.3 loaded from /usr/lib64/libsynth.so.1" in result.stdout
    for node, (major, minor) in (
        ("synth0", (10, 237)),
        ("synth1", (10, 235)),
        ("synth2", (10, 234)),
        ("synthctl", (10, 232)),
    ):
        assert f"opened /dev/{node} ({major}:{minor}) read-write" in result.stdout


def test_no_request_injects_nothing(hook_setup, image_busybox):
    result = hook_setup.run(image_busybox, ["/bin/sh", "-c", "ls /dev; ls /usr/bin"])
    assert result.returncode == 0, result.stderr
    assert "synth" not in result.stdout
    assert hook_setup.records() == []
