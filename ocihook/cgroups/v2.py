"""cgroup v2 device access: the runtime's BPF_PROG_TYPE_CGROUP_DEVICE program is replaced,
atomically, by a copy that starts with our allow rules and then runs the runtime's own
instructions unchanged; and stripped again on rollback. Imported by cgroups.py on v2 hosts only
(bpf and its ctypes structures are not needed on v1)."""

from __future__ import annotations

import errno
import os

from ocihook.cgroups import bpf
from ocihook.errors import OcihookError
from ocihook.structs import Struct


class _Prog(Struct):
    __slots__ = ("id", "fd", "info")
    id: int
    fd: int
    info: bpf.ProgInfo


def programs(cg_fd: int, path: str) -> tuple[int, list[_Prog]]:
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
    return reloadable_insns(prog.info, f"cgroup v2 {path}: device program {prog.id}")


def reloadable_insns(info: bpf.ProgInfo, what: str) -> list[bpf.Insn]:
    """A device program's instructions if they can be loaded again, else OcihookError
    naming `what` (the program: where it is attached or pinned)."""
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
        raise OcihookError(f"{what} {problem}; cannot extend it")
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


def _rewrite(cg_fd: int, path: str, make, required: bool = True) -> int:
    """Load make(old instructions) for each attached program, then swap them all in;
    returns how many were swapped."""
    flags, progs = programs(cg_fd, path)
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
        return len(pairs)
    finally:
        for fd in new_fds:
            os.close(fd)
        _close(progs)


def prepend(cg_fd: int, path: str, rules: list[bpf.DeviceRule], required: bool = True) -> int:
    """Put our allow blocks in front of every device program of the cgroup; returns how
    many programs there were (`required`: none is an error)."""
    prefix = bpf.allow_prefix(rules)
    return _rewrite(cg_fd, path, lambda old: prefix + old, required)


def strip(cg_fd: int, path: str, rules: list[bpf.DeviceRule]) -> None:
    """Remove our allow blocks from the programs that start with them."""
    prefix = bpf.allow_prefix(rules)
    n = len(prefix)

    def make(old: list[bpf.Insn]) -> list[bpf.Insn] | None:
        return old[n:] if old[:n] == prefix and len(old) > n else None

    _rewrite(cg_fd, path, make, required=False)
