"""What the hook did, counted from what it leaves in its state dir (ocihook/records.py):
`<id>.json` for each injection (its route and duration), `failed/<id>.json` for each start
it failed (refused or rolled back, the step, its duration).

Counters count the records that appear after the exporter started (those already there are
its baseline), so a restarted exporter starts from zero as Prometheus expects of a counter,
never from a history it cannot know whole (records are pruned by age and count). The
records' status (running, exited, orphaned) and the devices running containers hold are a
snapshot of the dir at each refresh; a record that says running whose process is gone (pid
and start time: `records.is_running`) counts as orphaned, as `ocihook audit` reads it (the
shipped registration has no poststop stage: the hook marks it at its next sweep). A record
is read again only when it changed (its inode, size or mtime); one that cannot be read is an
error of this refresh, counted by the caller, and tried again at the next.
"""

from __future__ import annotations

import json
import os
import stat

from ocihook import records
from ocihook.structs import Struct

# Seconds: the hook takes tens of milliseconds; a hung NVML or ldconfig up to their limits.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
INJECTED = "injected"


class Histogram(Struct):
    """Observations in DURATION_BUCKETS: counts per bucket (not cumulative), sum, count."""

    __slots__ = ("buckets", "sum", "count")
    buckets: list[int]
    sum: float
    count: int

    @classmethod
    def empty(cls) -> Histogram:
        return cls([0] * len(DURATION_BUCKETS), 0.0, 0)

    def observe(self, seconds: float) -> None:
        for position, bound in enumerate(DURATION_BUCKETS):
            if seconds <= bound:
                self.buckets[position] += 1
                break
        self.sum += seconds
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """[(le, cumulative count)] with +Inf last, as the exposition format has them."""
        result, running = [], 0
        for bound, count in zip(DURATION_BUCKETS, self.buckets):
            running += count
            result.append((repr(bound), running))
        result.append(("+Inf", self.count))
        return result


class Held(Struct):
    """A device node a running container holds: ("c", major, minor)."""

    __slots__ = ("type", "major", "minor")
    type: str
    major: int
    minor: int


class HookStats:
    """The counters and the snapshot, refreshed from `state_dir` by `refresh()`."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.injected: dict[str, int] = {}  # route -> containers
        self.failed: dict[tuple[str, str, str], int] = {}  # (route, outcome, reason) -> starts
        self.durations: dict[tuple[str, str], Histogram] = {}  # (route, outcome)
        self.status: dict[str, int] = {}  # a snapshot: status -> records
        self.held: set[tuple[str, int, int]] = set()  # nodes of running containers
        self.bodies: dict[str, dict] = {}  # name -> the record (for the audit's matcher)
        self._stamps: dict[str, tuple] = {}  # name -> (inode, size, mtime) when read
        self._counted: dict[str, set[str]] = {"": set(), records.FAILED_DIR: set()}
        self._started = False

    def refresh(self) -> list[str]:
        """Read what changed; returns one line per problem met (the errors of this refresh)."""
        problems: list[str] = []
        first = not self._started
        self._started = True
        self._records(problems, first)
        self._failures(problems, first)
        return problems

    def _listing(self, directory: str, problems: list[str]) -> list[tuple[str, os.stat_result]]:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []  # the hook has not run yet
        except OSError as error:
            problems.append(f"{directory}: {error.strerror}")
            return []
        found = []
        for name in names:
            if name.startswith(".") or not name.endswith(".json"):
                continue
            try:
                st = os.lstat(os.path.join(directory, name))
            except OSError:
                continue  # removed meanwhile (pruned)
            found.append((name, st))
        return found

    def _read(self, path: str, st: os.stat_result, problems: list[str]) -> dict | None:
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"{path}: unreadable record (not a regular file)")
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
            try:
                data = os.read(fd, records.MAX_RECORD_BYTES + 1)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return None  # pruned meanwhile
        except OSError as error:
            problems.append(f"{path}: unreadable record ({error.strerror})")
            return None
        try:
            body = json.loads(data)
        except ValueError as error:
            problems.append(f"{path}: unreadable record (not JSON: {error})")
            return None
        if not isinstance(body, dict) or body.get("version") not in records.READABLE_VERSIONS:
            problems.append(f"{path}: unreadable record (not a record of a known version)")
            return None
        return body

    def _records(self, problems: list[str], first: bool) -> None:
        listed = self._listing(self.state_dir, problems)
        names = {name for name, _ in listed}
        counted = self._counted[""]
        for gone in set(self.bodies) - names:
            del self.bodies[gone]
            self._stamps.pop(gone, None)
        counted &= names
        for name, st in listed:
            stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self._stamps.get(name) == stamp and name in self.bodies:
                continue
            body = self._read(os.path.join(self.state_dir, name), st, problems)
            if body is None:
                self.bodies.pop(name, None)
                self._stamps.pop(name, None)
                continue
            self.bodies[name] = body
            self._stamps[name] = stamp
            if name in counted:
                continue
            counted.add(name)
            if first:
                continue  # the baseline
            route = _word(body.get("route"), records.PRESTART)
            self.injected[route] = self.injected.get(route, 0) + 1
            duration = body.get("duration")
            if isinstance(duration, (int, float)) and not isinstance(duration, bool):
                self._histogram(route, INJECTED).observe(max(0.0, float(duration)))
        self.status = {}
        self.held = set()
        for body in self.bodies.values():
            status = _word(body.get("status"), records.RUNNING)
            if status == records.RUNNING and not records.is_running(body):
                status = records.ORPHANED  # gone, not yet swept (no poststop stage)
            self.status[status] = self.status.get(status, 0) + 1
            if status != records.RUNNING:
                continue
            for device in body.get("devices") or ():
                if isinstance(device, dict) and isinstance(device.get("major"), int):
                    minor = device.get("minor")
                    if isinstance(minor, int):
                        self.held.add((str(device.get("type")), device["major"], minor))

    def _failures(self, problems: list[str], first: bool) -> None:
        directory = os.path.join(self.state_dir, records.FAILED_DIR)
        listed = self._listing(directory, problems)
        counted = self._counted[records.FAILED_DIR]
        counted &= {name for name, _ in listed}
        for name, st in listed:
            if name in counted:
                continue
            if first:
                counted.add(name)
                continue
            body = self._read(os.path.join(directory, name), st, problems)
            if body is None:
                continue
            counted.add(name)
            route = _word(body.get("route"), records.PRESTART)
            outcome = _word(body.get("outcome"), records.REFUSED)
            reason = _word(body.get("reason"), "unknown")
            key = (route, outcome, reason)
            self.failed[key] = self.failed.get(key, 0) + 1
            duration = body.get("duration")
            if isinstance(duration, (int, float)) and not isinstance(duration, bool):
                self._histogram(route, outcome).observe(max(0.0, float(duration)))

    def _histogram(self, route: str, outcome: str) -> Histogram:
        key = (route, outcome)
        if key not in self.durations:
            self.durations[key] = Histogram.empty()
        return self.durations[key]


def _word(value: object, default: str) -> str:
    """A label value from a record: a short plain word, else `default` (records are the
    hook's own files, but a label value must stay bounded)."""
    if isinstance(value, str) and 0 < len(value) <= 32 and value.replace("-", "_").isidentifier():
        return value
    return default
