"""Device cgroup: find a container's cgroup and let it use the devices we inject.

cgroup v1 (the ``devices`` controller, also on hybrid hosts): one ``devices.allow`` write per rule.
cgroup v2: the runtime's BPF_PROG_TYPE_CGROUP_DEVICE program is replaced, atomically, by a copy
that starts with our allow rules and then runs the runtime's own instructions unchanged
(v2.py, imported only on cgroup v2 hosts).

crun with the systemd cgroup manager on cgroup v2 runs the container in a subgroup of its
scope (`<scope>/container`, or the name in the `run.oci.systemd.subgroup` annotation, none
when it is empty), and device programs may sit on either: crun 1.8 to 1.22 attach their own to
the subgroup, and from 1.19 systemd attaches one to the scope for crun's DeviceAllow= (crun
1.23 and later rely on that one alone). Every program of both gates the container, so both
are extended; nothing above the container's own scope is ever touched.

Under the systemd cgroup manager (cgroupsPath `slice:prefix:name`) the rules are also added
to the container's unit as runtime DeviceAllow= properties (systemd.py, over D-Bus), so that
a `systemctl daemon-reload`, which recomputes the unit's device cgroup from its properties,
keeps them. A runtime `update` that re-applies the OCI config's devices still drops them: only
the precreate route and CDI put them where the runtime sees them (docs/cgroups.md).
"""

from __future__ import annotations

import errno
import os

from ocihook.errors import OcihookError
from ocihook.linux import mountinfo
from ocihook.plan import devrules
from ocihook.plan.devrules import DeviceRule
from ocihook.structs import Struct

V1_ACTION = "devices.allow"
V2_ACTION = "bpf-prepend-allow"
UNIT_ACTION = "unit-device-allow"  # a runtime DeviceAllow= property of the systemd unit
PIN_ACTION = "unit-bpf-program"  # the unit's BPFProgram= named our pinned copy (pinned.py)


SUBGROUP_ANNOTATION = "run.oci.systemd.subgroup"
DEFAULT_SUBGROUP = "container"  # crun's, with the systemd cgroup manager on cgroup v2


class CgroupTarget(Struct):
    """A container's cgroup directory: version "v1" (devices controller) or "v2"; `scope`:
    the container's own cgroup (cgroupsPath) when the runtime put the process in a subgroup
    of it (crun, systemd, v2), else None; `unit`: the systemd unit that cgroupsPath names
    (the systemd cgroup manager), else None."""

    __slots__ = ("version", "path", "scope", "unit")
    _defaults = {"scope": None, "unit": None}

    version: str
    path: str
    scope: str | None
    unit: str | None

    def dirs(self) -> list[str]:
        """The cgroup directories whose device programs gate the container, innermost first."""
        return [self.path] if self.scope is None else [self.path, self.scope]


class DeviceEdit(Struct):
    """One change to a container's device cgroup: the rule allowed (typed, as the plan has
    it) and where. `record()` is its text form in the hook's record."""

    __slots__ = ("cgroup", "path", "action", "rule")

    cgroup: str  # "v1" or "v2"; "systemd" for a unit property
    path: str  # the cgroup directory; the unit's name for a unit property
    action: str  # V1_ACTION, V2_ACTION or UNIT_ACTION
    rule: DeviceRule

    def record(self) -> dict:
        return {
            "cgroup": self.cgroup,
            "path": self.path,
            "action": self.action,
            "rule": self.rule.line(),
        }


def _checked(rule: DeviceRule) -> DeviceRule:
    """The rule itself, or OcihookError naming what is wrong with it."""
    try:
        devrules.check_rule(rule)
    except ValueError as exc:
        raise OcihookError(f"device rule {rule.type} {rule.major}:{rule.minor}: {exc}") from None
    return rule


# ---------------------------------------------------------------------------
# Finding the container's cgroup


def _read(path: str, what: str) -> str:
    """Read a small text file, or OcihookError naming `what`."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except FileNotFoundError:
        raise OcihookError(f"{what}: {path} does not exist") from None
    except OSError as exc:
        raise OcihookError(f"{what}: cannot read {path}: {exc.strerror}") from None


def _proc_cgroup_path(text: str, version: str, pid: int) -> str:
    """The devices (v1) or unified (v2, "0::") path from /proc/<pid>/cgroup."""
    for line in text.splitlines():
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if version == "v1" and "devices" in controllers.split(","):
            return path
        if version == "v2" and hier == "0" and controllers == "":
            return path
    want = "devices" if version == "v1" else "unified (0::)"
    raise OcihookError(f"process {pid} has no {want} cgroup in /proc/{pid}/cgroup")


def _clean_cgroup_path(path: str, what: str) -> str:
    """Absolute, normalised, no '..' or '.' parts; OcihookError otherwise."""
    if not path.startswith("/") or "\0" in path or path.endswith(" (deleted)"):
        raise OcihookError(f"{what} {path!r} is not an absolute cgroup path of a live cgroup")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise OcihookError(f"{what} {path!r} contains '.' or '..'")
    return "/" + "/".join(parts)


def expand_slice(slice_name: str) -> str:
    """systemd slice to path: 'a-b-c.slice' -> 'a.slice/a-b.slice/a-b-c.slice', '-.slice' -> ''."""
    if slice_name == "-.slice":
        return ""
    stem = slice_name[: -len(".slice")] if slice_name.endswith(".slice") else ""
    if not stem or "/" in slice_name or any(not part for part in stem.split("-")):
        raise OcihookError(f"cgroupsPath slice {slice_name!r} is not a valid systemd slice name")
    words = stem.split("-")
    return "/".join("-".join(words[: i + 1]) + ".slice" for i in range(len(words)))


def systemd_unit(cgroups_path: str | None) -> str | None:
    """The systemd unit a 'slice:prefix:name' cgroupsPath names (the systemd cgroup
    manager): 'prefix-name.scope', or name when it is a slice; None for a cgroupfs path."""
    if not cgroups_path or ":" not in cgroups_path:
        return None
    parts = cgroups_path.split(":")
    if len(parts) != 3 or not parts[2]:
        raise OcihookError(f"cgroupsPath {cgroups_path!r} is not of the form slice:prefix:name")
    _, prefix, name = parts
    if "/" in prefix or "/" in name or ".." in (prefix, name):
        raise OcihookError(f"cgroupsPath {cgroups_path!r} has '/' or '..' in prefix or name")
    if name.endswith(".slice"):
        return name
    return f"{prefix}-{name}.scope" if prefix else f"{name}.scope"


def expected_cgroup_path(cgroups_path: str) -> str:
    """config.json cgroupsPath to a cgroup path: '/a/b' as is, 'slice:prefix:name' as systemd."""
    unit = systemd_unit(cgroups_path)
    if unit is not None:
        slice_name = cgroups_path.split(":")[0]
        base = expand_slice(slice_name or "system.slice")
        return _clean_cgroup_path(f"/{base}/{unit}", "cgroupsPath")
    if any(p == ".." for p in cgroups_path.split("/")):
        raise OcihookError(f"cgroupsPath {cgroups_path!r} contains '..'")
    return _clean_cgroup_path("/" + cgroups_path.lstrip("/"), "cgroupsPath")


def _same_cgroup(actual: str, expected: str) -> bool:
    """Equal, or `actual` ends with `expected` (both clean): nested or relative cgroupsPath."""
    return actual == expected or (expected != "/" and actual.endswith(expected))


CGROUP_FSTYPES = ("cgroup", "cgroup2")  # the mount table lines find_container_cgroup reads


def _pick_mount(mounts: list[mountinfo.Entry]) -> tuple[str, mountinfo.Entry | None]:
    """("v1", devices mount) when the devices controller is on v1, else ("v2", cgroup2 mount)."""
    for m in mounts:
        if m.fstype == "cgroup" and "devices" in m.options:
            return "v1", m
    for m in mounts:
        if m.fstype == "cgroup2":
            return "v2", m
    return "v2", None


def runtime_subgroup(annotations: dict[str, str] | None) -> str | None:
    """The subgroup of its scope crun runs a container in (systemd manager, cgroup v2): the
    `run.oci.systemd.subgroup` annotation (empty: none), else "container"; one path part."""
    name = (annotations or {}).get(SUBGROUP_ANNOTATION, DEFAULT_SUBGROUP)
    if not name:
        return None
    if "/" in name or name in (".", "..") or "\0" in name:
        raise OcihookError(f"annotation {SUBGROUP_ANNOTATION} {name!r} is not one cgroup name")
    return name


def find_container_cgroup(
    pid: int,
    cgroups_path: str | None = None,
    proc: str = "/proc",
    mounts: list[mountinfo.Entry] | None = None,
    annotations: dict[str, str] | None = None,
) -> CgroupTarget:
    """The device cgroup of process `pid`, cross-checked with config.json's cgroupsPath.
    `mounts`: our mount table's cgroup mounts, when the caller has read it already
    (`mountinfo.parse(text, CGROUP_FSTYPES)`; other entries are ignored).
    `annotations`: the container's (config.json and state), for crun's subgroup."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise OcihookError(f"container pid {pid!r} is not a positive integer")
    text = _read(f"{proc}/{pid}/cgroup", f"container process {pid} not found")
    if mounts is None:
        mounts = mountinfo.parse(_read(f"{proc}/self/mountinfo", "mounts"), CGROUP_FSTYPES)
    version, mount = _pick_mount([e for e in mounts if e.fstype in CGROUP_FSTYPES])
    if mount is None:
        raise OcihookError("no cgroup2 mount and no cgroup v1 devices controller mount found")
    cg = _clean_cgroup_path(_proc_cgroup_path(text, version, pid), f"cgroup of process {pid}")
    root = mount.root.rstrip("/")
    if cg != root and not cg.startswith(root + "/"):
        raise OcihookError(f"cgroup {cg} of process {pid} is outside the {mount.point} mount")
    rel = cg[len(root) :].rstrip("/")
    if not rel:
        raise OcihookError(f"process {pid} is in the root cgroup; refusing to touch host devices")
    scope = None
    if cgroups_path:
        expected = expected_cgroup_path(cgroups_path)
        if not _same_cgroup(cg, expected):
            subgroup = runtime_subgroup(annotations) if version == "v2" else None
            parent, _, last = cg.rpartition("/")
            if not (":" in cgroups_path and subgroup == last and _same_cgroup(parent, expected)):
                raise OcihookError(
                    f"cgroupsPath {cgroups_path!r} ({expected}) does not match "
                    f"the cgroup {cg} of process {pid}"
                )
            scope = mount.point.rstrip("/") + parent[len(root) :]
    path = mount.point.rstrip("/") + rel
    for directory in [path] if scope is None else [path, scope]:
        fd = _open_dir(directory, f"cgroup of process {pid}")
        try:
            if os.fstat(fd).st_dev != mount.dev:
                raise OcihookError(
                    f"cgroup directory {directory} is not on the {mount.point} cgroup mount"
                )
        finally:
            os.close(fd)
    return CgroupTarget(version, path, scope, systemd_unit(cgroups_path))


def _open_dir(path: str, what: str) -> int:
    """Open a cgroup directory with O_DIRECTORY|O_NOFOLLOW; OcihookError if it is missing."""
    if not path.startswith("/") or any(p in (".", "..") for p in path.split("/")):
        raise OcihookError(f"{what}: {path!r} is not a clean absolute path")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        raise OcihookError(f"{what}: {path} does not exist") from None
    except OSError as exc:
        raise OcihookError(f"{what}: cannot open {path}: {exc.strerror}") from None


# ---------------------------------------------------------------------------
# Plan, apply, revert


def _unique(rules: list[DeviceRule]) -> list[DeviceRule]:
    """Checked rules, duplicates dropped, order kept."""
    out: list[DeviceRule] = []
    for rule in rules:
        if _checked(rule) not in out:
            out.append(rule)
    return out


def plan_device_edits(target: CgroupTarget, rules: list[DeviceRule]) -> list[DeviceEdit]:
    """What allow_devices will do (one edit per rule and gating cgroup, duplicates
    dropped); no side effect."""
    if target.version not in ("v1", "v2"):
        raise OcihookError(f"cgroup version {target.version!r} is not 'v1' or 'v2'")
    action = V1_ACTION if target.version == "v1" else V2_ACTION
    unique = _unique(rules)
    return [DeviceEdit(target.version, d, action, r) for d in target.dirs() for r in unique]


def allow_devices(target: CgroupTarget, rules: list[DeviceRule], log=None) -> list[DeviceEdit]:
    """Let the container use these devices; returns the edits made: the plan's, then the
    systemd unit's DeviceAllow= entries added (systemd cgroup manager). A unit that cannot
    be told undoes the cgroup edits and refuses (OcihookError); `log(line)` says where
    nothing needed telling."""
    edits = _allow_cgroup(target, rules)
    if target.unit is None or not edits:
        return edits
    try:
        return edits + _allow_unit(target, [e.rule for e in edits if e.path == target.path], log)
    except BaseException:
        try:
            revert_device_edits(target, edits)
        except OcihookError:
            pass  # the unit's error is the one the runtime shows
        raise


def _allow_unit(target: CgroupTarget, rules: list[DeviceRule], log) -> list[DeviceEdit]:
    """The rules added to the unit's runtime DeviceAllow= (systemd.py)."""
    from ocihook.cgroups import systemd  # the D-Bus client: only under the systemd cgroup manager

    unit = str(target.unit)
    if not systemd.booted():
        if log is not None:
            log(
                f"systemd unit {unit}: systemd is not PID 1 ({systemd.BOOTED_DIR} is absent): "
                "no unit to tell, the device rules are in the cgroup only"
            )
        return []
    granted = systemd.allow_unit_devices(unit, rules, log)
    edits = [
        DeviceEdit("systemd", unit, UNIT_ACTION, r)
        for r in rules
        if (systemd.device_path(r), r.access) in granted.added
    ]
    if granted.unit.device_programs():  # crun 1.23+: systemd re-attaches a pinned program
        from ocihook.cgroups import pinned

        pins, dropin = pinned.extend(unit, granted.unit.programs, rules)
        edits += [DeviceEdit("systemd", unit, PIN_ACTION, r) for r in rules]
        if log is not None:
            log(
                f"systemd unit {unit}: its device program (BPFProgram=device:"
                f"{', '.join(granted.unit.device_programs())}) extended as {', '.join(pins)}, "
                f"which {dropin} names on the unit from the next daemon-reload on"
            )
    return edits


def _allow_cgroup(target: CgroupTarget, rules: list[DeviceRule]) -> list[DeviceEdit]:
    """The cgroup's own edits (v1 devices.allow, v2 BPF prepend); same as the plan."""
    edits = plan_device_edits(target, rules)
    if not edits:
        return []
    if target.version == "v1":
        fd = _open_dir(target.path, "cgroup v1")
        try:
            _v1_allow(fd, target.path, [e.rule.line() for e in edits])
        finally:
            os.close(fd)
        return edits
    from ocihook.cgroups import v2  # the BPF code: only on cgroup v2 hosts

    rules = [e.rule for e in edits if e.path == target.path]
    done: list[str] = []
    extended = 0
    try:
        for directory in target.dirs():
            fd = _open_dir(directory, "cgroup v2")
            try:
                extended += v2.prepend(fd, directory, rules, required=target.scope is None)
            finally:
                os.close(fd)
            done.append(directory)
        if not extended:
            raise OcihookError(
                f"cgroup v2 {target.path} and its scope {target.scope}: no device program "
                "attached (the runtime always attaches one); refusing to guess what restricts "
                "devices"
            )
    except BaseException:
        _v2_strip(done, rules)
        raise
    return edits


def _v2_strip(dirs: list[str], rules: list[DeviceRule]) -> None:
    """Undo prepend in each of `dirs`; raises the first failure after trying them all."""
    from ocihook.cgroups import v2

    first: OcihookError | None = None
    for directory in dirs:
        try:
            fd = _open_dir(directory, "cgroup v2")
            try:
                v2.strip(fd, directory, rules)
            finally:
                os.close(fd)
        except OcihookError as error:
            first = first or error
    if first is not None:
        raise first


def revert_device_edits(target: CgroupTarget, edits: list[DeviceEdit]) -> None:
    """Best-effort undo of allow_devices; raises OcihookError only if an undo step failed.
    The unit's DeviceAllow= entries stay (systemd drops a transient unit's properties with
    the failed container's scope); our pinned programs and their drop-in go."""
    failed: list[str] = []
    units = sorted({e.path for e in edits if e.action == PIN_ACTION})
    if units:
        from ocihook.cgroups import pinned

        failed = [f for unit in units for f in pinned.remove(unit)]
    _revert_cgroup(target, edits)
    if failed:
        raise OcihookError(f"cannot remove {'; '.join(failed)}")


def _revert_cgroup(target: CgroupTarget, edits: list[DeviceEdit]) -> None:
    """Undo the cgroup's own edits (v1 devices.deny, v2 strip)."""
    dirs = target.dirs()
    mine = [e for e in edits if e.cgroup == target.version and e.path in dirs]
    if not mine:
        return
    if target.version == "v1":
        fd = _open_dir(target.path, "cgroup v1")
        try:
            lines = [e.rule.line() for e in mine if e.path == target.path]
            _v1_write_all(fd, target.path, "devices.deny", lines, stop=False)
        finally:
            os.close(fd)
        return
    by_dir = [d for d in dirs if any(e.path == d for e in mine)]
    _v2_strip(by_dir, [e.rule for e in mine if e.path == by_dir[0]])


# ---------------------------------------------------------------------------
# cgroup v1


def _v1_write(dir_fd: int, name: str, line: str) -> None:
    """One write of one line to a devices.* file of the cgroup dir."""
    fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _v1_write_all(dir_fd: int, path: str, name: str, lines: list[str], stop: bool) -> int:
    """Write each line; on error raise at once (stop) or after trying all. Returns lines done."""
    first: str | None = None
    done = 0
    for line in lines:
        try:
            _v1_write(dir_fd, name, line)
            done += 1
        except OSError as exc:
            msg = f"cannot write {line!r} to {path}/{name}: {exc.strerror}"
            if exc.errno == errno.EPERM and name == "devices.allow":
                msg += " (the parent cgroup does not allow it)"
            if stop:
                raise OcihookError(msg) from None
            first = first or msg
    if first:
        raise OcihookError(first)
    return done


def _v1_allow(dir_fd: int, path: str, lines: list[str]) -> None:
    """Allow every line, or none: undo the ones written when one fails."""
    done: list[str] = []
    try:
        for line in lines:
            _v1_write_all(dir_fd, path, "devices.allow", [line], stop=True)
            done.append(line)
    except OcihookError:
        try:
            _v1_write_all(dir_fd, path, "devices.deny", done, stop=False)
        except OcihookError:
            pass
        raise


def update_warning(edits: list[DeviceEdit], runtime: str, crio: bool) -> str | None:
    """The line to log when a later `podman update` will drop these grants, else None:
    podman 5.4+ sends crun podman's own device list, and crun rebuilds its device program
    from it unless it pinned one that systemd attaches (crun 1.23+, PIN_ACTION); runc leaves
    the device rules alone, CRI-O sends no device list (docs/cgroups.md, "Which runtime
    keeps what"). `runtime`: the name of the runtime that ran the hook."""
    if crio or runtime != "crun" or not edits or any(e.action == PIN_ACTION for e in edits):
        return None
    return (
        "warning: a podman update (podman 5.4 and later) drops these devices: crun rebuilds "
        "its device program from podman's own device list (crun before 1.23, or under "
        "cgroupfs); runc and crun 1.23+ under systemd keep them (docs/cgroups.md)"
    )
