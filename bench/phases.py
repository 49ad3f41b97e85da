#!/usr/bin/env python3
"""Where the hook's time goes at a container start: its phases, measured in the process.

    .venv/bin/python bench/phases.py                       # this checkout, 20 rounds
    .venv/bin/python bench/phases.py --baseline /tmp/base  # and another, interleaved (A B A B)
    .venv/bin/python bench/phases.py --stage precreate     # the precreate stage's process

Each run is the hook as the runtime runs it (`python3 -IS`, state JSON on stdin, a fresh fake
container of bench/harness.py with the full synthetic driver), except that `main` is called
from a small wrapper that first puts `time.perf_counter` around the hook's own functions
(WRAPPER below: module attributes replaced before the hook runs, nothing in ocihook changed).
The interpreter's start and exit are what the process's wall time has beyond the phases.
Phases that nest are reported apart (a phase's figure never includes another's). Medians of
interleaved rounds; a table on stdout, JSON with --out. Needs what bench/run.py needs.

`--stage precreate` times the precreate stage's process instead (`ocihook-hook --stage
precreate`, podman's hooks.d extension): an OCI config asking for the full driver on stdin,
its root.path the bench image's tree (the stage only reads it, by fd), the edited config on
stdout (discarded). Its other half, the prestart stage on that route, and the runtime's own
mounts are in `make bench`'s start rows (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench import harness as h  # noqa: E402

# Run as `python3 -IS -c WRAPPER SYS_PATH HOOK_ARGS...`: SYS_PATH (os.pathsep-joined) is what
# the installed hook executable puts on sys.path. Prints the phases (ms) as one line on stdout
# (the prestart stage prints nothing there) and exits as the hook executable does.
WRAPPER = r"""
import gc
gc.disable()
import os, sys, time
T0 = time.perf_counter()
sys.path.extend(sys.argv[1].split(os.pathsep))
PHASES = {}
STACK = []

def add(name, seconds):
    PHASES[name] = PHASES.get(name, 0.0) + seconds

def timed(owner, attr, name):
    inner = getattr(owner, attr, None)
    if inner is None:  # a name of the other tree (this one or the baseline)
        return
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        STACK.append(0.0)
        try:
            return inner(*args, **kwargs)
        finally:
            spent = time.perf_counter() - start
            nested = STACK.pop()
            add(name, spent - nested)
            if STACK:
                STACK[-1] += spent
    setattr(owner, attr, wrapper)

t = time.perf_counter()
import ocihook.hook as hook
add("imports: ocihook.hook (config, state, errors)", time.perf_counter() - t)
t = time.perf_counter()
import ocihook.request.parse
add("imports: the request parser", time.perf_counter() - t)
t = time.perf_counter()
import ocihook.apply.inject as inject
add("imports: the injection path", time.perf_counter() - t)
from ocihook.apply import execute, ldcache, owned
try:  # since apply/execute.py was split by concern
    from ocihook.apply import sources, writer
except ImportError:  # a baseline tree from before: all in apply/execute.py
    sources = writer = execute
from ocihook.linux import namespaces
entering = namespaces if hasattr(namespaces, "enter_container") else execute
from ocihook.cgroups import grant
from ocihook import records, pipeline

try:
    from ocihook.stages import prestart as stage
    from ocihook.request import assemble
except ImportError:  # a baseline tree from before the stages' package: all in hook.py
    stage = assemble = hook
timed(stage, "read_state", "state: stdin, hook namespace")
timed(stage, "hook_namespace", "state: stdin, hook namespace")
timed(stage, "load_config", "config load (compiled cache)")
timed(stage, "load_container", "request: config.json, the request")
timed(assemble, "container_request", "request: config.json, the request")
timed(inject, "plan_container", "discovery and decision (plan)")
timed(getattr(inject, "_Injection", inject), "_open_sources", "sources: clones, labels")
timed(inject, "check_source_labels", "sources: clones, labels")
timed(inject.elf, "open_static_executable", "open roots, ldconfig, state dir, mountinfo")
timed(records, "open_state_dir", "open roots, ldconfig, state dir, mountinfo")
timed(inject.mountinfo, "read", "open roots, ldconfig, state dir, mountinfo")
timed(inject.mountinfo, "read_text", "open roots, ldconfig, state dir, mountinfo")
timed(namespaces, "host_superblocks", "open roots, ldconfig, state dir, mountinfo")
timed(inject, "open_roots", "open roots, ldconfig, state dir, mountinfo")
timed(grant, "find_container_cgroup", "device cgroup (find, rules, systemd)")
timed(grant, "allow_devices", "device cgroup (find, rules, systemd)")
timed(entering, "enter_container", "enter the container (setns, rootfs)")
timed(pipeline.Planned, "finalize", "finalize (the image probed)")
timed(owned, "left_to_do", "what the runtime made (owned)")
timed(writer.ContainerWriter, "_mountpoint", "mount points")
timed(writer.ContainerWriter, "_attach", "attaches (move_mount)")
timed(writer.ContainerWriter, "_link", "soname links")
timed(writer.ContainerWriter, "device_node", "device nodes")
timed(ldcache, "update", "ld cache")
timed(inject.privileges, "drop_capabilities", "drop capabilities, record, sweep")
timed(records, "injection_record", "drop capabilities, record, sweep")
timed(records, "write_record", "drop capabilities, record, sweep")
timed(records, "sweep", "drop capabilities, record, sweep")
timed(records.Log, "__init__", "log")
timed(records.Log, "_emit", "log")
if sys.argv[2:4] == ["--stage", "precreate"]:
    try:
        import ocihook.stages.precreate as pre
    except ImportError:  # a baseline tree from before the stages' package
        import ocihook.apply.precreate as pre

    timed(pre, "read_spec", "precreate: the config on stdin, parsed")
    timed(pre, "spec_container", "request: config.json, the request")
    timed(pipeline, "plan_container", "discovery and decision (plan)")
    timed(sources, "open_sources", "sources: opened in the source root")
    timed(pre, "config_edit", "precreate: the edit (mounts, linux.devices)")
    timed(pre, "apply_edit", "precreate: the edit (mounts, linux.devices)")
    try:  # the renderer, since the stages' package
        from ocihook.plan import edits as plan_edits

        timed(plan_edits, "runtime_edits", "precreate: the edit (mounts, linux.devices)")
    except ImportError:
        pass
    timed(pre, "apply_edits", "precreate: the edit (mounts, linux.devices)")
    timed(pre, "render", "precreate: the config written (C encoder)")
t = time.perf_counter()
status = hook.main(sys.argv[2:])
total = time.perf_counter() - T0
add("main: the rest", (time.perf_counter() - t) - sum(
    v for k, v in PHASES.items() if not k.startswith("imports")))
PHASES["in the process (after the interpreter started)"] = total
PHASES["@start"] = T0
PHASES["@end"] = time.perf_counter()
sys.stdout.write("\x1e".join(f"{k}={v * 1000:.4f}" for k, v in PHASES.items()) + "\n")
sys.stdout.flush()
sys.stderr.flush()
os._exit(status)
"""
TOTAL = "in the process (after the interpreter started)"
STARTED = "interpreter start (fork, exec, init: to the first line)"
ENDED = "exit (os._exit to the parent's wait: the kernel's teardown)"
WALL = "the process, wall time (as the runtime runs it)"


def site_dirs(install: h.Install) -> str:
    """The sys.path entries the installed hook executable adds (packaging/hook_executable.py)."""
    for line in install.hook.read_text().splitlines():
        if line.startswith("SITE_DIRS"):
            return os.pathsep.join(json.loads(line.split("=", 1)[1].strip().replace("'", '"')))
    raise RuntimeError(f"{install.hook}: no SITE_DIRS line")


def run_once(
    install: h.Install, driver: h.Driver, image: Path, work: Path, stage: str = "prestart"
) -> dict:
    args = driver.hook_args()
    if install.cache_tag:
        args[args.index("--cache-dir") + 1] += f"-{install.cache_tag}"
    cmd = [str(install.python), "-IS", "-c", WRAPPER, site_dirs(install)]
    if stage == "precreate":
        spec = h.bundle_config(image, {h.ANNOTATION: "all"}, None)
        cmd += ["--stage", "precreate", *args]
        start = time.perf_counter()
        result = subprocess.run(cmd, input=json.dumps(spec).encode(), capture_output=True)
        end = time.perf_counter()
        result.stdout = result.stdout.split(b"\n", 1)[1]  # the edited config's one line first
    else:
        with h.Sandbox(image, {h.ANNOTATION: "all"}, work=work) as sandbox:
            start = time.perf_counter()
            result = subprocess.run(
                [*cmd, *args], input=sandbox.state(), capture_output=True, timeout=60
            )
            end = time.perf_counter()
    wall = end - start
    if result.returncode != 0:
        raise RuntimeError(f"hook failed: {result.stderr.decode(errors='replace')[-400:]}")
    phases = {}
    for item in result.stdout.decode().strip().split("\x1e"):
        name, _, value = item.rpartition("=")
        phases[name] = float(value)
    # CLOCK_MONOTONIC (perf_counter) is one clock for both processes: the interpreter's start
    # (fork, exec, its own initialisation) up to the wrapper's first line, and its end from
    # the wrapper's os._exit to the runtime's wait returning (the kernel's teardown).
    phases[STARTED] = phases.pop("@start") - start * 1000
    phases[ENDED] = end * 1000 - phases.pop("@end")
    phases[WALL] = wall * 1000
    return phases


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--baseline", type=Path, help="another ocihook checkout, interleaved")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--stage", choices=("prestart", "precreate"), default="prestart")
    args = parser.parse_args(argv)
    installs = {"this": h.Install()}
    if args.baseline is not None:
        installs["baseline"] = h.Install(h.WORK / "baseline", args.baseline.resolve())
    image = h.image_rootfs()
    driver = h.full_driver()
    time.sleep(1.5)  # the config just written: its compile is cached once it is not racy
    floor = {}
    samples: dict[str, list[dict]] = {name: [] for name in installs}
    with h.ScratchFs() as scratch:
        for install in installs.values():
            run_once(install, driver, image, scratch, args.stage)  # warm-up: the config cache
        floor_samples = []
        bundle = h.static_bundle()
        state = h.state_json("phases-none", os.getpid(), bundle)
        for _ in range(args.rounds):
            floor_samples.append(h.timed(installs["this"].floor_cmd(), state) * 1000)
            for name, install in installs.items():
                samples[name].append(run_once(install, driver, image, scratch, args.stage))
        floor["interpreter floor: python3 -I -c pass"] = statistics.median(floor_samples)
    names: list[str] = []
    for runs in samples.values():
        for run in runs:
            names += [n for n in run if n not in names]
    order = [n for n in names if n not in (TOTAL, STARTED, ENDED, WALL)]
    order += [TOTAL, STARTED, ENDED, WALL]
    medians = {
        name: {n: statistics.median(r.get(n, 0.0) for r in runs) for n in order}
        for name, runs in samples.items()
    }
    width = max(len(n) for n in order)
    head = " | ".join(f"{name:>9}" for name in medians)
    print(f"| {'phase (ms, medians of ' + str(args.rounds) + ')':<{width}} | {head} |")
    print(f"|{'-' * (width + 2)}|" + "|".join("-" * 11 for _ in medians) + "|")
    for n in order:
        cells = " | ".join(f"{medians[name][n]:>9.2f}" for name in medians)
        print(f"| {n:<{width}} | {cells} |")
    for n, value in floor.items():
        print(f"\n{n}: {value:.2f} ms; load {os.getloadavg()[0]:.2f}")
    if args.out:
        args.out.write_text(json.dumps({"medians": medians, "floor": floor}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
