"""A CRI-O of the tests' own, driven with crictl: its config, its start and stop, its images,
and pods and containers configured the way kubelet configures them.

Everything it has lives in one scratch dir, `/var/tmp/ocihook-crio-XXXXXXXX` (storage root
and runroot, runc's state, pinned namespaces, logs, the hooks and CDI dirs, a node root for
the Kubernetes installer): nothing it creates or removes touches podman's storage, which other
tests use at the same time. `stop()` removes every pod, stops crio, ends what it left
running, unmounts what it left, removes its cgroups and the dir.

A run killed before `stop()` (SIGKILL of pytest) leaves all of that: crio runs on in a
session of its own, with conmon and the containers. The dir's `owner` file names the
process that made it (pid and start time); `sweep_leftovers()`, at the start of the tier,
undoes every dir whose owner is gone the way `stop()` would, and leaves every other dir
alone (see `stale`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from ocihook.linux import mountinfo

REPO = Path(__file__).resolve().parent.parent.parent
SHARED = REPO.parent / "shared" / "tools" / "crio"
BASE = Path("/var/tmp")
DIR_PREFIX = "ocihook-crio-"
# What crio mounts on the host and unmounts again as pods come and go (conftest's
# host_mounts_unchanged skips these, as it skips podman's): its storage dir bound onto itself,
# each container's root and each pod's shm, the namespaces pinns pins for a pod. Anything
# mounted *below* a container's root still counts.
HOST_MOUNT = re.compile(
    r"^/var/tmp/ocihook-crio-[A-Za-z0-9_]{8}/(storage/overlay|storage/overlay/[0-9a-f]{64}/merged"
    r"|runroot/overlay-containers/[0-9a-f]{64}/userdata/shm"
    r"|ns/(ipc|net|uts|user|pid)ns/[0-9a-f-]{36})$"
)
# CRI NamespaceMode values (k8s.io/cri-api): what kubelet asks for a pod without hostPID.
NAMESPACE_POD, NAMESPACE_CONTAINER, NAMESPACE_NODE = 0, 1, 2
# A container that ends at once on SIGTERM (sleep as pid 1 would ignore it until the timeout).
IDLE = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]
# Generous: crio shares 2 cores with other test runs.
TIMEOUT = 180
OWNER = "owner"  # in the scratch dir: "<pid> <start time>" of the process that made it
# A dir without an owner file (made by an older version of this module, or by a run killed
# in the instant between mkdtemp and writing the file) counts as left behind only when no
# process names it and nothing at its top changed for this long.
UNOWNED_AGE = 3600


def binaries() -> dict[str, str] | None:
    """crio, crictl and pinns: ../shared/tools/crio/ (relative to the repo root), else PATH."""
    for crio in (SHARED / "crio", shutil.which("crio")):
        if crio and os.access(crio, os.X_OK):
            crio = Path(crio)
            found = {
                "crio": str(crio),
                "crictl": _beside(crio, "crictl"),
                "pinns": _beside(crio, "pinns"),
            }
            return found if all(found.values()) else None
    return None


def _beside(crio: Path, name: str) -> str | None:
    path = crio.parent / name
    return str(path) if os.access(path, os.X_OK) else shutil.which(name)


def unmet() -> str | None:
    """Why the CRI-O tier cannot run here, or None. (conmon, runc and the CNI plugins come
    from scripts/install-deps.sh: where crio is present and they are not, the tier fails.)"""
    if binaries() is None:
        return f"needs CRI-O: crio, crictl and pinns in {SHARED} or on PATH"
    return None


def _tool(name: str, default: str) -> str:
    return shutil.which(name) or default


def _cni_plugin_dir() -> str:
    """Debian's containernetworking-plugins dir, or the upstream default."""
    for directory in ("/usr/lib/cni", "/opt/cni/bin", "/usr/libexec/cni"):
        if os.access(f"{directory}/loopback", os.X_OK):
            return directory
    return "/usr/lib/cni"


def version(crio: str) -> str:
    out = subprocess.run([crio, "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"crio version (\S+)", out)
    commit = re.search(r"GitCommit:\s+(\S+)", out)
    return f"{match.group(1) if match else '?'} ({commit.group(1)[:8] if commit else '?'})"


def docs_drop_in(text: str) -> str:
    """The `crio.conf.d` drop-in a document gives: the TOML block under its file name."""
    match = re.search(
        r"```toml\n\s*(# /etc/crio/crio\.conf\.d/50-ocihook\.conf\n.*?)```", text, re.DOTALL
    )
    assert match, "no /etc/crio/crio.conf.d/50-ocihook.conf block"
    return match.group(1)


def hooks_dirs(drop_in: str) -> list[str]:
    """The `hooks_dir` list of a drop-in (a TOML array of plain strings)."""
    match = re.search(r"^\s*hooks_dir\s*=\s*\[(.*?)\]", drop_in, re.DOTALL | re.MULTILINE)
    assert match, drop_in
    return re.findall(r'"([^"]*)"', match.group(1))


def relocate(drop_in: str, root: Path) -> str:
    """The drop-in with every hooks_dir entry moved under `root` (a node root of the test's
    own: the machine's /etc and /usr are left alone)."""
    start, end = re.search(r"^\s*hooks_dir\s*=\s*\[.*?\]", drop_in, re.DOTALL | re.MULTILINE).span()
    moved = re.sub(r'"(/[^"]*)"', lambda m: f'"{root}{m.group(1)}"', drop_in[start:end])
    return drop_in[:start] + moved + drop_in[end:]


# -- what a run leaves, and the sweep of what a killed run left --------------------------------


def start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat, clock ticks since boot), which
    tells it from a later process with the same pid; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return None


def make_dir(base: Path = BASE) -> Path:
    """A fresh scratch dir with this process named in its owner file."""
    directory = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=base))
    (directory / OWNER).write_text(f"{os.getpid()} {start_time(os.getpid())}\n")
    directory.chmod(0o755)
    return directory


def stale(directory: Path, now: float | None = None) -> bool:
    """Whether `directory` is what a killed run left: its owner file names a process that is
    gone (no process with that pid and start time); without an owner file, when no process
    names the dir in its command line and nothing at its top changed for UNOWNED_AGE."""
    try:
        pid, _, started = (directory / OWNER).read_text().strip().partition(" ")
    except FileNotFoundError:
        if _naming(directory):
            return False
        try:
            times = [directory.lstat().st_mtime]
            times += [entry.lstat().st_mtime for entry in directory.iterdir()]
        except OSError:
            return False  # removed meanwhile (by its own run's teardown)
        return (now if now is not None else time.time()) - max(times) > UNOWNED_AGE
    return not pid.isdigit() or start_time(int(pid)) != started


def sweep_leftovers(base: Path = BASE) -> list[str]:
    """Undo what killed runs left in `base`: for each stale `ocihook-crio-*` dir, its
    processes, mounts, cgroups and the dir itself (`undo`). What was undone, one line each."""
    done = []
    for directory in sorted(base.glob(f"{DIR_PREFIX}*")):
        if directory.is_dir() and not directory.is_symlink() and stale(directory):
            done += undo(directory)
    return done


def undo(directory: Path, hierarchies: list[Path] | None = None) -> list[str]:
    """End every process of the dir (crio, conmon, the containers), unmount everything below
    it (deepest first), remove its cgroups in every hierarchy, then the dir; what was done.
    The dir is removed only when nothing is mounted below it any more, and kept (for the
    next sweep to try again) while a cgroup named after it is left."""
    roots = cgroup_hierarchies() if hierarchies is None else hierarchies
    done = end_processes(directory, roots)
    done += unmount_below(directory)
    left = mounts_below(directory)
    if left:
        raise AssertionError(f"still mounted under {directory}: {left}")
    cgroups = remove_cgroups(directory.name, roots)
    if cgroups:
        return [*done, *cgroups, f"{directory} kept: its cgroups are left"]
    shutil.rmtree(directory)
    return [*done, f"{directory} removed"]


def cgroup_hierarchies(text: str | None = None) -> list[Path]:
    """The mount points of the cgroup hierarchies (of `text`, a mountinfo, or this process's):
    on a v1 host one per controller (/sys/fs/cgroup/pids, ...), on a hybrid host those and
    the unified one (/sys/fs/cgroup/unified), on a v2 host /sys/fs/cgroup itself."""
    entries = mountinfo.parse(text) if text is not None else mountinfo.read()
    points = [Path(e.point) for e in entries if e.fstype in ("cgroup", "cgroup2")]
    return list(dict.fromkeys(points))


def _naming(directory: Path) -> set[int]:
    """Processes (not this one) whose command line names `directory` or a path below it."""
    pattern = re.compile(re.escape(os.fsencode(directory)) + rb"(?=/|\x00|$)")
    pids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if pattern.search(cmdline):
            pids.add(int(entry.name))
    return pids


def processes(directory: Path, hierarchies: list[Path]) -> set[int]:
    """The dir's processes: those in its cgroups (named after the dir, in each hierarchy:
    the containers and conmon) and those whose command line names it (crio, conmon)."""
    pids = _naming(directory)
    for root in hierarchies:
        for procs in (root / directory.name).glob("**/cgroup.procs"):
            try:
                pids.update(int(line) for line in procs.read_text().split())
            except OSError:
                continue  # removed meanwhile
    pids.discard(os.getpid())
    return pids


def end_processes(directory: Path, hierarchies: list[Path]) -> list[str]:
    """SIGKILL the dir's processes, again while any are left (crio may have started one)."""
    ended: list[str] = []
    for _ in range(10):
        pids = processes(directory, hierarchies)
        if not pids:
            break
        for pid in sorted(pids):
            try:
                os.kill(pid, signal.SIGKILL)
                ended.append(f"process {pid} killed")
            except ProcessLookupError:
                pass
        time.sleep(1)
    return ended


def mounts_below(directory: Path) -> list[str]:
    """Mount points below `directory` in this mount namespace (one per mount)."""
    prefix = f"{directory}/"
    return [e.point for e in mountinfo.read() if e.point.startswith(prefix)]


def unmount_below(directory: Path) -> list[str]:
    """Unmount everything below `directory`, deepest first (lazily where a plain umount
    fails), until nothing is left or nothing more can be done."""
    undone: list[str] = []
    for _ in range(10):
        points = mounts_below(directory)
        if not points:
            break
        for point in sorted(points, key=lambda p: p.count("/"), reverse=True):
            for command in (["umount", point], ["umount", "-l", point]):
                if subprocess.run(command, capture_output=True).returncode == 0:
                    undone.append(f"{point} unmounted")
                    break
    return undone


def remove_cgroups(name: str, hierarchies: list[Path]) -> list[str]:
    """The cgroup `name` (crio's cgroup parent, /NAME) and everything below it, deepest
    first, in each hierarchy; what could not be removed."""
    left = []
    for root in hierarchies:
        parent = root / name
        if not parent.is_dir():
            continue
        children = sorted((p for p in parent.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for cgroup in [*children, parent]:
            try:
                cgroup.rmdir()
            except FileNotFoundError:
                pass
            except OSError as error:
                left.append(f"cgroup {cgroup}: {error}")
    return left


class Crio:
    """One crio process with its own config and state under `self.dir`."""

    def __init__(self, drop_in: str) -> None:
        tools = binaries()
        assert tools, unmet()
        self.tools = tools
        self.dir = make_dir()
        self.socket = self.dir / "crio.sock"
        self.log = self.dir / "crio.log"
        self.node = self.dir / "node"  # the node root the docs' paths are relocated under
        self.cdi_dir = self.dir / "cdi"
        self.pod_logs = self.dir / "pods"
        self.cgroup_parent = f"/{self.dir.name}"
        self.hook_config = self.dir / "hook-config.yaml"  # what the registered hook reads
        self.images: dict[str, str] = {}
        self.drop_in = relocate(drop_in, self.node)
        self.process: subprocess.Popen | None = None
        self.version = version(tools["crio"])
        for sub in ("confd", "cni", "cdi", "pods", "unused-hooks.d", "policies", "auth"):
            (self.dir / sub).mkdir()
        for directory in hooks_dirs(self.drop_in):
            Path(directory).mkdir(parents=True, exist_ok=True)

    # -- config, start, stop -------------------------------------------------------------------

    def write_config(self, pause_image: str) -> None:
        d = self.dir
        (d / "cni/10-loopback.conflist").write_text(
            json.dumps(
                {"cniVersion": "1.0.0", "name": "ocihook-lo", "plugins": [{"type": "loopback"}]}
            )
        )
        (d / "policy.json").write_text('{"default": [{"type": "insecureAcceptAnything"}]}\n')
        (d / "crictl.yaml").write_text(
            f"runtime-endpoint: unix://{self.socket}\nimage-endpoint: unix://{self.socket}\n"
            f"timeout: {TIMEOUT}\n"
        )
        conmon = _tool("conmon", "/usr/bin/conmon")
        # hooks_dir here names an empty dir: the hooks CRI-O runs come from the docs' drop-in.
        (d / "crio.conf").write_text(
            f"""[crio]
root = "{d}/storage"
runroot = "{d}/runroot"
storage_driver = "overlay"
log_dir = "{d}/pods"
version_file = "{d}/run/version"
clean_shutdown_file = "{d}/lib/clean.shutdown"
[crio.api]
listen = "{self.socket}"
[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
conmon = "{conmon}"
conmon_cgroup = "pod"
pinns_path = "{self.tools["pinns"]}"
namespaces_dir = "{d}/ns"
hooks_dir = ["{d}/unused-hooks.d"]
cdi_spec_dirs = ["{self.cdi_dir}"]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
drop_infra_ctr = true
container_exits_dir = "{d}/run/exits"
container_attach_socket_dir = "{d}/run"
decryption_keys_path = "{d}/keys"
apparmor_profile = "unconfined"
irqbalance_config_file = ""
irqbalance_config_restore_file = "disable"
log_level = "debug"
[crio.runtime.runtimes.runc]
runtime_path = "{_tool("runc", "/usr/sbin/runc")}"
runtime_root = "{d}/runc"
monitor_path = "{conmon}"
[crio.image]
pause_image = "{pause_image}"
signature_policy = "{d}/policy.json"
signature_policy_dir = "{d}/policies"
namespaced_auth_dir = "{d}/auth"
[crio.network]
network_dir = "{d}/cni"
plugin_dirs = ["{_cni_plugin_dir()}"]
[crio.nri]
enable_nri = false
"""
        )
        (d / "confd/50-ocihook.conf").write_text(self.drop_in)

    def import_image(self, root: Path, name: str) -> str:
        """`podman import` a tree into this crio's storage (podman's own is left alone)."""
        d = self.dir
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            ["podman", "--root", f"{d}/storage", "--runroot", f"{d}/runroot",
             "--tmpdir", f"{d}/podman-tmp", "--storage-driver", "overlay",
             "import", "-q", "-", f"localhost/{name}:latest"],
            stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL, timeout=TIMEOUT,
        )  # fmt: skip
        tar.wait()
        return f"localhost/{name}:latest"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [self.tools["crio"], "--config", str(self.dir / "crio.conf"),
                 "--config-dir", str(self.dir / "confd")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"crio exited {self.process.returncode}: {self.log_tail()}")
            if self.socket.exists() and self.crictl("version").returncode == 0:
                return
            time.sleep(0.5)
        raise AssertionError(f"crio did not answer on {self.socket}: {self.log_tail()}")

    def log_offset(self) -> int:
        return self.log.stat().st_size

    def wait_for_log(self, text: str, offset: int) -> None:
        """Until crio's log has `text` after byte `offset` (e.g. "added hook PATH": crio
        watches its hooks dirs and reloads them when a file changes)."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            with open(self.log, "rb") as log:
                log.seek(offset)
                if text.encode() in log.read():
                    return
            time.sleep(0.2)
        raise AssertionError(f"crio's log never said {text!r}: {self.log_tail()}")

    def sync_hooks(self, directory: Path) -> None:
        """Until crio has re-read its hooks dirs after every change made so far: a reload
        that found a new sentinel file in `directory` read the dirs as they are now (crio
        reloads on each change, in order; "added hook" for an older file could be an earlier
        reload's). The sentinel's hook never matches a container; it is removed after."""
        sentinel = directory / f"zz-sync-{uuid.uuid4().hex[:12]}.json"
        temporary = directory / f".{sentinel.name}.tmp"  # no .json suffix: crio skips it
        temporary.write_text(
            json.dumps(
                {
                    "version": "1.0.0",
                    "hook": {"path": "/bin/true"},
                    "when": {"annotations": {"^ocihook-test/never$": "^never$"}},
                    "stages": ["prestart"],
                }
            )
        )
        offset = self.log_offset()
        temporary.rename(sentinel)
        try:
            self.wait_for_log(f"added hook {sentinel}", offset)
        finally:
            sentinel.unlink()

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> list[str]:
        """Remove every pod, stop crio, then undo whatever it left; returns what had to be
        undone by force (empty when crio cleaned up after itself)."""
        forced: list[str] = []
        if self.process is not None and self.process.poll() is None:
            try:
                self.crictl("rmp", "--force", "--all")
            except subprocess.TimeoutExpired:
                forced.append("crictl rmp --all timed out")
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                forced.append(f"crio {self.process.pid} killed")
                self.process.kill()
                self.process.wait(timeout=60)
        hierarchies = cgroup_hierarchies()
        forced += end_processes(self.dir, hierarchies)
        forced += unmount_below(self.dir)
        forced += remove_cgroups(self.dir.name, hierarchies)
        left = self.mounts()
        if left:
            raise AssertionError(f"still mounted under {self.dir}: {left}")
        shutil.rmtree(self.dir)
        return forced

    def mounts(self) -> list[str]:
        """Mount points under this crio's dir, in the host's mount table."""
        return mounts_below(self.dir)

    # -- crictl ----------------------------------------------------------------------------

    def crictl(self, *args: str, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
        return subprocess.run(
            [self.tools["crictl"], "--config", str(self.dir / "crictl.yaml"), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def pod(
        self,
        name: str,
        namespace: str,
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
    ) -> Pod:
        """`crictl runp` of a pod configured as kubelet configures one (metadata, and the
        labels kubelet adds); host network, a PID namespace per container (no infra process)."""
        uid = str(uuid.uuid4())
        config = {
            "metadata": {"name": name, "namespace": namespace, "uid": uid, "attempt": 0},
            "labels": {
                **(labels or {}),
                "io.kubernetes.pod.name": name,
                "io.kubernetes.pod.namespace": namespace,
                "io.kubernetes.pod.uid": uid,
            },
            "annotations": dict(annotations or {}),
            "log_directory": str(self.pod_logs / f"{namespace}_{name}_{uid}"),
            "linux": {
                "cgroup_parent": self.cgroup_parent,
                "security_context": {"namespace_options": _namespaces()},
            },
        }
        path = self.dir / f"pod-{uid}.json"
        path.write_text(json.dumps(config))
        result = self.crictl("runp", str(path))
        assert result.returncode == 0, result.stderr
        return Pod(self, result.stdout.strip(), config, path)


def _namespaces() -> dict:
    return {"network": NAMESPACE_NODE, "pid": NAMESPACE_CONTAINER, "ipc": NAMESPACE_POD}


class Pod:
    def __init__(self, crio: Crio, pod_id: str, config: dict, path: Path) -> None:
        self.crio, self.id, self.config, self.path = crio, pod_id, config, path
        self.containers: list[str] = []

    def container_config(
        self,
        name: str,
        image: str,
        command: list[str],
        annotations: dict[str, str] | None = None,
        **fields: object,
    ) -> dict:
        """A container as kubelet writes it: its four labels (the pod's name, namespace and
        uid, the container's name) and its own annotations."""
        meta = self.config["metadata"]
        return {
            "metadata": {"name": name, "attempt": 0},
            "image": {"image": image},
            "command": command,
            "log_path": f"{name}.log",
            "labels": {
                "io.kubernetes.container.name": name,
                "io.kubernetes.pod.name": meta["name"],
                "io.kubernetes.pod.namespace": meta["namespace"],
                "io.kubernetes.pod.uid": meta["uid"],
            },
            "annotations": {"io.kubernetes.container.restartCount": "0", **(annotations or {})},
            "linux": {"security_context": {"namespace_options": _namespaces()}},
            **fields,
        }

    def create(self, config: dict) -> subprocess.CompletedProcess:
        """`crictl create`; on success stdout is the container id."""
        path = self.crio.dir / f"ctr-{self.id[:12]}-{config['metadata']['name']}.json"
        path.write_text(json.dumps(config))
        result = self.crio.crictl("create", self.id, str(path), str(self.path))
        if result.returncode == 0:
            self.containers.append(result.stdout.strip())
        return result

    def run(self, name: str, image: str, command: list[str], **kwargs) -> str:
        """create + start; the container's id."""
        created = self.create(self.container_config(name, image, command, **kwargs))
        assert created.returncode == 0, created.stderr
        container = created.stdout.strip()
        started = self.crio.crictl("start", container)
        assert started.returncode == 0, started.stderr
        return container

    def exec(self, container: str, command: list[str]) -> subprocess.CompletedProcess:
        return self.crio.crictl("exec", container, *command)

    def logs(self, container: str) -> subprocess.CompletedProcess:
        return self.crio.crictl("logs", container)

    def wait_exited(self, container: str) -> dict:
        """The container's status once it has exited."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            status = self.inspect(container)["status"]
            if status["state"] == "CONTAINER_EXITED":
                return status
            time.sleep(0.3)
        raise AssertionError(f"container {container} still running")

    def inspect(self, container: str) -> dict:
        result = self.crio.crictl("inspect", container)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def spec(self, container: str) -> dict:
        """The OCI config CRI-O wrote for the container (what runc and the hook read)."""
        return self.inspect(container)["info"]["runtimeSpec"]

    def stop(self) -> None:
        """As kubelet does: stop each container (SIGTERM, then SIGKILL after the grace
        period), then the pod."""
        for container in self.containers:
            self.crio.crictl("stop", "--timeout", "10", container)
        result = self.crio.crictl("stopp", self.id)
        assert result.returncode == 0, result.stderr

    def remove(self) -> None:
        result = self.crio.crictl("rmp", self.id)
        assert result.returncode == 0, result.stderr


class Setup:
    """One test's side of the session's crio: the hook config it writes (state and log in its
    own dir) and the pods it makes, removed after it."""

    def __init__(self, crio: Crio, directory: Path, synth_root: Path) -> None:
        self.crio = crio
        self.dir = directory
        self.synth_root = synth_root
        self.config = crio.hook_config
        self.state_dir = directory / "state"
        self.log = directory / "ocihook.log"
        self.pods: list[Pod] = []

    def write_config(self, **settings) -> None:
        import yaml

        self.config.write_text(yaml.safe_dump(settings))

    def pod(self, name: str, namespace: str, annotations: dict[str, str] | None = None) -> Pod:
        pod = self.crio.pod(name, namespace, annotations)
        self.pods.append(pod)
        return pod

    def records(self) -> dict[str, dict]:
        """The hook's records in this test's state dir, by container id."""
        paths = sorted(self.state_dir.glob("*.json"))
        return {path.stem: json.loads(path.read_text()) for path in paths}

    def remove_pods(self) -> None:
        for pod in self.pods:
            self.crio.crictl("rmp", "--force", pod.id)
