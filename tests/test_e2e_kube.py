"""The device plugin on a real cluster (pytest mark `kube`): Kubernetes v1.28.7 with CRI-O
1.37 from ../shared/tools/kubernetes, `ocihook device-plugin` registered with its kubelet,
the hook in Kubernetes mode in CRI-O's hooks dir (tests/conftest.py's `kube`, once per
session). The scheduler counts the devices, the kubelet allocates them through the plugin,
CRI-O hands the allocation to the hook.

Stand-ins: the accelerator is the synthetic driver (real ELF library and program, real char
devices of this machine that runc's default rules deny, mknod'ed into a device root of the
tier's own), its NUMA nodes are files of a sysfs tree under that device root (this machine
has one NUMA node); the node is 127.0.0.1 with loopback networking, hostNetwork pods.
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

ANNOTATION = "ocihook.io/devices"
RESOURCE = "ocihook.io/synthetic"
SMI = "/usr/bin/synth-smi"
SLEEP = ["/bin/sh", "-c", f"{SMI}; echo READY; exec sleep 3600"]

pytestmark = pytest.mark.kube


def pod(kube, name: str, command: list[str], count: int | None = 1, namespace: str = "default",
        annotations: dict | None = None, env: dict | None = None) -> dict:  # fmt: skip
    container = {
        "name": "main",
        "image": kube.images["debian"],
        "imagePullPolicy": "Never",
        "command": command,
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
    }
    if count is not None:
        container["resources"] = {"limits": {RESOURCE: str(count)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": {
            "restartPolicy": "Never",
            "hostNetwork": True,
            "terminationGracePeriodSeconds": 0,
            "containers": [container],
        },
    }


def opened(log: str) -> list[str]:
    """The device nodes synth-smi opened read-write, by name."""
    return sorted(re.findall(r"opened /dev/(synth[\w-]*) \(\d+:\d+\) read-write", log))


def devices_of(log: str) -> list[str]:
    return [name for name in opened(log) if re.fullmatch(r"synth\d+", name)]


def wait_log(kube, name: str, text: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = kube.cluster.kubectl("logs", name, check=False)
        if text in result.stdout:
            return result.stdout
        time.sleep(0.3)
    raise AssertionError(f"pod {name} never logged {text!r}: {kube.cluster.pod(name)['status']}")


@pytest.fixture
def pods(kube):
    """Names of the pods a test makes (in `default`), deleted after it; the node's devices
    are all allocatable again before the next test."""
    made: list[str] = []
    yield made
    if made:
        kube.cluster.delete(*made)
    kube.cluster.wait_allocatable(RESOURCE, 3)


def test_a_pod_asking_for_one_gets_exactly_one_device_through_the_ld_cache(kube, pods):
    kube.cluster.apply(pod(kube, "one", [SMI]))
    pods.append("one")
    kube.cluster.wait_phase("one", ("Succeeded", "Failed"))
    log = kube.cluster.logs("one")
    assert "libsynth 1.2.3 loaded from /usr/lib/x86_64-linux-gnu/libsynth.so.1" in log, log
    assert len(devices_of(log)) == 1, log
    assert {"synthctl", "synth-uvm"} <= set(opened(log)), log
    assert kube.cluster.pod("one")["status"]["phase"] == "Succeeded", log


def test_as_many_pods_as_devices_each_get_their_own_and_one_more_waits(kube, pods):
    names = ["fill-0", "fill-1", "fill-2"]
    kube.cluster.apply([pod(kube, name, SLEEP) for name in names])
    pods.extend(names)
    got = [devices_of(wait_log(kube, name, "READY")) for name in names]
    assert sorted(d for devices in got for d in devices) == ["synth0", "synth1", "synth2"], got
    kube.cluster.apply(pod(kube, "waiting", [SMI]))
    pods.append("waiting")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        conditions = kube.cluster.pod("waiting")["status"].get("conditions", [])
        scheduled = [c for c in conditions if c["type"] == "PodScheduled"]
        if scheduled and scheduled[0]["status"] == "False":
            break
        time.sleep(0.5)
    assert scheduled[0]["reason"] == "Unschedulable", scheduled
    assert f"Insufficient {RESOURCE}" in scheduled[0]["message"], scheduled
    freed = got[1][0]
    kube.cluster.delete("fill-1")
    kube.cluster.wait_phase("waiting", ("Succeeded", "Failed"))
    assert devices_of(kube.cluster.logs("waiting")) == [freed]


def test_a_two_device_request_stays_on_one_numa_node(kube, pods):
    """The plugin's GetPreferredAllocation (NUMA nodes from sysfs: synth0 and synth2 on
    node 0, synth1 on node 1) is what the kubelet allocates."""
    offset = len(kube.plugin.text())
    kube.cluster.apply(pod(kube, "pair", [SMI], count=2))
    pods.append("pair")
    kube.cluster.wait_phase("pair", ("Succeeded",))
    assert devices_of(kube.cluster.logs("pair")) == ["synth0", "synth2"]
    preferred = re.findall(r"preferred allocation of 2: (\S+)", kube.plugin.text()[offset:])
    assert [sorted(p.split(",")) for p in preferred] == [["0", "2"]], preferred


def test_a_pods_own_annotation_env_or_crio_key_gets_nothing(kube, pods):
    """Kubernetes mode: the request is read only from CRI-O's record of the container's
    own CRI annotations (io.kubernetes.cri-o.Annotations), which CRI-O writes over a pod
    annotation of that name. A pod that asks by annotation, env or that key gets no device,
    file or node; one that also asks for the resource gets exactly what was allocated."""
    forged = {
        ANNOTATION: "all",
        "io.kubernetes.cri-o.Annotations": json.dumps({ANNOTATION: "all"}),
    }
    show = ["/bin/sh", "-c", "ls /dev; ls /usr/bin; echo DONE"]
    kube.cluster.apply(
        pod(
            kube,
            "forger",
            show,
            count=None,
            annotations=forged,
            env={"SYNTH_VISIBLE_DEVICES": "all"},
        )
    )
    pods.append("forger")
    log = wait_log(kube, "forger", "DONE")
    assert "synth" not in log, log
    kube.cluster.apply(pod(kube, "forger-one", SLEEP, annotations=forged))
    pods.append("forger-one")
    assert len(devices_of(wait_log(kube, "forger-one", "READY"))) == 1


def test_an_unhealthy_device_leaves_allocatable_and_comes_back(kube):
    node = kube.root / "dev/synth1"
    rdev, mode = os.stat(node).st_rdev, os.stat(node).st_mode
    offset = len(kube.plugin.text())
    node.unlink()
    try:
        kube.cluster.wait_allocatable(RESOURCE, 2, timeout=30)
        assert f"device 1 unhealthy: node {node} is gone" in kube.plugin.text()[offset:]
    finally:
        os.mknod(node, mode, rdev)
    kube.cluster.wait_allocatable(RESOURCE, 3, timeout=30)
    assert "device 1 healthy again" in kube.plugin.text()[offset:]


def test_a_resource_quota_refuses_a_namespaces_second_pod(kube):
    cluster = kube.cluster
    cluster.kubectl("create", "namespace", "quota-a")
    try:
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "synth", "namespace": "quota-a"},
                "spec": {"hard": {f"requests.{RESOURCE}": "1"}},
            }
        )
        for _ in range(120):
            if (
                cluster.kubectl("-n", "quota-a", "get", "sa", "default", check=False).returncode
                == 0
            ):
                break
            time.sleep(0.5)
        cluster.apply(pod(kube, "first", SLEEP, namespace="quota-a"))
        refused = cluster.kubectl(
            "apply", "-f", "-", check=False,
            stdin=json.dumps(pod(kube, "second", SLEEP, namespace="quota-a")),
        )  # fmt: skip
        assert refused.returncode != 0
        assert "exceeded quota: synth" in refused.stderr, refused.stderr
    finally:
        cluster.kubectl("delete", "namespace", "quota-a", "--grace-period=0", "--wait=true",
                        timeout=300)  # fmt: skip
    cluster.wait_allocatable(RESOURCE, 3)


def test_an_allocated_container_keeps_its_devices_through_a_resources_update(kube, pods):
    """UpdateContainerResources (what the static CPU manager sends; `crictl update` here):
    the device still opens afterwards (the plugin's device specs are in the container's own
    config, which is what a runtime update starts from)."""
    kube.cluster.apply(pod(kube, "updated", SLEEP))
    pods.append("updated")
    before = devices_of(wait_log(kube, "updated", "READY"))
    sandbox = kube.cluster.crictl("pods", "-q", "--name", "updated").stdout.split()[0]
    container = kube.cluster.crictl("ps", "-q", "--pod", sandbox).stdout.split()[0]
    result = kube.cluster.crictl("update", "--cpu-share", "256", container)
    assert result.returncode == 0, result.stderr
    after = kube.cluster.kubectl("exec", "updated", "--", SMI)
    assert devices_of(after.stdout) == before, after.stdout


def test_the_plugin_re_registers_when_the_kubelet_restarts(kube, pods):
    offset = len(kube.plugin.text())
    kube.cluster.restart_kubelet()
    kube.plugin.wait_for("the kubelet restarted: registering again", after=offset, timeout=120)
    kube.plugin.wait_for("registered ocihook.io/synthetic", after=offset, timeout=120)
    kube.cluster.kubectl("wait", "--for=condition=Ready", "node/127.0.0.1", "--timeout=120s")
    kube.cluster.wait_allocatable(RESOURCE, 3)
    kube.cluster.apply(pod(kube, "after-restart", [SMI]))
    pods.append("after-restart")
    kube.cluster.wait_phase("after-restart", ("Succeeded",))
    assert len(devices_of(kube.cluster.logs("after-restart"))) == 1


def test_a_plugin_restart_loses_no_allocation(kube, pods):
    kube.cluster.apply(pod(kube, "kept", SLEEP))
    pods.append("kept")
    kept = devices_of(wait_log(kube, "kept", "READY"))
    offset = len(kube.plugin.text())
    assert kube.plugin.stop() == 0
    kube.plugin.start()
    kube.plugin.wait_for("registered ocihook.io/synthetic", after=offset)
    kube.cluster.wait_allocatable(RESOURCE, 3)
    names = ["next-0", "next-1"]
    kube.cluster.apply([pod(kube, name, SLEEP) for name in names])
    pods.extend(names)
    got = [d for name in names for d in devices_of(wait_log(kube, name, "READY"))]
    assert sorted(got + kept) == ["synth0", "synth1", "synth2"], (kept, got)


def test_the_daemonset_runs_the_installer_and_the_plugin(kube, tmp_path, pods):
    """packaging/kubernetes applied with kubectl -k (a copy, patched for this machine: no
    privileged container or system-node-critical priority, which it cannot run; the local
    image; the tier's driver and a resource name of its own in the ConfigMap; the host's
    network and a free port for the metrics, as this node has no pod network). The image is
    built FROM scratch here as the Containerfile lays it out (tests/support/k8s.py). The
    installer installs and is Ready without waiting for its readiness period; the plugin in
    its container registers the node's devices, and a pod that asks for one gets it. The
    plugin's metrics answer a real HTTP client on the node (its devices, the allocation),
    and the driver's facts reach the node's NFD features file as labels."""
    import yaml

    from tests.support import k8s
    from tests.support.metrics import free_port, samples, scrape, value
    from tests.test_features import nfd_labels

    image = kube.cluster.import_image(
        k8s.daemonset_image(tmp_path / "image", "ds"), "ocihook-k8s-daemonset"
    )
    copy = tmp_path / "manifests"
    copy.mkdir()
    source = REPO / "packaging/kubernetes"
    for path in source.glob("*.yaml"):
        (copy / path.name).write_text(path.read_text())
    resource = "example.com/ds-synthetic"
    configmap = yaml.safe_load((copy / "configmap.yaml").read_text())
    config = yaml.safe_load(configmap["data"]["config.yaml"])
    config.update(
        profile="synthetic", source_root=str(kube.root), device_root=str(kube.root),
        kubernetes={"device_plugin": True, "resource": resource, "health_interval": 2},
    )  # fmt: skip
    configmap["data"]["config.yaml"] = yaml.safe_dump(config)
    (copy / "configmap.yaml").write_text(yaml.safe_dump(configmap))
    daemonset = yaml.safe_load((copy / "daemonset.yaml").read_text())
    spec = daemonset["spec"]["template"]["spec"]
    assert spec.pop("priorityClassName") == "system-node-critical"
    installer, plugin = spec["containers"]
    assert installer["securityContext"] == {"privileged": True}
    # unprivileged, with the one capability beyond CRI-O's defaults the installer uses here
    # (chroot into the node's root to run its python3 and ocihook check)
    installer["securityContext"] = {"privileged": False, "capabilities": {"add": ["SYS_CHROOT"]}}
    assert plugin["securityContext"]["privileged"] is False  # shipped as it runs here
    for container in spec["containers"]:
        container["imagePullPolicy"] = "Never"
    port = free_port()
    spec["hostNetwork"] = True
    assert "--metrics-port=9479" in plugin["command"]
    plugin["command"] = [a.replace("=9479", f"={port}") for a in plugin["command"]]
    plugin["ports"] = [dict(plugin["ports"][0], containerPort=port)]
    (copy / "daemonset.yaml").write_text(yaml.safe_dump(daemonset))
    kustomization = yaml.safe_load((copy / "kustomization.yaml").read_text())
    name, tag = image.rsplit(":", 1)
    kustomization["images"] = [{"name": "ocihook-installer", "newName": name, "newTag": tag}]
    (copy / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    cluster = kube.cluster
    cluster.kubectl("apply", "-k", str(copy))
    try:
        cluster.kubectl(
            "-n", "ocihook-system", "rollout", "status", "ds/ocihook-installer", "--timeout=300s",
            timeout=320,
        )  # fmt: skip
        cluster.wait_allocatable(resource, 3)
        (ds_pod,) = json.loads(
            cluster.kubectl("-n", "ocihook-system", "get", "pods", "-o", "json").stdout
        )["items"]
        statuses = {s["name"]: s for s in ds_pod["status"]["containerStatuses"]}
        started = statuses["installer"]["state"]["running"]["startedAt"]
        ready = [c for c in ds_pod["status"]["conditions"] if c["type"] == "Ready"][0]
        waited = _seconds(ready["lastTransitionTime"]) - _seconds(started)
        # Ready once installed, not a readiness period (30 s) later: the startup probe
        # looks every second. (Here the install takes about a second, so a first readiness
        # probe may already pass without it; tests/test_kubernetes_manifests.py checks the
        # probes themselves.)
        assert waited < 30, (started, ready)
        logs = cluster.kubectl("-n", "ocihook-system", "logs", ds_pod["metadata"]["name"],
                               "-c", "device-plugin").stdout  # fmt: skip
        assert f"registered {resource} (3 devices)" in logs, logs
        asking = pod(kube, "from-daemonset", [SMI])
        asking["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
        cluster.apply(asking)
        pods.append("from-daemonset")
        cluster.wait_phase("from-daemonset", ("Succeeded",))
        assert len(devices_of(cluster.logs("from-daemonset"))) == 1
        assert f"metrics on http://0.0.0.0:{port}/metrics" in logs, logs
        got = samples(scrape(f"http://127.0.0.1:{port}/metrics"))
        for device in ("0", "1", "2"):
            assert value(got, "ocihook_device_healthy", device=device) == 1
            assert value(got, "ocihook_device_present", device=device) == 1
        device = {dict(labels)["device"]: dict(labels) for (name, labels) in got
                  if name == "ocihook_device_healthy"}["0"]  # fmt: skip
        assert device["product"] == "AMD Instinct MI210" and device["memory_mib"] == "65536"
        allocated = "ocihook_deviceplugin_allocations_total"
        assert value(got, allocated, channel="hook", result="allocated") == 1
        features = cluster.nsexec(
            "cat", "/etc/kubernetes/node-feature-discovery/features.d/ocihook",
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert features.returncode == 0, features.stderr
        (tmp_path / "features.d").mkdir()
        (tmp_path / "features.d/ocihook").write_text(features.stdout)
        labels = nfd_labels(tmp_path / "features.d", datetime.now(timezone.utc))
        assert labels["ocihook.io/profile"] == "synthetic"
        assert labels["ocihook.io/devices"] == "3"
        assert labels["ocihook.io/gpu.product"] == "AMD-Instinct-MI210"
        assert labels["ocihook.io/gpu.memory"] == "65536"
        assert labels["ocihook.io/gpu.device-id"] == "0x740f"
    finally:
        cluster.kubectl("delete", "-k", str(copy), "--wait=true", "--timeout=300s", timeout=320)


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").timestamp()


def test_the_cdi_channel_hands_the_same_device_through_the_runtime(kube, tmp_path, pods):
    """kubernetes.cdi: true (a second plugin, a resource of its own): the Allocate answer
    names CDI devices of the spec `ocihook cdi generate` wrote into CRI-O's CDI dir (the
    CRI's CDI field, kubelet's DevicePluginCDIDevices gate being on, and the cdi.k8s.io/
    container annotation); CRI-O applies the spec, the hook does not run."""
    import subprocess
    import sys

    import yaml

    from tests.conftest import base_config
    from tests.support import cluster as cluster_support

    resource = "example.com/cdi-synthetic"
    config = tmp_path / "cdi.yaml"
    settings = base_config(tmp_path, kube.root)
    settings["kubernetes"] = {"device_plugin": True, "resource": resource, "cdi": True}
    config.write_text(yaml.safe_dump(settings))
    ocihook = str(Path(sys.executable).with_name("ocihook"))
    spec = kube.cluster.state / "cdi/ocihook.io_synthetic.yaml"
    generated = subprocess.run(
        [ocihook, "cdi", "generate", "--config", str(config), "--output", str(spec),
         "--hook-path", ocihook],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert generated.returncode == 0, generated.stderr
    plugin = cluster_support.Plugin(config, kube.cluster.plugin_dir, tmp_path / "plugin.log")
    plugin.start()
    try:
        plugin.wait_for(f"registered {resource}")
        kube.cluster.wait_allocatable(resource, 3)
        asking = pod(kube, "by-cdi", [SMI], count=None)
        asking["spec"]["containers"][0]["resources"] = {"limits": {resource: "1"}}
        kube.cluster.apply(asking)
        pods.append("by-cdi")
        kube.cluster.wait_phase("by-cdi", ("Succeeded", "Failed"))
        log = kube.cluster.logs("by-cdi")
        assert "libsynth 1.2.3 loaded from" in log, log
        assert len(devices_of(log)) == 1, log
        status = kube.cluster.pod("by-cdi")["status"]["containerStatuses"][0]
        container = status["containerID"].split("://", 1)[1]
        assert not (kube.dir / "state" / f"{container}.json").exists()  # the hook did not run
        assert (kube.dir / "state").is_dir()  # where the hook's records of the others are
    finally:
        plugin.stop()
        spec.unlink(missing_ok=True)
