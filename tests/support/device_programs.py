"""A test oracle: reads back cgroup v2 device programs (ours and runc's) and describes a
cgroup's device access. The hook itself never decodes programs (it prepends its own rule
blocks and strips exactly those again), so the decoder lives with the tests."""

from __future__ import annotations

import os

from ocihook.cgroups.bpf import (
    ALU32_AND_K,
    ALU32_MOV_K,
    ALU32_MOV_X,
    ALU64_MOV_K,
    JMP32_JNE_K,
    JMP32_JNE_X,
    JMP_EXIT,
    JMP_JNE_K,
    JMP_JNE_X,
    R0,
    R2,
    R3,
    R4,
    R5,
    Insn,
    prologue,
)
from ocihook.cgroups.grant import CgroupTarget, _open_dir
from ocihook.cgroups.v2 import _close, _Prog, programs
from ocihook.errors import OcihookError
from ocihook.plan.devrules import ACCESS_BITS, TYPE_CODES, DeviceRule
from ocihook.structs import Struct

# Decoder: reads back programs in this layout (ours and runc's, whose blocks use R1 as
# scratch). Returns the rules in order and the default; unknown code ends the decoding.


class Decoded(Struct):
    """What a device program does: (rule, allow) in order, then the default (None: unknown)."""

    __slots__ = ("rules", "default_allow", "undecoded")

    rules: tuple[tuple[DeviceRule, bool], ...]
    default_allow: bool | None
    undecoded: int  # instructions not understood (0 when the whole program was decoded)


_JNE_K = (JMP_JNE_K, JMP32_JNE_K)
_JNE_X = (JMP_JNE_X, JMP32_JNE_X)
_MOV_K = (ALU32_MOV_K, ALU64_MOV_K)


def _match_prologue(insns: list[Insn], i: int) -> int:
    """Length of a prologue at i (0 when there is none)."""
    want = prologue()
    if [tuple(x) for x in insns[i : i + len(want)]] == want:
        return len(want)
    return 0


def _match_block(insns: list[Insn], i: int) -> tuple[DeviceRule, bool, int] | None:
    """Decode one rule block at i: (rule, allow, length) or None."""
    j, dtype, mask, major, minor, jumps = i, None, 7, -1, -1, []
    n = len(insns)
    if j < n and insns[j][0] in _JNE_K and insns[j][1] == R2:
        dtype = {v: k for k, v in TYPE_CODES.items()}.get(insns[j][4])
        jumps.append(j)
        j += 1
    if dtype is None:
        return None
    if (
        j + 2 < n
        and insns[j][0] == ALU32_MOV_X
        and insns[j][2] == R3
        and insns[j + 1][0] == ALU32_AND_K
        and insns[j + 1][1] == insns[j][1]
        and insns[j + 2][0] in _JNE_X
        and insns[j + 2][1:3] == (insns[j][1], R3)
    ):
        mask = insns[j + 1][4] & 7
        jumps.append(j + 2)
        j += 3
    if j < n and insns[j][0] in _JNE_K and insns[j][1] == R4:
        major = insns[j][4]
        jumps.append(j)
        j += 1
    if j < n and insns[j][0] in _JNE_K and insns[j][1] == R5:
        minor = insns[j][4]
        jumps.append(j)
        j += 1
    if not (j + 1 < n and insns[j][0] in _MOV_K and insns[j][1] == R0):
        return None
    if insns[j + 1][0] != JMP_EXIT or insns[j][4] not in (0, 1):
        return None
    end = j + 2
    if any(k + 1 + insns[k][3] != end for k in jumps):
        return None
    access = "".join(ch for ch in "rwm" if mask & ACCESS_BITS[ch])
    return DeviceRule(dtype, major, minor, access), bool(insns[j][4]), end - i


def decode_device_filter(insns: list[Insn]) -> Decoded:
    """Decode a device program built like ours or runc's (prefixes included)."""
    rules: list[tuple[DeviceRule, bool]] = []
    i, n, seen_prologue = 0, len(insns), False
    while i < n:
        p = _match_prologue(insns, i)
        if p:
            i, seen_prologue = i + p, True
            continue
        if not seen_prologue:
            break
        block = _match_block(insns, i)
        if block:
            rules.append((block[0], block[1]))
            i += block[2]
            continue
        last = insns[i : i + 2]
        if len(last) == 2 and last[0][0] in _MOV_K and last[0][1] == R0 and last[1][0] == JMP_EXIT:
            if i + 2 == n and last[0][4] in (0, 1):
                return Decoded(tuple(rules), bool(last[0][4]), 0)
        break
    return Decoded(tuple(rules), None, n - i)


def describe_device_access(target: CgroupTarget) -> list[dict]:
    """For `ocihook plan` and debugging: v1 devices.list, or the v2 device programs decoded."""
    fd = _open_dir(target.path, f"cgroup {target.version}")
    try:
        if target.version == "v1":
            return [{"devices.list": _read_at(fd, target.path, "devices.list").splitlines()}]
        _flags, progs = programs(fd, target.path)
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
    dec = decode_device_filter(prog.info.xlated or [])
    default = None if dec.default_allow is None else ("allow" if dec.default_allow else "deny")
    return {
        "id": prog.id,
        "name": prog.info.name,
        "rules": [("allow " if a else "deny ") + r.line() for r, a in dec.rules],
        "default": default,
        "undecoded": dec.undecoded,
    }
