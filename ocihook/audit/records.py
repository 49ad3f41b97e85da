"""The hook's per-container records (/run/ocihook/<id>.json) and matching denials to them.

The schema and lifetime are ocihook.records's: records stay after the container exits
(status "exited", `exited_at`) or is found gone without a poststop ("orphaned"), so a
denial of a container that has already failed is still tied to it. When a denial's time
is known, containers whose lifetime covers it are preferred (MCS categories and pids are
reused by later containers).

A denial belongs to a container when its scontext carries the container's MCS categories
(process or mount label), when its pid is the container's, or when it touches a file or
device that only that container had injected. A denial touches an injected file when its
path (container or host side), inode (with device name where known) or device node name
matches the record.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ocihook.audit.parse import Avc, Event
from ocihook.errors import describe
from ocihook.records import (
    DEFAULT_STATE_DIR,
    EXITED,
    ORPHANED,
    READABLE_VERSIONS,
    RECORD_VERSION,
    RUNNING,
    STATUSES,
    is_running,
)

__all__ = ["DEFAULT_STATE_DIR", "RECORD_VERSION", "EXITED", "ORPHANED", "RUNNING"]
SLACK = 2.0  # seconds of clock and rounding slack around a container's lifetime


@dataclass
class Injected:
    """One thing the hook put into a container: a mount, a symlink or a device node."""

    kind: str  # library, binary, firmware, ... (mounts), link, device
    target: str  # path inside the container
    source: str | None = None  # host path (mounts, devices)
    dev: int | None = None
    ino: int | None = None
    label: str | None = None
    numbers: tuple[int, int] | None = None  # a device node's (major, minor)


@dataclass
class Container:
    """A container as the hook recorded it."""

    id: str
    path: str
    created: str | None = None
    pid: int | None = None
    rootfs: str | None = None
    profile: str | None = None
    source_root: str | None = None
    device_root: str | None = None
    mount_label: str | None = None
    process_label: str | None = None
    injected: list[Injected] = field(default_factory=list)
    status: str = RUNNING  # running, exited or orphaned (running with its process gone: orphaned)
    created_at: float | None = None  # epoch seconds
    exited_at: float | None = None  # epoch seconds (exited)
    orphaned_at: float | None = None  # epoch seconds the orphan was found (ended before)

    def ended(self) -> float | None:
        """Latest time the container can have run (None: still running)."""
        return self.exited_at if self.exited_at is not None else self.orphaned_at

    def alive_at(self, when: float) -> bool:
        """Whether the container's lifetime covers `when` (unknown bounds count as covering)."""
        if self.created_at is not None and when < self.created_at - SLACK:
            return False
        end = self.ended()
        return end is None or when <= end + SLACK


@dataclass
class Match:
    """What a denial was tied to, and by which evidence."""

    container: Container | None = None
    injected: Injected | None = None
    by: list[str] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)  # ids when the file was in several


def categories(context: str | None) -> frozenset[str]:
    """The MCS categories of a context's (low) level: `...:s0:c1,c2` -> {c1, c2}; c1.c3 expanded."""
    if not context:
        return frozenset()
    parts = context.split(":", 3)
    if len(parts) < 4:
        return frozenset()
    level = parts[3].split("-")[0]
    cats = level.split(":", 1)[1] if ":" in level else ""
    result: set[str] = set()
    for item in filter(None, cats.split(",")):
        low, _, high = item.partition(".")
        if high and low[1:].isdigit() and high[1:].isdigit():
            result.update(f"c{n}" for n in range(int(low[1:]), int(high[1:]) + 1))
        else:
            result.add(item)
    return frozenset(result)


def context_type(context: str | None) -> str:
    parts = (context or "").split(":")
    return parts[2] if len(parts) > 2 else ""


def load_records(state_dir: str | os.PathLike[str]) -> tuple[list[Container], list[str]]:
    """Read every `<id>.json` record in `state_dir`; unreadable ones become warnings."""
    containers: list[Container] = []
    warnings: list[str] = []
    directory = Path(state_dir)
    if not directory.is_dir():
        return containers, warnings
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            containers.append(container_from_dict(data, str(path)))
        except (OSError, ValueError, TypeError, AttributeError, KeyError) as error:
            cause = describe(error) if isinstance(error, OSError) else str(error)
            warnings.append(f"{path}: unreadable record ({error.__class__.__name__}: {cause})")
    return containers, warnings


def _int(value: object) -> int | None:
    try:
        return None if value is None or isinstance(value, bool) else int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def container_from_dict(data: dict, path: str = "") -> Container:
    """A Container from a record of a readable version (raises ValueError when it is not one).

    A record that says running but whose process is gone (pid and start time) is read as
    orphaned; the file is left as it is (the hook itself marks it)."""
    if not isinstance(data, dict) or data.get("version") not in READABLE_VERSIONS:
        versions = " or ".join(str(v) for v in READABLE_VERSIONS)
        raise ValueError(f"not a version {versions} ocihook record")
    if not isinstance(data.get("id"), str) or not data["id"]:
        raise ValueError("record without an id")
    container = Container(
        id=data["id"],
        path=path,
        created=data.get("created"),
        pid=_int(data.get("pid")),
        rootfs=data.get("rootfs"),
        profile=data.get("profile"),
        source_root=data.get("source_root"),
        device_root=data.get("device_root"),
        mount_label=data.get("mount_label"),
        process_label=data.get("process_label"),
        created_at=_float(data.get("created_at")),
        exited_at=_float(data.get("exited_at")),
        orphaned_at=_float(data.get("orphaned_at")),
    )
    status = data.get("status", RUNNING)
    if status not in STATUSES:
        raise ValueError(f"unknown record status {status!r}")
    if status == RUNNING and container.pid is not None and not is_running(data):
        status = ORPHANED
    container.status = status
    for mount in data.get("mounts") or []:
        container.injected.append(
            Injected(
                kind=str(mount.get("kind") or "mount"),
                target=str(mount["target"]),
                source=mount.get("source"),
                dev=_int(mount.get("dev")),
                ino=_int(mount.get("ino")),
                label=mount.get("label"),
            )
        )
    for link in data.get("links") or []:
        container.injected.append(
            Injected(kind="link", target=str(link["target"]), source=link.get("points_to"))
        )
    for device in data.get("devices") or []:
        container.injected.append(
            Injected(
                kind="device",
                target=str(device["path"]),
                source=device.get("host_path"),
                label=device.get("label"),
                numbers=_numbers(device.get("major"), device.get("minor")),
            )
        )
    return container


def _numbers(major: object, minor: object) -> tuple[int, int] | None:
    numbers = (_int(major), _int(minor))
    return numbers if None not in numbers else None  # type: ignore[return-value]


def requested_char_device(avc: Avc) -> tuple[int, int | None] | None:
    """(major, minor) of a `module_request` for a char device's driver (kmod="char-major-M-N",
    or "char-major-M": any minor), which the kernel makes when a node without a driver is
    opened; None for any other denial."""
    kmod = (avc.fields.get("kmod") or "").strip('"')
    if "module_request" not in avc.perms or not kmod.startswith("char-major-"):
        return None
    parts = kmod[len("char-major-") :].split("-")
    if not all(p.isdigit() for p in parts) or len(parts) not in (1, 2):
        return None
    return int(parts[0]), (int(parts[1]) if len(parts) == 2 else None)


def device_name(dev: int | None) -> str | None:
    """The kernel's name (as AVC `dev=` shows it) for a device number, from /sys when it can."""
    if dev is None:
        return None
    major, minor = os.major(dev), os.minor(dev)
    try:
        with open(f"/sys/dev/block/{major}:{minor}/uevent", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("DEVNAME="):
                    return line.split("=", 1)[1].strip()
    except OSError:
        return None
    return None


def _paths(event: Event, avc: Avc) -> list[str]:
    """Absolute paths the denial names: AVC path=, PATH records' name= (joined with CWD)."""
    paths = []
    if avc.fields.get("path"):
        paths.append(avc.fields["path"])
    for record in event.paths:
        name = record.get("name", "")
        if name.startswith("/"):
            paths.append(name)
        elif name and event.cwd and name not in ("(null)", "?"):
            paths.append(os.path.normpath(os.path.join(event.cwd, name)))
    return paths


def match_file(container: Container, event: Event, avc: Avc) -> tuple[Injected, str] | None:
    """The injected item of `container` that the denial touches, with the evidence."""
    requested = requested_char_device(avc)
    if requested is not None:
        major, minor = requested
        for item in container.injected:
            if item.numbers and item.numbers[0] == major and minor in (None, item.numbers[1]):
                return item, "device number"
        return None
    paths = _paths(event, avc)
    name = avc.fields.get("name")
    ino = _int(avc.fields.get("ino"))
    dev = avc.fields.get("dev")
    rootfs = (container.rootfs or "").rstrip("/")
    for item in container.injected:
        for path in paths:
            if path == item.target or (rootfs and path == rootfs + item.target):
                return item, "path"
            if item.source and path == item.source:
                return item, "host path"
    for item in container.injected:
        if item.ino is not None and ino == item.ino:
            known = device_name(item.dev)
            if known is None or dev is None or dev == known:
                return item, "inode"
    for item in container.injected:
        base = os.path.basename(item.target)
        if name and name == base and not paths:
            if item.kind == "device" and avc.tclass in ("chr_file", "blk_file"):
                return item, "device name"
            if item.kind == "link" and avc.tclass == "lnk_file":
                return item, "link name"
    return None


def owns(container: Container, avc: Avc, event: Event) -> str | None:
    """Evidence that the denied process runs in `container` (categories, pid), else None."""
    cats = categories(avc.scontext)
    if cats:
        for label in (container.process_label, container.mount_label):
            if categories(label) == cats:
                return "MCS categories"
    pid = _int(avc.fields.get("pid")) or _int(event.syscall.get("pid"))
    if pid is not None and container.pid is not None and pid == container.pid:
        return "pid"
    return None


def _in_lifetime(event: Event, containers: list[Container]) -> list[Container]:
    """The containers that may have run at the event's time (all when it is unknown), newest
    first: a later container with the same MCS categories or pid is not blamed."""
    ordered = sorted(containers, key=lambda c: c.created_at or 0.0, reverse=True)
    if event.timestamp is None:
        return ordered
    return [c for c in ordered if c.alive_at(event.timestamp)]


def match(event: Event, avc: Avc, containers: list[Container]) -> Match:
    """Tie a denial to a container and an injected file where the records allow it: running,
    exited and orphaned containers alike, preferring those alive at the denial's time."""
    containers = _in_lifetime(event, containers)
    owners = [(c, why) for c in containers if (why := owns(c, avc, event))]
    files = [(c, hit) for c in containers if (hit := match_file(c, event, avc))]
    if owners:
        container, why = owners[0]
        result = Match(container=container, by=[why])
        for candidate, (item, evidence) in files:
            if candidate is container:
                result.injected = item
                result.by.append(evidence)
        return result
    if files:
        container, (item, evidence) = files[0]
        ids = [c.id for c, _ in files]
        result = Match(injected=item, by=[evidence])
        if len(ids) == 1:
            result.container = container
        else:
            result.candidates = ids
        return result
    return Match()
