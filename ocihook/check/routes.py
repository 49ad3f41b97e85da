"""`ocihook check`'s route lines: for each runtime of this host (hooksdirs.Reader) and each OCI
runtime it may run (crun, runc, as installed), which route the hook takes and whether the
devices it grants survive `systemctl daemon-reload` and a runtime update, decided from the
versions found, by the rules measured (docs/cgroups.md, "Which runtime keeps what"):

- route: precreate where podman loads an ocihook registration with that stage (the runtime
  then creates the nodes and mounts the driver), else prestart (the hook does); either way
  the device *rules* are the prestart stage's (ocihook/stages/precreate.py says why).
- reload, under the systemd cgroup manager with systemd as PID 1: crun 1.23 and later name a
  pinned program on the scope (BPFProgram=): the hook pins an extended copy and names it
  there (cgroups/pinned.py); runc and crun 1.19 to 1.22 restrict the scope by DeviceAllow=,
  which the hook extends over D-Bus (cgroups/systemd.py); crun before 1.19 leaves the scope
  unrestricted and keeps its own program, which a reload does not touch. Under cgroupfs no
  unit holds the container.
- update: CRI-O's `crictl update` (the kubelet's) sends no device list, so no runtime
  touches the device rules; neither does `runc update`. podman 5.4 and later send podman's
  own stored device list to the runtime: crun 1.23 and later under systemd compare it with
  their pinned program, which the hook leaves as it is, and go on; crun before 1.23, and
  crun under cgroupfs, rebuild the device program from that list and drop every device not
  in it (ours, and CDI's too); podman before 5.4 sent only the limits being changed.
- rootless podman: no device cgroup edit at all (docs/cgroups.md).

Facts: podman's version (hooksdirs), `crun --version` and `runc --version` on PATH,
`systemctl --version` where systemd is PID 1, and the cgroup manager from the files the
runtime reads: podman's `[engine] cgroup_manager`, CRI-O's `[crio.runtime] cgroup_manager`
(CONTAINER_CGROUP_MANAGER overrides it); podman's default is systemd where systemd is PID 1,
else cgroupfs, CRI-O's is systemd.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping

from ocihook.check import hooksd, tomlfile
from ocihook.check.findings import OK, WARNING, Finding
from ocihook.check.hooksdirs import Reader
from ocihook.check.registration import json_files

BOOTED_DIR = "/run/systemd/system"
PRECREATE_RUNTIMES = ("podman",)  # CRI-O rejects the stage (hooksd.py)
OCI_RUNTIMES = ("crun", "runc")
CRUN_PINS = (1, 23)  # crun names its pinned device program on the scope (BPFProgram=)
CRUN_DEVICE_ALLOW = (1, 19)  # crun restricts the scope by DeviceAllow= too
PODMAN_RESENDS_DEVICES = (5, 4)  # podman update sends podman's stored device list
SYSTEMD_BPF_PROGRAM = 249  # BPFProgram= (crun uses it only where systemd has it)
SYSTEMD_DEVNUM_PATHS = 240  # parses /dev/char/M:N without the host links
TOPICS = ("route", "reload", "update")  # check --json: "ok" in reload/update survives
UPDATES = {"podman": "podman update", "CRI-O": "crictl update (the kubelet's CPU manager)"}

Version = tuple  # (major, minor[, patch])


@dataclass(frozen=True)
class Runtime:
    """One engine with one OCI runtime, as the host has them."""

    engine: str  # "podman" or "CRI-O"
    engine_version: Version | None
    oci: str  # "crun" or "runc"
    oci_version: Version | None
    manager: str  # "systemd" or "cgroupfs"
    booted: bool  # systemd is PID 1
    systemd: int | None  # systemd's version, where it is PID 1

    def label(self) -> str:
        oci = self.oci + (f" {_dotted(self.oci_version)}" if self.oci_version else "")
        engine = self.engine + (f" {_dotted(self.engine_version)}" if self.engine_version else "")
        return f"{engine} with {oci}"


def _dotted(version: Version) -> str:
    return ".".join(str(n) for n in version)


def _at_least(version: Version | None, floor: Version) -> bool | None:
    return None if version is None else tuple(version[: len(floor)]) >= floor


def reload_claim(rt: Runtime) -> tuple[str, str]:
    """(status, text): whether granted devices survive `systemctl daemon-reload`, and why."""
    if rt.manager != "systemd":
        return OK, (
            "survive systemctl daemon-reload: cgroup manager cgroupfs, no systemd unit holds "
            "the container"
        )
    if not rt.booted:
        return WARNING, (
            f"cgroup manager systemd, but systemd is not PID 1 ({BOOTED_DIR} is absent): "
            f"{rt.engine} cannot run containers so"
        )
    old_systemd = rt.systemd is not None and rt.systemd < SYSTEMD_DEVNUM_PATHS
    links = (
        f"; systemd {rt.systemd} needs the host's /dev/char/M:N links, the hook refuses a "
        "container whose link is missing"
        if old_systemd
        else ""
    )
    if rt.oci == "crun":
        pins = _at_least(rt.oci_version, CRUN_PINS)
        bpf_program = rt.systemd is None or rt.systemd >= SYSTEMD_BPF_PROGRAM
        if pins and bpf_program:
            return OK, (
                "survive systemctl daemon-reload: crun 1.23+ names its pinned device program "
                "on the scope (BPFProgram=), the hook pins an extended copy and names it there "
                "(a runtime drop-in)"
            )
        if pins is None:
            return OK, (
                "survive systemctl daemon-reload (crun's version unknown: the hook extends "
                "what the scope holds, BPFProgram= or DeviceAllow=)" + links
            )
        if _at_least(rt.oci_version, CRUN_DEVICE_ALLOW) or (pins and not bpf_program):
            return OK, (
                "survive systemctl daemon-reload: the scope's DeviceAllow=, which the hook "
                "extends over D-Bus" + links
            )
        return OK, (
            "survive systemctl daemon-reload: crun before 1.19 keeps its own device program "
            "and leaves the scope unrestricted, a reload recomputes nothing of it"
        )
    return OK, (
        "survive systemctl daemon-reload: the scope's DeviceAllow=, which the hook extends "
        "over D-Bus" + links
    )


def update_claim(rt: Runtime) -> tuple[str, str]:
    """(status, text): whether granted devices survive the engine's update, and why."""
    what = UPDATES[rt.engine]
    if rt.manager == "systemd" and not rt.booted:
        return WARNING, "not known: cgroup manager systemd, but systemd is not PID 1"
    if rt.engine == "CRI-O":
        return OK, f"survive {what}: CRI-O sends the runtime no device list"
    if rt.oci == "runc":
        return OK, f"survive {what}: runc update leaves the device rules as they are"
    resends = _at_least(rt.engine_version, PODMAN_RESENDS_DEVICES)
    if resends is False:
        return OK, f"survive {what}: podman before 5.4 sends only the limits being changed"
    pins = _at_least(rt.oci_version, CRUN_PINS)
    bpf_program = rt.systemd is None or rt.systemd >= SYSTEMD_BPF_PROGRAM
    if rt.manager == "systemd" and rt.booted and pins and bpf_program:
        return OK, (
            f"survive {what}: crun 1.23+ compares podman's device list with its own pinned "
            "program, which the hook leaves as it is"
        )
    why = "crun under cgroupfs" if rt.manager != "systemd" else "crun before 1.23"
    if pins is None and rt.manager == "systemd":
        why = "crun (version unknown) if it is before 1.23"
    return WARNING, (
        f"dropped by {what}: podman 5.4+ sends the runtime podman's own device list, and {why} "
        "rebuilds the device program from it, without the devices any hook or CDI spec added; "
        "use runc, crun 1.23+ under the systemd cgroup manager, or podman run --device "
        "(docs/cgroups.md)"
    )


# ---------------------------------------------------------------------------
# Facts


def _kind(reader: Reader) -> str:
    """ "podman", "rootless" or "CRI-O"."""
    if reader.runtime.startswith("rootless podman"):
        return "rootless"
    return "CRI-O" if reader.runtime == "CRI-O" else "podman"


def cgroup_manager(reader: Reader, env: Mapping[str, str], booted: bool) -> tuple[str, str]:
    """(manager, where it comes from) as the reader's runtime works it out: podman's default
    is systemd where systemd is PID 1, else cgroupfs (containers/common); CRI-O's systemd."""
    kind = _kind(reader)
    if kind == "CRI-O" and env.get("CONTAINER_CGROUP_MANAGER"):
        return env["CONTAINER_CGROUP_MANAGER"], "CONTAINER_CGROUP_MANAGER"
    keys = (
        ("crio", "runtime", "cgroup_manager") if kind == "CRI-O" else ("engine", "cgroup_manager")
    )
    if kind == "CRI-O":
        manager, origin = "systemd", "default"
    elif booted:
        manager, origin = "systemd", "default: systemd is PID 1"
    else:
        manager, origin = "cgroupfs", "default: systemd is not PID 1"
    for path in reader.files:
        try:
            present, value = tomlfile.lookup(tomlfile.load(path), keys)
        except (OSError, tomlfile.TomlError):
            continue  # hooksdirs reported it
        if present and isinstance(value, str):
            manager, origin = value, f"cgroup_manager in {path}"
    return manager, origin


def parse_version(text: str, name: str) -> Version | None:
    """The version in the first line of `NAME --version` ('crun version 1.28',
    'runc version 1.3.6+ds1', 'systemd 262 (262.1-1)')."""
    lines = text.strip().splitlines()
    pattern = rf"{re.escape(name)}(?: version)? (\d+)(?:\.(\d+))?(?:\.(\d+))?"
    match = re.match(pattern, lines[0]) if lines else None
    if not match:
        return None
    return tuple(int(n) for n in match.groups() if n is not None)


def tool_version(name: str, env: Mapping[str, str]) -> Version | None:
    """`NAME --version` of the NAME on env's PATH, parsed; None when absent or unreadable."""
    path = shutil.which(name, path=env.get("PATH", os.defpath))
    if path is None:
        return None
    try:
        done = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=30, env=dict(env)
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_version(done.stdout, name)


def installed_runtimes(env: Mapping[str, str]) -> dict[str, Version | None]:
    """The OCI runtimes on env's PATH and their versions (crun before runc)."""
    search = env.get("PATH", os.defpath)
    return {
        name: tool_version(name, env) for name in OCI_RUNTIMES if shutil.which(name, path=search)
    }


def precreate_registration(directories: list[str]) -> str | None:
    """The hooks.d file, of those a runtime reading `directories` loads (a later directory
    masks the same name), that runs ocihook at the precreate stage; None if none does."""
    files: dict[str, str] = {}
    for directory in directories:
        files.update(json_files(directory))
    for path in files.values():
        report = hooksd.check_hook_file(path)
        if not report.ocihook:
            continue  # not ours; registration.py reports what is wrong with any file
        try:
            with open(path, "rb") as f:
                stages = json.loads(f.read(1 << 20)).get("stages", [])
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(stages, list) and "precreate" in stages:
            return path
    return None


def route_findings(
    readers: list[Reader],
    explicit: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    booted: bool | None = None,
    runtimes: Mapping[str, Version | None] | None = None,
    systemd: int | None = None,
) -> list[Finding]:
    """For each engine and OCI runtime: a route line, then whether granted devices survive a
    reload and an update (topics "route", "reload", "update"; "ok" survives). `runtimes` and
    `systemd`: the OCI runtimes and systemd's version, found on the host when not given."""
    env = os.environ if env is None else env
    booted = os.path.isdir(BOOTED_DIR) if booted is None else booted
    if runtimes is None:
        runtimes = installed_runtimes(env)
    if systemd is None and booted:
        found = tool_version("systemctl", env)
        systemd = found[0] if found else None
    out = []
    for reader in readers:
        kind, name = _kind(reader), reader.runtime
        directories = list(explicit) if explicit else reader.directories
        if kind == "rootless":
            out.append(
                Finding(
                    OK,
                    "route",
                    f"route: {name}: prestart, no device cgroup edit (rootless, "
                    "docs/cgroups.md): the runtime's own device rules stay, nothing for a "
                    "reload or an update to drop",
                )
            )
            continue
        manager, origin = cgroup_manager(reader, env, booted)
        where = f"cgroup manager {manager} ({origin})"
        registration = precreate_registration(directories) if kind in PRECREATE_RUNTIMES else None
        if registration is not None:
            route = (
                f"precreate ({registration}), {where}: the runtime creates the nodes and mounts "
                "the driver, the hook allows the nodes"
            )
        else:
            route = f"prestart, {where}: the hook creates, mounts and allows"
        if not runtimes:
            out.append(Finding(OK, "route", f"route: {name}: {route}"))
            out.append(
                Finding(WARNING, "route", f"route: {name}: neither crun nor runc is on PATH")
            )
        for oci, version in (runtimes or {}).items():
            rt = Runtime(kind, reader.version, oci, version, manager, booted, systemd)
            label = rt.label()
            out.append(Finding(OK, "route", f"route: {label}: {route}"))
            for topic, (status, text) in (
                ("reload", reload_claim(rt)),
                ("update", update_claim(rt)),
            ):
                out.append(Finding(status, topic, f"{topic}: {label}: granted devices {text}"))
    return out
