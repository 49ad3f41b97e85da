"""The kube tier's real cluster: ../shared/tools/kubernetes's single-node Kubernetes v1.28.7
with CRI-O 1.37 (cluster/up.sh and down.sh), started once per test session, with
`ocihook device-plugin` running beside it on the host and the hook registered in CRI-O's
hooks dir ($STATE/hooks) in Kubernetes mode.

Everything lives under STATE (in /tmp: up.sh overlays /etc /opt /root /run /usr /var in the
cluster's mount namespace, so a STATE there would not be the host's). The cluster's ports are
fixed, so one cluster runs on a machine at a time: the `owner` file beside STATE names the
run that holds it; a run that finds an owner that is gone (a killed run) takes the cluster
down with down.sh first (`sweep`), one whose owner is alive stops with that line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support import crio as crio_support

REPO = Path(__file__).resolve().parent.parent.parent
# OCIHOOK_K8S_TOOLS: another copy of ../shared/tools/kubernetes (tests/test_tiers.py points
# it at a missing dir to see the tier fail under make test).
TOOLS = Path(os.environ.get("OCIHOOK_K8S_TOOLS", REPO.parent / "shared" / "tools" / "kubernetes"))
UP, DOWN = TOOLS / "cluster" / "up.sh", TOOLS / "cluster" / "down.sh"
BASE = Path("/tmp/ocihook-kube-tier")
STATE = BASE / "state"
OWNER = BASE / "owner"
ETCD = Path(os.environ.get("ETCD_DIR", "/var/cache/ocihook-tests/etcd-server")) / "usr/bin/etcd"
NODE = "127.0.0.1"
TIMEOUT = 180
# DevicePluginCDIDevices: alpha in 1.28, for the plugin's CDI answer (kubernetes.cdi).
FEATURE_GATES = "DevicePluginCDIDevices=true"


def unmet() -> str | None:
    """Why the kube tier cannot run here, or None."""
    if not UP.is_file() or not DOWN.is_file():
        return f"needs the Kubernetes cluster scripts: {UP} and {DOWN}"
    if crio_support.binaries() is None:
        return crio_support.unmet()
    if not os.access(ETCD, os.X_OK):
        return f"needs Debian's etcd-server unpacked at {ETCD} (scripts/install-deps.sh)"
    try:
        import grpc  # noqa: F401

        from ocihook.deviceplugin.v1beta1 import api_pb2_grpc  # noqa: F401
    except Exception as error:  # ImportError, or the stubs' version check
        return f"needs the device plugin's gRPC stubs and runtime (make venv): {error}"
    return None


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        STATE=str(STATE), ETCD=str(ETCD), K8S_FEATURE_GATES=FEATURE_GATES,
        CRIO_CDI_DIRS=str(STATE / "cdi"),
    )  # fmt: skip
    return env


def sweep() -> str | None:
    """Take down what a killed run left (its owner gone); what was done, or None."""
    if not STATE.exists() and not OWNER.exists():
        return None
    try:
        pid, _, started = OWNER.read_text().strip().partition(" ")
    except FileNotFoundError:
        pid, started = "", ""
    if pid.isdigit() and crio_support.start_time(int(pid)) == started:
        raise AssertionError(
            f"the kube tier's cluster at {STATE} is held by the running process {pid}: "
            "one cluster per machine (fixed ports)"
        )
    result = subprocess.run([str(DOWN)], env=_env(), capture_output=True, text=True, timeout=300)
    OWNER.unlink(missing_ok=True)
    return f"took down a killed run's cluster: {result.stderr.strip().splitlines()[-1:]}"


class Cluster:
    """The running cluster: kubectl, crictl, its namespace, its kubelet."""

    def __init__(self) -> None:
        self.state = STATE
        self.hooks_dir = STATE / "hooks"
        self.plugin_dir = STATE / "kubelet" / "device-plugins"
        self.log = BASE / "up.log"

    def up(self) -> None:
        BASE.mkdir(parents=True, exist_ok=True)
        OWNER.write_text(f"{os.getpid()} {crio_support.start_time(os.getpid())}\n")
        with open(self.log, "w") as log:
            result = subprocess.run(
                [str(UP)], env=_env(), stdout=log, stderr=subprocess.STDOUT, timeout=600
            )
        if result.returncode:
            raise AssertionError(f"up.sh failed: {self.log.read_text()[-2000:]}")
        self.kubectl("wait", "--for=condition=Ready", f"node/{NODE}", "--timeout=120s")
        for _ in range(120):  # the default ServiceAccount, which every pod needs
            if self.kubectl("get", "serviceaccount", "default", check=False).returncode == 0:
                break
            time.sleep(1)

    def down(self) -> list[str]:
        """down.sh; then what is left of the cluster: processes still in its mount namespace,
        its kubepods cgroups, its state dir (each a line; empty when nothing is)."""
        try:
            namespace = (STATE / "k8s-mntns").read_text().strip()
        except OSError:
            namespace = None
        result = subprocess.run(
            [str(DOWN)], env=_env(), capture_output=True, text=True, timeout=600
        )
        left = [f"cgroup {c}" for c in Path("/sys/fs/cgroup").glob("*/kubepods")]
        for entry in Path("/proc").iterdir():
            try:
                inside = entry.name.isdigit() and os.readlink(entry / "ns/mnt") == namespace
            except OSError:
                continue
            if inside:
                left.append(f"process {entry.name} in the cluster's mount namespace")
        if STATE.exists():
            left.append(f"{STATE}: {result.stderr.strip()[-500:]}")
        OWNER.unlink(missing_ok=True)
        shutil.rmtree(BASE, ignore_errors=True)
        return left

    # -- clients ------------------------------------------------------------------------------

    def kubectl(
        self, *args: str, check: bool = True, stdin: str | None = None, timeout: int = TIMEOUT
    ):
        kubectl = Path(os.environ.get("TMPDIR", "/tmp")) / "ocihook-k8s" / "bin" / "kubectl"
        result = subprocess.run(
            [str(kubectl), "--kubeconfig", str(STATE / "kubeconfig/admin.conf"), *args],
            input=stdin, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if check and result.returncode:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result

    def apply(self, document: dict | list) -> None:
        items = document if isinstance(document, list) else [document]
        text = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        self.kubectl("apply", "-f", "-", stdin=text)

    def crictl(self, *args: str, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
        tools = crio_support.binaries()
        return subprocess.run(
            [tools["crictl"], "--runtime-endpoint", f"unix://{STATE}/crio.sock", *args],
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def nsexec(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        """A command in the cluster's mount namespace (where CRI-O, kubelet and runc are)."""
        return subprocess.run([str(STATE / "nsexec.sh"), *args], **kwargs)

    def import_image(self, root: Path, name: str) -> str:
        """`podman import` a tree into CRI-O's storage, inside the namespace (its mounts
        stay there)."""
        image = f"localhost/{name}:latest"
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        self.nsexec(
            "podman", "--root", f"{STATE}/storage/root", "--runroot", f"{STATE}/storage/run",
            "--storage-driver", "overlay", "--tmpdir", f"{STATE}/podman-tmp",
            "--events-backend", "none", "--cgroup-manager", "cgroupfs",
            "import", "-q", "-", image,
            stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL, timeout=TIMEOUT,
        )  # fmt: skip
        tar.wait()
        return image

    # -- the node -------------------------------------------------------------------------------

    def allocatable(self, resource: str) -> int:
        node = json.loads(self.kubectl("get", "node", NODE, "-o", "json").stdout)
        return int(node["status"].get("allocatable", {}).get(resource, "0"))

    def wait_allocatable(self, resource: str, count: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.allocatable(resource) == count:
                return
            time.sleep(0.5)
        raise AssertionError(
            f"node allocatable {resource} is {self.allocatable(resource)}, not {count}"
        )

    def restart_kubelet(self) -> None:
        """Stop the kubelet (SIGTERM) and start it again as up.sh does."""
        pid = int((STATE / "pids/kubelet.pid").read_text())
        os.kill(pid, signal.SIGTERM)
        for _ in range(300):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        holder = (STATE / "pids/holder.pid").read_text().strip()
        kubelet = Path(os.environ.get("TMPDIR", "/tmp")) / "ocihook-k8s/bin/kubelet"
        with open(STATE / "logs/kubelet.log", "ab") as log:
            subprocess.Popen(
                ["nsenter", "-t", holder, "-m", "--", "setsid", "nice", "-n", "10", "bash", "-c",
                 'echo $$ > "$0"; exec "$@"', str(STATE / "pids/kubelet.pid"), str(kubelet),
                 f"--config={STATE}/kubelet-config.yaml",
                 f"--kubeconfig={STATE}/kubeconfig/kubelet.conf", f"--hostname-override={NODE}",
                 "--root-dir=/var/lib/kubelet", "--v=2"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )  # fmt: skip

    # -- pods -----------------------------------------------------------------------------------

    def pod(self, name: str) -> dict:
        return json.loads(self.kubectl("get", "pod", name, "-o", "json").stdout)

    def wait_phase(self, name: str, phases: tuple[str, ...], timeout: float = TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pod = self.pod(name)
            if pod["status"].get("phase") in phases:
                return pod
            time.sleep(0.3)
        raise AssertionError(f"pod {name} is {pod['status']}, not {phases}")

    def logs(self, name: str) -> str:
        return self.kubectl("logs", name).stdout

    def delete(self, *names: str, wait: bool = True) -> None:
        self.kubectl(
            "delete", "pod", *names, "--grace-period=0", "--force", f"--wait={str(wait).lower()}",
            "--ignore-not-found", timeout=300,
        )  # fmt: skip


class Plugin:
    """`ocihook device-plugin` on the host, registered at the cluster's kubelet dir."""

    def __init__(self, config: Path, kubelet_dir: Path, log: Path, interval: float = 1) -> None:
        self.config, self.kubelet_dir, self.log_path = config, kubelet_dir, log
        self.interval = interval
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ocihook.cli.main", "device-plugin", "--config",
                 str(self.config), "--kubelet-dir", str(self.kubelet_dir),
                 "--health-interval", str(self.interval), "--metrics-port", "0"],
                cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            )  # fmt: skip

    def stop(self) -> int | None:
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError("the device plugin did not stop on SIGTERM") from None

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, after: int = 0, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.text()[after:]:
                return
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(
                    f"the plugin exited {self.process.returncode}: {self.text()[-2000:]}"
                )
            time.sleep(0.2)
        raise AssertionError(f"the plugin never said {text!r}: {self.text()[-2000:]}")
