"""The request channel and the hook's process, in real podman + runc containers.

The image env selects devices only when the config opts in; the allow-list refuses what
the orchestrator's annotations do not permit; LD_PRELOAD / PYTHONPATH in the container's
env never reach the hook; the hook runs without capabilities once the privileged work is
done (CapEff read from /proc/self/status after the drop and logged)."""

from __future__ import annotations

import re

import pytest
import yaml

from ocihook.errors import OcihookError
from ocihook.request.parse import DeviceRequest, check_allowed
from tests.conftest import base_config
from tests.support import hostile, podman

LS_DEV = ["/bin/sh", "-c", "ls /dev"]


def test_image_env_is_ignored_by_default(hook_setup, image_busybox):
    podman.write_hooks_dir(
        hook_setup.hooks_dir, hook_setup.hook, hook_setup.config, hook_setup.cache_dir, "always"
    )
    result = hook_setup.run(image_busybox, LS_DEV, extra=["-e", "SYNTH_VISIBLE_DEVICES=all"])
    assert result.returncode == 0, result.stderr
    assert "synth" not in result.stdout
    assert hook_setup.records() == []


def test_image_env_when_enabled(hook_setup, image_busybox, synth_root):
    hook_setup.write_config(
        **base_config(
            hook_setup.dir, synth_root, request={"env": True}, ldconfig={"enabled": False}
        )
    )
    podman.write_hooks_dir(
        hook_setup.hooks_dir, hook_setup.hook, hook_setup.config, hook_setup.cache_dir, "always"
    )
    result = hook_setup.run(image_busybox, LS_DEV, extra=["-e", "SYNTH_VISIBLE_DEVICES=1"])
    assert result.returncode == 0, result.stderr
    assert "synth1" in result.stdout and "synth0" not in result.stdout


def test_container_env_never_reaches_the_hook(hook_setup, image_rhel, tmp_path):
    marker = tmp_path / "marker"
    library = hostile.preload_trap(tmp_path / "preload", marker)
    trap = hostile.python_trap(tmp_path / "py", marker)
    env = [
        f"LD_PRELOAD={library}",
        f"LD_LIBRARY_PATH={library.parent}",
        f"PYTHONPATH={trap}",
        f"PYTHONHOME={trap}",
        f"PATH={trap}:/usr/bin:/bin",
    ]
    extra = [arg for entry in env for arg in ("-e", entry)]
    result = hook_setup.run(image_rhel, ["/usr/bin/synth-smi"], "all", extra=extra)
    assert result.returncode == 0, result.stderr
    assert "libsynth 1.2.3 loaded" in result.stdout
    assert not marker.exists()


def test_capabilities_dropped_after_the_privileged_work(hook_setup, image_busybox):
    result = hook_setup.run(image_busybox, LS_DEV, "0")
    assert result.returncode == 0, result.stderr
    lines = re.findall(r"capabilities dropped, CapEff ([0-9a-f]+)", hook_setup.log.read_text())
    assert lines == ["0"]


@pytest.mark.parametrize(
    "devices, wanted, allowed",
    [
        ("0", {"tenant": "gpu"}, True),
        ("all", {"tenant": "gpu"}, False),
        ("0-1", {"tenant": "gpu"}, False),
        ("0", {}, False),
        ("0", {"tenant": "cpu"}, False),
        ("all", {"tenant": "gpu", "admin": "yes"}, True),
    ],
)
def test_allow_list_in_a_container(hook_setup, image_busybox, synth_root, devices, wanted, allowed):
    allow = [
        {"annotations": {"^tenant$": "^gpu$"}, "devices": [0]},
        {"annotations": {"^admin$": "yes"}, "devices": "all"},
    ]
    # podman's caller sets every annotation (and is root): trusting these keys is the admin's
    # choice here; in Kubernetes only the defaults are safe (tests/test_e2e_crio.py).
    request = {"allow": allow, "trusted_annotations": ["tenant", "admin"]}
    hook_setup.write_config(
        **base_config(hook_setup.dir, synth_root, request=request, ldconfig={"enabled": False})
    )
    extra = [arg for k, v in wanted.items() for arg in ("--annotation", f"{k}={v}")]
    result = hook_setup.run(image_busybox, LS_DEV, devices, extra=extra)
    if allowed:
        assert result.returncode == 0, result.stderr
        assert "synth0" in result.stdout
    else:
        assert result.returncode != 0
        assert "is not allowed by the config's request.allow" in result.stderr, result.stderr
        assert hook_setup.records() == []


def test_check_allowed_semantics():
    allow = [{"annotations": {"team": "^ml"}, "devices": [0, 1]}, {"devices": [7]}]
    trusted = ["io.team", "team"]
    check_allowed(DeviceRequest((0, 1), "a"), {"io.team": "mlops"}, allow, trusted)  # unanchored
    check_allowed(DeviceRequest((7,), "a"), {}, allow, trusted)  # no annotations: any container
    for request, labels in (
        (DeviceRequest(None, "a"), {"team": "ml"}),  # all needs devices: all
        (DeviceRequest((2,), "a"), {"team": "ml"}),
        (DeviceRequest((0,), "a"), {"team": "ai"}),
    ):
        with pytest.raises(OcihookError, match="not allowed"):
            check_allowed(request, labels, allow, trusted)
    with pytest.raises(OcihookError, match="invalid regex"):
        check_allowed(DeviceRequest((0,), "a"), {}, [{"annotations": {"(": ""}, "devices": "all"}])


def test_allow_list_reads_only_the_trusted_annotations():
    """A key the allow-list does not trust is not read, whatever its value: by default only
    the kubelet's container labels (a pod's author can set any other annotation)."""
    allow = [{"annotations": {"namespace$": "^gpu$"}, "devices": "all"}]
    request = DeviceRequest((0,), "a")
    check_allowed(request, {"io.kubernetes.pod.namespace": "gpu"}, allow)
    for forged in ({"my.namespace": "gpu"}, {"namespace": "gpu", "x": "y"}):
        with pytest.raises(OcihookError, match="not allowed"):
            check_allowed(request, {**forged, "io.kubernetes.pod.namespace": "cpu"}, allow)
    check_allowed(request, {"my.namespace": "gpu"}, allow, ["my.namespace"])


def test_allow_key_that_reads_no_trusted_annotation_is_a_config_error(tmp_path):
    """An entry whose key regex matches none of request.trusted_annotations could never match
    (fail closed): the config says so at once, as one line."""
    from ocihook.config.compiled import compile_config

    config = tmp_path / "config.yaml"
    allow = [{"annotations": {"^tenant$": "^gpu$"}, "devices": "all"}]
    config.write_text(yaml.safe_dump(base_config(tmp_path, tmp_path, request={"allow": allow})))
    with pytest.raises(OcihookError) as error:
        compile_config(str(config))
    assert str(error.value) == (
        f"config {config}: request.allow.0.annotations: key '^tenant$' matches none of "
        "request.trusted_annotations (io.kubernetes.pod.namespace, io.kubernetes.pod.name, "
        "io.kubernetes.pod.uid, io.kubernetes.container.name): the allow-list reads only "
        "those, since a pod's author can set any other annotation"
    )
    request = {"allow": allow, "trusted_annotations": ["tenant"]}
    config.write_text(yaml.safe_dump(base_config(tmp_path, tmp_path, request=request)))
    assert compile_config(str(config))[0]["request"]["trusted_annotations"] == ["tenant"]
