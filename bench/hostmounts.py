#!/usr/bin/env python3
"""The hook with a host mount table the size of a busy Kubernetes node's: one child of
bench/run.py's `mounts` group, run as

    unshare -m python3 bench/hostmounts.py JOB_JSON

JOB_JSON: {"mounts": N, "runs": K, "hook": path, "args": [...], "image": path, "work": path}.
In its own mount namespace (private, gone when it exits) the child mounts N small tmpfs (each
a line of /proc/self/mountinfo, as a pod's secrets, shm and rootfs mounts are), then times K
hook runs on fresh fake containers (harness.Sandbox: their namespaces are copies of this one,
as runc's are of the host's) and prints their wall times (seconds) as a JSON list. The hook
reads its mount table at every start (the cgroup mount, the file systems the host shares): a
table of thousands of lines must not cost it what the driver's files cost.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench import harness as h  # noqa: E402
from ocihook.linux import syscalls  # noqa: E402


def add_mounts(under: Path, count: int) -> None:
    """`count` tmpfs mounts below `under` (itself a tmpfs, so nothing is left on disk)."""
    under.mkdir(parents=True, exist_ok=True)
    syscalls.mount("ocihook-bench", str(under), "tmpfs", 0, "size=1m")
    for i in range(count):
        point = under / str(i)
        point.mkdir()
        syscalls.mount("ocihook-bench", str(point), "tmpfs", 0, "size=4k")


def main() -> int:
    job = json.loads(sys.argv[1])
    syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
    work = Path(job["work"])
    if job["mounts"]:
        add_mounts(work / f"hostmounts-{os.getpid()}", job["mounts"])
    times = []
    for _ in range(job["runs"]):
        with h.Sandbox(Path(job["image"]), {h.ANNOTATION: "all"}, work=work) as sandbox:
            times.append(h.timed([job["hook"], *job["args"]], sandbox.state()))
    print(json.dumps(times))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
