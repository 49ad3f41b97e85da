#!/usr/bin/python3
"""The enforcing tier's checks, run INSIDE the SELinux-enforcing guest (tests/enforcing/guest.sh).

    guest_checks.py SRC OUT

SRC is the worktree, with enforcing-options.json (the policy this guest boots, the checks, the
OCI runtimes); OUT gets summary.json (one entry per check and runtime: name, runtime, ok,
detail, the AVC and SELINUX_ERR records logged while it ran) and the evidence (podman output,
ocihook audit output, the denials of the broken-on-purpose check). Containers run under real
podman with runc and crun, confined as container_t:s0:cX,cY by the guest's enforcing kernel.
Under refpolicy the product is installed the README's way (install.sh); under Fedora's policy
from its RPMs (SRC/enforcing-rpms) with `rpm`, whose scriptlets load the module, create the
tmpfiles entries and relabel, and which removes it all again at the end (rpm-erase). The hook
is the installed one (/usr/share/containers/oci/hooks.d). The device nodes stand for
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
POLICY = OPTIONS.get("policy", "refpolicy")  # refpolicy | fedora
RUNTIMES = tuple(OPTIONS.get("runtimes", ["runc"]))

from tests.support import fake_hosts, host_devices, images, podman, synthetic  # noqa: E402

AUDIT_LOG = Path("/var/log/audit/audit.log")
DRIVER = Path("/srv/synth-driver")
CONFIG = Path("/etc/ocihook/config.yaml")
IMAGE_NAME = "ocihook-enforcing"
ANNOTATION = podman.ANNOTATION
SHARED = "system_u:object_r:container_ro_file_t:s0"
BROKEN_TYPE = "user_home_t"
RUN_FLAGS = podman.LIMITS
DENIAL_TYPES = ("AVC", "USER_AVC", "SELINUX_ERR", "USER_SELINUX_ERR")


def sh(cmd: list[str], timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def save(name: str, text: str) -> None:
    (OUT / name).write_text(text)


# -- audit log accounting ---------------------------------------------------------------


class Audit:
    """Reads audit.log between markers that auditctl -m writes (so no record is missed)."""

    def __init__(self) -> None:
        self.count = 0

    def mark(self) -> int:
        """Write a marker record and wait for it: returns the log offset just after it."""
        self.count += 1
        text = f"ocihook-enforcing-mark-{os.getpid()}-{self.count}"
        sh(["auditctl", "-m", text])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            data = AUDIT_LOG.read_bytes()
            at = data.find(text.encode())
            if at >= 0:
                end = data.find(b"\n", at)
                return len(data) if end < 0 else end + 1
            time.sleep(0.2)
        raise RuntimeError("auditd did not log the marker in 30 s")

    @staticmethod
    def denials(start: int, end: int) -> list[str]:
        data = AUDIT_LOG.read_bytes()[start:end].decode(errors="replace")
        return [
            line for line in data.splitlines() if any(f"type={t} " in line for t in DENIAL_TYPES)
        ]


AUDIT = Audit()
RESULTS: list[dict] = []


@dataclass(frozen=True)
class Check:
    """One check: `fn(runtime)` returns (ok, detail). `per_runtime`: run once per OCI runtime
    of the options (podman --runtime), else once with runc. `policies`: the guests it runs in.
    `stand_in_denials`: kmod names of module_request denials that only a stand-in causes (a
    fake device's major with no driver makes the kernel ask for a module); such records are
    counted apart in the summary and kept in NAME.denials, never hidden."""

    name: str
    fn: Callable[[str], tuple[bool, str]]
    per_runtime: bool = False
    denials_expected: bool = False
    stand_in_denials: tuple[str, ...] = ()
    policies: tuple[str, ...] = ("refpolicy", "fedora")


def evidence_name(name: str, runtime: str | None) -> str:
    """The prefix of a check run's evidence files: NAME, or NAME@RUNTIME for a runtime check."""
    return f"{name}@{runtime}" if runtime else name


CURRENT = {"evidence": ""}


def save_evidence(suffix: str, text: str) -> None:
    """OUT/<the running check's evidence name><suffix>."""
    save(CURRENT["evidence"] + suffix, text)


def run_check(check: Check, runtime: str | None) -> bool:
    """Run one check (with `runtime`, for a runtime check); record ok/detail and the denials
    logged while it ran."""
    tag = evidence_name(check.name, runtime)
    CURRENT["evidence"] = tag
    start = AUDIT.mark()
    began = time.monotonic()
    try:
        ok, detail = check.fn(runtime or "runc")
    except Exception as error:  # a broken check is a failed check, with its trace
        ok, detail = False, f"{type(error).__name__}: {error}"
        save(f"{tag}.trace", traceback.format_exc())
    end = AUDIT.mark()
    logged = Audit.denials(start, end)
    save(f"{tag}.denials", "\n".join(logged) + ("\n" if logged else ""))
    stand_in = [
        d
        for d in logged
        if "{ module_request }" in d and any(p in d for p in check.stand_in_denials)
    ]
    denials = [d for d in logged if d not in stand_in]
    avc = sum(1 for d in denials if "type=AVC " in d or "type=USER_AVC " in d)
    err = len(denials) - avc
    if not check.denials_expected and denials:
        ok = False
        detail += f"; {avc} AVC, {err} SELINUX_ERR (see {tag}.denials)"
    RESULTS.append(
        {
            "name": check.name,
            "runtime": runtime,
            "ok": bool(ok),
            "detail": detail,
            "avc": avc,
            "selinux_err": err,
            "denials_expected": check.denials_expected,
            "stand_in_denials": len(stand_in),
            "seconds": round(time.monotonic() - began, 1),
        }
    )
    line = f"[{'ok' if ok else 'FAIL'}] {POLICY} {tag}: {detail} ({RESULTS[-1]['seconds']}s)"
    print(line, flush=True)
    try:
        with open("/dev/console", "w") as console:  # progress on the serial console
            console.write(f"ocihook-guest: {line}\n")
    except OSError:
        pass
    return ok


# -- helpers ------------------------------------------------------------------------------


def podman_run(
    command: list[str],
    devices: str | None = "all",
    extra: list[str] | None = None,
    runtime: str = "runc",
) -> subprocess.CompletedProcess:
    """podman run --rm with the installed hook (podman's default hooks dirs)."""
    args = ["podman", "--runtime", runtime, "run", "--rm", *RUN_FLAGS]
    if devices is not None:
        args += ["--annotation", f"{ANNOTATION}={devices}"]
    return sh(args + list(extra or []) + [f"localhost/{IMAGE_NAME}:latest", *command], 180)


def in_terminal(command: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """`command` (a shell line) in a terminal, as a user runs it: semodule's load_policy may
    write to a tty, not to the caller's pipe (script(1) gives it a pty)."""
    return sh(["script", "-qec", command, "/dev/null"], timeout)


def modules_by_priority() -> dict[str, int]:
    """Loaded policy modules and their priority (`semodule --list-modules=full`; the highest
    priority of a module is the one in force)."""
    modules: dict[str, int] = {}
    for line in sh(["semodule", "--list-modules=full"]).stdout.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0].isdigit():
            modules[fields[1]] = max(int(fields[0]), modules.get(fields[1], 0))
    return modules


def write_config(source_check: str) -> None:
    """/etc/ocihook/config.yaml for the synthetic driver at DRIVER (JSON is YAML)."""
    CONFIG.write_text(
        json.dumps(
            {
                "profile": "synthetic",
                "source_root": str(DRIVER),
                "device_root": str(DRIVER),
                "selinux": {"source_check": source_check},
            },
            indent=2,
        )
        + "\n"
    )
    sh(["restorecon", str(CONFIG)])


def smi_ok(result: subprocess.CompletedProcess) -> tuple[bool, str]:
    out = result.stdout + result.stderr
    devices = sorted(synthetic.DEVICES) + sorted(synthetic.CONTROL)
    lines = out.splitlines()
    opened = [
        d
        for d in devices
        if any(f"opened /dev/{d} (" in line and line.endswith("read-write") for line in lines)
    ]
    ok = (
        result.returncode == 0
        and "loaded from /usr/lib64/libsynth.so.1" in out
        and len(opened) == len(devices)
    )
    first = out.strip().splitlines()[:1]
    return ok, f"rc={result.returncode}, {len(opened)}/{len(devices)} devices rw; {first}"


def label_of(path: str) -> str | None:
    try:
        return os.getxattr(path, "security.selinux", follow_symlinks=False).rstrip(b"\0").decode()
    except OSError as error:
        return f"<{error.strerror}>"


def context_type(context: str | None) -> str:
    parts = (context or "").split(":")
    return parts[2] if len(parts) > 2 else ""


# -- the checks --------------------------------------------------------------------------


def guest_enforcing(runtime: str):
    enforce = Path("/sys/fs/selinux/enforce").read_text().strip()
    me = Path("/proc/self/attr/current").read_text().rstrip("\0\n")
    policy_type = sh(["sh", "-c", ". /etc/selinux/config && echo $SELINUXTYPE"]).stdout.strip()
    modules = modules_by_priority()
    # refpolicy: Debian's policy with refpolicy's container module (the image's, priority
    # 400). fedora: targeted, container-selinux 2.229.0 at priority 200 over the container
    # module the base policy bundles (100), as the container-selinux RPM installs it.
    want = {"refpolicy": ("default", 400), "fedora": ("targeted", 200)}[POLICY]
    ok = (
        enforce == "1"
        and (policy_type, modules.get("container")) == want
        and context_type(me) == "unconfined_t"
    )
    return ok, (
        f"enforce={enforce}, SELINUXTYPE={policy_type}, caller {me}, "
        f"container module at priority {modules.get('container')}"
    )


def install(runtime: str):
    """refpolicy: the README's install (make install, the module built here)."""
    done = in_terminal(f"sh {SRC / 'tests/enforcing/install.sh'} {SRC}")
    save("install.log", done.stdout + done.stderr)
    modules = modules_by_priority()
    hook = Path("/usr/libexec/ocihook/ocihook-hook")
    ok = done.returncode == 0 and "ocihook" in modules and hook.exists()
    return ok, f"rc={done.returncode}, ocihook module loaded: {'ocihook' in modules}"


RPM_DIR = SRC / "enforcing-rpms"
FC_PRE = Path("/var/lib/rpm-state/file_contexts.pre")
# A file that ocihook.fc labels and that exists before the package: the RPM's relabel
# scriptlets (%selinux_relabel_pre/_post: fixfiles -C) must give it the module's label.
PRE_EXISTING = Path("/usr/lib/ocihook/driver/usr/lib64/libpreexisting.so.1")
RPM_INSTALLED: dict[str, list[str]] = {}
PACKAGES = ("ocihook", "ocihook-selinux")


def not_default_labels(paths: list[str]) -> list[str]:
    """restorecon -n -v: the paths whose label is not the policy's default one."""
    existing = [p for p in paths if os.path.lexists(p)]
    done = sh(["restorecon", "-n", "-v", *existing]) if existing else None
    return done.stdout.split("\n") if done and done.stdout.strip() else []


def rpm_install(runtime: str):
    """fedora: the RPMs built with RHEL's macros, installed with rpm; their scriptlets must
    be RHEL's (module at priority 200, systemd-tmpfiles, fixfiles -C), not the spec's
    fallbacks (priority 400, no relabel)."""
    rpms = sorted(str(p) for p in RPM_DIR.glob("*.noarch.rpm"))
    PRE_EXISTING.parent.mkdir(parents=True, exist_ok=True)
    PRE_EXISTING.write_bytes(b"\x7fELF")
    before = label_of(str(PRE_EXISTING))
    done = in_terminal("rpm -i --nodeps --force-debian " + " ".join(rpms))
    save("rpm-install.log", done.stdout + done.stderr)
    files = sh(["rpm", "-ql", *PACKAGES]).stdout.split()
    RPM_INSTALLED["files"] = files
    save("rpm-files.txt", "\n".join(files) + "\n")
    modules = modules_by_priority()
    run_dir = Path("/run/ocihook")
    after = label_of(str(PRE_EXISTING))
    mislabelled = not_default_labels([f for f in files if not f.startswith("/run/")])
    found = {
        "rpm -i rc": done.returncode,
        "ocihook module priority": modules.get("ocihook"),
        "/run/ocihook (tmpfiles)": oct(run_dir.stat().st_mode & 0o7777)
        if run_dir.is_dir()
        else None,
        "file_contexts.pre left": FC_PRE.exists(),
        "pre-existing driver file": f"{before} -> {after}",
        "files not at their default label": mislabelled,
        "ocihook --version": sh(["ocihook", "--version"]).stdout.strip(),
    }
    save("rpm-install.json", json.dumps(found, indent=2))
    ok = (
        done.returncode == 0
        and modules.get("ocihook") == 200
        and run_dir.is_dir()
        and not FC_PRE.exists()
        and context_type(after) == "container_ro_file_t"
        and not mislabelled
        and found["ocihook --version"].startswith("ocihook")
    )
    return ok, "; ".join(f"{k}: {v}" for k, v in found.items())


def rpm_erase(runtime: str):
    """fedora: rpm -e removes the module and every file the packages installed; a config the
    checks changed is kept as .rpmsave, as rpm does for %config(noreplace)."""
    files = RPM_INSTALLED.get("files") or sh(["rpm", "-ql", *PACKAGES]).stdout.split()
    done = in_terminal("rpm -e --nodeps ocihook-selinux ocihook")
    save("rpm-erase.log", done.stdout + done.stderr)
    modules = modules_by_priority()
    left = [
        f
        for f in files
        if os.path.lexists(f) and not (os.path.isdir(f) and not os.path.islink(f) and os.listdir(f))
    ]
    kept_dirs = [f for f in files if os.path.isdir(f) and os.listdir(f)]
    plain = podman_run(["/bin/true"], devices=None)
    found = {
        "rpm -e rc": done.returncode,
        "ocihook module": modules.get("ocihook"),
        "files left": left,
        "non-empty dirs kept (other files in them)": kept_dirs,
        "rpmsave": sorted(str(p) for p in Path("/etc/ocihook").glob("*.rpmsave")),
        "rpm -q": sh(["rpm", "-q", "ocihook"]).stdout.strip(),
        "plain container after": plain.returncode,
    }
    save("rpm-erase.json", json.dumps(found, indent=2))
    ok = (
        done.returncode == 0
        and "ocihook" not in modules
        and not left
        and all(not d.startswith(("/usr/lib/python3", "/usr/libexec/ocihook")) for d in kept_dirs)
        and "not installed" in found["rpm -q"]
        and plain.returncode == 0
    )
    return ok, "; ".join(f"{k}: {v}" for k, v in found.items())


def setup(runtime: str):
    # The synthetic devices are char devices of the guest, picked from its /proc/misc and
    # /proc/devices (host_devices.py) when the driver is built: load the modules that
    # register the preferred ones first, so that they are there to pick.
    sh(["modprobe", "-a", *host_devices.MODULES])
    shutil.rmtree(DRIVER, ignore_errors=True)
    synthetic.build_driver(DRIVER)
    relabel = sh(["ocihook", "selinux", "relabel", str(DRIVER)])
    save("relabel.log", relabel.stdout + relabel.stderr)
    write_config("error")
    work = Path("/var/tmp/ocihook-enforcing-image")
    shutil.rmtree(work, ignore_errors=True)
    images.import_image(images.glibc_rootfs(work, "rhel"), IMAGE_NAME)
    checked = sh(["ocihook", "check"])
    save("ocihook-check.log", checked.stdout + checked.stderr)
    lib = label_of(str(DRIVER / "usr/lib/x86_64-linux-gnu/libsynth.so.1.2.3"))
    ok = relabel.returncode == 0 and lib == SHARED and checked.returncode == 0
    return ok, f"relabel rc={relabel.returncode}, driver lib {lib}, check rc={checked.returncode}"


def plain(runtime: str):
    result = podman_run(
        ["/bin/sh", "-c", "cat /proc/self/attr/current; echo; ls /dev"],
        devices=None,
        runtime=runtime,
    )
    save_evidence(".out", result.stdout + result.stderr)
    label = result.stdout.splitlines()[0].rstrip("\0") if result.stdout else ""
    ok = (
        result.returncode == 0
        and context_type(label) == "container_t"
        and "synth" not in result.stdout
    )
    return ok, f"rc={result.returncode}, runs as {label}, no synth devices"


def root_command(runtime: str):
    result = podman_run(["/usr/bin/synth-smi"], runtime=runtime)
    save_evidence(".out", result.stdout + result.stderr)
    return smi_ok(result)


def root_shell(runtime: str):
    result = podman_run(["/bin/sh", "-c", "synth-smi && echo shell-ok"], runtime=runtime)
    save_evidence(".out", result.stdout + result.stderr)
    ok, detail = smi_ok(result)
    return ok and "shell-ok" in result.stdout, detail


def user_1000(runtime: str):
    result = podman_run(["/usr/bin/synth-smi"], extra=["--user", "1000:1000"], runtime=runtime)
    save_evidence(".out", result.stdout + result.stderr)
    return smi_ok(result)


def labels(runtime: str):
    name = f"ocihook-enforcing-labels-{runtime}"
    sh(["podman", "rm", "-f", name])
    started = sh(
        ["podman", "--runtime", runtime, "run", "-d", "--name", name, *RUN_FLAGS]
        + ["--annotation", f"{ANNOTATION}=all", f"localhost/{IMAGE_NAME}:latest", "sleep", "300"]
    )
    if started.returncode != 0:
        return False, f"podman run -d: {started.stderr.strip()[-300:]}"
    try:
        fmt = "{{.State.Pid}} {{.ProcessLabel}} {{.MountLabel}}"
        pid, process_label, mount_label = sh(["podman", "inspect", "-f", fmt, name]).stdout.split()
        root = f"/proc/{pid}/root"
        seen = {
            "process": Path(f"/proc/{pid}/attr/current").read_text().rstrip("\0\n"),
            "/usr/lib64/libsynth.so.1.2.3": label_of(root + "/usr/lib64/libsynth.so.1.2.3"),
            "/usr/bin/synth-smi": label_of(root + "/usr/bin/synth-smi"),
            "/usr/lib64/libsynth.so.1": label_of(root + "/usr/lib64/libsynth.so.1"),
            "/etc/ld.so.cache": label_of(root + "/etc/ld.so.cache"),
            "/dev/synth0": label_of(root + "/dev/synth0"),
            "/dev/synthctl": label_of(root + "/dev/synthctl"),
        }
        mode = oct(os.stat(root + "/dev/synth0").st_mode & 0o777)
        save_evidence(".json", json.dumps({"mount_label": mount_label, **seen}, indent=2))
        want = {
            "process": process_label,
            "/usr/lib64/libsynth.so.1.2.3": SHARED,
            "/usr/bin/synth-smi": SHARED,
            "/usr/lib64/libsynth.so.1": mount_label,
            "/etc/ld.so.cache": mount_label,
            "/dev/synth0": mount_label,
            "/dev/synthctl": mount_label,
        }
        wrong = {k: (seen[k], want[k]) for k in want if seen[k] != want[k]}
        ok = not wrong and context_type(mount_label) == "container_file_t" and mode == "0o666"
        detail = (
            f"bind mounts {SHARED}, created files and device nodes {mount_label}, "
            f"process {process_label}, node mode {mode}"
        )
        return ok, detail if ok else f"wrong labels (seen, wanted): {wrong}; mode {mode}"
    finally:
        sh(["podman", "rm", "-f", "-t", "0", name])


def no_annotation(runtime: str):
    result = podman_run(
        ["/bin/sh", "-c", "ls /dev /usr/bin /usr/lib64 | grep -c synth"], None, runtime=runtime
    )
    save_evidence(".out", result.stdout + result.stderr)
    return (
        result.returncode == 1 and result.stdout.strip() == "0",
        f"synth entries without the annotation: {result.stdout.strip()} (rc {result.returncode})",
    )


PRESTART_HOOKS = Path("/run/ocihook-prestart-hooks.d")


def prestart_hooks_dir() -> Path:
    """A hooks dir with the installed registration limited to prestart and poststop: the
    prestart route (no precreate stage), whatever the installed file registers."""
    installed = Path("/usr/share/containers/oci/hooks.d/ocihook.json")
    document = json.loads(installed.read_text())
    document["stages"] = ["prestart", "poststop"]
    PRESTART_HOOKS.mkdir(exist_ok=True)
    (PRESTART_HOOKS / "ocihook.json").write_text(json.dumps(document, indent=2) + "\n")
    return PRESTART_HOOKS


def unit_devices(unit: str) -> dict[str, str]:
    """DevicePolicy, DeviceAllow and DropInPaths of a unit (systemctl show)."""
    shown = sh(["systemctl", "show", "-p", "DevicePolicy,DeviceAllow,DropInPaths", unit]).stdout
    out: dict[str, str] = {}
    for line in shown.splitlines():
        key, _, value = line.partition("=")
        out[key] = (out[key] + "\n" + value) if key in out else value
    return out


def reload_prestart(runtime: str):
    """The prestart route under podman's systemd cgroup manager: an annotated container
    started detached opens every injected node (synth-smi, podman exec) before and after
    `systemctl daemon-reload`, which recomputes the scope's device program from its
    DeviceAllow=; the hook put its rules there (runtime properties over D-Bus), so the
    scope's DeviceAllow= lists each node as /dev/char/M:N. Where systemd does not restrict
    the scope at all (DevicePolicy=auto, no DeviceAllow=: crun before 1.19) the hook adds
    nothing, and the reload has nothing to drop."""
    name = f"ocihook-enforcing-reload-{runtime}"
    hooks = prestart_hooks_dir()
    sh(["podman", "rm", "-f", "-t", "0", name])
    podman_cmd = ["podman", "--runtime", runtime, "--hooks-dir", str(hooks)]
    podman_cmd += ["--cgroup-manager", "systemd"]
    started = sh(
        [*podman_cmd, "run", "-d", "--name", name, *RUN_FLAGS]
        + ["--annotation", f"{ANNOTATION}=all", f"localhost/{IMAGE_NAME}:latest", "sleep", "600"]
    )
    if started.returncode != 0:
        logged = sh(["journalctl", "-b", "-t", "ocihook", "-n", "5", "--no-pager"]).stdout
        save_evidence(".out", started.stdout + started.stderr + "\n--\n" + logged)
        last = logged.strip().splitlines()[-1:] or ["(no hook log)"]
        return False, f"podman run -d: {started.stderr.strip()[-200:]}; hook log: {last[0]}"
    try:
        fmt = "{{.Id}} {{.State.Pid}}"
        cid, pid = sh(["podman", "inspect", "-f", fmt, name]).stdout.split()
        unit = f"libpod-{cid}.scope"
        devices = sorted(synthetic.DEVICES) + sorted(synthetic.CONTROL)
        wanted = []
        for d in devices:
            rdev = os.stat(f"/proc/{pid}/root/dev/{d}").st_rdev
            wanted.append(f"/dev/char/{os.major(rdev)}:{os.minor(rdev)}")
        before = sh(["podman", "exec", name, "/usr/bin/synth-smi"])
        shown = unit_devices(unit)
        reload = sh(["systemctl", "daemon-reload"])
        after = sh(["podman", "exec", name, "/usr/bin/synth-smi"])
        shown_after = unit_devices(unit)
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        # Measured, not required (docs/cgroups.md: an update that re-applies the OCI
        # config's devices is beyond a prestart hook): a CPU update, then the nodes again.
        updated = sh(["podman", "update", "--cpus", "1", name])
        how = "podman update --cpus 1"
        if updated.returncode != 0:  # podman 4.3 may lack it: the runtime's own
            root = {"runc": "/run/runc", "crun": "/run/crun"}[runtime]
            updated = sh([runtime, "--root", root, "update", "--cpu-share", "512", cid])
            how = f"{runtime} update --cpu-share 512"
        after_update = sh(["podman", "exec", name, "/usr/bin/synth-smi"])
        update_detail = f"after {how} (rc {updated.returncode}): {smi_ok(after_update)[1]}"
        evidence = {
            "unit": unit,
            "cgroup": cgroup,
            "wanted": wanted,
            "before_reload": shown,
            "after_reload": shown_after,
            "reload_rc": reload.returncode,
            "update": how,
            "update_rc": updated.returncode,
            "update_out": (updated.stdout + updated.stderr)[-2000:],
            "after_update_unit": unit_devices(unit),
        }
        save_evidence(".json", json.dumps(evidence, indent=2) + "\n")
        outputs = [before, after, after_update]
        save_evidence(".out", "\n--\n".join(r.stdout + r.stderr for r in outputs))
        ok_before, detail_before = smi_ok(before)
        ok_after, detail_after = smi_ok(after)
        allow = shown_after.get("DeviceAllow", "")
        listed = [w for w in wanted if f"{w} " in allow]
        unrestricted = shown.get("DevicePolicy") == "auto" and not shown.get("DeviceAllow")
        units_ok = len(listed) == len(wanted) or unrestricted
        ok = ok_before and ok_after and units_ok and reload.returncode == 0
        where = (
            "scope unrestricted by systemd (DevicePolicy=auto, no DeviceAllow=)"
            if unrestricted
            else f"{len(listed)}/{len(wanted)} nodes in the scope's DeviceAllow="
        )
        detail = f"before reload {detail_before}; after {detail_after}; {where}"
        return ok, f"{detail}; measured: {update_detail}"
    finally:
        sh(["podman", "rm", "-f", "-t", "0", name])


# tree of tests/support/fake_hosts.py, request, the nodes the container must get
VENDOR_CASES = {
    "amd-server": ("renderD129", ["/dev/dri/card2", "/dev/dri/renderD129", "/dev/kfd"]),
    "intel": ("0000:03:00.0", ["/dev/dri/card1", "/dev/dri/renderD129"]),
    "gaudi-accel": ("0", ["/dev/accel/accel1", "/dev/accel/accel_controlD1"]),
    "rdma": ("1", ["/dev/infiniband/uverbs1", "/dev/infiniband/umad1", "/dev/infiniband/rdma_cm"]),
}
ALLOWED_OPEN = ("ok", "No such device or address", "No such device")


# The kernel asks to load a driver for a major no driver registered (the fake hosts' kfd,
# accel, habanalabs, infiniband and misc 10:58 nodes): a container may not load modules, so
# this AVC comes AFTER the file's SELinux checks passed, and a host whose driver is loaded
# never logs it. Only these module requests are set apart, and only in this check.
FAKE_MAJOR_MODULE_REQUEST = (
    'kmod="char-major-511-',  # kfd (amd-server)
    'kmod="char-major-261-',  # accel (gaudi)
    'kmod="char-major-508-',  # habanalabs control (gaudi)
    'kmod="char-major-231-',  # infiniband (rdma)
    'kmod="char-major-10-58"',  # rdma_cm's misc minor (rdma)
)


def vendor_devices(runtime: str):
    """The amd, intel, habana and rdma profiles on fake hosts (stand-ins: sysfs trees and
    char nodes with the vendors' majors, no hardware). The hook mknods each node in the
    container's /dev; the container opens it: the device cgroup and SELinux must both allow
    it (EPERM: cgroup, EACCES + AVC: SELinux; ENXIO/ENODEV: allowed, no driver here)."""
    results = []
    try:
        for tree, (request, nodes) in VENDOR_CASES.items():
            profile, build = fake_hosts.TREES[tree]
            root = Path("/srv/ocihook-fake-hosts") / tree
            shutil.rmtree(root, ignore_errors=True)
            build(root)
            CONFIG.write_text(
                json.dumps({"profile": profile, "source_root": "/", "device_root": str(root)})
                + "\n"
            )
            sh(["restorecon", str(CONFIG)])
            opens = "; ".join(f"(exec 3<>{p}) 2>&1 && echo 'OPEN {p} ok'" for p in nodes)
            result = podman_run(["/bin/sh", "-c", opens], devices=request, runtime=runtime)
            save_evidence(f"-{tree}.out", result.stdout + result.stderr)
            for node in nodes:
                line = next(
                    (
                        x
                        for x in result.stdout.splitlines()
                        if f" {node}: " in x or f"OPEN {node} " in x
                    ),
                    "",
                )
                results.append((tree, node, line, line.endswith(ALLOWED_OPEN)))
    finally:
        write_config("error")
    bad = [r for r in results if not r[3]]
    ok = bool(results) and not bad
    detail = f"{len(results) - len(bad)}/{len(results)} vendor nodes opened or ENXIO/ENODEV"
    return ok, detail if ok else f"{detail}; refused: {bad}"


# The driver as a distribution package installs it on a host: in the host's own /usr and
# /lib/firmware, labelled by the policy's defaults (lib_t libraries, bin_t binaries), the
# host root as source_root. Nothing of it may be relabelled (ocihook selinux relabel
# refuses /usr): the hook must accept what the loaded policy lets containers use.
HOST_FILES = ("usr/lib/x86_64-linux-gnu", "usr/bin", "lib/firmware/synth")


def host_root_driver(runtime: str):
    staging = Path("/var/tmp/ocihook-host-driver")
    shutil.rmtree(staging, ignore_errors=True)
    synthetic.build_driver(staging)
    copied = []
    try:
        for part in HOST_FILES:
            for source in sorted((staging / part).rglob("*")):
                target = Path("/") / source.relative_to(staging)
                target.parent.mkdir(parents=True, exist_ok=True)
                if source.is_dir():
                    target.mkdir(exist_ok=True)
                    continue
                if os.path.lexists(target):
                    raise RuntimeError(f"{target} exists on this host already")
                if source.is_symlink():
                    os.symlink(os.readlink(source), target)
                else:
                    shutil.copy2(source, target)
                copied.append(str(target))
        sh(["restorecon", "-F", *copied])
        binary = "/usr/bin/synth-smi"
        labels = {p: context_type(label_of(p)) for p in (binary, copied[0])}
        CONFIG.write_text(
            json.dumps(
                {
                    "profile": "synthetic",
                    "source_root": "/",
                    "device_root": str(DRIVER),
                    "selinux": {"source_check": "error"},
                }
            )
            + "\n"
        )
        sh(["restorecon", str(CONFIG)])
        result = podman_run(["/bin/sh", "-c", "synth-smi && echo shell-ok"], runtime=runtime)
        save_evidence(".out", result.stdout + result.stderr)
        ok, detail = smi_ok(result)
        return ok and "shell-ok" in result.stdout and labels[binary] == "bin_t", (
            f"{detail}; host labels {labels}"
        )
    finally:
        for path in reversed(copied):
            os.unlink(path)
        shutil.rmtree("/lib/firmware/synth", ignore_errors=True)
        shutil.rmtree(staging, ignore_errors=True)
        write_config("error")


def break_driver() -> None:
    sh(["chcon", "-R", "-t", BROKEN_TYPE, str(DRIVER)])


def broken_error(runtime: str):
    break_driver()
    write_config("error")
    result = podman_run(["/usr/bin/synth-smi"])
    save("broken-error.out", result.stdout + result.stderr)
    lines = [line for line in result.stderr.splitlines() if "ocihook:" in line]
    ok = (
        result.returncode != 0
        and len(lines) >= 1
        and str(DRIVER) in lines[0]
        and BROKEN_TYPE in lines[0]
        and "ocihook selinux relabel" in lines[0]
    )
    return ok, f"refused: {lines[0] if lines else result.stderr.strip()[-300:]}"


def broken_warn(runtime: str):
    break_driver()
    write_config("warn")
    since = time.time() - 1
    names = ["ocihook-enforcing-warn-cmd", "ocihook-enforcing-warn-shell"]
    runs = [
        podman_run(["/usr/bin/synth-smi"], extra=["--name", names[0]]),
        podman_run(["/bin/sh", "-c", "synth-smi"], extra=["--name", names[1]]),
    ]
    save("broken-warn.out", "\n".join(r.stdout + r.stderr for r in runs))
    gone = sh(["podman", "ps", "-a", "--format", "{{.Names}}"]).stdout
    time.sleep(1)
    audited = sh(["ocihook", "audit", "--since", str(since), "--json"])
    text = sh(["ocihook", "audit", "--since", str(since)])
    save("broken-warn.audit.json", audited.stdout + audited.stderr)
    # The evidence for the ordinary tier's golden fixtures: the hook's records, kept after
    # the containers were removed.
    records = OUT / "broken-warn.records"
    records.mkdir(exist_ok=True)
    for record in Path("/run/ocihook").glob("*.json"):
        shutil.copy(record, records / record.name)
    save("broken-warn.audit.txt", text.stdout + text.stderr)
    report = json.loads(audited.stdout) if audited.stdout.strip().startswith("{") else {}
    findings = [f for f in report.get("findings", []) if f.get("result", "denied") == "denied"]
    tied = [
        f
        for f in findings
        if f.get("container")
        and f.get("injected")
        and any("ocihook selinux relabel" in fix for fix in f["fixes"])
        and not any(fix.startswith(("allow ", "setsebool ")) for fix in f["fixes"])
    ]
    # the text report's fixes: the relabel only, never a rule or a boolean
    fixes = [x.strip()[5:] for x in text.stdout.splitlines() if x.strip().startswith("fix: ")]
    ok = (
        all(r.returncode != 0 for r in runs)
        and not any(n in gone for n in names)
        and findings
        and len(tied) == len(findings)
        and audited.returncode == 1
        and fixes
        and all(f.startswith("ocihook selinux relabel ") for f in fixes)
    )
    return ok, (
        f"containers denied and removed; audit rc={audited.returncode}, "
        f"{len(tied)}/{len(findings)} denials tied to container + injected file, relabel fix"
    )


def fixed(runtime: str):
    relabel = sh(["ocihook", "selinux", "relabel", str(DRIVER)])
    write_config("error")
    result = podman_run(["/usr/bin/synth-smi"])
    save("fixed.out", relabel.stdout + relabel.stderr + result.stdout + result.stderr)
    return smi_ok(result)


# cdi-hook carries out the spec's decision: a spec from a config with SELinux disabled makes
# its links without writing a label, one from a config with SELinux on gives them the mount
# label. Every xattr syscall of the cdi-hook processes (comm "ocihook") is audited, so
# "no label written" is seen, not inferred from the label the kernel gave the new link.
XATTR_KEY = "ocihook-cdi-xattr"
XATTR_RULE = ["always,exit", "-F", "arch=b64", "-S", "setxattr", "-S", "lsetxattr"]
XATTR_RULE += ["-S", "fsetxattr", "-k", XATTR_KEY]
CDI_CASES = {"disabled": ("none", False), "enabled": ("mount-label", True)}


def _hook_xattr_calls(start: int, end: int) -> list[str]:
    """The audited xattr syscalls of cdi-hook processes in the audit log's [start, end)."""
    data = AUDIT_LOG.read_bytes()[start:end].decode(errors="replace")
    return [
        line
        for line in data.splitlines()
        if "type=SYSCALL " in line and f'key="{XATTR_KEY}"' in line and 'comm="ocihook"' in line
    ]


def _cdi_container(mode: str, runtime: str) -> dict:
    """Generate a spec from a config with `selinux.mode: MODE`, start a container with its
    device 0, and read back what the links got."""
    kind = f"ocihook.io/enforcing-{mode}"
    config = Path(f"/etc/ocihook/cdi-{mode}.yaml")
    config.write_text(
        json.dumps(
            {
                "profile": "synthetic",
                "source_root": str(DRIVER),
                "device_root": str(DRIVER),
                "selinux": {"mode": mode},
            }
        )
        + "\n"
    )
    spec_path = Path("/etc/cdi") / (kind.replace("/", "_") + ".json")
    spec_path.parent.mkdir(exist_ok=True)
    made = sh(
        ["ocihook", "cdi", "generate", "--config", str(config), "--kind", kind]
        + ["--lib-dir", "/usr/lib64", "--output", str(spec_path)]
    )
    seen: dict = {"generate": made.returncode, "generate_err": made.stderr.strip()[-300:]}
    name = f"ocihook-enforcing-cdi-{mode}-{runtime}"
    sh(["podman", "rm", "-f", name])
    start = AUDIT.mark()
    try:
        if made.returncode != 0:
            return seen
        spec = json.loads(spec_path.read_text())
        args = [h["args"] for h in spec["containerEdits"]["hooks"]]
        seen["symlinks_args"] = args[0][:5]
        started = sh(
            ["podman", "--runtime", runtime, "run", "-d", "--name", name, *RUN_FLAGS]
            + ["--device", f"{kind}=0", f"localhost/{IMAGE_NAME}:latest", "sleep", "300"]
        )
        seen["run"] = started.returncode
        seen["run_err"] = started.stderr.strip()[-300:]
        if started.returncode != 0:
            return seen
        fmt = "{{.State.Pid}} {{.MountLabel}}"
        pid, seen["mount_label"] = sh(["podman", "inspect", "-f", fmt, name]).stdout.split()
        link = f"/proc/{pid}/root/usr/lib64/libsynth.so.1"
        seen["link"] = os.readlink(link) if os.path.islink(link) else None
        seen["link_label"] = label_of(link)
        smi = sh(["podman", "exec", name, "/usr/bin/synth-smi"])
        seen["smi"] = smi.returncode
        seen["smi_loaded"] = "loaded from /usr/lib64/libsynth.so.1" in smi.stdout + smi.stderr
        return seen
    finally:
        sh(["podman", "rm", "-f", "-t", "0", name])
        seen["xattr_calls"] = _hook_xattr_calls(start, AUDIT.mark())
        spec_path.unlink(missing_ok=True)
        config.unlink(missing_ok=True)


def cdi_hook_decision(runtime: str):
    """A CDI spec (podman --device KIND=0) from a config with SELinux disabled: its
    create-symlinks hook says `--selinux-label none`, the links are made and used (the
    library loads through them) and cdi-hook writes no label (no xattr syscall of it is
    audited); the contrast, a spec from a config with SELinux enabled: `mount-label`, the
    hook labels the links (audited) with the container's mount label. Zero AVC."""
    added = sh(["auditctl", "-a", *XATTR_RULE])
    if added.returncode != 0:
        return False, f"auditctl -a: {added.stderr.strip()}"
    seen = {}
    try:
        for mode in CDI_CASES:
            seen[mode] = _cdi_container(mode, runtime)
    finally:
        sh(["auditctl", "-d", *XATTR_RULE])
    save_evidence(".json", json.dumps(seen, indent=2))
    wrong = []
    for mode, (choice, labelled) in CDI_CASES.items():
        got = seen[mode]
        expect_args = ["ocihook", "cdi-hook", "create-symlinks", "--selinux-label", choice]
        if got.get("symlinks_args") != expect_args:
            wrong.append(f"{mode}: hook args {got.get('symlinks_args')}, {got.get('generate_err')}")
            continue
        if got.get("run") != 0 or got.get("link") != "libsynth.so.1.2.3":
            wrong.append(
                f"{mode}: run rc={got.get('run')} {got.get('run_err')} link {got.get('link')}"
            )
            continue
        if got.get("smi") != 0 or not got.get("smi_loaded"):
            wrong.append(f"{mode}: synth-smi rc={got.get('smi')}, library not loaded via the link")
        if labelled and (not got["xattr_calls"] or got["link_label"] != got["mount_label"]):
            wrong.append(
                f"{mode}: {len(got['xattr_calls'])} label writes, link {got['link_label']}, "
                f"mount label {got['mount_label']}"
            )
        if not labelled and got["xattr_calls"]:
            wrong.append(f"{mode}: cdi-hook wrote {len(got['xattr_calls'])} xattr(s)")
    disabled, enabled = seen["disabled"], seen["enabled"]
    detail = (
        f"selinux disabled: --selinux-label none, {len(disabled.get('xattr_calls', []))} label "
        f"writes, link {disabled.get('link_label')} (the kernel's); enabled: mount-label, "
        f"{len(enabled.get('xattr_calls', []))} label write(s) (on a context= rootfs: "
        f"EOPNOTSUPP), link {enabled.get('link_label')}"
    )
    return not wrong, detail if not wrong else "; ".join(wrong)


PRECREATE_DIR = Path("/usr/share/ocihook/hooks.d.podman")
PRECREATE_CONF = Path("/etc/containers/containers.conf.d/50-ocihook-precreate.conf")


def _nodes() -> list[str]:
    """The synthetic driver's nodes (picked when setup built it: read then, not at import)."""
    return [f"/dev/{n}" for n in sorted(synthetic.DEVICES) + sorted(synthetic.CONTROL)]


def _opened_in(name: str) -> list[str]:
    """The injected nodes a `podman exec` into `name` opens read-write."""
    line = "; ".join(f"(exec 3<>{n}) && echo OPENED {n}" for n in _nodes())
    result = sh(["podman", "exec", name, "/bin/sh", "-c", line], 120)
    return [w.split()[1] for w in result.stdout.splitlines() if w.startswith("OPENED ")]


def durable_devices(runtime: str):
    """The precreate route (docs/cgroups.md, Routes) under podman's systemd cgroup manager:
    the shipped precreate registration in a podman-only dir, read through a containers.conf
    drop-in; an annotated container started detached opens every injected node from
    `podman exec` before and after `systemctl daemon-reload` and after `podman update
    --cpus`; the scope's DeviceAllow= names them (systemd has them from the runtime)."""
    PRECREATE_DIR.mkdir(parents=True, exist_ok=True)
    shutil.copy(SRC / "hooks.d/ocihook-precreate.json", PRECREATE_DIR / "ocihook-precreate.json")
    PRECREATE_CONF.parent.mkdir(parents=True, exist_ok=True)
    PRECREATE_CONF.write_text(
        f'[engine]\nhooks_dir = ["/usr/share/containers/oci/hooks.d", "{PRECREATE_DIR}"]\n'
    )
    sh(["restorecon", "-R", str(PRECREATE_DIR), str(PRECREATE_CONF)])
    name = f"ocihook-durable-{runtime}"
    sh(["podman", "rm", "-f", name])
    steps: dict[str, list[str]] = {}
    evidence = []
    try:
        manager = sh(["podman", "info", "--format", "{{.Host.CgroupManager}}"]).stdout.strip()
        args = ["podman", "--runtime", runtime, "run", "-d", "--name", name, *RUN_FLAGS]
        args += ["--annotation", f"{ANNOTATION}=all", f"localhost/{IMAGE_NAME}:latest"]
        started = sh([*args, "sleep", "900"], 180)
        evidence.append(f"run: rc={started.returncode} {started.stdout}{started.stderr}")
        if started.returncode != 0:
            return False, f"podman run -d failed: {started.stderr.strip()[-300:]}"
        container_id = started.stdout.strip()
        steps["before"] = _opened_in(name)
        reload = sh(["systemctl", "daemon-reload"], 300)
        evidence.append(f"daemon-reload: rc={reload.returncode} {reload.stderr}")
        time.sleep(1)
        steps["after daemon-reload"] = _opened_in(name)
        update = sh(["podman", "update", "--cpus", "1", name], 120)
        evidence.append(f"podman update: rc={update.returncode} {update.stdout}{update.stderr}")
        steps["after podman update"] = _opened_in(name)
        reload = sh(["systemctl", "daemon-reload"], 300)
        time.sleep(1)
        steps["after update + reload"] = _opened_in(name)
        scope = sh(["systemctl", "show", "-p", "DeviceAllow", f"libpod-{container_id}.scope"])
        evidence.append(f"scope DeviceAllow: {scope.stdout}")
        config = sh(["podman", "inspect", "--format", "{{.OCIConfigPath}}", name]).stdout.strip()
        if config and os.path.exists(config):
            spec = json.loads(Path(config).read_text())
            made = sorted(d["path"] for d in spec["linux"].get("devices") or ())
            evidence.append(f"config.json linux.devices: {made}")
    finally:
        sh(["podman", "rm", "-f", name])
        PRECREATE_CONF.unlink(missing_ok=True)
        shutil.rmtree(PRECREATE_DIR, ignore_errors=True)
        evidence += [f"{step}: {opened}" for step, opened in steps.items()]
        save_evidence(".out", "\n".join(evidence) + "\n")
    nodes = _nodes()
    ok = update.returncode == 0 and all(opened == nodes for opened in steps.values())
    ok = ok and len(steps) == 4
    counts = ", ".join(f"{step} {len(opened)}/{len(nodes)}" for step, opened in steps.items())
    return ok, f"cgroup manager {manager}: {counts}"


KUBE_HOOKS = Path("/run/ocihook-kube-hooks.d")
KUBE_CONFIG = Path("/etc/ocihook/kubernetes.yaml")
CRIO_CONTAINER_ANNOTATIONS = "io.kubernetes.cri-o.Annotations"


def csv_field(value: str) -> str:
    """One --annotation value as this podman reads it: before 4.4 a CSV field (podman 4.3
    splits at commas and refuses a bare quote), so quoted whole with its quotes doubled;
    from 4.4 on as it is."""
    words = sh(["podman", "--version"]).stdout.split()
    try:
        version = tuple(int(n) for n in words[2].split(".")[:2])
    except (IndexError, ValueError):
        version = (4, 3)
    return '"' + value.replace('"', '""') + '"' if version < (4, 4) else value


def device_plugin_allocation(runtime: str):
    """Kubernetes mode under enforcing SELinux: the device plugin's Allocate answer for one
    device (ocihook.deviceplugin.allocation, the plain data the gRPC server sends the
    kubelet) applied as CRI-O applies it: its device specs as the runtime's own devices
    (podman --device), its annotations as CRI-O records a container's own CRI annotations
    (io.kubernetes.cri-o.Annotations, as JSON), the installed hook with a Kubernetes-mode
    config. The container gets exactly that device (and the control nodes) and the driver
    through the ld cache, confined, zero denials; the same container asking by its own
    annotation alone gets nothing. No kubelet here: the cluster is the kube tier's."""
    from ocihook.config.compiled import compile_config
    from ocihook.deviceplugin.allocation import container_allocation
    from ocihook.deviceplugin.inventory import take_inventory

    KUBE_CONFIG.write_text(
        json.dumps(
            {
                "profile": "synthetic",
                "profile_dirs": ["/etc/ocihook/profiles", "/usr/share/ocihook/profiles"],
                "source_root": str(DRIVER),
                "device_root": str(DRIVER),
                "kubernetes": {"device_plugin": True},
            }
        )
        + "\n"
    )
    sh(["restorecon", str(KUBE_CONFIG)])
    installed = Path("/usr/share/containers/oci/hooks.d/ocihook.json")
    document = json.loads(installed.read_text())
    args = document["hook"]["args"]
    document["hook"]["args"] = [*args[: args.index("--config") + 1], str(KUBE_CONFIG)]
    document["stages"] = ["prestart", "poststop"]
    KUBE_HOOKS.mkdir(exist_ok=True)
    (KUBE_HOOKS / "ocihook.json").write_text(json.dumps(document) + "\n")
    try:
        config, _ = compile_config(str(KUBE_CONFIG))
        inventory = take_inventory(config)
        chosen = inventory.devices[0].id
        answer = container_allocation(config, inventory, [chosen])
        base = ["podman", "--runtime", runtime, "--hooks-dir", str(KUBE_HOOKS), "run", "--rm"]
        allocated = [*base, *RUN_FLAGS]
        for spec in answer["devices"]:
            allocated += ["--device", f"{spec['host_path']}:{spec['container_path']}:rwm"]
        for key, value in answer["annotations"].items():
            allocated += ["--annotation", csv_field(f"{key}={value}")]  # the container's own
        record = json.dumps(answer["annotations"], separators=(",", ":"))
        allocated += ["--annotation", csv_field(f"{CRIO_CONTAINER_ANNOTATIONS}={record}")]
        result = sh([*allocated, f"localhost/{IMAGE_NAME}:latest", "/usr/bin/synth-smi"], 180)
        forged = [*base, *RUN_FLAGS, "--annotation", f"{ANNOTATION}=all"]
        probe = ["/bin/sh", "-c", "ls /dev /usr/bin /usr/lib64 | grep -c synth"]
        alone = sh([*forged, f"localhost/{IMAGE_NAME}:latest", *probe], 180)
    finally:
        shutil.rmtree(KUBE_HOOKS, ignore_errors=True)
        KUBE_CONFIG.unlink(missing_ok=True)
    out = result.stdout + result.stderr
    save_evidence(".out", f"answer: {json.dumps(answer)}\n{out}\nannotation alone: "
                  f"{alone.stdout}{alone.stderr}")  # fmt: skip
    device = [n.path.rsplit("/", 1)[-1] for n in inventory.by_id()[chosen].nodes]
    expected = sorted(device + sorted(synthetic.CONTROL))
    opened = sorted(
        line.split("opened /dev/", 1)[1].split(" ", 1)[0]
        for line in out.splitlines()
        if "opened /dev/" in line and line.endswith("read-write")
    )
    ok = (
        result.returncode == 0
        and "loaded from /usr/lib64/libsynth.so.1" in out
        and opened == expected
        and alone.returncode == 1
        and alone.stdout.strip() == "0"
    )
    return ok, (
        f"allocated {chosen}: opened {opened} (expected {expected}), rc={result.returncode}; "
        f"annotation alone: {alone.stdout.strip()} synth entries"
    )


def demo(runtime: str):
    result = sh(["make", "-o", "venv", "demo", "VPY=/usr/bin/python3"], 900, cwd=SRC)
    save("demo.out", result.stdout + result.stderr)
    ok = result.returncode == 0 and "DEMO OK" in result.stdout
    return ok, f"rc={result.returncode}, {'DEMO OK' if ok else result.stdout.strip()[-300:]}"


# The CDI path of NVIDIA's stock images (docs/vendors/nvidia.md): a host of driver 535.104.05
# whose libcuda is a gcc-built stand-in, two IMEX channels (real char devices of the guest),
# images with a cuda-compat libcuda whose fwd_compatibility note lists the host's branch, or
# does not. Built once per guest, for every runtime.
NVIDIA_CDI = Path("/srv/ocihook-nvidia-cdi")
NVIDIA_CDI_KIND = "ocihook.io/enforcing-cuda"
IMEX_KIND = "nvidia.com/imex-channel"
NVIDIA_CDI_BUILT: dict = {}
NVIDIA_CDI_SPECS = Path("/etc/cdi")
NVIDIA_CDI_CONFIG = Path("/etc/ocihook/cdi-nvidia.yaml")
NVIDIA_CDI_SETTINGS: dict = {}  # more config keys (a dry run outside the guest: profile_dirs)


def _nvidia_cdi_setup() -> dict:
    """The NVIDIA stand-in host, its config and specs (the GPUs' under a kind of this check's,
    the IMEX channels' under NVIDIA's), and the two images, built once."""
    if NVIDIA_CDI_BUILT:
        return NVIDIA_CDI_BUILT
    from tests.support import cuda_images

    shutil.rmtree(NVIDIA_CDI, ignore_errors=True)
    work = NVIDIA_CDI / "work"
    work.mkdir(parents=True)
    root = cuda_images.host_tree(NVIDIA_CDI / "root", work)
    channels = host_devices.pick_same_major(2, "stand-ins for IMEX channels")
    imex_dir = root / "dev/nvidia-caps-imex-channels"
    imex_dir.mkdir(parents=True)
    for device in channels:
        node = imex_dir / f"channel{device.minor}"
        os.mknod(node, 0o20666, os.makedev(device.major, device.minor))
        node.chmod(0o666)
    (root / "proc").mkdir(exist_ok=True)
    (root / "proc/devices").write_text(
        f"Character devices:\n195 nvidia-frontend\n{channels[0].major:3d} "
        "nvidia-caps-imex-channels\n\nBlock devices:\n"
    )
    relabel = sh(["ocihook", "selinux", "relabel", str(root)])
    config = NVIDIA_CDI_CONFIG
    settings = {"profile": "nvidia", "source_root": str(root), "device_root": str(root)}
    config.write_text(json.dumps({**settings, **NVIDIA_CDI_SETTINGS}) + "\n")
    specs = {}
    for kind in (NVIDIA_CDI_KIND, IMEX_KIND):
        path = NVIDIA_CDI_SPECS / (kind.replace("/", "_") + ".json")
        path.parent.mkdir(exist_ok=True)
        made = sh(
            ["ocihook", "cdi", "generate", "--config", str(config), "--kind", kind]
            + ["--output", str(path)]
        )
        specs[kind] = (path, made.returncode, made.stderr.strip()[-300:])
    allowed = cuda_images.fwd_note([535, 550, 560, 565, 570, 575])
    excluded = cuda_images.fwd_note([550, 560, 565, 570, 575])
    built_images = {}
    for name, note in (("allowed", allowed), ("excluded", excluded)):
        tree = cuda_images.cuda_image_tree(NVIDIA_CDI / f"image-{name}", work, "575.57.08", note)
        built_images[name] = images.import_image(tree, f"ocihook-enforcing-cuda-{name}")
    NVIDIA_CDI_BUILT.update(
        root=root,
        relabel=relabel.returncode,
        specs=specs,
        channels=[f"{d.minor}" for d in channels],
        images=built_images,
    )
    return NVIDIA_CDI_BUILT


def cdi_nvidia_compat_imex(runtime: str):
    """The CDI path of NVIDIA's stock images, confined: `--device KIND=0` of a spec from
    `ocihook cdi generate` on the nvidia profile, whose update-ldcache hook takes the image's
    CUDA compat libcuda first where its note lists the host's branch (535) and the host's
    where it does not, and `--device nvidia.com/imex-channel=N` (NVIDIA's name) whose node
    the container opens read-write. Zero AVC: the compat probe reads the image by fd as
    container_t's runtime lets it, the hooks run as the runtime's, the channel's node is
    the container's own."""
    built = _nvidia_cdi_setup()
    failed = [f"{k}: rc={rc} {err}" for k, (_, rc, err) in built["specs"].items() if rc != 0]
    if failed or built["relabel"] != 0:
        return False, f"setup: relabel rc={built['relabel']}; {'; '.join(failed)}"
    channel = built["channels"][0]
    node = f"/dev/nvidia-caps-imex-channels/channel{channel}"
    script = (
        f"/usr/bin/loaded-driver; (exec 3<>{node}) 2>&1 && echo OPEN ok; "
        "cat /proc/self/attr/current; echo"
    )
    seen = {}
    for name, expected in (("allowed", "compat 575.57.08"), ("excluded", "host 535.104.05")):
        args = ["podman", "--runtime", runtime, "run", "--rm", *RUN_FLAGS]
        args += ["--device", f"{NVIDIA_CDI_KIND}=0", "--device", f"{IMEX_KIND}={channel}"]
        result = sh([*args, built["images"][name], "/bin/sh", "-c", script], 180)
        save_evidence(f"-{name}.out", result.stdout + result.stderr)
        lines = result.stdout.splitlines()
        seen[name] = (
            result.returncode == 0
            and f"STANDIN {expected}" in lines
            and "OPEN ok" in lines
            and any(context_type(line.rstrip("\0")) == "container_t" for line in lines),
            f"rc={result.returncode} "
            + " ".join(line for line in lines if line.startswith(("STANDIN", "OPEN"))),
        )
    ok = all(good for good, _ in seen.values())
    return ok, "; ".join(f"{name}: {detail}" for name, (_, detail) in seen.items())


CHECKS = (
    Check("guest-enforcing", guest_enforcing),
    Check("install", install, policies=("refpolicy",)),
    Check("install", rpm_install, policies=("fedora",)),
    Check("setup-driver-and-image", setup),
    Check("plain-container", plain, per_runtime=True),
    Check("root-command", root_command, per_runtime=True),
    Check("root-shell", root_shell, per_runtime=True),
    Check("user-1000", user_1000, per_runtime=True),
    Check("labels", labels, per_runtime=True),
    Check("no-annotation", no_annotation, per_runtime=True),
    Check("reload-prestart", reload_prestart, per_runtime=True),
    Check(
        "vendor-devices",
        vendor_devices,
        per_runtime=True,
        stand_in_denials=FAKE_MAJOR_MODULE_REQUEST,
    ),
    Check("cdi-hook-decision", cdi_hook_decision, per_runtime=True),
    Check("durable-devices", durable_devices, per_runtime=True),
    Check("device-plugin-allocation", device_plugin_allocation, per_runtime=True),
    Check("cdi-nvidia-compat-imex", cdi_nvidia_compat_imex, per_runtime=True),
    Check("host-root-driver", host_root_driver),
    Check("broken-source-check-error", broken_error),
    Check("broken-source-check-warn", broken_warn, denials_expected=True),
    Check("fixed-by-relabel", fixed),
    Check("make-demo", demo),
    Check("rpm-erase", rpm_erase, policies=("fedora",)),
)
REQUIRED = ("guest-enforcing", "install", "setup-driver-and-image")


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    wanted = OPTIONS.get("checks", "all")
    names = {c.name for c in CHECKS} if wanted == "all" else set(wanted.split(","))
    boot_end = AUDIT.mark()
    save("boot.denials", "\n".join(Audit.denials(0, boot_end)))
    started = time.monotonic()
    for check in CHECKS if wanted != "none" else ():
        if POLICY not in check.policies or (check.name not in names and check.name not in REQUIRED):
            continue
        for runtime in RUNTIMES if check.per_runtime else (None,):
            if not run_check(check, runtime) and check.name in REQUIRED:
                break
        else:
            continue
        break
    expected = [r for r in RESULTS if r["denials_expected"]]
    summary = {
        "policy": POLICY,
        "runtimes": list(RUNTIMES),
        "checks": RESULTS,
        "avc": sum(r["avc"] for r in RESULTS if not r["denials_expected"]),
        "selinux_err": sum(r["selinux_err"] for r in RESULTS if not r["denials_expected"]),
        "expected_denials": sum(r["avc"] + r["selinux_err"] for r in expected),
        "stand_in_denials": sum(r.get("stand_in_denials", 0) for r in RESULTS),
        "boot_denials": len(Audit.denials(0, boot_end)),
        "seconds": round(time.monotonic() - started),
        "kernel": os.uname().release,
    }
    save("summary.json", json.dumps(summary, indent=2) + "\n")
    return 0 if RESULTS and all(r["ok"] for r in RESULTS) else 1


if __name__ == "__main__":
    raise SystemExit(main())
