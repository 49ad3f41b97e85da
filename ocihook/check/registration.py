"""Where ocihook is registered, against the hooks.d directories the runtimes really read.

`ocihook check` asks ocihook/check/hooksdirs.py which directories podman and CRI-O read on this
host, checks every hooks.d file they would load (any invalid one stops the runtime, not only
ocihook's), and reports ocihook's registration: read by whom, masked by a same-named file in
a later directory, registered twice, or sitting where nobody reads it. With --hooks-dir DIR
the given directories are checked as a runtime started with --hooks-dir reads them.
"""

from __future__ import annotations

import os

from ocihook.check import hooksd
from ocihook.check.findings import FAILED, OK, WARNING, Finding
from ocihook.check.hooksdirs import DEFAULT_DIR, OVERRIDE_DIR, Reader

COMMAND_LINE = "a runtime started with --hooks-dir"


def json_files(directory: str) -> dict[str, str]:
    """name -> path of the *.json entries of a hooks directory (the runtime's ReadDir)."""
    try:
        names = sorted(os.listdir(directory), key=str.lower)
    except OSError:
        return {}
    return {n: os.path.join(directory, n) for n in names if n.endswith(".json")}


def _effective(directories: list[str]) -> dict[str, str]:
    """name -> path of the files a runtime reading `directories` loads (later ones mask)."""
    files: dict[str, str] = {}
    for directory in directories:
        files.update(json_files(directory))
    return files


def _describe(reader: Reader) -> str:
    where = ", ".join(reader.directories) if reader.directories else "no directory"
    return f"{reader.runtime} reads {where}"


def runtime_findings(readers: list[Reader]) -> list[Finding]:
    out = []
    for reader in readers:
        status = OK if reader.directories else WARNING
        message = f"hooks dirs: {_describe(reader)} ({reader.origin})"
        out.append(Finding(status, "runtime", message))
        out += [Finding(FAILED, "runtime", p) for p in reader.problems]
        out += [Finding(WARNING, "runtime", n) for n in reader.notes]
    return out


def _file_findings(report: hooksd.HookFile, readers: str) -> list[Finding]:
    """Findings for a file some runtime loads; `readers` names them."""
    path = report.path
    out = []
    lead = f"hooks.d file {path}"
    for problem in report.rejected:
        consequence = "" if report.ocihook else f" ({readers} then runs no container)"
        out.append(Finding(FAILED, "hooks.d", f"{lead}: {problem}{consequence}", path))
    severity = FAILED if report.ocihook else WARNING
    for problem in report.skipped + report.never_runs:
        out.append(Finding(severity, "hooks.d", f"{lead}: {problem}", path))
    for problem in report.ocihook_needs:
        out.append(Finding(FAILED, "hooks.d", f"{lead}: {problem}", path))
    for problem in report.warnings:
        out.append(Finding(WARNING, "hooks.d", f"{lead}: {problem}", path))
    return out


def registration_findings(
    readers: list[Reader], explicit: list[str], known: tuple[str, ...] = (DEFAULT_DIR, OVERRIDE_DIR)
) -> list[Finding]:
    """What check reports about hooks.d: every file that is loaded, and ocihook's place
    (`known`: directories where registrations are put, looked at even when nobody reads
    them)."""
    views = [(r.runtime, [os.path.normpath(d) for d in r.directories if d]) for r in readers]
    if explicit:
        views = [(COMMAND_LINE, [os.path.normpath(d) for d in explicit])]
    scanned = [d for _, dirs in views for d in dirs]
    if not explicit:
        scanned += [os.path.normpath(d) for d in known]
    scanned = list(dict.fromkeys(scanned))

    effective = {view: _effective(dirs) for view, dirs in views}
    # podman's precreate stage is valid only where CRI-O does not read (it refuses to start).
    crio_dirs = {d for view, dirs in views if view == "CRI-O" for d in dirs}
    reports: dict[str, hooksd.HookFile] = {}
    out: list[Finding] = []
    for directory in scanned:
        for name, path in json_files(directory).items():
            used_by = [view for view, files in effective.items() if files.get(name) == path]
            masked_by = {}
            for view, dirs in views:
                other = effective[view].get(name)
                if directory in dirs and other is not None and other != path:
                    masked_by[view] = other
            stages = () if directory in crio_dirs else hooksd.PODMAN_EXTENSION_STAGES
            report = reports[path] = hooksd.check_hook_file(path, stages)
            if used_by:
                out += _file_findings(report, " and ".join(used_by))
                if report.ocihook and report.usable and not report.ocihook_needs:
                    who = "" if explicit else f" (read by {', '.join(used_by)})"
                    out.append(Finding(OK, "hooks.d", f"hooks.d file {path}{who}", path))
            for view, other in masked_by.items():
                if report.ocihook:
                    message = f"hooks.d file {path}: masked by {other} for {view} (same name)"
                    out.append(Finding(WARNING, "hooks.d", message, path))
            if not used_by and not masked_by and report.ocihook:
                readers_text = "; ".join(_describe(r) for r in readers)
                message = f"hooks.d file {path} sits in a directory nobody reads ({readers_text})"
                out.append(Finding(FAILED, "hooks.d", message, path))

    mine = {
        view: [p for p in files.values() if p in reports and _registers(reports[p])]
        for view, files in effective.items()
    }
    registered = any(mine.values())
    for view, paths in mine.items():
        if len(paths) > 1:
            message = f"ocihook is registered twice for {view}: {', '.join(paths)} (it runs twice)"
            out.append(Finding(FAILED, "hooks.d", message))
        elif not paths and registered:  # another runtime has it, this one does not
            directories = dict(views)[view] or ["no directory"]
            message = f"{view} reads no hooks.d file for ocihook ({', '.join(directories)})"
            out.append(Finding(WARNING, "hooks.d", message))
    if not registered:
        if explicit:
            message = f"no hooks.d file for ocihook in {', '.join(explicit)}"
        else:
            readers_text = "; ".join(_describe(r) for r in readers)
            message = (
                f"no hooks.d file for ocihook in a directory the runtimes read ({readers_text})"
            )
        out.append(Finding(FAILED, "hooks.d", message))
    if explicit:
        for directory in explicit:
            normal = os.path.normpath(directory)
            readers_of = [r for r in readers if normal in map(os.path.normpath, r.directories)]
            if not readers_of:
                message = (
                    f"hooks dir {directory}: read only by {COMMAND_LINE} "
                    f"({'; '.join(_describe(r) for r in readers)})"
                )
                out.append(Finding(WARNING, "hooks-dir", message, directory))
    return out


def stage_findings(
    readers: list[Reader],
    explicit: list[str],
    runtimes: list[tuple[str, str, str | None]],
) -> list[Finding]:
    """At which stage ocihook runs (check/stages.py): per registration a runtime loads, its
    stage and the OCI runtimes (`runtimes`: stages.installed_runtimes) that run it; FAILED
    where an installed runtime would never run a createRuntime-only registration."""
    from ocihook.check import stages

    views = [(r.runtime, r.directories) for r in readers]
    if explicit:
        views = [(COMMAND_LINE, explicit)]
    used: dict[str, list[str]] = {}
    for view, dirs in views:
        for path in _effective([os.path.normpath(d) for d in dirs if d]).values():
            used.setdefault(path, []).append(view)
    running, not_running = stages.describe_runtimes(runtimes)
    out = []
    for path, who in used.items():
        report = hooksd.check_hook_file(path, hooksd.PODMAN_EXTENSION_STAGES)
        if not (_registers(report) and not report.ocihook_needs):
            continue
        stage = "createRuntime" if "createRuntime" in report.stages else "prestart"
        where = f"hooks.d file {path} (read by {', '.join(who)})"
        if stage == "prestart":
            message = (
                f"stage: {where} registers ocihook at prestart, which the OCI runtime spec "
                "deprecates (podman 5 and CRI-O 1.30 pass it on as createRuntime): the shipped "
                "registrations say createRuntime; prestart is for a runtime without it"
            )
            out.append(Finding(OK, "stage", message, path))
            continue
        if not_running:
            message = (
                f"stage: {where} registers ocihook at createRuntime, which "
                f"{', '.join(not_running)} never runs (runc runs it from 1.0.0-rc91, crun from "
                "0.12): update it, or register ocihook at prestart (hooks.d stages)"
            )
            out.append(Finding(FAILED, "stage", message, path))
        if running:
            message = (
                f"stage: {where} registers ocihook at createRuntime, which "
                f"{', '.join(running)} runs where prestart hooks run"
            )
            out.append(Finding(OK, "stage", message, path))
        elif not not_running:
            message = (
                f"stage: {where} registers ocihook at createRuntime; no runc or crun found "
                "to tell whether the OCI runtime runs it (runc 1.0.0-rc91 and crun 0.12 do)"
            )
            out.append(Finding(WARNING, "stage", message, path))
    return out


def _registers(report: hooksd.HookFile) -> bool:
    """A registration of the prestart hook (the precreate one is its companion, not a
    second registration: docs/cgroups.md, Routes)."""
    return report.ocihook and report.usable and not report.precreate
