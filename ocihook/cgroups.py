"""Device cgroup: find a container's cgroup and let it use the devices we inject.

cgroup v1 (the ``devices`` controller, also on hybrid hosts): one ``devices.allow`` write per rule.
cgroup v2: the runtime's BPF_PROG_TYPE_CGROUP_DEVICE program is replaced, atomically, by a copy
that starts with our allow rules and then runs the runtime's own instructions unchanged.
"""

from __future__ import annotations

import errno
import os

from ocihook import bpf, mountinfo
from ocihook.errors import OcihookError
from ocihook.slots import Struct

V1_ACTION = "devices.allow"
V2_ACTION = "bpf-prepend-allow"


class DeviceRule(Struct):
    """One device the container may use: type "c"/"b", numbers (-1: any), access in "rwm"."""

    __slots__ = ("type", "major", "minor", "access")

    type: str
    major: int
    minor: int
    access: str

    def as_tuple(self) -> bpf.Rule:
        """The plain tuple the assembler takes."""
        return (self.type, self.major, self.minor, self.access)

    def line(self) -> str:
        """The cgroup v1 syntax, e.g. 'c 10:237 rw'."""
        return bpf.format_rule(self.as_tuple())


class CgroupTarget(Struct):
    """A container's cgroup directory: version "v1" (devices controller) or "v2"."""

    __slots__ = ("version", "path")

    version: str
    path: str


def parse_rule(line: str) -> DeviceRule:
    """'c 10:237 rw' -> DeviceRule('c', 10, 237, 'rw'); '*' stands for any number."""
    try:
        dtype, numbers, access = line.split()
        major, minor = (-1 if v == "*" else int(v) for v in numbers.split(":"))
    except ValueError:
        raise OcihookError(f"device rule {line!r} is not of the form 'c MAJOR:MINOR rwm'") from None
    return _checked(DeviceRule(dtype, major, minor, access))


def _checked(rule: DeviceRule) -> DeviceRule:
    """The rule itself, or OcihookError naming what is wrong with it."""
    if not isinstance(rule.major, int) or not isinstance(rule.minor, int):
        raise OcihookError(f"device rule {rule!r}: major and minor must be integers")
    try:
        bpf.check_rule(rule.as_tuple())
    except ValueError as exc:
        raise OcihookError(f"device rule {rule.type} {rule.major}:{rule.minor}: {exc}") from None
    return rule


# ---------------------------------------------------------------------------
# Finding the container's cgroup


def _cgroup_mounts(text: str) -> list[mountinfo.Entry]:
    """The cgroup and cgroup2 mounts in a mountinfo text, in order."""
    return [e for e in mountinfo.parse(text) if e.fstype in ("cgroup", "cgroup2")]


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


def expected_cgroup_path(cgroups_path: str) -> str:
    """config.json cgroupsPath to a cgroup path: '/a/b' as is, 'slice:prefix:name' as systemd."""
    if ":" in cgroups_path:
        parts = cgroups_path.split(":")
        if len(parts) != 3 or not parts[2]:
            raise OcihookError(f"cgroupsPath {cgroups_path!r} is not of the form slice:prefix:name")
        slice_name, prefix, name = parts
        if "/" in prefix or "/" in name or ".." in (prefix, name):
            raise OcihookError(f"cgroupsPath {cgroups_path!r} has '/' or '..' in prefix or name")
        if name.endswith(".slice"):
            unit = name
        else:
            unit = f"{prefix}-{name}.scope" if prefix else f"{name}.scope"
        base = expand_slice(slice_name or "system.slice")
        return _clean_cgroup_path(f"/{base}/{unit}", "cgroupsPath")
    if any(p == ".." for p in cgroups_path.split("/")):
        raise OcihookError(f"cgroupsPath {cgroups_path!r} contains '..'")
    return _clean_cgroup_path("/" + cgroups_path.lstrip("/"), "cgroupsPath")


def _same_cgroup(actual: str, expected: str) -> bool:
    """Equal, or `actual` ends with `expected` (both clean): nested or relative cgroupsPath."""
    return actual == expected or (expected != "/" and actual.endswith(expected))


def _pick_mount(mounts: list[mountinfo.Entry]) -> tuple[str, mountinfo.Entry | None]:
    """("v1", devices mount) when the devices controller is on v1, else ("v2", cgroup2 mount)."""
    for m in mounts:
        if m.fstype == "cgroup" and "devices" in m.options:
            return "v1", m
    for m in mounts:
        if m.fstype == "cgroup2":
            return "v2", m
    return "v2", None


def find_container_cgroup(
    pid: int, cgroups_path: str | None = None, proc: str = "/proc"
) -> CgroupTarget:
    """The device cgroup of process `pid`, cross-checked with config.json's cgroupsPath."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise OcihookError(f"container pid {pid!r} is not a positive integer")
    text = _read(f"{proc}/{pid}/cgroup", f"container process {pid} not found")
    version, mount = _pick_mount(_cgroup_mounts(_read(f"{proc}/self/mountinfo", "mounts")))
    if mount is None:
        raise OcihookError("no cgroup2 mount and no cgroup v1 devices controller mount found")
    cg = _clean_cgroup_path(_proc_cgroup_path(text, version, pid), f"cgroup of process {pid}")
    root = mount.root.rstrip("/")
    if cg != root and not cg.startswith(root + "/"):
        raise OcihookError(f"cgroup {cg} of process {pid} is outside the {mount.point} mount")
    rel = cg[len(root) :].rstrip("/")
    if not rel:
        raise OcihookError(f"process {pid} is in the root cgroup; refusing to touch host devices")
    if cgroups_path:
        expected = expected_cgroup_path(cgroups_path)
        if not _same_cgroup(cg, expected):
            raise OcihookError(
                f"cgroupsPath {cgroups_path!r} ({expected}) does not match "
                f"the cgroup {cg} of process {pid}"
            )
    path = mount.point.rstrip("/") + rel
    fd = _open_dir(path, f"cgroup of process {pid}")
    try:
        if os.fstat(fd).st_dev != mount.dev:
            raise OcihookError(f"cgroup directory {path} is not on the {mount.point} cgroup mount")
    finally:
        os.close(fd)
    return CgroupTarget(version, path)


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


def plan_device_edits(target: CgroupTarget, rules: list[DeviceRule]) -> list[dict]:
    """What allow_devices will do, as plain data (one entry per rule); no side effect."""
    if target.version not in ("v1", "v2"):
        raise OcihookError(f"cgroup version {target.version!r} is not 'v1' or 'v2'")
    action = V1_ACTION if target.version == "v1" else V2_ACTION
    return [
        {"cgroup": target.version, "path": target.path, "action": action, "rule": r.line()}
        for r in _unique(rules)
    ]


def allow_devices(target: CgroupTarget, rules: list[DeviceRule]) -> list[dict]:
    """Let the container use these devices; returns the edits made (same as the plan)."""
    edits = plan_device_edits(target, rules)
    if not edits:
        return []
    fd = _open_dir(target.path, f"cgroup {target.version}")
    try:
        lines = [e["rule"] for e in edits]
        if target.version == "v1":
            _v1_allow(fd, target.path, lines)
        else:
            _v2_prepend(fd, target.path, [parse_rule(x).as_tuple() for x in lines])
    finally:
        os.close(fd)
    return edits


def revert_device_edits(target: CgroupTarget, edits: list[dict]) -> None:
    """Best-effort undo of allow_devices; raises OcihookError only if an undo step failed."""
    mine = [e for e in edits if e.get("cgroup") == target.version and e.get("path") == target.path]
    if not mine:
        return
    fd = _open_dir(target.path, f"cgroup {target.version}")
    try:
        lines = [e["rule"] for e in mine]
        if target.version == "v1":
            _v1_write_all(fd, target.path, "devices.deny", lines, stop=False)
        else:
            _v2_strip(fd, target.path, [parse_rule(x).as_tuple() for x in lines])
    finally:
        os.close(fd)


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


# ---------------------------------------------------------------------------
# cgroup v2


class _Prog(Struct):
    __slots__ = ("id", "fd", "info")
    id: int
    fd: int
    info: bpf.ProgInfo


def _v2_programs(cg_fd: int, path: str) -> tuple[int, list[_Prog]]:
    """(attach flags, programs) attached to the cgroup itself; caller closes the fds."""
    try:
        flags, ids = bpf.prog_query(cg_fd)
    except bpf.BpfError as exc:
        msg = f"cgroup v2 {path}: cannot list device programs: {exc.strerror}"
        raise OcihookError(msg) from None
    progs: list[_Prog] = []
    try:
        for prog_id in ids:
            fd = bpf.prog_fd_by_id(prog_id)
            try:
                progs.append(_Prog(prog_id, fd, bpf.prog_info(fd)))
            except bpf.BpfError:
                os.close(fd)
                raise
    except bpf.BpfError as exc:
        _close(progs)
        msg = f"cgroup v2 {path}: cannot read device program: {exc.strerror}"
        raise OcihookError(msg) from None
    return flags, progs


def _close(progs: list[_Prog]) -> None:
    for p in progs:
        os.close(p.fd)


def _original_insns(prog: _Prog, path: str) -> list[bpf.Insn]:
    """The program's instructions if they can be loaded again, else OcihookError."""
    info = prog.info
    problem = None
    if info.type != bpf.BPF_PROG_TYPE_CGROUP_DEVICE:
        problem = f"has type {info.type}, not cgroup device"
    elif info.xlated is None:
        problem = "instructions are not readable (net.core.bpf_jit_harden blinds them?)"
    elif info.nr_map_ids:
        problem = "uses maps"
    else:
        problem = bpf.reloadable_problem(info.xlated)
    if problem:
        msg = f"cgroup v2 {path}: device program {prog.id} {problem}; cannot extend it"
        raise OcihookError(msg)
    return list(info.xlated or [])


def _swap(cg_fd: int, flags: int, old_fd: int, new_fd: int) -> None:
    """Replace old by new on the cgroup: atomically when possible, else attach then detach."""
    if not flags & bpf.BPF_F_ALLOW_MULTI:
        bpf.prog_attach(cg_fd, new_fd, flags)  # single-program mode replaces in place
        return
    try:
        bpf.prog_attach(cg_fd, new_fd, bpf.BPF_F_ALLOW_MULTI, replace_fd=old_fd)
        return
    except bpf.BpfError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: no BPF_F_REPLACE before Linux 5.6
            raise
    bpf.prog_attach(cg_fd, new_fd, bpf.BPF_F_ALLOW_MULTI)
    try:
        bpf.prog_detach(cg_fd, old_fd)
    except bpf.BpfError:
        bpf.prog_detach(cg_fd, new_fd)
        raise


def _replace_all(cg_fd: int, path: str, flags: int, pairs: list[tuple[_Prog, int]]) -> None:
    """Swap every (old, new fd) pair; if one fails, swap back those done and raise."""
    done: list[tuple[_Prog, int]] = []
    for old, new_fd in pairs:
        try:
            _swap(cg_fd, flags, old.fd, new_fd)
        except bpf.BpfError as exc:
            for prev, prev_new in reversed(done):
                try:
                    _swap(cg_fd, flags, prev_new, prev.fd)
                except bpf.BpfError:
                    pass
            raise OcihookError(
                f"cgroup v2 {path}: cannot replace device program {old.id}: {exc.strerror}"
            ) from None
        done.append((old, new_fd))


def _load(insns: list[bpf.Insn], old: _Prog, path: str) -> int:
    """Load a program with a license as GPL-compatible as the one it replaces."""
    license = "GPL" if old.info.gpl_compatible else "Apache"
    try:
        return bpf.prog_load(insns, license)
    except bpf.BpfError as exc:
        raise OcihookError(
            f"cgroup v2 {path}: kernel refused the new device program: {exc.strerror}"
        ) from None


def _rewrite(cg_fd: int, path: str, make, required: bool = True) -> None:
    """Load make(old instructions) for each attached program, then swap them all in."""
    flags, progs = _v2_programs(cg_fd, path)
    new_fds: list[int] = []
    try:
        if not progs and required:
            raise OcihookError(
                f"cgroup v2 {path}: no device program attached (runc always attaches one); "
                "refusing to guess what restricts devices"
            )
        pairs = []
        for prog in progs:
            insns = make(_original_insns(prog, path))
            if insns is None:
                continue
            new_fds.append(_load(insns, prog, path))
            pairs.append((prog, new_fds[-1]))
        _replace_all(cg_fd, path, flags, pairs)
    finally:
        for fd in new_fds:
            os.close(fd)
        _close(progs)


def _v2_prepend(cg_fd: int, path: str, rules: list[bpf.Rule]) -> None:
    """Put our allow blocks in front of every device program of the cgroup."""
    prefix = bpf.allow_prefix(rules)
    _rewrite(cg_fd, path, lambda old: prefix + old)


def _v2_strip(cg_fd: int, path: str, rules: list[bpf.Rule]) -> None:
    """Remove our allow blocks from the programs that start with them."""
    prefix = bpf.allow_prefix(rules)
    n = len(prefix)

    def make(old: list[bpf.Insn]) -> list[bpf.Insn] | None:
        return old[n:] if old[:n] == prefix and len(old) > n else None

    _rewrite(cg_fd, path, make, required=False)


def describe_device_access(target: CgroupTarget) -> list[dict]:
    """For `ocihook plan` and debugging: v1 devices.list, or the v2 device programs decoded."""
    fd = _open_dir(target.path, f"cgroup {target.version}")
    try:
        if target.version == "v1":
            return [{"devices.list": _read_at(fd, target.path, "devices.list").splitlines()}]
        _flags, progs = _v2_programs(fd, target.path)
    finally:
        os.close(fd)
    try:
        return [_describe(p) for p in progs]
    finally:
        _close(progs)


def _read_at(dir_fd: int, path: str, name: str) -> str:
    """A small file of the cgroup dir, opened relative to it."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        raise OcihookError(f"cannot read {path}/{name}: {exc.strerror}") from None
    with os.fdopen(fd) as f:
        return f.read()


def _describe(prog: _Prog) -> dict:
    """One device program as plain data: its allow/deny rules in order and the default."""
    dec = bpf.decode_device_filter(prog.info.xlated or [])
    default = None if dec.default_allow is None else ("allow" if dec.default_allow else "deny")
    return {
        "id": prog.id,
        "name": prog.info.name,
        "rules": [("allow " if a else "deny ") + bpf.format_rule(r) for r, a in dec.rules],
        "default": default,
        "undecoded": dec.undecoded,
    }
