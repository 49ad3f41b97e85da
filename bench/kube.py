#!/usr/bin/env python3
"""make bench-kube: on the real cluster of ../shared/tools/kubernetes, the time from a pod's
creation to its container's first output, with the device plugin (the pod asks for
`ocihook.io/synthetic: 1`: scheduler, kubelet's Allocate, CRI-O's device specs, the hook in
Kubernetes mode) against the same pod with the hook's annotation alone (no plugin, the hook
in direct mode, registered for a second annotation key so that the two never mix).

Rounds are interleaved (plugin, annotation, plugin, ...); medians with min and max, and the
ratio of the medians. The clock: the host's, before the create request (kubectl create),
and the first line's timestamp in the container's CRI log (conmon's, same host clock).
Writes a table to stdout and JSON to bench/results/kube.json (or --out). Root; takes the
cluster up and down itself (about 15 s each).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import yaml  # noqa: E402

from tests.support import cluster as cluster_support  # noqa: E402
from tests.support import images, podman, synthetic  # noqa: E402

RESOURCE = "ocihook.io/synthetic"
DIRECT_KEY = "bench.ocihook.io/devices"
SMI = "/usr/bin/synth-smi"


def registration(hook: Path, config: Path, cache: Path, key: str) -> dict:
    document = json.loads((HERE.parent / "hooks.d/ocihook.json").read_text())
    document["hook"]["path"] = str(hook)
    document["hook"]["args"] = ["ocihook-hook", "--config", str(config), "--cache-dir", str(cache)]
    document["when"] = {"annotations": {"^" + key.replace(".", "\\.") + "$": ".+"}}
    return document


def place(directory: Path, name: str, document: dict) -> None:
    temporary = directory / f".{name}.tmp"
    temporary.write_text(json.dumps(document))
    temporary.rename(directory / name)


def pod(name: str, image: str, plugin: bool) -> dict:
    container = {"name": "main", "image": image, "imagePullPolicy": "Never", "command": [SMI]}
    metadata: dict = {"name": name}
    if plugin:
        container["resources"] = {"limits": {RESOURCE: "1"}}
    else:
        metadata["annotations"] = {DIRECT_KEY: "0"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"restartPolicy": "Never", "hostNetwork": True,
                 "terminationGracePeriodSeconds": 0, "containers": [container]},
    }  # fmt: skip


def first_output(cluster, name: str, timeout: float = 120) -> float:
    """The CRI log timestamp of the container's first line (seconds since the epoch)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = cluster.kubectl("logs", "--timestamps", name, check=False).stdout
        if out.strip():
            stamp = out.split(" ", 1)[0]
            whole, _, fraction = stamp.rstrip("Z").partition(".")
            base = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").timestamp()
            return base - time.timezone + float(f"0.{fraction or '0'}")
        time.sleep(0.05)
    raise SystemExit(f"bench-kube: pod {name} printed nothing: {cluster.pod(name)['status']}")


def once(cluster, image: str, plugin: bool, number: int) -> float:
    name = f"bench-{'plugin' if plugin else 'annotation'}-{number}"
    text = json.dumps(pod(name, image, plugin))
    start = time.time()
    cluster.kubectl("create", "-f", "-", stdin=text)
    seconds = first_output(cluster, name) - start
    log = cluster.logs(name)
    if "opened /dev/synth" not in log:
        raise SystemExit(f"bench-kube: pod {name} got no device: {log}")
    cluster.delete(name)
    return seconds


def summary(samples: list[float]) -> dict:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples),
            "runs": len(samples)}  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "kube.json")
    args = parser.parse_args(argv)
    why = cluster_support.unmet()
    if why:
        raise SystemExit(f"bench-kube: {why}")
    swept = cluster_support.sweep()
    if swept:
        print(swept, file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="ocihook-bench-kube-"))
    work.chmod(0o755)
    root = synthetic.build_driver(work / "driver")
    hook = podman.write_hook_executable(work / "ocihook-hook", sys.executable)
    cluster = cluster_support.Cluster()
    plugin = None
    try:
        cluster.up()
        kube_config, direct_config = work / "kube.yaml", work / "direct.yaml"
        kube_config.write_text(yaml.safe_dump(synthetic.config(
            root, kubernetes={"device_plugin": True}, log={"target": "none"})))  # fmt: skip
        direct_config.write_text(yaml.safe_dump(synthetic.config(
            root, request={"annotation": DIRECT_KEY}, log={"target": "none"})))  # fmt: skip
        place(
            cluster.hooks_dir,
            "ocihook.json",
            registration(hook, kube_config, work / "cache", "ocihook.io/devices"),
        )
        place(cluster.hooks_dir, "ocihook-direct.json",
              registration(hook, direct_config, work / "cache", DIRECT_KEY))  # fmt: skip
        image = cluster.import_image(images.glibc_rootfs(work / "image", "debian"), "bench-kube")
        plugin = cluster_support.Plugin(kube_config, cluster.plugin_dir, work / "plugin.log")
        plugin.start()
        plugin.wait_for(f"registered {RESOURCE}")
        cluster.wait_allocatable(RESOURCE, 3)
        once(cluster, image, True, -1)  # warm: first pod, image and caches
        once(cluster, image, False, -1)
        samples: dict[str, list[float]] = {"plugin": [], "annotation": []}
        for number in range(args.rounds):
            samples["plugin"].append(once(cluster, image, True, number))
            samples["annotation"].append(once(cluster, image, False, number))
    finally:
        if plugin:
            plugin.stop()
        cluster.down()
    result = {key: summary(values) for key, values in samples.items()}
    ratio = result["plugin"]["median"] / result["annotation"]["median"]
    document = {"rows": result, "ratio plugin/annotation": ratio, "samples": samples}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")
    print("pod creation to first output (s)        median    min    max  runs")
    for key, label in (("plugin", "device plugin (resource request)"),
                       ("annotation", "hook's annotation alone")):  # fmt: skip
        row = result[key]
        print(f"{label:<38} {row['median']:7.3f} {row['min']:6.3f} {row['max']:6.3f} "
              f"{row['runs']:5d}")  # fmt: skip
    print(f"ratio plugin/annotation (medians): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
