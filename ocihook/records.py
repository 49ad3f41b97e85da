"""What was injected into each container: the records in the state dir, and the log line.

The record schema, shared by the writer (the hook) and the readers (`ocihook audit`):

    <state_dir>/<id>.json     (state_dir: config key, default /run/ocihook; mode 0600)
    version      RECORD_VERSION (readers accept READABLE_VERSIONS)
    id           the container id
    status       "running" from prestart; "orphaned" when an injecting start's sweep finds the
                 container's process gone (pid and start time: liveness), the usual end
                 since the shipped registration has no poststop stage; "exited" at poststop
                 where an admin registered that stage (exact exit times)
    created_at   epoch seconds (float) of the prestart; `created` the same as UTC text
    pid          the container's host pid; `pid_start` its start time (clock ticks after
                 boot, /proc/<pid>/stat field 22) so a reused pid is not taken for it
    exited_at    epoch seconds of the poststop (status "exited")
    orphaned_at  epoch seconds when the sweep found the process gone (status "orphaned";
                 the container ended at some time before it)
    bundle, rootfs, profile, request, source_root, device_root, driver_version,
    capabilities, mount_label, process_label, file_label
                 the container's and the finalized plan's (file_label: what the hook's own
                 files are labelled; null: labels untouched)
    mounts       [{source (host path), target, kind, dev, ino, label (of the source, read
                 from the fd that was mounted; null: not read)}]
    links        [{target, points_to}]
    devices      [{path, host_path, type, major, minor, index, label}]
    cgroup       [{cgroup ("v1"/"v2"; "systemd": the unit's DeviceAllow=, path the unit's
                  name), path, action, rule ("c 10:237 rw")}]: the edits made
    ld_dirs, ld_cache  the dirs the container's ld cache was updated for (the image's CUDA
                       compat dir first when it was taken), and how
                 ("native", "ldconfig"; null and [] when it was not)
    rootless     only from the hook of a rootless container: {host_uid (the user), device_cgroup
                 ("unchanged": cgroup is [])}; the record is then in /run/user/<uid>/ocihook
    route        "prestart" (the hook made everything), "precreate" (the runtime made the
                 mounts or nodes that podman's precreate stage put in config.json)
    duration     seconds from the hook seeing the request to the record (both absent in
                 records of earlier releases)

    <state_dir>/failed/<id>.json   a start the hook failed (the container did not start;
                                   nothing of the hook is left in it), pruned as records are:
    version, id, created_at, created, route, duration, error (the line the runtime showed)
    outcome      "refused" (before any change) or "rolled_back" (changes made and undone)
    reason       the step that failed: bundle, request, plan, requirement, rootless,
                 sources, selinux, state-dir, cgroup, container, record, or internal (a bug)

`injection_record` builds it; `ocihook/audit/records.py` reads it back
(tests/test_record_schema.py: the round trip); `ocihook/metrics/hookstats.py` counts both
kinds for the exporter, which writes nothing.

Lifetime: records stay after the container exits, so that a denial of a container that
failed can still be tied to it. No process runs when a container stops (the shipped
registration has no poststop stage: one hook process per container, at its start); a reader
tells a gone container by liveness (`is_running`), as `ocihook audit` does. Each prestart that
injects sweeps the state dir cheaply:
at most once a minute, running records whose process is gone become "orphaned", and
exited/orphaned records older than `records.max_age` seconds, or beyond the newest
`records.max_count`, are removed, and so are temporary files of killed writers. The
state dir is on tmpfs (/run): a reboot empties it.
"""

from __future__ import annotations

import os
import time

from ocihook import fastjson
from ocihook.errors import OcihookError, describe
from ocihook.linux import trusted

RECORD_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1: no status, removed at poststop
DEFAULT_STATE_DIR = "/run/ocihook"
DEFAULT_MAX_AGE = 7 * 24 * 3600  # seconds an exited or orphaned record is kept
DEFAULT_MAX_COUNT = 1000  # exited and orphaned records kept at most (newest first)
RUNNING, EXITED, ORPHANED = "running", "exited", "orphaned"
STATUSES = (RUNNING, EXITED, ORPHANED)
MAX_RECORD_BYTES = 16 << 20
SWEEP_INTERVAL = 60.0  # seconds between orphan sweeps
SWEEP_STAMP = ".swept"
STALE_TMP_SECONDS = 600.0  # a temporary file this old belongs to a killed writer
WHAT = "state dir"
PRESTART, PRECREATE = "prestart", "precreate"  # routes: who made the mounts and nodes
FAILED_DIR = "failed"  # <state_dir>/failed/<id>.json: the starts the hook failed
REFUSED, ROLLED_BACK = "refused", "rolled_back"
INTERNAL = "internal"  # the reason of a failure that is a bug (exit status 70)
MAX_ERROR_CHARS = 512


def open_state_dir(path: str) -> int:
    """The state dir's fd (created 0700; root-owned and 0700 or refused), opened on the host
    before setns and before anything is changed: a state dir that cannot be written (a
    read-only file system) fails the start while there is nothing to undo."""
    fd = trusted.open_dir(path, WHAT)
    problem = None
    if os.fstatvfs(fd).f_flag & os.ST_RDONLY:
        problem = "read-only file system"
    elif not os.fstat(fd).st_mode & 0o200:  # the record is written without capabilities
        problem = f"not writable by its owner (mode {os.fstat(fd).st_mode & 0o7777:04o})"
    if problem:
        os.close(fd)
        raise OcihookError(f"{WHAT} {path}: cannot write records: {problem}")
    return fd


def process_start(pid: int) -> int | None:
    """Start time of `pid` in clock ticks after boot (None when there is no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            data = file.read()
    except OSError:
        return None
    try:  # the command name may hold spaces and parentheses: split after the last ')'
        return int(data[data.rindex(b")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def is_running(body: dict) -> bool:
    """Whether the record's container process still runs (pid and its start time match)."""
    pid = body.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    start, recorded = process_start(pid), body.get("pid_start")
    return start is not None and (recorded is None or recorded == start)


def new_record(container_id: str, pid: int | None, fields: dict) -> dict:
    """The body of a new record: status running, timestamps, then `fields`."""
    now = time.time()
    return {
        "version": RECORD_VERSION,
        "id": container_id,
        "status": RUNNING,
        "created_at": round(now, 3),
        "created": utc_now(now),
        "pid": pid,
        "pid_start": process_start(pid) if pid else None,
        **fields,
    }


def injection_record(
    container,
    plan,
    sources: list,
    labels: list,
    edits: list,
    ld_cache,
    rootless_uid=None,
    route: str = PRESTART,
    duration: float | None = None,
) -> dict:
    """The record of one injection: the container (state.Container), its finalized plan,
    the sources mounted (apply.SourceTree, in plan order) with their `labels`, the device
    cgroup edits made (cgroups.DeviceEdit), how the ld cache was updated (or None), for
    the hook of a rootless container the user's host uid, the route and the seconds it took."""
    body = new_record(
        container.id,
        container.pid,
        {
            "bundle": container.bundle,
            "rootfs": container.rootfs,
            "profile": plan.profile,
            "request": plan.request,
            "source_root": plan.source_root,
            "device_root": plan.device_root,
            "driver_version": plan.driver_version,
            "capabilities": plan.capabilities,
            "mount_label": container.mount_label,
            "process_label": container.process_label,
            "file_label": plan.file_label,
            "mounts": [
                {
                    "source": s.mount.host_path,
                    "target": s.mount.target,
                    "kind": s.mount.kind,
                    "dev": s.dev,
                    "ino": s.ino,
                    "label": label,
                }
                for s, label in zip(sources, labels)
            ],
            "links": [{"target": link.target, "points_to": link.points_to} for link in plan.links],
            "devices": [
                {
                    "path": d.path,
                    "host_path": d.host_path,
                    "type": d.type,
                    "major": d.major,
                    "minor": d.minor,
                    "index": d.index,
                    "label": plan.file_label,
                }
                for d in plan.devices
            ],
            "cgroup": [edit.record() for edit in edits],
            "ld_dirs": _ld_dirs(plan) if ld_cache else [],
            "ld_cache": ld_cache,
            "route": route,
            "duration": None if duration is None else round(duration, 6),
        },
    )
    if rootless_uid is not None:
        body["rootless"] = {"host_uid": rootless_uid, "device_cgroup": "unchanged"}
    return body


def _ld_dirs(plan) -> list[str]:
    """The dirs the ld cache was written for: the image's CUDA compat dir first when it
    was taken (cuda.py), then the plan's."""
    compat = plan.cuda_compat
    return ([compat["dir"]] if compat and compat["use"] else []) + plan.ld_dirs


def write_record(state_dir_fd: int, state_dir: str, container_id: str, body: dict) -> None:
    """Atomically write <id>.json (the id was validated: no '/'); OcihookError names the file
    and the cause, and no temporary file is left."""
    data = fastjson.dumps(body, indent=None).encode()  # one line: the C encoder
    trusted.write_file(state_dir_fd, state_dir, f"{container_id}.json", data, "record")


def read_record(state_dir_fd: int, name: str) -> dict | None:
    """A record by file name, or None when it is missing, untrusted or not a record."""
    data = trusted.read_file(state_dir_fd, name, MAX_RECORD_BYTES)
    if not data:
        return None
    try:
        body = fastjson.loads(data)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("version") not in READABLE_VERSIONS:
        return None
    return body


def finish_record(state_dir: str, container_id: str) -> dict | None:
    """Poststop: mark the record exited with the time; returns it, None when there is none
    (the container asked for nothing) or it was marked already. OcihookError when it
    cannot be written."""
    try:
        dir_fd = os.open(state_dir, trusted.DIR_FLAGS)
    except FileNotFoundError:
        return False
    except OSError as error:
        raise OcihookError(f"{WHAT} {state_dir}: {describe(error)}") from None
    try:
        problem = trusted.dir_problem(os.fstat(dir_fd))
        if problem:
            raise OcihookError(f"{WHAT} {state_dir}: {problem}; record of {container_id} left")
        name = f"{container_id}.json"
        body = read_record(dir_fd, name)
        if body is None or body.get("status") not in (None, RUNNING, ORPHANED):
            return None
        body["status"] = EXITED
        body["exited_at"] = round(time.time(), 3)
        body.pop("orphaned_at", None)
        write_record(dir_fd, state_dir, container_id, body)
        return body
    finally:
        os.close(dir_fd)


def sweep(state_dir_fd: int, state_dir: str, max_age: float, max_count: int) -> None:
    """Mark orphans and prune old or surplus records, at most once per SWEEP_INTERVAL (one
    lstat of the stamp otherwise: a state dir of a thousand records costs an injection
    nothing more); the dir may exceed `max_count` by the starts of one interval.

    Then one directory listing and an lstat per record; a record is read only when it is
    old enough or surplus enough to be pruned, or to tell whether its process still runs.
    Best effort: a record that cannot be read or removed is left for the next sweep."""
    now = time.time()
    if not _sweep_due(state_dir_fd, now):
        return
    entries = []
    for name in os.listdir(state_dir_fd):
        if name.startswith(".") and name.endswith(".tmp"):
            _remove_stale_tmp(state_dir_fd, name, now)
            continue
        if name.startswith(".") or not name.endswith(".json"):
            continue
        try:
            st = os.lstat(name, dir_fd=state_dir_fd)
        except OSError:
            continue
        entries.append((st.st_mtime, name))
    entries.sort(reverse=True)  # newest first
    kept = 0
    for mtime, name in entries:
        surplus = kept >= max_count
        old = now - mtime > max_age
        body = read_record(state_dir_fd, name)
        if body is None:
            continue
        status = body.get("status", RUNNING)
        if status == RUNNING and not is_running(body):
            status = ORPHANED
            if not (surplus or old) and _unchanged(state_dir_fd, name, mtime):
                body["status"] = ORPHANED
                body["orphaned_at"] = round(now, 3)
                try:
                    write_record(state_dir_fd, state_dir, name[:-5], body)
                except OcihookError:
                    pass
        if status != RUNNING and (surplus or old):
            try:
                os.unlink(name, dir_fd=state_dir_fd)
            except OSError:
                pass
            continue
        kept += 1


def write_failure(
    config: dict,
    container_id: str,
    route: str,
    reason: str,
    changed: bool,
    started: float,
    error: BaseException,
) -> None:
    """Best effort, on the failure path only: <state_dir>/failed/<id>.json saying that the
    hook failed this container's start, where (`reason`: the step), whether it had changed
    anything (`changed`: then it was rolled back), after how long (`started`: the monotonic
    time the request was seen) and the line the runtime showed. Never raises: the error
    the runtime shows is the one that made the hook fail. The newest `records.max_count`
    younger than `records.max_age` are kept; nothing else reads or writes this dir."""
    from ocihook.errors import EXIT_SOFTWARE, exit_line

    try:
        status, line = exit_line(error) if isinstance(error, Exception) else (1, str(error))
        now = time.time()
        body = {
            "version": RECORD_VERSION,
            "id": container_id,
            "created_at": round(now, 3),
            "created": utc_now(now),
            "route": route,
            "outcome": ROLLED_BACK if changed else REFUSED,
            "reason": INTERNAL if status == EXIT_SOFTWARE else reason,
            "duration": round(time.monotonic() - started, 6),
            "error": line[:MAX_ERROR_CHARS],
        }
        path = os.path.join(config["state_dir"], FAILED_DIR)
        dir_fd = trusted.open_dir(path, WHAT)
    except Exception:  # noqa: BLE001 - the record is best effort
        return
    try:
        write_record(dir_fd, path, container_id, body)
        settings = config["records"]
        _prune(dir_fd, settings["max_count"], settings["max_age"])
    except Exception:  # noqa: BLE001 - a full disk: no empty dir left behind
        try:
            os.rmdir(path)
        except OSError:
            pass
    finally:
        os.close(dir_fd)


def _prune(dir_fd: int, max_count: int, max_age: float) -> None:
    """Remove the records of a dir beyond the newest `max_count` or older than `max_age`."""
    now = time.time()
    entries = []
    for name in os.listdir(dir_fd):
        if name.startswith(".") and name.endswith(".tmp"):
            _remove_stale_tmp(dir_fd, name, now)
        elif name.endswith(".json") and not name.startswith("."):
            try:
                entries.append((os.lstat(name, dir_fd=dir_fd).st_mtime, name))
            except OSError:
                continue
    entries.sort(reverse=True)
    for rank, (mtime, name) in enumerate(entries):
        if rank >= max_count or now - mtime > max_age:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except OSError:
                pass


def _remove_stale_tmp(state_dir_fd: int, name: str, now: float) -> None:
    """A temporary file of a writer that was killed before it could remove it."""
    try:
        if now - os.lstat(name, dir_fd=state_dir_fd).st_mtime > STALE_TMP_SECONDS:
            os.unlink(name, dir_fd=state_dir_fd)
    except OSError:
        pass


def _unchanged(state_dir_fd: int, name: str, mtime: float) -> bool:
    """The record was not rewritten since it was listed (a poststop that finished it wins)."""
    try:
        return os.lstat(name, dir_fd=state_dir_fd).st_mtime == mtime
    except OSError:
        return False


def _sweep_due(state_dir_fd: int, now: float) -> bool:
    """True at most once per SWEEP_INTERVAL (the stamp file's mtime), and touch the stamp."""
    try:
        if now - os.lstat(SWEEP_STAMP, dir_fd=state_dir_fd).st_mtime < SWEEP_INTERVAL:
            return False
    except FileNotFoundError:
        pass
    except OSError:
        return False
    try:
        fd = os.open(
            SWEEP_STAMP,
            os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=state_dir_fd,
        )
        os.utime(fd)
        os.close(fd)
    except OSError:
        return False
    return True


def utc_now(now: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


class Log:
    """One line per container to syslog or a file; every step too when debug is on."""

    def __init__(self, target: str, debug: bool) -> None:
        self.debug_enabled = debug
        self._fd: int | None = None
        self._syslog = None
        if target == "syslog":
            import syslog

            syslog.openlog("ocihook", syslog.LOG_PID, syslog.LOG_DAEMON)
            self._syslog = syslog
        elif target != "none":
            try:
                self._fd = os.open(
                    target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640
                )
            except OSError:
                self._fd = None  # logging must never fail a container start

    def info(self, message: str) -> None:
        self._emit("info", message)

    def debug(self, message: str) -> None:
        if self.debug_enabled:
            self._emit("debug", message)

    def error(self, message: str) -> None:
        self._emit("error", message)

    def _emit(self, level: str, message: str) -> None:
        if self._syslog is not None:
            priority = {"info": self._syslog.LOG_INFO, "debug": self._syslog.LOG_DEBUG}.get(
                level, self._syslog.LOG_ERR
            )
            self._syslog.syslog(priority, message)
        elif self._fd is not None:
            line = f"{utc_now()} ocihook[{os.getpid()}] {level}: {message}\n"
            try:
                os.write(self._fd, line.encode(errors="replace"))
            except OSError:
                pass


def pinned_units(body: dict | None) -> list[str]:
    """The systemd units whose device programs the hook pinned for the record's container
    (cgroup edits with action "unit-bpf-program": ocihook/cgroups/pinned.py)."""
    units: list[str] = []
    for edit in (body or {}).get("cgroup") or ():
        if isinstance(edit, dict) and edit.get("action") == "unit-bpf-program":
            unit = edit.get("path")
            if isinstance(unit, str) and unit not in units:
                units.append(unit)
    return units
