"""The Kubernetes node path end to end: a real CRI-O (its own, tests/support/crio.py) with runc
and conmon, driven with crictl (runp, create, start, exec, logs, stop/stopp, rmp) the way
kubelet drives it: pod metadata and the labels kubelet sets, pod annotations, a pod per test.

What CRI-O does that these tests rely on and check (CRI-O 1.37, server/container_create.go and
internal/factory/container/container.go): it copies the pod's annotations into the OCI config
of each of its containers first, then its own `io.kubernetes.cri-o.*` keys, then the
container's annotations, then the container's labels. Kubelet labels every container with
`io.kubernetes.pod.namespace`, `.pod.name`, `.pod.uid` and `io.kubernetes.container.name`, so
those keys in the OCI config are kubelet's even where the pod's own annotations set them.

Stand-ins: the accelerator is the synthetic driver (tests/support/synthetic.py: real ELF
libraries and program, real char devices of this machine that runc's default device rules
deny), and for NVIDIA's CDI names the stand-in NVIDIA host of tests/support/nvidia_mig.py;
the node's /etc and /usr are a directory of the test's own (crio.node), so that the
machine's own are left alone.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from ocihook.config.compiled import _cache_name
from ocihook.records import SWEEP_STAMP, is_running
from tests.conftest import base_config
from tests.support import crio as crio_support
from tests.support import images, k8s, nvidia_mig, podman, synthetic

REPO = Path(__file__).resolve().parent.parent
ANNOTATION = "ocihook.io/devices"
OCIHOOK = str(Path(sys.executable).with_name("ocihook"))
SMI = "/usr/bin/synth-smi"
ALLOW_TEAM_A = [
    {"annotations": {r"^io\.kubernetes\.pod\.namespace$": "^team-a$"}, "devices": "all"}
]
# Kubelet's four container labels: the keys request.allow reads by default.
KUBELET_KEYS = (
    "io.kubernetes.pod.namespace",
    "io.kubernetes.pod.name",
    "io.kubernetes.pod.uid",
    "io.kubernetes.container.name",
)

pytestmark = pytest.mark.crio


def device_nodes(synth_root: Path) -> tuple[dict[int, tuple[str, int, int]], dict]:
    """The driver tree's nodes as built (their numbers come from the machine, not from here):
    index -> (name, major, minor) for `synth<N>`, and the control nodes by name."""
    devices, control = {}, {}
    for node in (synth_root / "dev").iterdir():
        rdev = os.stat(node).st_rdev
        entry = (node.name, os.major(rdev), os.minor(rdev))
        match = re.fullmatch(r"synth(\d+)", node.name)
        if match:
            devices[int(match.group(1))] = entry
        else:
            control[node.name] = entry
    return devices, control


def opened(entry: tuple[str, int, int]) -> str:
    name, major, minor = entry
    return f"synth-smi: opened /dev/{name} ({major}:{minor}) read-write"


def hook_line(stderr: str) -> str:
    """The hook's stderr as crictl shows it (inside runc's "error running hook" message):
    asserted to be one `ocihook: ...` line, the same wherever crictl repeats it."""
    found = set(re.findall(r"stderr: (.*?)(?:\\\\n|\\n|\n)", stderr))
    assert len(found) == 1, stderr
    (line,) = found
    assert line.startswith("ocihook: ") and "\n" not in line, stderr
    return line


def container_ids(pod: crio_support.Pod) -> list[str]:
    result = pod.crio.crictl("ps", "--all", "--quiet", "--pod", pod.id)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


# -- the pod annotation ----------------------------------------------------------------------


def test_pod_annotation_reaches_each_container_of_the_pod(crio, crio_setup):
    """`ocihook.io/devices` on the pod, none on the containers: both containers get device 0
    and the control nodes; the RHEL-layout image finds the library only through the ld cache
    the hook wrote (its loader does not search /usr/lib64 by itself). No allowed_annotations
    is configured: CRI-O filters only annotations it interprets itself (umask.crio.io, set on
    the same pod, is dropped), never ocihook's."""
    devices, control = device_nodes(crio_setup.synth_root)
    pod = crio_setup.pod("gpu", "team-a", {ANNOTATION: "0", "umask.crio.io": "0077"})
    rhel = pod.run("rhel", crio.images["rhel"], [SMI])
    debian = pod.run("debian", crio.images["debian"], crio_support.IDLE)

    assert pod.wait_exited(rhel)["exitCode"] == 0, pod.logs(rhel).stdout
    logs = pod.logs(rhel).stdout
    assert f"libsynth {synthetic.VERSION} loaded from /usr/lib64/libsynth.so.1" in logs
    smi = pod.exec(debian, [SMI])
    assert smi.returncode == 0, smi.stdout + smi.stderr
    assert "loaded from /usr/lib/x86_64-linux-gnu/libsynth.so.1" in smi.stdout
    cache = pod.exec(debian, ["grep", "-c", "libsynth.so.1", "/etc/ld.so.cache"])
    assert int(cache.stdout) >= 1
    for output in (logs, smi.stdout):
        for entry in [devices[0], *control.values()]:
            assert opened(entry) in output, output
        for index in set(devices) - {0}:
            assert f"/dev/{devices[index][0]} " not in output

    records = crio_setup.records()
    assert set(records) == {rhel, debian}
    for container, record in records.items():
        spec = pod.spec(container)
        assert spec["annotations"][ANNOTATION] == "0"
        assert "umask.crio.io" not in spec["annotations"]
        assert record["bundle"].endswith(f"/overlay-containers/{container}/userdata")
        assert [d["path"] for d in record["devices"]][0] == f"/dev/{devices[0][0]}"


def test_pod_without_the_annotation_gets_nothing(crio, crio_setup):
    pod = crio_setup.pod("plain", "team-a")
    container = pod.run("rhel", crio.images["rhel"], crio_support.IDLE)
    listing = pod.exec(container, ["/bin/sh", "-c", "ls /dev /usr/lib64 /usr/bin /usr/lib"])
    assert listing.returncode == 0, listing.stderr
    assert "synth" not in listing.stdout
    assert pod.exec(container, [SMI]).returncode != 0
    assert crio_setup.records() == {}
    assert ANNOTATION not in pod.spec(container)["annotations"]
    assert "createRuntime" not in pod.spec(container).get("hooks", {})


# -- request.allow by namespace --------------------------------------------------------------


def test_allow_list_by_the_namespace_kubelet_sets(crio, crio_setup):
    """The pod's namespace reaches the OCI config as io.kubernetes.pod.namespace (the label
    kubelet sets); a namespace the allow-list does not name is refused at `crictl create`
    with the hook's one line, and nothing is left of the container."""
    crio_setup.write_config(
        **base_config(crio_setup.dir, crio_setup.synth_root, request={"allow": ALLOW_TEAM_A})
    )
    allowed = crio_setup.pod("gpu", "team-a", {ANNOTATION: "all"})
    container = allowed.run("smi", crio.images["rhel"], [SMI])
    assert allowed.wait_exited(container)["exitCode"] == 0, allowed.logs(container).stdout
    assert allowed.spec(container)["annotations"]["io.kubernetes.pod.namespace"] == "team-a"

    denied = crio_setup.pod("gpu", "team-b", {ANNOTATION: "0"})
    mounts = crio.mounts()
    result = denied.create(denied.container_config("smi", crio.images["rhel"], [SMI]))
    assert result.returncode != 0
    assert hook_line(result.stderr) == (
        f"ocihook: annotation {ANNOTATION}: request for devices '0' is not allowed by the "
        "config's request.allow list for this container's annotations"
    )
    assert container_ids(denied) == []
    assert sorted(crio.mounts()) == sorted(mounts)
    assert set(crio_setup.records()) == {container}


def test_a_pods_own_namespace_annotation_loses_to_kubelets_label(crio, crio_setup):
    """A pod in team-b that claims team-a with annotations of its own: the kubelet keys
    (io.kubernetes.pod.namespace, ...) have kubelet's values in the OCI config (CRI-O writes
    the container's labels last); any other key (`my.pod.namespace`) reaches the OCI config as
    the pod's author wrote it, so the allow-list reads only the kubelet keys. Its entry here is
    anchored only at the end (`pod\\.namespace$`), which `my.pod.namespace` also matches:
    still refused."""
    allow = [{"annotations": {r"pod\.namespace$": "^team-a$"}, "devices": "all"}]
    crio_setup.write_config(
        **base_config(crio_setup.dir, crio_setup.synth_root, request={"allow": allow})
    )
    forged = {key: "forged" for key in KUBELET_KEYS}
    forged.update({"io.kubernetes.pod.namespace": "team-a", "my.pod.namespace": "team-a"})
    looking = crio_setup.pod("gpu", "team-b", forged)
    container = looking.run("smi", crio.images["busybox"], crio_support.IDLE)
    annotations = looking.spec(container)["annotations"]
    assert {key: annotations[key] for key in KUBELET_KEYS} == {
        "io.kubernetes.pod.namespace": "team-b",
        "io.kubernetes.pod.name": "gpu",
        "io.kubernetes.pod.uid": looking.config["metadata"]["uid"],
        "io.kubernetes.container.name": "smi",
    }
    assert annotations["my.pod.namespace"] == "team-a"

    asking = crio_setup.pod("gpu", "team-b", {**forged, ANNOTATION: "0"})
    result = asking.create(asking.container_config("smi", crio.images["busybox"], [SMI]))
    assert result.returncode != 0
    assert "is not allowed by the config's request.allow list" in hook_line(result.stderr)
    assert crio_setup.records() == {}
    # The same entry lets a team-a pod in: the refusal above is the namespace's.
    welcome = crio_setup.pod("gpu", "team-a", {ANNOTATION: "0"})
    container = welcome.run("smi", crio.images["busybox"], crio_support.IDLE)
    assert set(crio_setup.records()) == {container}


# -- the Kubernetes installer's registration and the docs' drop-in -------------------------------


def test_installer_registration_with_the_docs_drop_in_is_what_crio_runs(
    crio, crio_setup, synth_root, tmp_path
):
    """packaging/kubernetes/ocihook-installer, run as on a node (HOST_ROOT=/), writes its
    registration into its default HOOKS_DIR, /etc/containers/oci/hooks.d, which the drop-in of
    docs/kubernetes.md (and of docs/installing.md, for one host) adds to CRI-O's hooks_dir
    (this crio's main config names an empty dir: only the drop-in's dirs count). Every node
    path is relocated under crio.node. CRI-O picks the file up without a restart (it watches
    hooks_dir); the same file name in the later dir wins over the test's own registration in
    /usr/share/containers/oci/hooks.d."""
    docs = (REPO / "docs/kubernetes.md").read_text()
    dirs = crio_support.hooks_dirs(crio_support.docs_drop_in(docs))
    installing = (REPO / "docs/installing.md").read_text()  # the same drop-in, for one host
    assert crio_support.hooks_dirs(crio_support.docs_drop_in(installing)) == dirs
    script = k8s.INSTALLER.read_text()
    default = re.search(r"HOOKS_DIR=\$\{HOOKS_DIR:-(/[^}]+)\}", script).group(1)
    assert default in dirs
    assert dirs.index(default) == len(dirs) - 1  # read last: its ocihook.json wins

    node = crio.node
    installed = tmp_path / "installed"
    installed.mkdir()
    configmap = tmp_path / "configmap.yaml"
    settings = synthetic.config(synth_root, installed)
    settings["profile_dirs"] = [f"{node}/opt/ocihook/profiles"]
    configmap.write_text(yaml.safe_dump(settings))
    registration = Path(f"{node}{default}/ocihook.json")
    config = f"{node}/etc/ocihook/config.yaml"
    cache = Path("/run/ocihook/cache") / _cache_name(config)
    existed = [p for p in (cache.parent.parent, cache.parent) if p.exists()]
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOST_ROOT": "/",
        "PAYLOAD": str(k8s.payload(tmp_path / "payload", selinux_module=False)),
        "CONFIG_SRC": str(configmap),
        "PREFIX": f"{node}/opt/ocihook",
        "CONFIG": config,
        "HOOKS_DIR": f"{node}{default}",
        "FEATURES_FILE": "",
        "SELINUXFS": str(tmp_path / "no-selinuxfs"),
    }
    offset = crio.log_offset()
    try:
        install = subprocess.run(
            ["sh", str(k8s.INSTALLER), "install"], env=env, capture_output=True, text=True,
            timeout=crio_support.TIMEOUT,
        )  # fmt: skip
        assert install.returncode == 0, install.stdout + install.stderr
        crio.wait_for_log(f"added hook {registration}", offset)

        pod = crio_setup.pod("gpu", "team-a", {ANNOTATION: "1"})
        container = pod.run("smi", crio.images["rhel"], [SMI])
        assert pod.wait_exited(container)["exitCode"] == 0, pod.logs(container).stdout
        hook = pod.spec(container)["hooks"]["createRuntime"]
        assert [(h["path"], h["args"]) for h in hook] == [
            (f"{node}/opt/ocihook/bin/ocihook-hook", ["ocihook-hook", "--config", config])
        ]
        assert opened(device_nodes(synth_root)[0][1]) in pod.logs(container).stdout
        record = installed / "state" / f"{container}.json"
        assert json.loads(record.read_text())["status"] == "running"
        pod.stop()
        pod.remove()  # no poststop: the record stays, its process is gone (liveness)
        body = json.loads(record.read_text())
        assert body["status"] == "running" and not is_running(body)
        assert crio_setup.records() == {}  # the test's own registration did not run
    finally:
        registration.unlink(missing_ok=True)
        crio.sync_hooks(registration.parent)  # crio no longer has the installer's hook
        subprocess.run(["rm", "-rf", f"{node}/opt", f"{node}/etc/ocihook"], check=True)
        cache.unlink(missing_ok=True)
        for directory in (cache.parent, cache.parent.parent):
            if directory not in existed:
                try:
                    directory.rmdir()
                except OSError:
                    pass  # another run's cache is in it


# -- failures and poststop ---------------------------------------------------------------------


def test_bad_request_fails_the_container_with_the_hooks_one_line(crio, crio_setup):
    """An index the node does not have: `crictl create` fails and shows the hook's line; the
    container is gone, nothing it had is mounted, the hook wrote no record and logged why."""
    devices, _ = device_nodes(crio_setup.synth_root)
    missing = max(devices) + 3
    pod = crio_setup.pod("gpu", "team-a", {ANNOTATION: str(missing)})
    mounts = crio.mounts()
    result = pod.create(pod.container_config("smi", crio.images["rhel"], [SMI]))
    assert result.returncode != 0
    available = ",".join(str(i) for i in sorted(devices))
    message = (
        f"annotation {ANNOTATION}: device index {missing} does not exist (available: {available})"
    )
    assert hook_line(result.stderr) == f"ocihook: {message}"
    assert container_ids(pod) == []
    assert sorted(crio.mounts()) == sorted(mounts)
    assert crio_setup.records() == {}
    (line,) = [line for line in crio_setup.log.read_text().splitlines() if message in line]
    assert " error: " in line


def test_a_removed_pods_record_is_marked_by_the_next_injecting_start(crio, crio_setup):
    """No poststop stage (the shipped registration): a stopped and removed pod's record
    still says running, its process is gone (pid and start time), and the next injecting
    start's sweep marks it orphaned."""
    pod = crio_setup.pod("gpu", "team-a", {ANNOTATION: "0"})
    container = pod.run("idle", crio.images["busybox"], crio_support.IDLE)
    assert crio_setup.records()[container]["status"] == "running"
    assert is_running(crio_setup.records()[container])
    pod.stop()
    assert pod.inspect(container)["status"]["state"] == "CONTAINER_EXITED"
    pod.remove()
    assert crio.crictl("inspectp", pod.id).returncode != 0
    body = crio_setup.records()[container]
    assert body["status"] == "running" and not is_running(body)
    stamp = crio_setup.state_dir / SWEEP_STAMP  # the orphan sweep: once a minute
    stamp.unlink(missing_ok=True)
    other = crio_setup.pod("gpu2", "team-a", {ANNOTATION: "0"})
    second = other.run("true", crio.images["busybox"], ["/bin/true"])
    assert other.wait_exited(second)["exitCode"] == 0
    assert crio_setup.records()[container]["status"] == "orphaned"


# -- CDI ---------------------------------------------------------------------------------------

LISTING = (
    "for f in $(/bin/busybox find /usr /dev | grep synth | /bin/busybox sort); do"
    ' if [ -L "$f" ]; then echo "$f -> $(readlink "$f")";'
    ' elif [ -c "$f" ]; then stat -c "%n char %t:%T %a" "$f";'
    ' elif [ -d "$f" ]; then echo "$f/";'
    ' else /bin/busybox sha256sum "$f"; fi; done'
)


@pytest.fixture
def cdi_kind(crio, crio_setup):
    """`ocihook cdi generate` for the test's config, into the crio's cdi_spec_dirs."""
    kind = f"ocihook.io/t{uuid.uuid4().hex[:12]}"
    path = crio.cdi_dir / (kind.replace("/", "_") + ".yaml")
    result = subprocess.run(
        [OCIHOOK, "cdi", "generate", "--config", str(crio_setup.config), "--kind", kind,
         "--hook-path", OCIHOOK, "--output", str(path)],
        capture_output=True, text=True, timeout=crio_support.TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    yield kind
    path.unlink()


def test_cdi_device_by_name_gets_the_hooks_files_and_nodes(crio, crio_setup, cdi_kind):
    """A container that names `KIND=1` in the CRI's CDI device field, and one that names it
    in a `cdi.k8s.io/` annotation of its own (this CRI-O takes both), get the same driver
    files (same content), links and device nodes as a container the hook gave device 1;
    the spec's createContainer hooks ran (`ocihook cdi-hook`: the soname links, the ld
    cache), and the device cgroup lets them open the nodes."""
    devices, control = device_nodes(crio_setup.synth_root)
    image = crio.images["debian"]
    hooked = crio_setup.pod("hooked", "team-a", {ANNOTATION: "1"})
    by_hook = hooked.run("smi", image, crio_support.IDLE)
    cdi = crio_setup.pod("cdi", "team-a")
    by_field = cdi.run("field", image, crio_support.IDLE, CDI_devices=[{"name": f"{cdi_kind}=1"}])
    by_annotation = cdi.run(
        "annotation", image, crio_support.IDLE, annotations={"cdi.k8s.io/ocihook": f"{cdi_kind}=1"}
    )

    expected = hooked.exec(by_hook, ["/bin/sh", "-c", LISTING])
    assert expected.returncode == 0, expected.stderr
    assert "/dev/synth1 char" in expected.stdout and "libsynth.so.1 -> " in expected.stdout
    for container in (by_field, by_annotation):
        listing = cdi.exec(container, ["/bin/sh", "-c", LISTING])
        assert listing.stdout == expected.stdout
        spec = cdi.spec(container)
        hooks = spec["hooks"]["createContainer"]
        assert [h["args"][1:3] for h in hooks] == [
            ["cdi-hook", "create-symlinks"],
            ["cdi-hook", "update-ldcache"],
        ]
        assert "createRuntime" not in spec["hooks"]  # no ocihook.io/devices: no prestart hook
        smi = cdi.exec(container, [SMI])
        assert smi.returncode == 0, smi.stdout + smi.stderr
        for entry in [devices[1], *control.values()]:
            assert opened(entry) in smi.stdout
        cache = cdi.exec(container, ["grep", "-c", "libsynth.so.1", "/etc/ld.so.cache"])
        assert int(cache.stdout) >= 1
    assert set(crio_setup.records()) == {by_hook}


def test_cdi_nvidia_gpu_by_uuid(crio, crio_setup, tmp_path):
    """As NVIDIA's device plugin asks under its CDI strategy: `nvidia.com/gpu=GPU-<uuid>` in
    the CRI's CDI device field, with the spec `ocihook cdi generate` wrote on a stand-in
    NVIDIA host (tests/support/nvidia_mig.py: the driver's proc files, GPU nodes of major 195
    that no driver here registers, a stand-in libnvidia-ml.so.1, real char devices as cap
    nodes) in its default kind. The container gets that GPU's node and the control nodes and
    no other: GPU 0's node, bound in by a CRI mount, is refused by the device cgroup (EPERM)
    where GPU 1's is let through to the kernel (ENXIO: no driver), and no cap node is there."""
    nvidia_mig.check_majors_unused()
    host = nvidia_mig.build(tmp_path / "mig")
    host.root.chmod(0o755)
    settings = base_config(crio_setup.dir, crio_setup.synth_root, profile="nvidia")
    settings["source_root"] = settings["device_root"] = str(host.root)
    settings["ldconfig"] = {"enabled": False}
    crio_setup.write_config(**settings)
    gpu, other = nvidia_mig.GPU1, nvidia_mig.GPU0
    result = subprocess.run(
        [OCIHOOK, "cdi", "generate", "--config", str(crio_setup.config),
         "--hook-path", OCIHOOK, "--output", str(crio.cdi_dir)],
        capture_output=True, text=True, timeout=crio_support.TIMEOUT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    path = crio.cdi_dir / "nvidia.com_gpu.yaml"
    try:
        spec = yaml.safe_load(path.read_text())
        assert spec["kind"] == "nvidia.com/gpu"
        names = {d["name"] for d in spec["devices"]}
        assert {gpu.uuid, other.uuid} <= names
        script = (
            'for p in /dev/nvidia1 /dev/nvidia0; do (exec 3<$p) 2>&1 && echo "OPEN $p ok"; '
            "done; find /dev -type c | sort"
        )
        pod = crio_setup.pod("gpu", "team-a")
        container = pod.run(
            "cuda",
            crio.images["busybox"],
            ["/bin/sh", "-c", script],
            CDI_devices=[{"name": f"nvidia.com/gpu={gpu.uuid}"}],
            mounts=[{"container_path": "/dev/nvidia0", "host_path": f"{host.root}/dev/nvidia0"}],
        )
        assert pod.wait_exited(container)["exitCode"] == 0, pod.logs(container).stdout
        logs = pod.logs(container).stdout
    finally:
        path.unlink()
    lines = logs.splitlines()
    (nvidia1,) = [line for line in lines if "/dev/nvidia1:" in line or "OPEN /dev/nvidia1" in line]
    (nvidia0,) = [line for line in lines if "/dev/nvidia0:" in line or "OPEN /dev/nvidia0" in line]
    assert nvidia1.endswith("No such device or address"), logs
    assert nvidia0.endswith("Operation not permitted"), logs
    vendor = {line for line in lines if line.startswith("/dev/nvidia")}
    assert vendor == {
        "/dev/nvidia0",  # the CRI mount's
        "/dev/nvidia1",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    }, logs
    assert crio_setup.records() == {}  # no ocihook.io/devices: the hook did not run


# -- the precreate stage (podman's only) -------------------------------------------------------


def test_crio_does_not_run_a_precreate_registration(crio, crio_setup, tmp_path):
    """The shipped precreate registration (hooks.d/ocihook-precreate.json, its hook pointed at
    a recorder of the test's own) in CRI-O's first hooks dir: CRI-O 1.37 refuses the file
    (its hooks manager knows no extension stages, and `precreate` is one), logs why, and
    never runs it; the prestart registration beside it still injects, so the container
    gets its devices exactly as before (the prestart route: docs/cgroups.md, Routes)."""
    marker = tmp_path / "precreate-ran"
    recorder = tmp_path / "recorder.sh"
    recorder.write_text(f"#!/bin/sh\ntouch {marker}\nexec cat\n")
    recorder.chmod(0o755)
    shipped = json.loads((REPO / "hooks.d/ocihook-precreate.json").read_text())
    shipped["hook"]["path"] = str(recorder)
    shipped["hook"]["args"] = ["recorder"]
    first_dir = Path(crio_support.hooks_dirs(crio.drop_in)[0])
    registration = first_dir / "ocihook-precreate.json"
    offset = crio.log_offset()
    try:
        registration.write_text(json.dumps(shipped))
        crio.sync_hooks(first_dir)
        with open(crio.log, "rb") as log:
            log.seek(offset)
            said = log.read().decode(errors="replace")
        assert f"added hook {registration}" not in said
        lines = [line for line in said.splitlines() if "precreate" in line]
        print("\n".join(lines))
        assert any("unknown stage" in line or "precreate" in line for line in lines), said
        devices, control = device_nodes(crio_setup.synth_root)
        pod = crio_setup.pod("gpu", "team-a", {ANNOTATION: "0"})
        container = pod.run("smi", crio.images["rhel"], [SMI])
        assert pod.wait_exited(container)["exitCode"] == 0, pod.logs(container).stdout
        assert opened(devices[0]) in pod.logs(container).stdout
        assert not marker.exists()
        spec = pod.spec(container)
        assert "precreate" not in json.dumps(spec.get("hooks") or {})
    finally:
        registration.unlink(missing_ok=True)
        crio.sync_hooks(first_dir)


def test_crio_refuses_to_start_with_a_precreate_registration_in_its_hooks_dir(hook_exe, tmp_path):
    """Why the precreate registration never goes into a hooks dir CRI-O reads: a CRI-O 1.37
    started with hooks.d/ocihook-precreate.json in its hooks dir does not start at all (its
    hooks manager knows no extension stage: `level=fatal msg="unknown stage \\"precreate\\""`).
    The RPM installs the file in a podman-only dir (docs/cgroups.md, Routes)."""
    drop_in = crio_support.docs_drop_in((REPO / "docs/kubernetes.md").read_text())
    server = crio_support.Crio(drop_in)
    try:
        busybox = server.import_image(
            images.busybox_rootfs(tmp_path / "busybox"), "ocihook-crio-busybox"
        )
        server.write_config(pause_image=busybox)
        first_dir = Path(crio_support.hooks_dirs(server.drop_in)[0])
        podman.write_hooks_dir(first_dir, hook_exe, server.hook_config, server.dir / "cache")
        shipped = json.loads((REPO / "hooks.d/ocihook-precreate.json").read_text())
        shipped["hook"]["path"] = str(hook_exe)
        (first_dir / "ocihook-precreate.json").write_text(json.dumps(shipped))
        with pytest.raises(AssertionError, match="crio exited 1"):
            server.start()
        said = server.log.read_text(errors="replace")
        assert 'level=fatal msg="unknown stage \\"precreate\\""' in said, said[-2000:]
    finally:
        forced = server.stop()
    # A crio that exits fatally leaves only its storage mounted (stop() unmounts it).
    assert [f for f in forced if not f.endswith("/storage/overlay unmounted")] == [], forced
