#!/usr/bin/env python3
"""make bench: how much the hook costs, as a process and at container start.

Every figure is the median of interleaved runs (A B C A B C ...) with min and max; every
ratio is computed from medians measured in the same interleaved group. Writes a table to
stdout and JSON to bench/results/latest.json (or --out). Needs root, podman + runc and a
cgroup v1 devices controller (see bench/harness.py). --quick: few runs, small sizes (tests).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench import harness as h  # noqa: E402
from ocihook.ld import cachefile  # noqa: E402
from tests.support import hosts, nvidia_toolkit, podman, synthetic  # noqa: E402

RESULTS = HERE / "results"
IMAGE_NAME = "ocihook-bench"

# name -> (group, label)
ROWS = {
    "floor": ("hook", "interpreter floor: python3 -I -c pass"),
    "hook_none": ("hook", "hook, container asks for nothing"),
    "hook_full": ("hook", "hook, full synthetic driver injected"),
    "hook_full_rootfs": ("hook", "hook, full driver, upper dir on this root fs"),
    "hook_poststop": ("hook", "hook at poststop (not registered by default)"),
    "hook_none@baseline": ("hook", "--baseline: hook, container asks for nothing"),
    "hook_full@baseline": ("hook", "--baseline: hook, full synthetic driver injected"),
    "ready_plain": ("start", "container's first output, no injection"),
    "ready_flags": ("start", "container's first output, -v/--device"),
    "ready_nvidia": ("start", "container's first output, NVIDIA CDI"),
    "ready_cdi": ("start", "container's first output, CDI stand-in (extra)"),
    "ready_hook": ("start", "container's first output, prestart route"),
    "ready_precreate": ("start", "container's first output, precreate route"),
    "start_plain": ("start", "podman run --rm, no injection"),
    "start_flags": ("start", "podman run --rm, same files as -v/--device"),
    "start_nvidia": ("start", "podman run --rm, NVIDIA CDI (nvidia-ctk spec)"),
    "start_cdi": ("start", "podman run --rm, CDI stand-in (extra)"),
    "start_hook": ("start", "podman run --rm, prestart route"),
    "start_precreate": ("start", "podman run --rm, precreate route"),
    "ready_floor1": ("start", "container's first output, -v/--device + no-op hook"),
    "ready_floor2": ("start", "container's first output, precreate route's floor"),
    "start_floor1": ("start", "podman run --rm, -v/--device + no-op hook"),
    "start_floor2": ("start", "podman run --rm, precreate route's floor"),
    "mounts_0": ("mounts", "hook, full driver, the host's mount table as it is"),
    "mounts_3000": ("mounts", "hook, full driver, 3000 more mounts on the host"),
    "host_rhel": ("hosts", "hook, NVIDIA profile, RHEL-like root"),
    "host_rhel_libs": ("hosts", "hook, NVIDIA profile, RHEL root + 2500 libs"),
    "mounts_0@baseline": ("mounts", "--baseline: hook, full driver, the table as it is"),
    "mounts_3000@baseline": ("mounts", "--baseline: hook, full driver, 3000 more mounts"),
    "host_rhel@baseline": ("hosts", "--baseline: hook, NVIDIA profile, RHEL-like root"),
    "host_rhel_libs@baseline": ("hosts", "--baseline: NVIDIA profile, RHEL root + 2500 libs"),
}
# Ratios of medians from the same interleaved group, and their targets (issue 40, after
# issue 15). The start targets are checked twice: up to the container's first output
# ("ready": its start) and for the whole `podman run --rm` (to podman's exit, teardown
# included). Both ocihook routes (docs/cgroups.md, Routes) against NVIDIA's CDI path (its
# own nvidia-ctk spec and nvidia-cdi-hook: what users would pick instead) and against the
# runtime's own -v/--device.
TARGETS = {
    "hook_none/floor": 1.1,
    "hook_full/floor": 2.5,
    "hook_full_rootfs/floor": 2.5,
    "ready_hook/ready_flags": 1.10,
    "start_hook/start_flags": 1.10,
    "ready_precreate/ready_flags": 1.10,
    "start_precreate/start_flags": 1.10,
    "ready_hook/ready_nvidia": 0.85,
    "start_hook/start_nvidia": 0.90,
    "ready_precreate/ready_nvidia": 0.85,
    "start_precreate/start_nvidia": 0.90,
}
# Shown without a target: the routes against each other, and against the CDI stand-in (the
# spec `ocihook cdi generate` writes, run with ocihook's own Python cdi-hook: an extra row);
# the floor of every precreate route (floor2) and of one that had a single process (floor1:
# see floor_hooks_dir) against the peers.
INFO_RATIOS = (
    "ready_precreate/ready_hook",
    "start_precreate/start_hook",
    "ready_floor1/ready_nvidia",
    "start_floor1/start_nvidia",
    "ready_floor2/ready_nvidia",
    "start_floor2/start_nvidia",
    "ready_floor2/ready_flags",
    "start_floor2/start_flags",
    "ready_precreate/ready_floor2",
    "ready_hook/ready_cdi",
    "start_hook/start_cdi",
    "ready_nvidia/ready_cdi",
    "mounts_3000/mounts_0",
    "host_rhel_libs/host_rhel",
)
# With --baseline (another checkout installed alike, its rows interleaved with these): this
# code over that one. No target: the figure says whether a change made the hook slower.
BASELINE_RATIOS = (
    "hook_none/hook_none@baseline",
    "hook_full/hook_full@baseline",
    "mounts_0/mounts_0@baseline",
    "mounts_3000/mounts_3000@baseline",
    "host_rhel/host_rhel@baseline",
    "host_rhel_libs/host_rhel_libs@baseline",
)
# Added start time over the bare start: (num - base) / (den - base).
ADDED_TARGETS = {
    ("ready_hook", "ready_nvidia", "ready_plain"): 0.8,
    ("start_hook", "start_nvidia", "start_plain"): 0.8,
}
# The no-op hooks of the precreate route's floors (floor_hooks_dir), by the stage they run at.
FLOOR_STAGES = {"floor1": ("precreate",), "floor2": ("precreate", "createRuntime")}
PODMAN = ["podman"]  # with --root/--runroot when the start group uses the scratch ext4
CDI_SPEC_DIR = Path("/var/run/cdi")  # podman 4.3 reads /etc/cdi and /var/run/cdi only
MODES = {
    "full": {
        "hook_rounds": 20,
        "start_rounds": 20,
        "scale_rounds": 5,
        "sizes": (10, 100, 400, 1000),
        "mounts_rounds": 6,
        "hosts_rounds": 20,
    },
    "quick": {
        "hook_rounds": 4,
        "start_rounds": 2,
        "scale_rounds": 2,
        "sizes": (10, 30, 100),
        "mounts_rounds": 1,
        "hosts_rounds": 2,
    },
}


def summary(samples: list[float]) -> dict:
    ms = [s * 1000 for s in samples]
    return {
        "n": len(ms),
        "median_ms": statistics.median(ms),
        "min_ms": min(ms),
        "max_ms": max(ms),
        "samples_ms": [round(x, 3) for x in ms],
    }


def interleaved(runners: dict, rounds: int) -> dict[str, list]:
    """Each runner once per round, in order, after one untimed warm-up run of each; what each
    run returns (seconds, or a tuple of them)."""
    for run in runners.values():
        run()
    samples: dict[str, list] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            samples[name].append(run())
    return samples


def sandbox_runner(install, driver, image, work: Path = h.WORK):
    def run() -> float:
        with h.Sandbox(image, {h.ANNOTATION: "all"}, work=work) as sandbox:
            return h.run_hook(install, driver, sandbox.state())

    return run


def check_injection(install, driver, image, records: list | None = None, work=h.WORK) -> dict:
    """One run, checked: what the hook put into the container (from its record)."""
    with h.Sandbox(image, {h.ANNOTATION: "all"}, work=work) as sandbox:
        h.run_hook(install, driver, sandbox.state())
        record = driver.record(sandbox.id)
    if records is not None:
        records.append(record)
    return {
        "library_files": driver.libraries,
        "mounts": len(record["mounts"]),
        "links": len(record["links"]),
        "devices": len(record["devices"]),
        "ld_dirs": record["ld_dirs"],
    }


def poststop_runner(install, driver, body: dict, bundle: Path):
    """The poststop stage: a running record of the full driver's size is put back (untimed)
    before each run, which the hook then marks exited."""
    name = "bench-poststop"
    path = driver.state_dir / f"{name}.json"
    data = json.dumps(dict(body, id=name, status="running"), indent=1).encode()
    state = h.state_json(name, os.getpid(), bundle, status="stopped")

    def run() -> float:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return h.run_hook(install, driver, state)

    def check() -> dict:
        run()
        finished = driver.record(name)
        if finished["status"] != "exited" or "exited_at" not in finished:
            raise RuntimeError(f"poststop left the record {finished['status']}")
        return {"status": finished["status"]}

    return run, check


def hook_group(
    install, driver, image, rounds: int, scratch: Path, baseline=None
) -> tuple[dict, dict]:
    """The hook as a process. hook_full's fake containers have their overlay upper dir on the
    scratch ext4; hook_full_rootfs's on this machine's root file system (see ScratchFs).
    `baseline`: another checkout's Install, whose hook_none and hook_full run interleaved
    with these (A B A B ...), for a before/after comparison in one run."""
    bundle = h.static_bundle()
    none_state = h.state_json("bench-none", os.getpid(), bundle)
    records: list[dict] = []
    info = {"hook_full": check_injection(install, driver, image, records, work=scratch)}
    info["hook_full_rootfs"] = check_injection(install, driver, image)
    poststop, check_poststop = poststop_runner(install, driver, records[0], bundle)
    info["hook_poststop"] = check_poststop()
    runners = {
        "floor": lambda: h.timed(install.floor_cmd(), none_state),
        "hook_none": lambda: h.run_hook(install, driver, none_state),
        "hook_full": sandbox_runner(install, driver, image, scratch),
        "hook_full_rootfs": sandbox_runner(install, driver, image),
        "hook_poststop": poststop,
    }
    if baseline is not None:
        info["hook_full@baseline"] = check_injection(baseline, driver, image, work=scratch)
        runners["hook_none@baseline"] = lambda: h.run_hook(baseline, driver, none_state)
        runners["hook_full@baseline"] = sandbox_runner(baseline, driver, image, scratch)
    return interleaved(runners, rounds), info


def start_group(
    install, driver, image_root: Path, rounds: int, storage: Path | None = None
) -> tuple[dict, dict]:
    """Real podman + runc starts. With `storage` (the scratch ext4), podman's store and run
    dirs live there instead of /var/lib/containers on this machine's root file system."""
    global PODMAN
    PODMAN = ["podman"]
    if storage is not None:
        PODMAN += ["--root", str(storage / "storage"), "--runroot", str(storage / "run")]
    image = import_image(image_root)
    hooks_dir = podman.write_hooks_dir(
        h.WORK / "hooks.d", install.hook, driver.config, driver.cache_dir
    )
    timed_start(image, hooks_dir, "all", None)  # the hook works (raises with its error)
    # The precreate route: the same hook, its precreate registration beside the prestart one.
    precreate_dir = podman.write_hooks_dir(
        h.WORK / "hooks.d.precreate", install.hook, driver.config, driver.cache_dir,
        precreate=True,
    )  # fmt: skip
    timed_start(image, precreate_dir, "all", None)
    # The runtime-flags variant gets exactly what the hook injects, from a hook record
    # (podman's poststop run of the hook removes the record of a podman container).
    with h.Sandbox(image_root, {h.ANNOTATION: "all"}) as sandbox:
        h.run_hook(install, driver, sandbox.state())
        record = driver.record(sandbox.id)
    flags: list[str] = []
    for mount in record["mounts"]:
        flags += ["-v", f"{mount['source']}:{mount['target']}:ro"]
    for device in record["devices"]:
        flags += ["--device", f"{device['host_path']}:{device['path']}:rw"]

    info: dict = {}
    floors: dict[str, Path] = {}
    for name, stages in FLOOR_STAGES.items():
        floors[name] = h.WORK / f"hooks.d.{name}"
        shutil.rmtree(floors[name], ignore_errors=True)
        witness = h.WORK / f"{name}-stages"
        witness.unlink(missing_ok=True)
        floor_hooks_dir(install, floors[name], stages, witness)
        timed_start(image, floors[name], "all", flags)  # the no-op hooks run (and say so)
        info[f"start_{name}"] = {"stages_run": witness.read_text().split()}
        floor_hooks_dir(install, floors[name], stages)

    def start(devices=None, extra=None, hooks=hooks_dir):
        def run() -> tuple[float, float]:
            return timed_start(image, hooks, devices, extra)

        return run

    kind = f"ocihook-bench.io/g{os.getpid()}"
    spec = CDI_SPEC_DIR / (kind.replace("/", "_") + ".json")
    nvidia_kind = f"nvidia-bench.io/g{os.getpid()}"
    nvidia_spec = CDI_SPEC_DIR / (nvidia_kind.replace("/", "_") + ".json")
    spec_dir_existed = CDI_SPEC_DIR.exists()
    try:
        cdi = write_cdi_spec(install, driver, kind, spec)
        nvidia = write_nvidia_spec(driver, nvidia_kind, nvidia_spec)
        runners = {
            "start_plain": start(),
            "start_flags": start(extra=flags),
            "start_cdi": start(extra=["--device", f"{kind}=all"]),
            "start_hook": start(devices="all"),
            "start_precreate": start(devices="all", hooks=precreate_dir),
            "start_floor1": start(devices="all", extra=flags, hooks=floors["floor1"]),
            "start_floor2": start(devices="all", extra=flags, hooks=floors["floor2"]),
        }
        timed_start(image, hooks_dir, None, ["--device", f"{kind}=all"])  # the spec works
        if nvidia is not None:
            runners["start_nvidia"] = start(extra=["--device", f"{nvidia_kind}=all"])
            timed_start(image, hooks_dir, None, ["--device", f"{nvidia_kind}=all"])
            info["start_nvidia"] = nvidia
        pairs = interleaved(runners, rounds)
        samples = {}
        for name, values in pairs.items():
            samples[name.replace("start_", "ready_")] = [ready for ready, _ in values]
            samples[name] = [total for _, total in values]
    finally:
        spec.unlink(missing_ok=True)
        nvidia_spec.unlink(missing_ok=True)
        if not spec_dir_existed:
            try:
                CDI_SPEC_DIR.rmdir()
            except OSError:
                pass
    info["start_flags"] = {"volumes": len(record["mounts"]), "devices": len(record["devices"])}
    info["start_cdi"] = cdi
    return samples, info


def floor_hooks_dir(
    install, hooks_dir: Path, stages: tuple[str, ...], witness: Path | None = None
) -> Path:
    """The floor of a precreate route of a Python hook, as a hooks dir: the runtime makes
    the driver's mounts and nodes (the rows' -v/--device), a precreate hook hands the config
    back unchanged and (floor2) a createRuntime hook reads the state, each the hook's
    interpreter (`python3 -IS`, as packaging/ocihook-hook) doing nothing else. floor2 is the
    floor of every precreate route: the device rules can only be granted after the runtime
    made the cgroup (docs/cgroups.md, "One hook process per container start: which route");
    floor1 is what a route of one process would start at if the runtime could be handed the
    rules. `witness`: each hook also appends its stage to that file (the check that podman
    ran them; the timed runs go without)."""
    hooks_dir.mkdir(parents=True, exist_ok=True)
    bodies = {
        "precreate": "sys.stdout.buffer.write(data)",
        "createRuntime": "pass",
    }
    for stage in stages:
        body = bodies[stage]
        script = hooks_dir / f"noop-{stage}"
        script.write_text(
            f"#!{install.python} -IS\nimport sys\n\ndata = sys.stdin.buffer.read()\n"
            f"if len(sys.argv) > 1:\n    with open(sys.argv[1], 'a') as log:\n"
            f"        log.write('{stage}\\n')\n{body}\n"
        )
        script.chmod(0o755)
        document = {
            "version": "1.0.0",
            "hook": {
                "path": str(script),
                "args": [script.name] + ([str(witness)] if witness else []),
            },
            "when": {"annotations": {r"^ocihook\.io/devices$": ".+"}},
            "stages": [stage],
        }
        (hooks_dir / f"noop-{stage}.json").write_text(json.dumps(document, indent=2))
    return hooks_dir


def import_image(root: Path) -> str:
    """`podman import` the image tree into the store the start group uses."""
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    name = f"localhost/{IMAGE_NAME}:latest"
    subprocess.run(
        [*PODMAN, "import", "-q", "-", name],
        stdin=tar.stdout,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    tar.wait()
    return name


def timed_start(image, hooks_dir, devices, extra) -> tuple[float, float]:
    """One `podman run --rm IMAGE /bin/echo ready`: (seconds until the container's first
    output reaches us, which is when its process runs; seconds until podman exits, with the
    poststop hook and the teardown)."""
    args = [*PODMAN, "--runtime", "runc", "--hooks-dir", str(hooks_dir)]
    args += ["run", *podman.RUN_FLAGS]
    if devices is not None:
        args += ["--annotation", f"{podman.ANNOTATION}={devices}"]
    args += [*(extra or []), image, "/bin/echo", "ready"]
    t0 = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = os.read(process.stdout.fileno(), 1)  # one byte: the rest stays in the pipe
    ready = time.perf_counter() - t0
    out, err = process.communicate(timeout=120)
    total = time.perf_counter() - t0
    if process.returncode != 0 or first + out != b"ready\n":
        raise RuntimeError(
            f"podman run failed ({process.returncode}, {first + out!r}): "
            f"{err.decode(errors='replace').strip()[-400:]}"
        )
    return ready, total


def write_cdi_spec(install, driver, kind: str, path: Path) -> dict:
    """`ocihook cdi generate` for the bench driver into the runtime's spec dir; what it holds."""
    result = subprocess.run(
        [str(install.cli), "cdi", "generate", "--config", str(driver.config)]
        + ["--kind", kind, "--hook-path", str(install.cli), "--output", str(path)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"ocihook cdi generate: {result.stderr.strip()[-400:]}")
    edits = json.loads(path.read_text())["containerEdits"]
    return {
        "kind": kind,
        "mounts": len(edits.get("mounts", [])),
        "hooks": len(edits.get("hooks", [])),
        "shared_nodes": len(edits.get("deviceNodes", [])),
    }


def write_nvidia_spec(driver, kind: str, path: Path) -> dict | None:
    """NVIDIA's own CDI spec for the bench driver, by NVIDIA's `nvidia-ctk cdi generate` (the
    toolkit's build in ../shared/tools/nvidia-container-toolkit, or one on PATH), its hooks
    NVIDIA's `nvidia-cdi-hook`; None when the toolkit is not there (the rows are left out).

    No NVML here, so the driver's files are listed for its `csv` mode (as NVIDIA's Tegra
    hosts list theirs): every device node (`dev`), every library, binary and firmware file
    (`lib`: a bind mount each) and every soname link (`sym`: its create-symlinks hook). The
    spec is NVIDIA's as written but for one hook: with a driver root other than `/` the csv
    mode adds a second create-symlinks hook that makes the same links again at the driver
    root's host paths; a host whose driver is at `/` has none, so it is left out and the row
    is NVIDIA's path at its cheapest (a real host's NVML-mode spec also has
    enable-cuda-compat and disable-device-node-modification hooks, which this one lacks)."""
    ctk = nvidia_toolkit.TOOLS / "nvidia-ctk"
    ctk_path = str(ctk) if ctk.is_file() else shutil.which("nvidia-ctk")
    hook = nvidia_toolkit.cdi_hook()
    if ctk_path is None or hook is None:
        return None
    root = driver.root
    lines = []
    for sub, kinds in (("dev", "dev"), ("usr/lib", "lib"), ("usr/bin", "lib"), ("lib", "lib")):
        top = root / sub
        for item in sorted(top.rglob("*")) if top.is_dir() else []:
            name = "/" + str(item.relative_to(root))
            if item.is_symlink():
                lines.append(f"sym, {name}")
            elif item.is_char_device() or (kinds != "dev" and item.is_file()):
                lines.append(f"{'dev' if kinds == 'dev' else 'lib'}, {name}")
    csv = h.WORK / "nvidia" / "drivers.csv"
    csv.parent.mkdir(parents=True, exist_ok=True)
    csv.write_text("\n".join(lines) + "\n")
    vendor, cls = kind.split("/")
    result = subprocess.run(
        [ctk_path, "--quiet", "cdi", "generate", "--mode", "csv", "--csv.file", str(csv)]
        + ["--driver-root", str(root), "--dev-root", str(root)]
        + ["--library-search-path", str(root / synthetic.MULTIARCH)]
        + ["--nvidia-cdi-hook-path", hook, "--vendor", vendor, "--class", cls]
        + ["--format", "json", "--output", str(path)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"nvidia-ctk cdi generate: {result.stderr.strip()[-400:]}")
    spec = json.loads(path.read_text())
    edits = spec["containerEdits"]
    prefix = f"::{root}/"
    kept = [
        hook_entry
        for hook_entry in edits.get("hooks", [])
        if not any(prefix in arg for arg in hook_entry["args"])
    ]
    dropped = len(edits.get("hooks", [])) - len(kept)
    edits["hooks"] = kept
    path.write_text(json.dumps(spec))
    nodes = [n for d in spec["devices"] for n in d["containerEdits"].get("deviceNodes", [])]
    return {
        "kind": kind,
        "cdi_version": spec["cdiVersion"],
        "mounts": len(edits.get("mounts", [])),
        "hooks": [" ".join(e["args"][:2]) for e in kept],
        "hooks_left_out": dropped,
        "links": sum(a == "--link" for e in kept for a in e["args"]),
        "device_nodes": len({n["path"] for n in nodes}),
        "nvidia_ctk": ctk_path,
        "nvidia_cdi_hook": hook,
    }


def scale_group(install, image, sizes, rounds: int, scratch: Path) -> tuple[dict, dict]:
    """A size whose checked run fails is left out of the timing, its error kept. The upper
    dirs on the scratch ext4 (see ScratchFs)."""
    runners, info = {}, {}
    for size in sizes:
        driver = h.Driver(f"libs{size}", extra_libraries=size - 2)
        try:
            info[f"scale_{size}"] = check_injection(install, driver, image, work=scratch)
        except RuntimeError as error:
            info[f"scale_{size}_error"] = {"library_files": size, "error": str(error)[-300:]}
            continue
        runners[f"scale_{size}"] = sandbox_runner(install, driver, image, scratch)
    return interleaved(runners, rounds), info


HOST_MOUNTS = 3000  # a busy Kubernetes node: a pod's secrets, shm, rootfs and volumes each


def mounts_group(
    install, driver, image, rounds: int, scratch: Path, baseline=None
) -> dict[str, list]:
    """The full driver with the host's mount table as it is and with HOST_MOUNTS more: each
    round one child per table (bench/hostmounts.py in a mount namespace of its own, which it
    fills), three timed runs each, the two alternating; with `baseline` (another checkout's
    Install), its hook in children of its own in the same rounds."""

    def child(mounts: int, hook) -> list[float]:
        args = driver.hook_args()
        if hook.cache_tag:
            args[args.index("--cache-dir") + 1] += f"-{hook.cache_tag}"
        job = {
            "mounts": mounts,
            "runs": 3,
            "hook": str(hook.hook),
            "args": args,
            "image": str(image),
            "work": str(scratch),
        }
        result = subprocess.run(
            ["unshare", "-m", sys.executable, str(HERE / "hostmounts.py"), json.dumps(job)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            raise RuntimeError(f"bench/hostmounts.py: {result.stderr.strip()[-400:]}")
        return json.loads(result.stdout)

    hooks = {"": install} if baseline is None else {"": install, "@baseline": baseline}
    samples: dict[str, list] = {}
    for hook in hooks.values():
        child(0, hook)  # warm-up: the compiled config, the page cache
    for _ in range(rounds):
        for mounts in (0, HOST_MOUNTS):
            for suffix, hook in hooks.items():
                samples.setdefault(f"mounts_{mounts}{suffix}", []).extend(child(mounts, hook))
    return samples


OTHER_LIBRARIES = 2500  # a RHEL host's /usr/lib64 holds 2000-4000 files besides the driver's


def host_driver(name: str, other_libraries: int) -> Path:
    """A config for the NVIDIA profile on a tree laid out like a RHEL host with NVIDIA's
    driver (tests/support/hosts.py: stand-in ELF files with the real sonames, its own
    ld.so.cache, device nodes with NVIDIA's numbers) and `other_libraries` more libraries
    (with their .so links) in its /usr/lib64 and its ld.so.cache, as a real host has."""
    root = h.WORK / "hosts" / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    hosts.rhel(root)
    lib = root / "usr" / "lib64"
    cached = []
    for i in range(other_libraries):
        real = f"libother{i:05d}.so.{i % 9}"
        (lib / real).write_bytes(hosts.library(real))
        cached.append((real, f"/usr/lib64/{real}", hosts.X86_64))
        if i % 2 == 0:
            os.symlink(real, lib / f"libother{i:05d}.so")
    if cached:  # ldconfig lists them too: the host's cache has thousands of entries
        cache = root / "etc" / "ld.so.cache"
        entries = cachefile.parse(cache.read_bytes())
        hosts.write_ld_cache(cache, entries + cached)
    setup = h.WORK / "config" / f"host-{name}"
    shutil.rmtree(setup, ignore_errors=True)
    setup.mkdir(parents=True)
    config = setup / "config.yaml"
    settings = synthetic.config(root, setup, profile="nvidia", debug=False)
    config.write_text(json.dumps(settings, indent=2) + "\n")  # JSON is YAML
    return config


def hosts_group(install, image, rounds: int, scratch: Path, baseline=None) -> dict[str, list]:
    """The NVIDIA profile's injection (its default capabilities, every device) on a
    RHEL-like host root as it is and with OTHER_LIBRARIES more in its lib dir, interleaved:
    what a host's own files cost discovery. `baseline`: another checkout's Install, run on
    the same roots in the same rounds."""
    runners = {}
    for name, others in (("host_rhel", 0), ("host_rhel_libs", OTHER_LIBRARIES)):
        config = host_driver(name, others)
        for suffix, hook in (("", install), ("@baseline", baseline)):
            if hook is None:
                continue
            cache = config.parent / f"cache{hook.cache_tag}"
            args = ["--config", str(config), "--cache-dir", str(cache)]

            def run(args=args, hook=hook) -> float:
                with h.Sandbox(image, {h.ANNOTATION: "all"}, work=scratch) as sandbox:
                    return h.timed([str(hook.hook), *args], sandbox.state())

            runners[name + suffix] = run
    time.sleep(1.5)  # the configs just written: their compile is cached once not racy
    return interleaved(runners, rounds)


def machine() -> dict:
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
        except OSError:
            return None

    return {
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "python": out(
            [
                str(h.WORK / "venv/bin/python3"),
                "-I",
                "-c",
                "import sys; print(sys.version.split()[0])",
            ]
        ),
        "podman": out(["podman", "--version"]),
        "runc": (out(["runc", "--version"]) or "").splitlines()[:1],
        "load_before": os.getloadavg(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="few runs, small sizes (tests)")
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    parser.add_argument(
        "--only", choices=("hook", "start", "scale", "mounts", "hosts"), action="append"
    )
    parser.add_argument(
        "--storage",
        choices=("scratch", "root"),
        default="scratch",
        help="podman's store for the start rows: a scratch ext4 the bench mounts (default) or "
        "/var/lib/containers on this machine's root file system (see harness.ScratchFs)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another ocihook checkout (e.g. a git worktree of the last release): its hook "
        "rows run interleaved with this one's, and the ratios say whether this code is slower",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help="interleaved rounds of the hook and start groups (default 20; more on a busy host)",
    )
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    params = dict(MODES[mode])
    if args.rounds:
        params["hook_rounds"] = params["start_rounds"] = args.rounds
    groups = args.only or ["hook", "start", "scale", "mounts", "hosts"]
    started = time.time()

    install = h.Install()  # venv + .pth, compileall of ocihook, hook executable
    baseline = None
    if args.baseline is not None:
        if not (args.baseline / "ocihook" / "hook.py").is_file():
            parser.error(f"--baseline {args.baseline}: not an ocihook checkout")
        baseline = h.Install(h.WORK / "baseline", args.baseline.resolve())
    image = h.image_rootfs()
    driver = h.full_driver()
    info = {"machine": machine(), "mode": mode, "params": dict(params, sizes=list(params["sizes"]))}
    samples: dict[str, list[float]] = {}
    details: dict = {}
    with h.ScratchFs() as scratch:
        if "hook" in groups:
            s, d = hook_group(install, driver, image, params["hook_rounds"], scratch, baseline)
            samples.update(s), details.update(d)
        if "start" in groups:
            storage = scratch if args.storage == "scratch" else None
            s, d = start_group(install, driver, image, params["start_rounds"], storage)
            samples.update(s), details.update(d)
        if "scale" in groups:
            s, d = scale_group(install, image, params["sizes"], params["scale_rounds"], scratch)
            samples.update(s), details.update(d)
        if "mounts" in groups:
            samples.update(
                mounts_group(install, driver, image, params["mounts_rounds"], scratch, baseline)
            )
        if "hosts" in groups:
            samples.update(hosts_group(install, image, params["hosts_rounds"], scratch, baseline))
    info["storage"] = args.storage
    info["load_after"] = os.getloadavg()
    info["baseline"] = str(args.baseline) if args.baseline else None

    rows = {}
    order = list(ROWS)
    for name, values in sorted(
        samples.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)
    ):
        if name in ROWS:
            group, label = ROWS[name]
        else:
            group, label = "scale", f"hook, {name.split('_')[1]} library files"
        rows[name] = {"group": group, "label": label, **summary(values), **details.get(name, {})}
    ratios = {}
    pairs = [tuple(key.split("/")) for key in TARGETS]
    sizes = params["sizes"]
    scaled = [n for n in sizes if f"scale_{n}" in rows]
    if len(scaled) >= 2:  # the largest size that ran over the largest size <= 1/4 of it
        top = scaled[-1]
        base = max([n for n in scaled[:-1] if n * 4 <= top] or [scaled[-2]])
        pairs.append((f"scale_{top}", f"scale_{base}"))
    for num, den in pairs:
        if num in rows and den in rows:
            key = f"{num}/{den}"
            if num.startswith("scale_"):  # linear growth: files ratio
                target = int(num.split("_")[1]) / int(den.split("_")[1])
            else:
                target = TARGETS[key]
            value = rows[num]["median_ms"] / rows[den]["median_ms"]
            ratios[key] = {"value": value, "target": target, "met": value <= target}
    for key in INFO_RATIOS + BASELINE_RATIOS:
        num, den = key.split("/")
        if num in rows and den in rows:
            value = rows[num]["median_ms"] / rows[den]["median_ms"]
            ratios[key] = {"value": value, "target": None, "met": None}
    for (num, den, base), target in ADDED_TARGETS.items():
        if num in rows and den in rows and base in rows:
            b = rows[base]["median_ms"]
            value = (rows[num]["median_ms"] - b) / (rows[den]["median_ms"] - b)
            key = f"({num}-{base})/({den}-{base})"
            ratios[key] = {"value": value, "target": target, "met": value <= target}
    errors = {k: v for k, v in details.items() if k.endswith("_error")}
    result = {
        **info,
        "elapsed_s": round(time.time() - started, 1),
        "notes": [
            "hook rows: the real executable (packaging/ocihook-hook) under the bench venv's "
            "python3 -I with ocihook importable through a plain .pth and compiled .pyc "
            "(compileall before the runs); state JSON on stdin; wall time of the process",
            "hook_full and scale rows: a fresh fake container per run (private mount ns with "
            "an overlay rootfs, a v1 devices cgroup with runc's default rules), see harness.py; "
            "its overlay upper dir on a scratch ext4 the bench loop-mounts, hook_full_rootfs's "
            "on this machine's root file system (mounted with resv_strict: its creates cost "
            "10 us to over 0.5 ms, minute by minute)",
            "start rows: `podman run --rm IMAGE /bin/echo ready`; ready_* = until its first "
            "output arrives (the container's process runs: its start), start_* = until podman "
            "exits (with the poststop hook and the teardown)",
            "start_flags passes the hook's mounts and devices as -v/--device; no soname links, "
            "no ldconfig",
            "start_nvidia is NVIDIA's CDI path: the spec NVIDIA's nvidia-ctk (csv mode: no "
            "NVML here) writes for the same driver, podman --device KIND=all, its createContainer "
            "hooks NVIDIA's nvidia-cdi-hook (create-symlinks, update-ldcache); see "
            "write_nvidia_spec for the one hook left out",
            "start_cdi is an extra row: the spec `ocihook cdi generate` writes for the same "
            "driver, its hooks `ocihook cdi-hook` processes (Python)",
            "start_hook is the prestart route (hooks.d/ocihook.json: createRuntime), "
            "start_precreate the precreate route (ocihook-precreate.json beside it)",
            "start_floor2 is the floor of every precreate route of a Python hook: the "
            "-v/--device of start_flags, and two hooks of the hook's interpreter that do "
            "nothing (a precreate hook handing the config back, a createRuntime hook reading "
            "the state); start_floor1 the same with the precreate hook alone",
        ],
        "rows": rows,
        "ratios": ratios,
        "errors": errors,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    if "start" in groups:
        where = "/var/lib/containers" if args.storage == "root" else "a scratch ext4"
        print(f"podman store for the start rows: {where} (--storage {args.storage})\n")
    print(table(result))
    if "start" in groups and "start_nvidia" not in rows:
        print(f"\nNVIDIA's toolkit not found ({nvidia_toolkit.TOOLS}): no NVIDIA CDI rows")
    for name, error in errors.items():
        print(f"\nFAILED {name}: {error['error']}")
    before = " ".join(f"{x:.2f}" for x in info["machine"]["load_before"])
    after = " ".join(f"{x:.2f}" for x in info["load_after"])
    print(f"\nload average (1, 5, 15 min): {before} before, {after} after; {os.cpu_count()} cpus")
    print(f"\nJSON: {args.out}  ({result['elapsed_s']} s, mode {mode})")
    return 0


def table(result: dict) -> str:
    lines = [
        f"| {'row':<50} | {'median ms':>9} | {'min':>7} | {'max':>7} | {'n':>3} |",
        f"|{'-' * 52}|{'-' * 11}|{'-' * 9}|{'-' * 9}|{'-' * 5}|",
    ]
    for row in result["rows"].values():
        lines.append(
            f"| {row['label']:<50} | {row['median_ms']:>9.1f} | {row['min_ms']:>7.1f} "
            f"| {row['max_ms']:>7.1f} | {row['n']:>3} |"
        )
    lines += [
        "",
        f"| {'ratio of medians (targets: issue 40)':<52} | {'value':>6} | {'target':>6} | met |",
    ]
    lines.append(f"|{'-' * 54}|{'-' * 8}|{'-' * 8}|-----|")
    for key, ratio in result["ratios"].items():
        target = f"<={ratio['target']:g}" if ratio["target"] else ""
        met = {True: "yes", False: "no", None: ""}[ratio["met"]]
        lines.append(f"| {key:<52} | {ratio['value']:>6.2f} | {target:>6} | {met:<3} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
