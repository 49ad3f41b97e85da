#!/usr/bin/python3
"""The runtime stacks' checks, run INSIDE a guest built from Debian's packages
(tests/enforcing/today-image.sh; systemd as PID 1, cgroup v2 only; no SELinux: the enforcing
guests cover it): "today", Debian's newest (podman 5.8, crun 1.28, runc 1.3, conmon 2.1,
containerd 2.1, systemd 262, Python 3.14), where every grant must survive; and "trixie",
Debian 13 (podman 5.4.2, crun 1.21, runc 1.1.15, systemd 257: RHEL 9.6 and 10.0's
generation), where crun rebuilds its device program at `podman update` and the grant must
be kept exactly where `ocihook check` says it is.

    today_checks.py SRC OUT

The product is installed the README's way (`make install`, with the distribution's click,
PyYAML and jsonschema) and the hook is the installed one, on the default install's routes:
the prestart registration podman and CRI-O read by default, and podman's precreate
registration where its containers.conf drop-in is in place. Every injected node is opened
from `podman exec` at start, after `systemctl daemon-reload`, after `podman update --cpus 1`,
after both, with crun (podman's default) and runc, on both routes; `ocihook check`'s route
lines are compared with what was measured. The CDI route runs the driver's binary through the
ld cache with podman and through containerd 2.1's CRI (crictl). OUT gets summary.json (every
check, the versions the guest ran) and the evidence per check. The device nodes stand for
accelerators: real char devices of the guest (synthetic driver).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

SRC = Path(sys.argv[1]).resolve()
OUT = Path(sys.argv[2]).resolve()
sys.path.insert(0, str(SRC))
OPTIONS = json.loads((SRC / "enforcing-options.json").read_text())
RUNTIMES = tuple(OPTIONS.get("runtimes", ["crun", "runc"]))
GUEST = OPTIONS.get("policy", "today")  # today | trixie

from tests.support import host_devices, images, podman, synthetic  # noqa: E402

DRIVER = Path("/srv/synth-driver")
CONFIG = Path("/etc/ocihook/config.yaml")
IMAGE = "localhost/ocihook-today:latest"
PAUSE = "localhost/ocihook-pause:latest"
ANNOTATION = podman.ANNOTATION
RUN_FLAGS = podman.LIMITS
PRECREATE_DIR = Path("/usr/share/ocihook/hooks.d.podman")
PRECREATE_CONF = Path("/etc/containers/containers.conf.d/50-ocihook-precreate.conf")
CGROUPFS_CONF = Path("/etc/containers/containers.conf.d/60-ocihook-test-cgroupfs.conf")
PIN_DIR = Path("/sys/fs/bpf/ocihook")
UNIT_DIR = Path("/run/systemd/system")
CDI_SPEC = Path("/etc/cdi/ocihook.yaml")
CDI_NAME = "ocihook.io/synthetic=all"
PACKAGES = (
    "linux-image-amd64",
    "systemd",
    "podman",
    "crun",
    "runc",
    "conmon",
    "containerd",
    "python3",
    "python3-click",
    "python3-yaml",
    "python3-jsonschema",
)
RESULTS: list[dict] = []
# What the durable checks measured, for check-claims: (route, runtime, manager) ->
# {"reload": survived, "update": survived and the update succeeded}
MEASURED: dict[tuple[str, str, str], dict[str, bool]] = {}
# What `ocihook check --json` claims: (runtime, manager) -> {"reload": survive, "update": ...}
CLAIMS: dict[tuple[str, str], dict[str, bool]] = {}


def sh(cmd: list[str], timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def save(name: str, text: str) -> None:
    (OUT / name).write_text(text)


@dataclass(frozen=True)
class Check:
    """`fn(runtime)` returns (ok, detail); `per_runtime`: once per OCI runtime."""

    name: str
    fn: Callable[[str], tuple[bool, str]]
    per_runtime: bool = False


def run_check(check: Check, runtime: str | None) -> bool:
    tag = f"{check.name}@{runtime}" if runtime else check.name
    began = time.monotonic()
    try:
        ok, detail = check.fn(runtime or "crun")
    except Exception as error:  # a broken check is a failed check, with its trace
        ok, detail = False, f"{type(error).__name__}: {error}"
        save(f"{tag}.trace", traceback.format_exc())
    RESULTS.append(
        {
            "name": check.name,
            "runtime": runtime,
            "ok": bool(ok),
            "detail": detail,
            "seconds": round(time.monotonic() - began, 1),
        }
    )
    line = f"[{'ok' if ok else 'FAIL'}] {GUEST} {tag}: {detail} ({RESULTS[-1]['seconds']}s)"
    print(line, flush=True)
    try:
        with open("/dev/console", "w") as console:
            console.write(f"ocihook-guest: {line}\n")
    except OSError:
        pass
    return ok


# -- helpers ------------------------------------------------------------------------------


def nodes() -> list[str]:
    return [f"/dev/{n}" for n in sorted(synthetic.DEVICES) + sorted(synthetic.CONTROL)]


def opened_in(name: str, cli: str = "podman") -> list[str]:
    """The injected nodes a `podman exec` (or `crictl exec`) into `name` opens read-write."""
    line = "; ".join(f"(exec 3<>{n}) && echo OPENED {n}" for n in nodes())
    if cli == "podman":
        done = sh(["podman", "exec", name, "/bin/sh", "-c", line], 180)
    else:
        done = sh(["crictl", "--timeout", "120s", "exec", name, "/bin/sh", "-c", line], 180)
    return [w.split()[1] for w in done.stdout.splitlines() if w.startswith("OPENED ")]


def smi_ok(output: str) -> bool:
    """synth-smi loaded libsynth through the ld cache and opened every node read-write."""
    wanted = [f"opened {n} (" for n in nodes()]
    lines = output.splitlines()
    return "libsynth 1.2.3 loaded from" in output and all(
        any(w in line and line.endswith("read-write") for line in lines) for w in wanted
    )


def count(found: list[str]) -> str:
    return f"{len(found)}/{len(nodes())}"


def reload() -> int:
    done = sh(["systemctl", "daemon-reload"], 300)
    time.sleep(1)
    return done.returncode


def use_precreate(on: bool) -> None:
    """The shipped precreate registration in a podman-only dir, read through the shipped
    containers.conf drop-in (README, "Registering the hook"), or neither."""
    if on:
        PRECREATE_DIR.mkdir(parents=True, exist_ok=True)
        shutil.copy(SRC / "hooks.d/ocihook-precreate.json", PRECREATE_DIR)
        PRECREATE_CONF.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SRC / "packaging/50-ocihook-precreate.conf", PRECREATE_CONF)
    else:
        PRECREATE_CONF.unlink(missing_ok=True)
        shutil.rmtree(PRECREATE_DIR, ignore_errors=True)


def use_cgroupfs(on: bool) -> None:
    if on:
        CGROUPFS_CONF.parent.mkdir(parents=True, exist_ok=True)
        CGROUPFS_CONF.write_text('[engine]\ncgroup_manager = "cgroupfs"\n')
    else:
        CGROUPFS_CONF.unlink(missing_ok=True)


def leftovers(container_id: str) -> list[str]:
    """Our pins and drop-ins still there for a removed container's scope."""
    unit = f"libpod-{container_id}.scope"
    left = [str(p) for p in PIN_DIR.glob(f"{unit.replace('.', '_')}*")] if PIN_DIR.exists() else []
    dropin = UNIT_DIR / f"{unit}.d" / "50-ocihook-devices.conf"
    return left + ([str(dropin)] if dropin.exists() else [])


def swept_after_next_start(container_id: str, runtime: str) -> tuple[list[str], list[str]]:
    """(what a removed container left, what is still left after the next injecting start):
    the shipped registration has no poststop stage, so crun 1.23+'s pins and drop-in of a
    removed container go at the next injection that pins (cgroups/pinned.sweep: its unit
    is gone). Under the same route and manager as the container's."""
    left = leftovers(container_id)
    if not left:
        return [], []
    sh(
        ["podman", "--runtime", runtime, "run", "--rm", *RUN_FLAGS]
        + ["--annotation", f"{ANNOTATION}=all", IMAGE, "true"],
        300,
    )
    return left, leftovers(container_id)


# -- checks -------------------------------------------------------------------------------


def versions(runtime: str):
    got = {}
    for package in PACKAGES:
        done = sh(["dpkg-query", "-W", "-f=${Version}", package])
        got[package] = done.stdout.strip() if done.returncode == 0 else None
    got["kernel"] = os.uname().release
    save("versions.json", json.dumps(got, indent=2) + "\n")
    VERSIONS.update(got)
    crun = got.get("crun") or ""
    pins = sh(["dpkg", "--compare-versions", crun, "ge", "1.23"]).returncode == 0
    ok = pins == (GUEST == "today")  # today: BPFProgram=; trixie: crun's rebuild at update
    summary = ", ".join(f"{k} {v}" for k, v in got.items() if k in ("podman", "crun", "runc"))
    want = "crun 1.23 or later" if GUEST == "today" else "a crun before 1.23"
    return ok, f"{summary}, systemd {got['systemd']}, containerd {got['containerd']}" + (
        "" if ok else f"; this guest is for {want}"
    )


VERSIONS: dict = {}


def install(runtime: str):
    done = sh(["make", "install"], 900, cwd=SRC)
    save("install.log", done.stdout + done.stderr)
    version = sh(["ocihook", "--version"])
    ok = done.returncode == 0 and version.returncode == 0
    return (
        ok,
        f"make install rc={done.returncode}; {version.stdout.strip() or version.stderr[-200:]}",
    )


def setup(runtime: str):
    sh(["modprobe", "-a", *host_devices.MODULES])
    shutil.rmtree(DRIVER, ignore_errors=True)
    synthetic.build_driver(DRIVER)
    CONFIG.parent.mkdir(parents=True, exist_ok=True)
    CONFIG.write_text(
        json.dumps({"profile": "synthetic", "source_root": str(DRIVER), "device_root": str(DRIVER)})
    )
    work = Path("/var/tmp/ocihook-today-image")
    shutil.rmtree(work, ignore_errors=True)
    images.import_image(images.glibc_rootfs(work, "rhel"), "ocihook-today")
    checked = sh(["ocihook", "check"])
    save("ocihook-check.log", checked.stdout + checked.stderr)
    for manager in ("systemd", "cgroupfs"):
        CLAIMS.update(read_claims(manager))
    claimed = all(
        len(CLAIMS.get((rt, m), {})) == 2 for rt in RUNTIMES for m in ("systemd", "cgroupfs")
    )
    ok = checked.returncode == 0 and claimed
    return ok, f"driver {sorted(synthetic.DEVICES)}, check rc={checked.returncode}" + (
        "" if claimed else f"; check's reload/update lines not found for every runtime: {CLAIMS}"
    )


def read_claims(manager: str) -> dict[tuple[str, str], dict[str, bool]]:
    """`ocihook check --json`'s reload and update lines for podman with each runtime, under
    `manager` (a containers.conf drop-in for cgroupfs): "ok" means survive."""
    use_cgroupfs(manager == "cgroupfs")
    try:
        done = sh(["ocihook", "check", "--json"], 300)
    finally:
        use_cgroupfs(False)
    save(f"check-{manager}.json", done.stdout + done.stderr)
    findings = json.loads(done.stdout)["findings"]
    claims = {}
    for rt in RUNTIMES:
        claims[(rt, manager)] = {
            f["topic"]: f["status"] == "ok"
            for f in findings
            if f["topic"] in ("reload", "update") and f" with {rt} " in f["message"]
        }
    return claims


def durable(route: str, runtime: str, manager: str = "systemd") -> tuple[bool, str]:
    """One container on `route` with `runtime` under `manager`: every node from `podman
    exec` at each step; podman update's exit status; config.json's device rules unchanged by
    the update (podman's own list, both times) and its nodes the runtime's (precreate); what
    the scope holds after the reload; nothing of ours left once the next injecting start has
    run after `podman rm` (no poststop stage: the sweep removes a gone unit's pins)."""
    use_precreate(route == "precreate")
    use_cgroupfs(manager == "cgroupfs")
    name = f"today-{route}-{runtime}-{manager}"
    sh(["podman", "rm", "-f", "-t", "0", name])
    evidence: list[str] = []
    steps: dict[str, list[str]] = {}
    container_id = ""
    update_rc = None
    try:
        started = sh(
            ["podman", "--runtime", runtime, "run", "-d", "--name", name, *RUN_FLAGS]
            + ["--annotation", f"{ANNOTATION}=all", IMAGE, "sleep", "1800"],
            300,
        )
        evidence.append(f"run: rc={started.returncode} {started.stdout}{started.stderr}")
        if started.returncode != 0:
            return False, f"podman run -d: {started.stderr.strip()[-300:]}"
        container_id = started.stdout.strip()
        config_path = sh(["podman", "inspect", "-f", "{{.OCIConfigPath}}", name]).stdout.strip()
        before = json.loads(Path(config_path).read_text())
        smi = sh(["podman", "exec", name, "/usr/bin/synth-smi"], 180)
        evidence.append(f"synth-smi: {smi.stdout}{smi.stderr}")
        steps["start"] = opened_in(name)
        reload()
        steps["reload"] = opened_in(name)
        unit = f"libpod-{container_id}.scope"
        shown = sh(["systemctl", "show", "-p", "BPFProgram,DevicePolicy,DeviceAllow", unit])
        evidence.append(f"{unit} after the reload:\n{shown.stdout}")
        update = sh(["podman", "update", "--cpus", "1", name], 300)
        update_rc = update.returncode
        evidence.append(f"podman update: rc={update.returncode} {update.stdout}{update.stderr}")
        steps["update"] = opened_in(name)
        reload()
        steps["update + reload"] = opened_in(name)
        after = json.loads(Path(config_path).read_text())
        smi_after = sh(["podman", "exec", name, "/usr/bin/synth-smi"], 180)
    finally:
        sh(["podman", "rm", "-f", "-t", "0", name], 300)
        removed, left = swept_after_next_start(container_id, runtime) if container_id else ([], [])
        use_precreate(False)
        use_cgroupfs(False)
        evidence += [f"{step}: {found}" for step, found in steps.items()]
        evidence.append(f"left after podman rm: {removed}; after the next start: {left}")
        save(f"durable-{route}-{manager}@{runtime}.out", "\n".join(evidence) + "\n")
    want = nodes()
    survived = {step: found == want for step, found in steps.items()}
    MEASURED[(route, runtime, manager)] = {
        "reload": survived.get("reload", False),
        "update": update_rc == 0
        and survived.get("update", False)
        and survived.get("update + reload", False),
    }
    rules_kept = before["linux"]["resources"].get("devices") == after["linux"]["resources"].get(
        "devices"
    )
    made = {d["path"] for d in before["linux"].get("devices") or ()}
    runtime_made = set(want) <= made if route == "precreate" else not (set(want) & made)
    counts = ", ".join(f"{step} {count(found)}" for step, found in steps.items())
    detail = f"{counts}; podman update rc={update_rc}"
    problems = []
    if not rules_kept:
        problems.append("podman update changed config.json's device rules")
    if not runtime_made:
        problems.append(f"config.json linux.devices {sorted(made)}")
    if left:
        problems.append(f"left after podman rm and the next injecting start: {left}")
    if not (smi_ok(smi.stdout) and smi_ok(smi_after.stdout)):
        problems.append("synth-smi did not load libsynth and open every node")
    claimed = CLAIMS.get((runtime, manager), {}).get("update")
    if GUEST != "today" or manager == "cgroupfs":
        # where crun rebuilds its program (trixie's crun, cgroupfs) the update may drop them:
        # what was measured must be what `ocihook check` says (and check-claims compares)
        updated = MEASURED[(route, runtime, manager)]["update"]
        problems = [p for p in problems if not p.startswith("synth-smi")] + (
            [] if claimed == updated else [f"check says {'survive' if claimed else 'dropped'}"]
        )
        ok = survived.get("reload", False) and update_rc == 0 and not problems
        return ok, "; ".join([f"measured: {detail}", *problems])
    ok = all(survived.values()) and len(steps) == 4 and update_rc == 0 and not problems
    return ok, "; ".join([detail, *problems])


def userns_auto(runtime: str):
    out = []
    ok = True
    for route in ("prestart", "precreate"):
        use_precreate(route == "precreate")
        try:
            done = sh(
                ["podman", "--runtime", runtime, "run", "--rm", "--userns=auto", *RUN_FLAGS]
                + ["--annotation", f"{ANNOTATION}=all", IMAGE]
                + ["/bin/sh", "-c", "cat /proc/self/uid_map; /usr/bin/synth-smi"],
                300,
            )
        finally:
            use_precreate(False)
        save(f"userns-auto-{route}@{runtime}.out", done.stdout + done.stderr)
        mapped = done.stdout.split()[:3]
        good = done.returncode == 0 and smi_ok(done.stdout) and mapped[1:2] != ["0"]
        ok = ok and good
        out.append(
            f"{route}: rc={done.returncode} uid_map {' '.join(mapped)} {'ok' if good else 'FAILED'}"
        )
    return ok, "; ".join(out)


def check_claims(runtime: str):
    """`ocihook check --json`'s reload and update lines for podman with each runtime, under
    systemd (the default) and cgroupfs, against what the durable checks measured."""
    mismatches, compared = [], 0
    for (route, rt, manager), measured in sorted(MEASURED.items()):
        claims = CLAIMS.get((rt, manager), {})
        for topic in ("reload", "update"):
            compared += 1
            if claims.get(topic) != measured[topic]:
                mismatches.append(
                    f"{manager} {route} {rt} {topic}: check says "
                    f"{'survive' if claims.get(topic) else 'dropped'}, measured "
                    f"{'survive' if measured[topic] else 'dropped'}"
                )
    ok = compared > 0 and not mismatches
    return ok, f"{compared} claims compared" + (f"; {'; '.join(mismatches)}" if mismatches else "")


def cdi_podman(runtime: str):
    generated = sh(["ocihook", "cdi", "generate", "--output", str(CDI_SPEC)])
    if generated.returncode != 0:
        return False, f"cdi generate: {generated.stderr.strip()[-300:]}"
    name = f"today-cdi-{runtime}"
    sh(["podman", "rm", "-f", "-t", "0", name])
    try:
        started = sh(
            ["podman", "--runtime", runtime, "run", "-d", "--name", name, *RUN_FLAGS]
            + ["--device", CDI_NAME, IMAGE, "sleep", "1800"],
            300,
        )
        if started.returncode != 0:
            return False, f"podman run --device {CDI_NAME}: {started.stderr.strip()[-300:]}"
        smi = sh(["podman", "exec", name, "/usr/bin/synth-smi"], 180)
        start = opened_in(name)
        reload()
        after_reload = opened_in(name)
        update = sh(["podman", "update", "--cpus", "1", name], 300)
        after_update = opened_in(name)
        save(
            f"cdi-podman@{runtime}.out",
            f"{smi.stdout}{smi.stderr}\nupdate rc={update.returncode} {update.stderr}\n",
        )
    finally:
        sh(["podman", "rm", "-f", "-t", "0", name], 300)
    measured = (
        f"measured: reload {count(after_reload)}, podman update rc={update.returncode} "
        f"{count(after_update)}"
    )
    ok = smi_ok(smi.stdout) and start == nodes()
    loaded = "ok" if smi_ok(smi.stdout) else "FAILED"
    return ok, f"synth-smi through the ld cache {loaded}, start {count(start)}; {measured}"


def containerd_images() -> str | None:
    """ocihook-today and a local sandbox image in containerd's k8s.io namespace."""
    if sh(["systemctl", "is-active", "containerd"]).stdout.strip() != "active":
        sh(["systemctl", "restart", "containerd"], 300)
    containerfile = Path("/var/tmp/Containerfile.pause")
    containerfile.write_text(f'FROM {IMAGE}\nENTRYPOINT ["/bin/sleep", "infinity"]\n')
    built = sh(["podman", "build", "-q", "-t", PAUSE, "-f", str(containerfile), "/var/tmp"], 600)
    if built.returncode != 0:
        return f"podman build {PAUSE}: {built.stderr[-300:]}"
    for image in (IMAGE, PAUSE):
        archive = f"/var/tmp/{image.split('/')[1].split(':')[0]}.tar"
        saved = sh(["podman", "save", "--format", "oci-archive", "-o", archive, image], 600)
        loaded = sh(["ctr", "-n", "k8s.io", "images", "import", "--base-name",
                     image.rsplit(":", 1)[0], archive], 600)  # fmt: skip
        if saved.returncode or loaded.returncode:
            return f"{image} into containerd: {saved.stderr[-200:]}{loaded.stderr[-200:]}"
    return None


def cdi_containerd(runtime: str):
    """A pod through containerd 2.1's CRI (what kubelet talks to) whose container names the
    CDI device; the driver's binary through the ld cache, every node from crictl exec, and
    after crictl update (the kubelet's CPU manager) and a daemon-reload."""
    if not CDI_SPEC.exists():
        sh(["ocihook", "cdi", "generate", "--output", str(CDI_SPEC)])
    if not CONTAINERD_READY:
        problem = containerd_images()
        if problem:
            return False, problem
        CONTAINERD_READY.append(True)
    crictl = ["crictl", "--timeout", "120s"]
    pod_json = Path(f"/var/tmp/pod-{runtime}.json")
    ctr_json = Path(f"/var/tmp/ctr-{runtime}.json")
    pod_json.write_text(json.dumps({
        "metadata": {"name": f"cdi-{runtime}", "namespace": "default", "uid": f"cdi-{runtime}"},
        "log_directory": "/var/tmp/cri-logs",
        "linux": {"cgroup_parent": "kubepods.slice",
                  "security_context": {"namespace_options": {"network": 2}}},
    }))  # fmt: skip
    ctr_json.write_text(json.dumps({
        "metadata": {"name": "smi"},
        "image": {"image": IMAGE},
        "command": ["/bin/sh", "-c", "/usr/bin/synth-smi; sleep 1800"],
        "log_path": "smi.log",
        "CDI_devices": [{"name": CDI_NAME}],
        "linux": {},
    }))  # fmt: skip
    Path("/var/tmp/cri-logs").mkdir(exist_ok=True)
    pod = sh([*crictl, "runp", "--runtime", runtime, str(pod_json)], 300)
    if pod.returncode != 0:
        return False, f"crictl runp: {pod.stderr.strip()[-300:]}"
    pod_id = pod.stdout.strip()
    try:
        created = sh([*crictl, "create", pod_id, str(ctr_json), str(pod_json)], 300)
        if created.returncode != 0:
            return False, f"crictl create: {created.stderr.strip()[-300:]}"
        ctr = created.stdout.strip()
        sh([*crictl, "start", ctr], 300)
        logs = ""
        for _ in range(60):
            logs = sh([*crictl, "logs", ctr]).stdout
            if "synthctl" in logs:
                break
            time.sleep(1)
        start = opened_in(ctr, "crictl")
        update = sh([*crictl, "update", "--cpu-share", "512", ctr], 300)
        after_update = opened_in(ctr, "crictl")
        reload()
        after_reload = opened_in(ctr, "crictl")
        save(
            f"cdi-containerd@{runtime}.out",
            f"{logs}\nupdate rc={update.returncode} {update.stderr}\n",
        )
    finally:
        sh([*crictl, "rmp", "-f", pod_id], 300)
    steps = [start, after_update, after_reload]
    ok = smi_ok(logs) and all(s == nodes() for s in steps) and update.returncode == 0
    return ok, (
        f"synth-smi through the ld cache {'ok' if smi_ok(logs) else 'FAILED'}; start "
        f"{count(start)}, crictl update (rc={update.returncode}) {count(after_update)}, "
        f"daemon-reload {count(after_reload)}"
    )


CONTAINERD_READY: list[bool] = []

CHECKS = (
    Check("versions", versions),
    Check("install", install),
    Check("setup-driver-and-image", setup),
    Check("durable-prestart", lambda rt: durable("prestart", rt), per_runtime=True),
    Check("durable-precreate", lambda rt: durable("precreate", rt), per_runtime=True),
    Check("durable-prestart-cgroupfs", lambda rt: durable("prestart", rt, "cgroupfs"), True),
    Check("userns-auto", userns_auto, per_runtime=True),
    Check("check-claims", check_claims),
    Check("cdi-podman", cdi_podman, per_runtime=True),
    Check("cdi-containerd", cdi_containerd, per_runtime=True),  # containerd 2 (today) only
)
REQUIRED = ("install", "setup-driver-and-image")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    wanted = OPTIONS.get("checks", "all")
    names = {c.name for c in CHECKS} if wanted == "all" else set(wanted.split(","))
    started = time.monotonic()
    for check in CHECKS:
        if check.name not in names and check.name not in REQUIRED and check.name != "versions":
            continue
        if check.name == "cdi-containerd" and GUEST != "today":
            continue  # trixie's containerd is 1.7: containerd 2.1 is the today guest's
        for runtime in RUNTIMES if check.per_runtime else (None,):
            if not run_check(check, runtime) and check.name in REQUIRED:
                break
        else:
            continue
        break
    summary = {
        "policy": GUEST,
        "runtimes": list(RUNTIMES),
        "checks": RESULTS,
        "versions": VERSIONS,
        "avc": 0,
        "selinux_err": 0,
        "seconds": round(time.monotonic() - started),
        "kernel": os.uname().release,
    }
    save("summary.json", json.dumps(summary, indent=2) + "\n")
    return 0 if RESULTS and all(r["ok"] for r in RESULTS) else 1


if __name__ == "__main__":
    raise SystemExit(main())
