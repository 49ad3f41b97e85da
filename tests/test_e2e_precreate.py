"""The precreate route end to end: real podman 4.3 + runc containers with the precreate
registration (hooks.d/ocihook-precreate.json) beside the prestart one. The runtime creates
and mounts what the precreate stage put in the config; the prestart stage allows the nodes
in the device cgroup and adds the links and the ld cache, and makes no node and no mount
again; the nodes still open after `podman update`,
`runc update` and from `podman exec`. Hostile images against this route: the config the
stage returns never names a path of the image as a mount source or a device.

Stand-ins: the accelerator is the synthetic driver (real char devices of this machine that
runc's default rules deny; tests/support/synthetic.py)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import hostile, podman, synthetic

NODES = [f"/dev/{n}" for n in synthetic.DEVICE_NAMES + synthetic.CONTROL_NAMES]
OPEN_ALL = "; ".join(f"(exec 3<>{n}) && echo OPENED {n}" for n in NODES)


@pytest.fixture
def precreate_setup(hook_setup):
    podman.write_hooks_dir(
        hook_setup.hooks_dir, hook_setup.hook, hook_setup.config, hook_setup.cache_dir,
        precreate=True,
    )  # fmt: skip
    return hook_setup


def opened(output: str) -> list[str]:
    return [line.split()[1] for line in output.splitlines() if line.startswith("OPENED ")]


def start_detached(setup, image: str, name: str) -> str:
    args = ["podman", "--runtime", "runc", "--hooks-dir", str(setup.hooks_dir), "run", "-d"]
    args += ["--name", name, *podman.LIMITS, "--annotation", f"{podman.ANNOTATION}=all"]
    result = subprocess.run(
        [*args, image, "sleep", "600"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def exec_open(name: str) -> list[str]:
    result = subprocess.run(
        ["podman", "exec", name, "/bin/sh", "-c", OPEN_ALL], capture_output=True, text=True
    )
    return opened(result.stdout)


def bundle_config(container_id: str) -> dict:
    path = f"/var/lib/containers/storage/overlay-containers/{container_id}/userdata/config.json"
    return json.loads(Path(path).read_text())


def test_runtime_owns_the_nodes_through_update_and_exec(precreate_setup, synth_root, image_rhel):
    """Detached, the nodes and mounts come from the runtime: config.json has every node and
    mount, and none of the device rules (podman's own list, which `podman update` resends);
    the prestart stage made no node and no mount and allowed the nodes in the device cgroup
    (its log); every node opens from `podman exec`, after `podman update --cpus` and after
    `runc update`; the library still loads through the ld cache and the soname link the
    prestart stage wrote."""
    name = podman.unique_name("ocihook-precreate")
    try:
        container_id = start_detached(precreate_setup, image_rhel, name)
        assert exec_open(name) == NODES
        spec = bundle_config(container_id)
        devices = {d["path"]: (d["major"], d["minor"]) for d in spec["linux"]["devices"]}
        for node in NODES:
            rdev = os.stat(synth_root / "dev" / os.path.basename(node)).st_rdev
            assert devices[node] == (os.major(rdev), os.minor(rdev))
        real_root = os.path.realpath(synth_root)
        driver_mounts = [m for m in spec["mounts"] if m["source"].startswith(real_root + "/")]
        assert {m["destination"] for m in driver_mounts} >= {
            "/usr/lib64/libsynth.so.1.2.3",
            "/usr/bin/synth-smi",
        }
        log = precreate_setup.log.read_text()
        assert f"{container_id}: made by the runtime: {len(driver_mounts)} mounts, 5 device" in log
        rules = spec["linux"]["resources"]["devices"]
        numbers = {(d["major"], d["minor"]) for d in spec["linux"]["devices"] if d["path"] in NODES}
        assert not [r for r in rules if (r.get("major"), r.get("minor")) in numbers]
        assert f"{container_id}: cgroup v1 " in log  # the prestart stage's device cgroup edit

        update = subprocess.run(["podman", "update", "--cpus", "1", name], capture_output=True)
        assert update.returncode == 0, update.stderr
        assert exec_open(name) == NODES
        runc = ["runc", "--root", "/run/runc", "update", "--cpu-share", "512", container_id]
        update = subprocess.run(runc, capture_output=True)
        assert update.returncode == 0, update.stderr
        assert exec_open(name) == NODES
        smi = subprocess.run(["podman", "exec", name, "/usr/bin/synth-smi"], capture_output=True)
        assert smi.returncode == 0, smi.stderr
        assert b"loaded from /usr/lib64/libsynth.so.1" in smi.stdout
    finally:
        podman.remove(name)


def test_a_precreate_failure_is_the_prestart_stages_one_line(precreate_setup, image_busybox):
    """podman 4.3 drops a precreate hook's stderr (it shows only "exit status 1"): a failed
    precreate stage hands the config back unchanged and logs why; the prestart stage
    meets the same error and refuses the container with the one line podman shows."""
    result = precreate_setup.run(image_busybox, ["/bin/true"], devices="7")
    assert result.returncode != 0
    line = "ocihook: annotation ocihook.io/devices: device index 7 does not exist"
    assert line in result.stderr, result.stderr
    assert "precreate hook" not in result.stderr
    log = precreate_setup.log.read_text()
    assert "precreate: annotation ocihook.io/devices: device index 7 does not exist" in log
    assert "left to the prestart stage" in log
    assert precreate_setup.records() == []


def test_no_request_container_is_untouched_by_the_precreate_stage(precreate_setup, image_busybox):
    result = precreate_setup.run(image_busybox, ["/bin/sh", "-c", "ls /dev"])
    assert result.returncode == 0, result.stderr
    assert "synth" not in result.stdout


# -- hostile images against the precreate route ---------------------------------------------


@pytest.fixture(scope="module")
def rhel_base(tmp_path_factory) -> Path:
    return hostile.rhel_tree(tmp_path_factory.mktemp("hostile") / "base")


ATTACKS = {
    "lib64-absolute": {"/usr/lib64": ("symlink", "{canary}")},
    "lib64-dotdot": {"/usr/lib64": ("symlink", "../../../../../../..{canary}")},
    "lib64-proc-1-root": {"/usr/lib64": ("symlink", "/proc/1/root{canary}")},
    "usr-absolute": {"/usr": ("symlink", "{canary}")},
    "library-absolute": {"/usr/lib64/libsynth.so.1.2.3": ("symlink", "{canary}/libsynth.so.1.2.3")},
    "smi-proc-self-root": {"/usr/bin/synth-smi": ("symlink", "/proc/self/root{canary}/marker")},
    "library-fifo": {"/usr/lib64/libsynth.so.1.2.3": ("fifo", "")},
    "dev-node-is-a-link": {"/dev/synth0": ("symlink", "{canary}/marker")},
}


def _hostile_tree(rhel_base: Path, tmp_path: Path, edits: dict, canary: Path) -> Path:
    root = tmp_path / "image"
    subprocess.run(["cp", "-a", str(rhel_base), str(root)], check=True)
    for path, (kind, target) in edits.items():
        hostile.replace(root / path.lstrip("/"), kind, target.format(canary=canary))
    return root


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_hostile_image_never_reaches_the_returned_config(
    precreate_setup, synth_root, rhel_base, tmp_path, attack
):
    """The stage run on the hostile tree as the container's root (what podman hands it):
    every mount source it returns is a file inside the source root, every node a node of
    the device root's, whatever the image's links say; then the same image in a real
    container: the canary is untouched and the host's /dev unchanged."""
    canary = hostile.make_canary(tmp_path / "canary")
    root = _hostile_tree(rhel_base, tmp_path, ATTACKS[attack], canary)
    spec = json.loads((Path(__file__).parent / "data/precreate-config.json").read_text())
    spec["root"]["path"] = str(root)
    spec["annotations"][podman.ANNOTATION] = "all"
    args = [str(precreate_setup.hook), "--stage", "precreate", "--config"]
    args += [str(precreate_setup.config), "--cache-dir", str(precreate_setup.cache_dir)]
    result = subprocess.run(args, input=json.dumps(spec).encode(), capture_output=True)
    assert result.returncode == 0, result.stderr
    edited = json.loads(result.stdout)
    real_root = os.path.realpath(synth_root)
    for mount in edited["mounts"][len(spec["mounts"]) :]:
        assert mount["source"].startswith(real_root + "/"), mount
        assert not mount["source"].startswith((str(root), str(canary))), mount
    for device in edited["linux"]["devices"]:
        rdev = os.stat(synth_root / "dev" / os.path.basename(device["path"])).st_rdev
        assert (device["major"], device["minor"]) == (os.major(rdev), os.minor(rdev))
        assert device["path"] in NODES

    before = hostile.snapshot(canary, synth_root)
    dev_before = hostile.host_dev_entries()
    name = f"ocihook-hostile-pre-{attack}"
    image = hostile.import_tree(root, name)
    try:
        command = ["/bin/sh", "-c", "grep -rl canary /usr /lib 2>/dev/null; echo DONE"]
        run = precreate_setup.run(image, command, "all")
    finally:
        subprocess.run(["podman", "rmi", "-f", image], capture_output=True)
    if run.returncode != 0:
        assert "ocihook: " in run.stderr or "runc create failed" in run.stderr, run.stderr
        assert "internal error" not in run.stderr
    if run.returncode == 0:
        assert run.stdout.strip().splitlines() == ["DONE"], run.stdout  # no canary file inside
    assert hostile.snapshot(canary, synth_root) == before
    assert hostile.host_dev_entries() == dev_before
