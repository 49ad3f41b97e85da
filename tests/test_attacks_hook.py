"""Attacks on the hook's inputs and process, driven by running the hook executable directly.

Crafted state JSON and bundles (root.path escaping the bundle, a bundle that is a symlink,
the pid of a process that is not the container, or no pid), and a hostile environment
(PYTHONPATH and friends, a hostile working directory). Each must end with exit status 1
and one line on stderr, or (for the environment) with the hook unaffected; nothing on
the host may change.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.support import hostile
from tests.support.sandbox import FakeRuntimeProcess


@pytest.fixture
def attack(hook_setup, synth_root, tmp_path):
    """Run the hook with a crafted state; check afterwards that nothing on the host changed."""
    canary = hostile.make_canary(tmp_path / "canary")
    watched = (canary, synth_root)
    before = hostile.snapshot(*watched)
    dev_before = hostile.host_dev_entries()

    def run(data, **kwargs) -> hostile.HookResult:
        return hostile.run_hook(
            hook_setup.hook, hook_setup.config, hook_setup.cache_dir, data, **kwargs
        )

    yield run
    assert hostile.snapshot(*watched) == before
    assert hostile.host_dev_entries() == dev_before
    assert hook_setup.records() == []


def _fails_with_one_line(result: hostile.HookResult, *words: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ocihook: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]


V1_DEVICES = Path("/sys/fs/cgroup/devices")


@pytest.fixture
def parked():
    """Start a `sleep` in its own devices cgroup, in a private mount namespace or in ours: a
    process that the cgroup checks accept but that is not a container. Its device list must
    not change."""
    made: list[tuple[FakeRuntimeProcess, Path, str]] = []

    def start(private: bool = True) -> int:
        cgroup = V1_DEVICES / f"ocihook-attack-{uuid.uuid4().hex[:10]}"
        process = FakeRuntimeProcess(cgroup, ("c 1:3 rwm",), private=private)
        made.append((process, cgroup, (cgroup / "devices.list").read_text()))
        return process.pid

    yield start
    for process, cgroup, devices in made:
        assert (cgroup / "devices.list").read_text() == devices
        process.close()


@pytest.fixture
def private_ns_process(parked) -> int:
    return parked(private=True)


def test_root_path_escaping_the_bundle(attack, tmp_path, private_ns_process):
    bundle = hostile.write_bundle(tmp_path / "bundle", {"root": {"path": "../../../canary"}})
    result = attack(hostile.state(str(bundle), private_ns_process))
    _fails_with_one_line(result, "root", "inside the bundle")


@pytest.mark.parametrize("root_path", ["/", "/proc/..", "/dev", "/dev/shm", "/tmp/..", "CANARY"])
def test_root_path_on_the_host(attack, tmp_path, private_ns_process, root_path):
    """An absolute root.path naming a host directory, with the pid of a process in a private
    mount namespace: the host's root, a host mount point, or a plain host directory."""
    canary = tmp_path / "canary"
    path = str(canary) if root_path == "CANARY" else root_path
    bundle = hostile.write_bundle(tmp_path / "bundle", {"root": {"path": path}})
    result = attack(hostile.state(str(bundle), private_ns_process))
    _fails_with_one_line(result)
    assert "rootfs" in result.stderr


def test_bundle_is_a_symlink(attack, tmp_path, private_ns_process):
    real = hostile.write_bundle(tmp_path / "real", {"root": {"path": str(tmp_path / "canary")}})
    link = tmp_path / "link"
    link.symlink_to(real)
    result = attack(hostile.state(str(link), private_ns_process))
    _fails_with_one_line(result, "bundle")


def test_config_json_is_a_symlink(attack, tmp_path, private_ns_process):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (tmp_path / "elsewhere.json").write_text(json.dumps({"root": {"path": "/"}}))
    (bundle / "config.json").symlink_to(tmp_path / "elsewhere.json")
    result = attack(hostile.state(str(bundle), private_ns_process))
    _fails_with_one_line(result, "config.json")


@pytest.mark.parametrize(
    "which", ["host-process", "host-process-in-cgroup", "self", "missing", "none", "zero", "init"]
)
def test_pid_that_is_not_the_container(attack, tmp_path, parked, which):
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    bundle = hostile.write_bundle(tmp_path / "bundle", {"root": {"path": str(rootfs)}})
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        pid = {
            "host-process": sleeper.pid,
            "host-process-in-cgroup": parked(private=False) if "cgroup" in which else 0,
            "self": os.getpid(),
            "missing": 2**22 + 12345,
            "none": None,
            "zero": 0,
            "init": 1,
        }[which]
        result = attack(hostile.state(str(bundle), pid))
    finally:
        sleeper.kill()
        sleeper.wait()
    _fails_with_one_line(result)
    assert os.listdir(rootfs) == []


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"[]",
        b'{"ociVersion": "1", "id": "../../etc", "status": "creating", "bundle": "/tmp"}',
        b'{"ociVersion": "1", "id": "x", "status": "creating", "bundle": "relative"}',
        b'{"ociVersion": "1", "id": "x", "status": "running", "bundle": "/tmp"}',
        b'{"ociVersion": "1", "id": "x", "status": "creating", "bundle": "/tmp", "pid": -1}',
        b"\xff\xfe",
        b"x" * (1 << 21),
    ],
)
def test_malformed_state(attack, data):
    _fails_with_one_line(attack(data))


# -- a hostile environment ---------------------------------------------------------------


def _good_state(tmp_path: Path, devices: str | None) -> dict:
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir(exist_ok=True)
    bundle = hostile.write_bundle(tmp_path / "bundle", {"root": {"path": str(rootfs)}})
    return hostile.state(str(bundle), os.getpid(), devices=devices)


@pytest.mark.parametrize("devices", [None, "all"])
def test_python_env_and_cwd_do_not_steer_the_hook(attack, tmp_path, devices):
    """PYTHONPATH, PYTHONHOME, PYTHONSTARTUP, PYTHONINSPECT and the working directory offer
    modules that would leave a marker if imported; `python3 -I` ignores them all."""
    marker = tmp_path / "imported"
    trap = hostile.python_trap(tmp_path / "trap", marker)
    env = {
        "PATH": f"{trap}:/usr/bin:/bin",
        "PYTHONPATH": str(trap),
        "PYTHONHOME": str(trap),
        "PYTHONSTARTUP": str(trap / "json.py"),
        "PYTHONINSPECT": "1",
        "PYTHONUSERBASE": str(trap),
        "PYTHONSAFEPATH": "",
    }
    result = attack(_good_state(tmp_path, devices), env=env, cwd=str(trap))
    assert not marker.exists(), "the hook imported a module from the hostile environment"
    if devices is None:
        assert result.returncode == 0, result.stderr
    else:  # our own pid is no container (root cgroup, host mount namespace): refused
        _fails_with_one_line(result)


def test_hooks_d_passes_an_explicit_env_and_python_runs_isolated():
    """What the runtime runs: hooks.d sets the whole env (nothing from the container), and the
    hook executable runs `python3 -I`."""
    repo = Path(__file__).resolve().parent.parent
    for path in sorted((repo / "hooks.d").glob("*.json")):
        hook = json.loads(path.read_text())["hook"]
        names = [entry.split("=", 1)[0] for entry in hook["env"]]
        assert set(names) <= {"PATH", "LANG"}, (path, names)
        assert hook["path"].startswith("/usr/")
    shebang = (repo / "packaging/ocihook-hook").read_text().splitlines()[0]
    assert shebang.startswith("#!/") and shebang.split()[-1] == "-IS"
