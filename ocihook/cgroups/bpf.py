"""bpf(2) through ctypes, plus a tiny assembler and decoder for cgroup device programs.

Only what the device cgroup code needs: load a BPF_PROG_TYPE_CGROUP_DEVICE program, query,
fetch, attach, replace and detach the programs of a cgroup. Instructions are plain tuples
``(code, dst, src, off, imm)``; device rules are `devrules.DeviceRule`s, the plan's own
(``type`` "c" or "b", ``access`` a subset of "rwm", -1 for a wildcard major or minor).
"""

from __future__ import annotations

import ctypes
import errno as _errno
import os
import struct
import sys

from ocihook.linux import syscalls
from ocihook.plan.devrules import TYPE_CODES, DeviceRule, access_mask, check_rule
from ocihook.structs import Struct

Insn = tuple[int, int, int, int, int]

# bpf(2) system call numbers by machine (uname -m).

# Commands.
BPF_PROG_LOAD = 5
BPF_OBJ_PIN = 6
BPF_OBJ_GET = 7
BPF_PROG_ATTACH = 8
BPF_PROG_DETACH = 9
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_PROG_QUERY = 16

BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
BPF_F_ALLOW_OVERRIDE = 1
BPF_F_ALLOW_MULTI = 2
BPF_F_REPLACE = 4

# struct bpf_cgroup_dev_ctx: u32 access_type ((access << 16) | type); u32 major; u32 minor.

# Opcodes used by the assembler (class | op | source).
LDX_MEM_W = 0x61  # BPF_LDX | BPF_MEM | BPF_W
ALU32_AND_K = 0x54
ALU32_RSH_K = 0x74
ALU32_MOV_K = 0xB4
ALU32_MOV_X = 0xBC
ALU64_MOV_K = 0xB7
JMP_JNE_K = 0x55
JMP_JNE_X = 0x5D
JMP32_JNE_K = 0x56
JMP32_JNE_X = 0x5E
JMP_JA = 0x05
JMP_EXIT = 0x95
JMP_CALL = 0x85
LD_IMM64 = 0x18

_JUMPS = (JMP_JNE_K, JMP_JNE_X, JMP32_JNE_K, JMP32_JNE_X)
R0, R1, R2, R3, R4, R5 = range(6)

_INSN = struct.Struct("=BBhi")
_LITTLE = sys.byteorder == "little"


class BpfError(OSError):
    """A failed bpf(2) call: errno plus the command that failed (and a verifier line)."""


# ---------------------------------------------------------------------------
# Encoding


def encode(insns: list[Insn]) -> bytes:
    """Pack instructions into the kernel's struct bpf_insn layout."""
    out = bytearray()
    for code, dst, src, off, imm in insns:
        regs = (src << 4 | dst) if _LITTLE else (dst << 4 | src)
        out += _INSN.pack(code, regs, off, imm)
    return bytes(out)


def decode(raw: bytes) -> list[Insn]:
    """Unpack struct bpf_insn records into instruction tuples."""
    insns = []
    for code, regs, off, imm in _INSN.iter_unpack(raw):
        dst, src = (regs & 0xF, regs >> 4) if _LITTLE else (regs >> 4, regs & 0xF)
        insns.append((code, dst, src, off, imm))
    return insns


# ---------------------------------------------------------------------------
# Assembler: the same block layout as runc's device filter, but R1 (the context) is kept
# intact, so that our blocks can be put in front of another program unchanged.


def prologue() -> list[Insn]:
    """R2 = type, R3 = access, R4 = major, R5 = minor (R1, the context, untouched)."""
    return [
        (LDX_MEM_W, R2, R1, 0, 0),
        (ALU32_AND_K, R2, 0, 0, 0xFFFF),
        (LDX_MEM_W, R3, R1, 0, 0),
        (ALU32_RSH_K, R3, 0, 0, 16),
        (LDX_MEM_W, R4, R1, 4, 0),
        (LDX_MEM_W, R5, R1, 8, 0),
    ]


def rule_block(rule: DeviceRule, allow: bool = True) -> list[Insn]:
    """Instructions that return allow/deny when the rule matches, else fall through."""
    check_rule(rule)
    major, minor = rule.major, rule.minor
    mask = access_mask(rule.access)
    checks: list[Insn] = [(JMP_JNE_K, R2, 0, 0, TYPE_CODES[rule.type])]
    if mask != 7:
        # Requested access must be a subset of the rule's: (R3 & mask) == R3. R0 is scratch.
        checks += [(ALU32_MOV_X, R0, R3, 0, 0), (ALU32_AND_K, R0, 0, 0, mask)]
        checks.append((JMP_JNE_X, R0, R3, 0, 0))
    if major != -1:
        checks.append((JMP_JNE_K, R4, 0, 0, major))
    if minor != -1:
        checks.append((JMP_JNE_K, R5, 0, 0, minor))
    tail = [(ALU32_MOV_K, R0, 0, 0, int(allow)), (JMP_EXIT, 0, 0, 0, 0)]
    n = len(checks) + len(tail)
    # Every check jumps to the first instruction after this block.
    fixed = [
        (c, d, s, n - 1 - i if c in _JUMPS else off, imm)
        for i, (c, d, s, off, imm) in enumerate(checks)
    ]
    return fixed + tail


def allow_prefix(rules: list[DeviceRule]) -> list[Insn]:
    """Prologue plus one allow block per rule; falls through to whatever follows."""
    insns = prologue()
    for rule in rules:
        insns += rule_block(rule)
    return insns


def device_filter(rules: list[tuple[DeviceRule, bool]], default_allow: bool = False) -> list[Insn]:
    """A whole program like runc's: first matching rule decides, else the default."""
    insns = prologue()
    for rule, allow in rules:
        insns += rule_block(rule, allow)
    return insns + [(ALU32_MOV_K, R0, 0, 0, int(default_allow)), (JMP_EXIT, 0, 0, 0, 0)]


def reloadable_problem(insns: list[Insn]) -> str | None:
    """Why these (xlated) instructions cannot be loaded again as they are, or None."""
    if not insns:
        return "the kernel returned no instructions"
    for k, (code, dst, src, _off, _imm) in enumerate(insns):
        if code == 0 or dst > 10 or src > 10:
            return f"instruction {k} is not valid (blinded or hidden by the kernel?)"
        if code == JMP_CALL or code == LD_IMM64:
            return f"instruction {k} calls a helper or uses a map"
    if insns[-1][0] not in (JMP_EXIT, JMP_JA):
        return "the last instruction is not exit or ja"
    return None


# ---------------------------------------------------------------------------
# System calls


class _LoadAttr(ctypes.Structure):
    _fields_ = [
        ("prog_type", ctypes.c_uint32),
        ("insn_cnt", ctypes.c_uint32),
        ("insns", ctypes.c_uint64),
        ("license", ctypes.c_uint64),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_uint64),
        ("kern_version", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_name", ctypes.c_char * 16),
        ("prog_ifindex", ctypes.c_uint32),
        ("expected_attach_type", ctypes.c_uint32),
    ]


class _AttachAttr(ctypes.Structure):
    _fields_ = [
        ("target_fd", ctypes.c_uint32),
        ("attach_bpf_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("attach_flags", ctypes.c_uint32),
        ("replace_bpf_fd", ctypes.c_uint32),
    ]


class _ObjAttr(ctypes.Structure):
    _fields_ = [
        ("pathname", ctypes.c_uint64),
        ("bpf_fd", ctypes.c_uint32),
        ("file_flags", ctypes.c_uint32),
    ]


class _QueryAttr(ctypes.Structure):
    _fields_ = [
        ("target_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("query_flags", ctypes.c_uint32),
        ("attach_flags", ctypes.c_uint32),
        ("prog_ids", ctypes.c_uint64),
        ("prog_cnt", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
    ]


class _GetFdAttr(ctypes.Structure):
    _fields_ = [
        ("prog_id", ctypes.c_uint32),
        ("next_id", ctypes.c_uint32),
        ("open_flags", ctypes.c_uint32),
    ]


class _InfoAttr(ctypes.Structure):
    _fields_ = [
        ("bpf_fd", ctypes.c_uint32),
        ("info_len", ctypes.c_uint32),
        ("info", ctypes.c_uint64),
    ]


class _ProgInfo(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("tag", ctypes.c_uint8 * 8),
        ("jited_prog_len", ctypes.c_uint32),
        ("xlated_prog_len", ctypes.c_uint32),
        ("jited_prog_insns", ctypes.c_uint64),
        ("xlated_prog_insns", ctypes.c_uint64),
        ("load_time", ctypes.c_uint64),
        ("created_by_uid", ctypes.c_uint32),
        ("nr_map_ids", ctypes.c_uint32),
        ("map_ids", ctypes.c_uint64),
        ("name", ctypes.c_char * 16),
        ("ifindex", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),  # bit 0: gpl_compatible
    ]


def _bpf(cmd: int, attr: ctypes.Structure, what: str) -> int:
    """Call bpf(2); raise BpfError naming `what` on failure."""
    try:
        nr = syscalls.syscall_number("bpf")
    except OSError as error:
        raise BpfError(error.errno, f"{what}: {error.strerror}") from None
    ret = syscalls.libc.syscall(
        ctypes.c_long(nr), ctypes.c_int(cmd), ctypes.byref(attr), ctypes.c_uint(ctypes.sizeof(attr))
    )
    if ret < 0:
        err = ctypes.get_errno()
        raise BpfError(err, f"{what}: {os.strerror(err)}")
    return int(ret)


def prog_load(insns: list[Insn], license: str = "Apache", name: str = "ocihook_dev") -> int:
    """Load a cgroup device program; return its fd. The verifier's last line goes in the error."""
    code = encode(insns)
    buf = ctypes.create_string_buffer(code, len(code))
    lic = ctypes.create_string_buffer(license.encode())
    attr = _LoadAttr(
        prog_type=BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt=len(insns),
        insns=ctypes.addressof(buf),
        license=ctypes.addressof(lic),
        prog_name=name.encode()[:15],
    )
    try:
        return _bpf(BPF_PROG_LOAD, attr, "BPF_PROG_LOAD")
    except BpfError as exc:
        failed = exc
    if failed.errno == _errno.EPERM:
        _raise_memlock()  # kernels before 5.11 charge programs to RLIMIT_MEMLOCK
        try:
            return _bpf(BPF_PROG_LOAD, attr, "BPF_PROG_LOAD")
        except BpfError as exc:
            failed = exc
    # Once more with the verifier log, only to explain the failure.
    log = ctypes.create_string_buffer(1 << 18)
    attr.log_level, attr.log_size, attr.log_buf = 1, len(log), ctypes.addressof(log)
    try:
        fd = _bpf(BPF_PROG_LOAD, attr, "BPF_PROG_LOAD")
    except BpfError:
        lines = log.value.decode(errors="replace").strip().splitlines()
        lines = [ln for ln in lines if not ln.startswith(("processed ", "verification "))]
        detail = f" (verifier: {lines[-1]})" if lines else ""
        raise BpfError(failed.errno, f"{failed.strerror}{detail}") from None
    os.close(fd)
    raise failed


def _raise_memlock() -> None:
    """Best effort: lift RLIMIT_MEMLOCK (only this hook process is affected)."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_MEMLOCK, (resource.RLIM_INFINITY,) * 2)
    except (OSError, ValueError):
        pass


def prog_query(cgroup_fd: int) -> tuple[int, list[int]]:
    """(attach_flags, program ids) of the device programs attached to this cgroup itself."""
    size = 64
    for _ in range(10):
        ids = (ctypes.c_uint32 * size)()
        attr = _QueryAttr(
            target_fd=cgroup_fd,
            attach_type=BPF_CGROUP_DEVICE,
            prog_ids=ctypes.addressof(ids),
            prog_cnt=size,
        )
        try:
            _bpf(BPF_PROG_QUERY, attr, "BPF_PROG_QUERY")
        except BpfError as exc:
            if exc.errno == _errno.ENOSPC:
                size = max(attr.prog_cnt, size * 2)
                continue
            raise
        return attr.attach_flags, list(ids[: attr.prog_cnt])
    raise BpfError(_errno.ENOSPC, "BPF_PROG_QUERY: the list of programs keeps growing")


def prog_fd_by_id(prog_id: int) -> int:
    """Open a program by id (needs CAP_SYS_ADMIN)."""
    attr = _GetFdAttr(prog_id=prog_id)
    return _bpf(BPF_PROG_GET_FD_BY_ID, attr, f"BPF_PROG_GET_FD_BY_ID {prog_id}")


class ProgInfo(Struct):
    """The parts of struct bpf_prog_info that we use."""

    __slots__ = ("id", "type", "name", "gpl_compatible", "nr_map_ids", "xlated")

    id: int
    type: int
    name: str
    gpl_compatible: bool
    nr_map_ids: int
    xlated: list[Insn] | None  # None when the kernel did not give the instructions


def prog_info(prog_fd: int) -> ProgInfo:
    """Fetch a program's id, type and translated instructions."""
    info = _ProgInfo()
    attr = _InfoAttr(bpf_fd=prog_fd, info_len=ctypes.sizeof(info), info=ctypes.addressof(info))
    _bpf(BPF_OBJ_GET_INFO_BY_FD, attr, "BPF_OBJ_GET_INFO_BY_FD")
    size = info.xlated_prog_len
    xlated = None
    if size:
        buf = ctypes.create_string_buffer(size)
        info2 = _ProgInfo(xlated_prog_len=size, xlated_prog_insns=ctypes.addressof(buf))
        size2 = ctypes.sizeof(info2)
        attr = _InfoAttr(bpf_fd=prog_fd, info_len=size2, info=ctypes.addressof(info2))
        _bpf(BPF_OBJ_GET_INFO_BY_FD, attr, "BPF_OBJ_GET_INFO_BY_FD")
        # The kernel clears the pointer instead of dumping a blinded program.
        if info2.xlated_prog_insns and info2.xlated_prog_len == size:
            xlated = decode(buf.raw)
    return ProgInfo(
        id=info.id,
        type=info.type,
        name=info.name.decode(errors="replace"),
        gpl_compatible=bool(info.flags & 1),
        nr_map_ids=info.nr_map_ids,
        xlated=xlated,
    )


def prog_attach(cgroup_fd: int, prog_fd: int, flags: int, replace_fd: int = -1) -> None:
    """Attach to a cgroup as a device program; with replace_fd, atomically swap that one out."""
    attr = _AttachAttr(
        target_fd=cgroup_fd,
        attach_bpf_fd=prog_fd,
        attach_type=BPF_CGROUP_DEVICE,
        attach_flags=flags | (BPF_F_REPLACE if replace_fd >= 0 else 0),
        replace_bpf_fd=max(replace_fd, 0),
    )
    _bpf(BPF_PROG_ATTACH, attr, "BPF_PROG_ATTACH")


def prog_detach(cgroup_fd: int, prog_fd: int) -> None:
    """Detach one device program from a cgroup."""
    attr = _AttachAttr(target_fd=cgroup_fd, attach_bpf_fd=prog_fd, attach_type=BPF_CGROUP_DEVICE)
    _bpf(BPF_PROG_DETACH, attr, "BPF_PROG_DETACH")


def obj_pin(prog_fd: int, path: str) -> None:
    """Pin a program at `path` in a bpf file system (BPF_OBJ_PIN); the path must not exist."""
    name = ctypes.create_string_buffer(os.fsencode(path))
    attr = _ObjAttr(pathname=ctypes.addressof(name), bpf_fd=prog_fd)
    _bpf(BPF_OBJ_PIN, attr, f"BPF_OBJ_PIN {path}")


def obj_get(path: str) -> int:
    """Open the program pinned at `path` (BPF_OBJ_GET); returns its fd."""
    name = ctypes.create_string_buffer(os.fsencode(path))
    attr = _ObjAttr(pathname=ctypes.addressof(name))
    return _bpf(BPF_OBJ_GET, attr, f"BPF_OBJ_GET {path}")
