"""The Kubernetes node installer (packaging/kubernetes/ocihook-installer) in a real podman
container, as the DaemonSet runs it, against a scratch host root mounted at /host.

No registry and no cluster: the installer image is built locally FROM scratch (busybox, the
payload, the script); the host root is a directory with a real Python, the synthetic driver
and the host's ldconfig, so the installed hook's `ocihook check` and `ocihook features` run
with the Python that would run the hook. SELinux: this machine runs no SELinux LSM, so a
stand-in selinuxfs (a dir with `enforce`) and a stand-in `semodule` in the host root show
that the module is loaded and removed, not that the kernel accepts it.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tests.support import k8s, podman

MANAGED = "# Managed by ocihook-installer (Kubernetes DaemonSet); edits are overwritten."


@pytest.fixture(scope="module")
def installer_image(tmp_path_factory) -> str:
    name = "ocihook-i17-installer"
    yield k8s.installer_image(tmp_path_factory.mktemp("installer") / "root", name)
    subprocess.run(["podman", "rmi", "-f", f"localhost/{name}:latest"], capture_output=True)


@pytest.fixture(scope="module")
def base_host(tmp_path_factory, synth_root) -> Path:
    return k8s.host_root(tmp_path_factory.mktemp("host") / "root", synth_root)


class Node:
    def __init__(self, tmp_path: Path, base: Path, image: str) -> None:
        self.root = tmp_path / "host"
        subprocess.run(["cp", "-a", str(base), str(self.root)], check=True)
        self.configmap = tmp_path / "configmap"
        self.configmap.mkdir()
        self.selinuxfs = tmp_path / "selinuxfs"
        self.selinuxfs.mkdir()
        self.image = image
        self.write_configmap()

    def write_configmap(self, **changes) -> dict:
        config = {
            "profile": "synthetic",
            "profile_dirs": ["/etc/ocihook/profiles", "/opt/ocihook/profiles"],
            "source_root": "/srv/synth",
            "device_root": "/srv/synth",
            **changes,
        }
        (self.configmap / "config.yaml").write_text(yaml.safe_dump(config))
        return config

    def args(self, env: dict[str, str] | None = None, name: str | None = None) -> list[str]:
        args = [
            "podman", "--runtime", "runc", "run", "--network", "none",
            "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
            "-v", f"{self.root}:/host", "-v", "/proc:/host/proc:ro",
            "-v", f"{self.configmap}:/config:ro", "-v", f"{self.selinuxfs}:/fake-selinuxfs:ro",
            "-e", "SELINUXFS=/fake-selinuxfs",
        ]  # fmt: skip
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        return args + (["--name", name] if name else ["--rm"])

    def installer(self, action: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*self.args(env), self.image, "/usr/local/bin/ocihook-installer", action],
            capture_output=True,
            text=True,
            timeout=300,
        )

    def snapshot(self) -> dict:
        return k8s.snapshot(self.root)

    def features(self) -> dict[str, str]:
        path = self.root / "etc/kubernetes/node-feature-discovery/features.d/ocihook"
        lines = path.read_text().splitlines() if path.exists() else []
        return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@pytest.fixture
def node(tmp_path, base_host, installer_image) -> Node:
    return Node(tmp_path, base_host, installer_image)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_install_upgrade_uninstall_idempotent_and_clean(node):
    pristine = node.snapshot()
    out = ok(node.installer("install"))
    assert "SELinux is not enabled on this node" in out
    assert "FAILED" not in out, out  # `ocihook check` on the host passes
    root = node.root
    hook = root / "opt/ocihook/bin/ocihook-hook"
    assert hook.read_text().startswith("#!/usr/bin/python3 -IS\n")
    registration = json.loads((root / "etc/containers/oci/hooks.d/ocihook.json").read_text())
    # /opt is a link to var/opt on this node: the registration names the real place.
    assert registration["hook"]["path"] == "/var/opt/ocihook/bin/ocihook-hook"
    assert registration["when"]["annotations"] == {r"^ocihook\.io/devices$": ".+"}
    config = (root / "etc/ocihook/config.yaml").read_text()
    assert config.startswith(MANAGED)
    assert yaml.safe_load(config)["source_root"] == "/srv/synth"
    assert (root / "etc/ocihook/config.yaml").stat().st_mode & 0o777 == 0o644
    plan = subprocess.run(  # in a private mount namespace with /proc, as on a node
        ["unshare", "--mount", "sh", "-c", f"mount --bind /proc {root}/proc && "
         f"exec chroot {root} /opt/ocihook/bin/ocihook plan --devices 0"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    assert "/dev/synth0" in plan.stdout and "libsynth.so.1" in plan.stdout
    installed = node.snapshot()

    ok(node.installer("install"))
    assert node.snapshot() == installed, "install twice: the same host"

    node.write_configmap(source_root="/srv/synth", device_root="/srv/synth", mount_api="classic")
    ok(node.installer("install"))
    upgraded = node.snapshot()
    changed = {p for p in set(upgraded) | set(installed) if upgraded.get(p) != installed.get(p)}
    assert changed == {"etc/ocihook/config.yaml"}
    assert "mount_api: classic" in (root / "etc/ocihook/config.yaml").read_text()

    ok(node.installer("uninstall"))
    assert node.snapshot() == pristine, "nothing left behind"
    ok(node.installer("uninstall"))
    assert node.snapshot() == pristine


def test_selinux_module_loaded_and_removed(node):
    (node.selinuxfs / "enforce").write_text("1")
    store = node.root / "var/lib/selinux-standin"
    restorecon = node.root / "usr/sbin/restorecon"  # a stand-in that logs its arguments
    restorecon.write_text('#!/bin/sh\necho "$@" >> /var/lib/selinux-standin/restorecon.log\n')
    restorecon.chmod(0o755)
    pristine = node.snapshot()
    out = ok(node.installer("install"))
    assert "loaded SELinux module ocihook" in out
    assert (store / "ocihook").read_bytes() == b"stand-in policy package\n"
    calls = (store / "restorecon.log").read_text().splitlines()
    assert calls[0] == "-R /var/opt/ocihook /etc/ocihook /etc/containers/oci/hooks.d"
    assert calls[1] == "/dev/nvidia* /dev/synth*"  # no such nodes in this host root
    ok(node.installer("install"))
    ok(node.installer("uninstall"))
    assert not (store / "ocihook").exists()
    assert (store / "restorecon.log").read_text().splitlines()[-1] == "/dev/nvidia* /dev/synth*"
    (store / "restorecon.log").unlink()
    assert node.snapshot() == pristine


def test_host_config_is_kept_without_configmap_and_never_removed(node):
    (node.root / "etc/ocihook").mkdir()
    own = node.root / "etc/ocihook/config.yaml"
    own.write_text("profile: synthetic\nsource_root: /srv/synth\ndevice_root: /srv/synth\n")
    (node.configmap / "config.yaml").unlink()
    pristine = node.snapshot()
    out = ok(node.installer("install"))
    assert "keeping the host's own /etc/ocihook/config.yaml" in out
    ok(node.installer("uninstall"))
    assert node.snapshot() == pristine


def test_host_python_that_cannot_run_the_hook_fails_cleanly(node):
    pristine = node.snapshot()
    result = node.installer("install", HOST_PYTHON="/usr/bin/python-missing")
    assert result.returncode == 1
    assert "ocihook-installer: the host's /usr/bin/python-missing cannot run ocihook" in (
        result.stderr
    )
    assert node.snapshot() == pristine


def test_daemonset_run_labels_the_node_writes_cdi_and_cleans_up_on_stop(node):
    """`run` as the DaemonSet's container: install, NFD labels on a timer, a CDI spec for
    containerd, and with UNINSTALL_ON_STOP=true a clean host after SIGTERM (podman stop)."""
    pristine = node.snapshot()
    name = f"ocihook-i17-ds-{uuid.uuid4().hex[:8]}"
    env = {"FEATURES_INTERVAL": "1", "UNINSTALL_ON_STOP": "true",
           "CDI_OUTPUT": "/var/run/cdi/ocihook.yaml"}  # fmt: skip
    started = subprocess.run(
        [*node.args(env, name), "-d", node.image, "/usr/local/bin/ocihook-installer", "run"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 120
        while node.features().get("ocihook.io/ready") != "true" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert node.features() == {
            "ocihook.io/profile": "synthetic",
            "ocihook.io/devices": "3",
            "ocihook.io/driver-version": "1.2.3",
            "ocihook.io/selinux": "disabled",
            "ocihook.io/ready": "true",
        }
        # /var/run -> /run (absolute): the spec is in the node's /run, not the pod's.
        spec = yaml.safe_load((node.root / "run/cdi/ocihook.yaml").read_text())
        assert spec["kind"] == "ocihook.io/synthetic"
        assert spec["containerEdits"]["hooks"][0]["path"] == "/var/opt/ocihook/bin/ocihook"
        # A broken ConfigMap shows on the next tick.
        node.write_configmap(source_root="/srv/missing")
        ok(node.installer("install"))
        while node.features().get("ocihook.io/ready") != "false" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert node.features()["ocihook.io/ready"] == "false"
        stopped = subprocess.run(["podman", "stop", "-t", "30", name], capture_output=True)
        assert stopped.returncode == 0, stopped.stderr
        logs = subprocess.run(["podman", "logs", name], capture_output=True, text=True)
        assert "ocihook-installer: uninstalled" in logs.stdout, logs.stdout + logs.stderr
    finally:
        podman.remove(name)
    assert node.snapshot() == pristine


@pytest.fixture(scope="module")
def shim_image(tmp_path_factory) -> str:
    """An installer image whose payload carries PyPI's `selinux` shim (what `pip install
    --target` put there while setup.cfg required `selinux`)."""
    name = "ocihook-k8s-shim-installer"
    root = tmp_path_factory.mktemp("shim") / "root"
    yield k8s.installer_image(root, name, extra_lib=k8s.SELINUX_SHIM)
    subprocess.run(["podman", "rmi", "-f", f"localhost/{name}:latest"], capture_output=True)


@pytest.mark.parametrize("bindings", [True, False], ids=["node-has-bindings", "node-has-none"])
def test_the_payload_never_shadows_the_nodes_selinux_bindings(
    tmp_path, base_host, shim_image, bindings
):
    """`ocihook` on the node (its Python -I, the payload's lib dir first on sys.path) imports
    the node's own libselinux bindings where its Python has them, and none where it has not:
    never a shim that says SELinux is off."""
    node = Node(tmp_path, base_host, shim_image)
    if bindings:
        k8s.add_selinux_bindings(node.root)
    out = ok(node.installer("install"))
    assert "not installing selinux from the image" in out, out
    assert not (node.root / "opt/ocihook/lib/selinux").exists()
    assert not list((node.root / "opt/ocihook/lib").glob("selinux-*.dist-info"))
    probe = (
        "import sys; sys.path.insert(0, '/opt/ocihook/lib')\n"
        "try:\n    import selinux\nexcept ImportError as e:\n    print('none', e)\n"
        "else:\n    print(selinux.__file__, hasattr(selinux, 'lsetfilecon'))\n"
    )
    result = subprocess.run(
        ["chroot", str(node.root), "/usr/bin/python3", "-I", "-c", probe],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    if bindings:
        assert result.stdout == "/usr/lib/python3/dist-packages/selinux/__init__.py True\n"
    else:
        assert result.stdout.startswith("none No module named 'selinux'"), result.stdout
    ok(node.installer("uninstall"))
