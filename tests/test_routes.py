"""`ocihook check`'s route lines (ocihook/check/routes.py) from real configuration files: podman's
containers.conf (CONTAINERS_CONF) and CRI-O's crio.conf (CONTAINER_CONFIG), real hooks.d
directories with and without the precreate stage, systemd as PID 1 or not (this machine:
not; `booted` says which host is described)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ocihook.check import hooksdirs, routes
from tests.conftest import REPO
from tests.support import podman

UPDATE_PODMAN = (
    "route: podman: a runtime update that re-applies the OCI config's devices (podman update, "
    "runc/crun update, by the runtime's version: docs/cgroups.md) drops the ones a prestart "
    "hook granted, and a prestart hook cannot prevent it: use the precreate registration (a "
    "hooks.d file with the precreate stage) or CDI"
)


@pytest.fixture
def hooks(tmp_path, hook_exe):
    """A hooks.d directory registering the hook for prestart and poststop."""
    return podman.write_hooks_dir(
        tmp_path / "hooks.d", hook_exe, tmp_path / "config.yaml", tmp_path / "cache"
    )


def _stages(directory, stages):
    path = directory / "ocihook.json"
    document = json.loads(path.read_text())
    document["stages"] = stages
    path.write_text(json.dumps(document))
    return path


def _podman(tmp_path, hooks, manager=None, uid=0):
    conf = tmp_path / "containers.conf"
    lines = ["[engine]", f'hooks_dir = ["{hooks}"]']
    lines += [f'cgroup_manager = "{manager}"'] if manager else []
    conf.write_text("\n".join(lines) + "\n")
    env = {"CONTAINERS_CONF": str(conf), "PATH": os.environ["PATH"]}
    return hooksdirs.podman_reader(env, uid, (4, 3)), env, conf


def _lines(findings):
    return [(f.status, f.message) for f in findings]


def test_podman_systemd_manager_prestart_keeps_devices_over_a_reload(tmp_path, hooks):
    reader, env, conf = _podman(tmp_path, hooks, "systemd")
    assert _lines(routes.route_findings([reader], env=env, booted=True)) == [
        (
            "ok",
            f"route: podman: prestart, cgroup manager systemd (cgroup_manager in {conf}): the "
            "device cgroup and the container's systemd unit (runtime DeviceAllow=, over D-Bus): "
            "granted devices survive systemctl daemon-reload",
        ),
        ("warning", UPDATE_PODMAN),
    ]
    status, message = _lines(routes.route_findings([reader], env=env, booted=False))[0]
    assert (status, message) == (
        "warning",
        f"route: podman: prestart, cgroup manager systemd (cgroup_manager in {conf}): but "
        "systemd is not PID 1 (/run/systemd/system is absent): the device cgroup only, and "
        "podman cannot run containers so",
    )


def test_podman_cgroupfs_and_the_defaults(tmp_path, hooks):
    reader, env, conf = _podman(tmp_path, hooks, "cgroupfs")
    assert _lines(routes.route_findings([reader], env=env, booted=True))[0] == (
        "ok",
        f"route: podman: prestart, cgroup manager cgroupfs (cgroup_manager in {conf}): the "
        "device cgroup only; no systemd unit holds the container, so systemctl "
        "daemon-reload changes nothing of it",
    )
    reader, env, _ = _podman(tmp_path, hooks)
    assert routes.cgroup_manager(reader, env, True) == ("systemd", "default: systemd is PID 1")
    assert routes.cgroup_manager(reader, env, False) == (
        "cgroupfs",
        "default: systemd is not PID 1",
    )


def test_podman_with_the_precreate_registration(tmp_path, hooks):
    path = _stages(hooks, ["precreate", "prestart", "poststop"])
    reader, env, conf = _podman(tmp_path, hooks, "systemd")
    assert _lines(routes.route_findings([reader], env=env, booted=True)) == [
        (
            "ok",
            f"route: podman: precreate ({path}), cgroup manager systemd (cgroup_manager in "
            f"{conf}): the runtime creates and allows the devices itself: they survive "
            "systemctl daemon-reload and a runtime update",
        )
    ]
    # masked by a same-named prestart-only file in a later directory: prestart again
    later = tmp_path / "later"
    later.mkdir()
    (later / "ocihook.json").write_text(
        (hooks / "ocihook.json").read_text().replace('"precreate", ', "")
    )
    found = routes.route_findings([reader], explicit=[str(hooks), str(later)], booted=True)
    assert found[0].message.startswith("route: podman: prestart, cgroup manager systemd")
    assert routes.precreate_registration([str(hooks), str(later)]) is None


def test_crio_reads_its_manager_and_has_no_precreate_route(tmp_path, hooks):
    _stages(hooks, ["precreate", "prestart", "poststop"])
    conf = tmp_path / "crio.conf"
    conf.write_text(f'[crio.runtime]\nhooks_dir = ["{hooks}"]\ncgroup_manager = "cgroupfs"\n')
    env = {"CONTAINER_CONFIG": str(conf), "CONTAINER_CONFIG_DIR": str(tmp_path / "none")}
    reader = hooksdirs.crio_reader(env)
    lines = _lines(routes.route_findings([reader], env=env, booted=True))
    assert lines[0] == (
        "ok",
        f"route: CRI-O: prestart, cgroup manager cgroupfs (cgroup_manager in {conf}): the "
        "device cgroup only; no systemd unit holds the container, so systemctl "
        "daemon-reload changes nothing of it",
    )
    assert lines[1] == (
        "warning",
        "route: CRI-O: a runtime update that re-applies the OCI config's devices (crictl "
        "update, the kubelet's CPU manager, runc/crun update, by the runtime's version: "
        "docs/cgroups.md) drops the ones a prestart hook granted, and a prestart hook cannot "
        "prevent it: use CDI (docs/cdi.md)",
    )
    env["CONTAINER_CGROUP_MANAGER"] = "systemd"
    assert routes.cgroup_manager(reader, env, True) == ("systemd", "CONTAINER_CGROUP_MANAGER")
    conf.write_text(f'[crio.runtime]\nhooks_dir = ["{hooks}"]\n')
    del env["CONTAINER_CGROUP_MANAGER"]
    assert routes.cgroup_manager(hooksdirs.crio_reader(env), env, False) == ("systemd", "default")


def test_rootless_podman_edits_no_device_cgroup(tmp_path, hooks):
    reader, env, _ = _podman(tmp_path, hooks, "systemd", uid=1000)
    assert _lines(routes.route_findings([reader], env=env, booted=True)) == [
        (
            "ok",
            "route: rootless podman (uid 1000): prestart, no device cgroup edit (rootless, "
            "docs/cgroups.md): the runtime's own device rules stay, nothing for a reload or "
            "an update to drop",
        )
    ]


def test_check_prints_the_route_lines_and_json_has_them(hook_setup, tmp_path):
    conf = tmp_path / "containers.conf"
    conf.write_text(
        f'[engine]\nhooks_dir = ["{hook_setup.hooks_dir}"]\ncgroup_manager = "cgroupfs"\n'
    )
    args = [sys.executable, "-m", "ocihook.cli.main", "check", "--config", str(hook_setup.config)]
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    text = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env)
    assert text.returncode == 0, text.stdout + text.stderr
    assert (
        f"ok      route: podman: prestart, cgroup manager cgroupfs (cgroup_manager in {conf})"
        in text.stdout
    )
    assert f"WARNING {UPDATE_PODMAN}\n" in text.stdout
    data = subprocess.run(args + ["--json"], capture_output=True, text=True, cwd=REPO, env=env)
    routes_found = [f for f in json.loads(data.stdout)["findings"] if f["topic"] == "route"]
    assert [f["status"] for f in routes_found] == ["ok", "warning"]
