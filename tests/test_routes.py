"""`ocihook check`'s route lines (ocihook/check/routes.py): the claims per engine, OCI runtime,
version and cgroup manager (what the today's-stack guest measures: tests/enforcing/
today_checks.py compares its measurement with these lines), and the lines from real
configuration files: podman's containers.conf (CONTAINERS_CONF) and CRI-O's crio.conf
(CONTAINER_CONFIG), real hooks.d directories with and without the precreate stage, systemd as
PID 1 or not (this machine: not; `booted` says which host is described)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ocihook.check import hooksdirs, routes
from tests.conftest import REPO
from tests.support import podman


def rt(engine="podman", engine_version=(5, 8), oci="crun", oci_version=(1, 28), **kw):
    facts = {"manager": "systemd", "booted": True, "systemd": 262, **kw}
    return routes.Runtime(engine, engine_version, oci, oci_version, **facts)


# (runtime, reload survives, update survives, a word of the reason)
CLAIMS = [
    # today's hosts: Fedora 42+, podman 5.8 + crun 1.28, systemd 262
    (rt(), True, True, "pinned"),
    (rt(oci="runc", oci_version=(1, 3, 6)), True, True, "DeviceAllow"),
    # RHEL 9.6 / 10.0: podman 5.4 + crun 1.21: the update rebuilds crun's program
    (rt(engine_version=(5, 4), oci_version=(1, 21)), True, False, "before 1.23"),
    # RHEL 9.4: podman 4.9 sends only the limits
    (rt(engine_version=(4, 9), oci_version=(1, 14)), True, True, "before 5.4"),
    # crun under cgroupfs with podman 5.4+: dropped, whatever crun's version
    (rt(manager="cgroupfs", systemd=None), True, False, "cgroupfs"),
    (rt(oci="runc", oci_version=(1, 1), manager="cgroupfs"), True, True, "runc update"),
    # Debian 12: podman 4.3 + crun 1.8: crun keeps its own program, no DeviceAllow=
    (rt(engine_version=(4, 3), oci_version=(1, 8), systemd=252), True, True, "before 1.19"),
    # crun 1.23+ on a systemd without BPFProgram= falls back to DeviceAllow=
    (rt(oci_version=(1, 24), systemd=248), True, False, "before 1.23"),
    # CRI-O: crictl update carries no device list
    (rt(engine="CRI-O", engine_version=(1, 37), manager="cgroupfs"), True, True, "no device"),
    (rt(engine="CRI-O", engine_version=None, oci_version=(1, 21)), True, True, "no device"),
    # systemd not PID 1 under the systemd manager
    (rt(booted=False, systemd=None), False, False, "not PID 1"),
]


@pytest.mark.parametrize(("runtime", "reload", "update", "why"), CLAIMS)
def test_claims_by_version(runtime, reload, update, why):
    reload_status, reload_text = routes.reload_claim(runtime)
    update_status, update_text = routes.update_claim(runtime)
    assert (reload_status == "ok", update_status == "ok") == (reload, update)
    assert why in reload_text + update_text
    if not update and runtime.booted:
        assert update_text.startswith("dropped by podman update")
        assert "docs/cgroups.md" in update_text


@pytest.mark.parametrize(
    ("text", "name", "want"),
    [
        ("crun version 1.28\ncommit: abc\nspec: 1.0.0\n", "crun", (1, 28)),
        ("runc version 1.3.6+ds1\ncommit: v1.3.6\n", "runc", (1, 3, 6)),
        ("runc version 1.1.5+ds1\n", "runc", (1, 1, 5)),
        ("systemd 262 (262.1-1)\n+PAM +AUDIT\n", "systemctl", None),
        ("systemd 262 (262.1-1)\n+PAM +AUDIT\n", "systemd", (262,)),
        ("", "crun", None),
        ("crun: unknown option\n", "crun", None),
    ],
)
def test_version_lines(text, name, want):
    assert routes.parse_version(text, name) == want


def test_installed_runtimes_run_the_real_binaries():
    """The runtimes of this machine, by their own --version (runc is always here)."""
    found = routes.installed_runtimes(os.environ)
    assert "runc" in found and found["runc"] is not None and found["runc"] >= (1, 1)
    done = subprocess.run(["runc", "--version"], capture_output=True, text=True)
    assert done.stdout.split()[2].startswith(".".join(str(n) for n in found["runc"]))


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


def _podman(tmp_path, hooks, manager=None, uid=0, version=(5, 8)):
    conf = tmp_path / "containers.conf"
    lines = ["[engine]", f'hooks_dir = ["{hooks}"]']
    lines += [f'cgroup_manager = "{manager}"'] if manager else []
    conf.write_text("\n".join(lines) + "\n")
    env = {"CONTAINERS_CONF": str(conf), "PATH": os.environ["PATH"]}
    return hooksdirs.podman_reader(env, uid, version), env, conf


def _lines(findings):
    return [(f.status, f.topic, f.message) for f in findings]


TODAY = {"crun": (1, 28), "runc": (1, 3, 6)}


def test_podman_systemd_manager_lines_per_runtime(tmp_path, hooks):
    reader, env, conf = _podman(tmp_path, hooks, "systemd")
    lines = _lines(
        routes.route_findings([reader], env=env, booted=True, runtimes=TODAY, systemd=262)
    )
    where = f"cgroup manager systemd (cgroup_manager in {conf})"
    assert [(s, t) for s, t, _ in lines] == [
        ("ok", "route"),
        ("ok", "reload"),
        ("ok", "update"),
    ] * 2
    assert lines[0][2] == (
        f"route: podman 5.8 with crun 1.28: prestart, {where}: the hook creates, mounts and allows"
    )
    assert lines[1][2].startswith("reload: podman 5.8 with crun 1.28: granted devices survive")
    assert "BPFProgram=" in lines[1][2]
    assert lines[4][2].startswith("reload: podman 5.8 with runc 1.3.6: granted devices survive")
    assert "DeviceAllow=" in lines[4][2]
    not_booted = _lines(routes.route_findings([reader], env=env, booted=False, runtimes=TODAY))
    assert not_booted[1][:2] == ("warning", "reload")
    assert "systemd is not PID 1 (/run/systemd/system is absent)" in not_booted[1][2]


def test_podman_54_with_crun_121_warns_that_an_update_drops_them(tmp_path, hooks):
    reader, env, _ = _podman(tmp_path, hooks, "systemd", version=(5, 4))
    found = routes.route_findings(
        [reader], env=env, booted=True, runtimes={"crun": (1, 21)}, systemd=257
    )
    update = [f for f in found if f.topic == "update"]
    assert [(f.status, f.message.split(":")[0]) for f in update] == [("warning", "update")]
    assert update[0].message.startswith(
        "update: podman 5.4 with crun 1.21: granted devices dropped by podman update"
    )


def test_podman_cgroupfs_and_the_defaults(tmp_path, hooks):
    reader, env, conf = _podman(tmp_path, hooks, "cgroupfs")
    lines = _lines(routes.route_findings([reader], env=env, booted=True, runtimes={"runc": (1, 1)}))
    assert lines == [
        (
            "ok",
            "route",
            f"route: podman 5.8 with runc 1.1: prestart, cgroup manager cgroupfs "
            f"(cgroup_manager in {conf}): the hook creates, mounts and allows",
        ),
        (
            "ok",
            "reload",
            "reload: podman 5.8 with runc 1.1: granted devices survive systemctl "
            "daemon-reload: cgroup manager cgroupfs, no systemd unit holds the container",
        ),
        (
            "ok",
            "update",
            "update: podman 5.8 with runc 1.1: granted devices survive podman update: runc "
            "update leaves the device rules as they are",
        ),
    ]
    reader, env, _ = _podman(tmp_path, hooks)
    assert routes.cgroup_manager(reader, env, True) == ("systemd", "default: systemd is PID 1")
    assert routes.cgroup_manager(reader, env, False) == (
        "cgroupfs",
        "default: systemd is not PID 1",
    )


def test_podman_with_the_precreate_registration(tmp_path, hooks):
    path = _stages(hooks, ["precreate", "prestart", "poststop"])
    reader, env, conf = _podman(tmp_path, hooks, "systemd")
    found = routes.route_findings(
        [reader], env=env, booted=True, runtimes={"crun": (1, 28)}, systemd=262
    )
    assert _lines(found)[0] == (
        "ok",
        "route",
        f"route: podman 5.8 with crun 1.28: precreate ({path}), cgroup manager systemd "
        f"(cgroup_manager in {conf}): the runtime creates the nodes and mounts the driver, the "
        "hook allows the nodes",
    )
    assert [f.status for f in found] == ["ok", "ok", "ok"]
    # masked by a same-named prestart-only file in a later directory: prestart again
    later = tmp_path / "later"
    later.mkdir()
    (later / "ocihook.json").write_text(
        (hooks / "ocihook.json").read_text().replace('"precreate", ', "")
    )
    found = routes.route_findings(
        [reader], explicit=[str(hooks), str(later)], booted=True, runtimes={"runc": (1, 3)}
    )
    assert found[0].message.startswith("route: podman 5.8 with runc 1.3: prestart, cgroup manager")
    assert routes.precreate_registration([str(hooks), str(later)]) is None


def test_crio_reads_its_manager_and_has_no_precreate_route(tmp_path, hooks):
    _stages(hooks, ["precreate", "prestart", "poststop"])
    conf = tmp_path / "crio.conf"
    conf.write_text(f'[crio.runtime]\nhooks_dir = ["{hooks}"]\ncgroup_manager = "cgroupfs"\n')
    env = {"CONTAINER_CONFIG": str(conf), "CONTAINER_CONFIG_DIR": str(tmp_path / "none")}
    reader = hooksdirs.crio_reader(env)
    lines = _lines(
        routes.route_findings([reader], env=env, booted=True, runtimes={"crun": (1, 21)})
    )
    assert lines[0] == (
        "ok",
        "route",
        f"route: CRI-O with crun 1.21: prestart, cgroup manager cgroupfs (cgroup_manager in "
        f"{conf}): the hook creates, mounts and allows",
    )
    assert lines[2] == (
        "ok",
        "update",
        "update: CRI-O with crun 1.21: granted devices survive crictl update (the kubelet's "
        "CPU manager): CRI-O sends the runtime no device list",
    )
    env["CONTAINER_CGROUP_MANAGER"] = "systemd"
    assert routes.cgroup_manager(reader, env, True) == ("systemd", "CONTAINER_CGROUP_MANAGER")
    conf.write_text(f'[crio.runtime]\nhooks_dir = ["{hooks}"]\n')
    del env["CONTAINER_CGROUP_MANAGER"]
    assert routes.cgroup_manager(hooksdirs.crio_reader(env), env, False) == ("systemd", "default")


def test_rootless_podman_edits_no_device_cgroup(tmp_path, hooks):
    reader, env, _ = _podman(tmp_path, hooks, "systemd", uid=1000)
    assert _lines(routes.route_findings([reader], env=env, booted=True, runtimes=TODAY)) == [
        (
            "ok",
            "route",
            "route: rootless podman (uid 1000): prestart, no device cgroup edit (rootless, "
            "docs/cgroups.md): the runtime's own device rules stay, nothing for a reload or "
            "an update to drop",
        )
    ]


def test_no_oci_runtime_on_path_is_said(tmp_path, hooks):
    reader, env, _ = _podman(tmp_path, hooks, "cgroupfs")
    found = routes.route_findings([reader], env=env, booted=False, runtimes={})
    assert (found[-1].status, found[-1].message) == (
        "warning",
        "route: podman: neither crun nor runc is on PATH",
    )


def test_check_prints_the_route_lines_and_json_has_them(hook_setup, tmp_path):
    """The real `ocihook check` on this machine: podman 4.3 and runc (crun too, where
    installed), cgroupfs: every line says survive, by the runtimes' own --version."""
    conf = tmp_path / "containers.conf"
    conf.write_text(
        f'[engine]\nhooks_dir = ["{hook_setup.hooks_dir}"]\ncgroup_manager = "cgroupfs"\n'
    )
    args = [sys.executable, "-m", "ocihook.cli.main", "check", "--config", str(hook_setup.config)]
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    text = subprocess.run(args, capture_output=True, text=True, cwd=REPO, env=env)
    assert text.returncode == 0, text.stdout + text.stderr
    runc = routes.installed_runtimes(env)["runc"]
    label = f"podman {'.'.join(map(str, hooksdirs.podman_version(env)))} with runc "
    label += ".".join(map(str, runc))
    assert (
        f"ok      route: {label}: prestart, cgroup manager cgroupfs (cgroup_manager in {conf})"
        in text.stdout
    )
    assert f"ok      update: {label}: granted devices survive podman update" in text.stdout
    data = subprocess.run(args + ["--json"], capture_output=True, text=True, cwd=REPO, env=env)
    found = [f for f in json.loads(data.stdout)["findings"] if f["topic"] in routes.TOPICS]
    runc_lines = [f for f in found if f"with runc {'.'.join(map(str, runc))}:" in f["message"]]
    assert [(f["topic"], f["status"]) for f in runc_lines] == [
        ("route", "ok"),
        ("reload", "ok"),
        ("update", "ok"),
    ]
