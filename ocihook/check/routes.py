"""`ocihook check`'s route lines: for each runtime of this host (hooksdirs.Reader), which
route the hook takes and whether the devices it grants survive `systemctl daemon-reload`
and a runtime update.

- precreate: podman loads an ocihook registration with the `precreate` stage; the runtime
  then creates, allows and records the devices itself: they survive both.
- prestart under the systemd cgroup manager (systemd PID 1): the hook edits the device
  cgroup and adds the rules to the container's unit as runtime DeviceAllow= (systemd.py):
  they survive a reload.
- prestart under cgroupfs: the device cgroup alone; systemd owns no unit of the container,
  a reload recomputes nothing of it.
- rootless podman: no device cgroup edit at all (docs/cgroups.md).

On every prestart route a runtime update that re-applies the OCI config's devices (podman
update, crictl update, runc/crun update, depending on the runtime's version) drops the hook's:
a prestart hook cannot prevent that; only precreate and CDI put the devices where the runtime
sees them.

The cgroup manager is read from the files the runtime reads (Reader.files): podman's
`[engine] cgroup_manager`, CRI-O's `[crio.runtime] cgroup_manager` (CONTAINER_CGROUP_MANAGER
overrides it); podman's default is systemd where systemd is PID 1, else cgroupfs, CRI-O's
is systemd.
"""

from __future__ import annotations

import json
import os
from typing import Mapping

from ocihook.check import hooksd, tomlfile
from ocihook.check.findings import OK, WARNING, Finding
from ocihook.check.hooksdirs import Reader
from ocihook.check.registration import json_files

BOOTED_DIR = "/run/systemd/system"
PRECREATE_RUNTIMES = ("podman",)  # CRI-O rejects the stage (hooksd.py)
DURABLE = {
    "podman": "the precreate registration (a hooks.d file with the precreate stage) or CDI",
    "CRI-O": "CDI (docs/cdi.md)",
}
UPDATES = {
    "podman": "podman update, runc/crun update",
    "CRI-O": "crictl update, the kubelet's CPU manager, runc/crun update",
}
UPDATE_LIMIT = (
    "route: {runtime}: a runtime update that re-applies the OCI config's devices ({updates}, "
    "by the runtime's version: docs/cgroups.md) drops the ones a prestart hook granted, and a "
    "prestart hook cannot prevent it: use {durable}"
)


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
) -> list[Finding]:
    """One route line per runtime, and the update limit where the route is prestart."""
    env = os.environ if env is None else env
    booted = os.path.isdir(BOOTED_DIR) if booted is None else booted
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
            message = (
                f"route: {name}: precreate ({registration}), {where}: the runtime creates and "
                "allows the devices itself: they survive systemctl daemon-reload and a "
                "runtime update"
            )
            out.append(Finding(OK, "route", message))
            continue
        if manager == "systemd" and booted:
            status, what = (
                OK,
                (
                    "the device cgroup and the container's systemd unit (runtime DeviceAllow=, "
                    "over D-Bus): granted devices survive systemctl daemon-reload"
                ),
            )
        elif manager == "systemd":
            status, what = (
                WARNING,
                (
                    f"but systemd is not PID 1 ({BOOTED_DIR} is absent): the device cgroup "
                    f"only, and {name} cannot run containers so"
                ),
            )
        else:
            status, what = (
                OK,
                (
                    "the device cgroup only; no systemd unit holds the container, so "
                    "systemctl daemon-reload changes nothing of it"
                ),
            )
        out.append(Finding(status, "route", f"route: {name}: prestart, {where}: {what}"))
        text = UPDATE_LIMIT.format(runtime=name, updates=UPDATES[kind], durable=DURABLE[kind])
        out.append(Finding(WARNING, "route", text))
    return out
