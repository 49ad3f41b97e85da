"""One device rule's validity: (type, major, minor, access) with type "c" or "b", numbers in
dev_t's range or -1 (any), access a non-empty subset of "rwm". Shared by the cgroup v1 writer
and the BPF assembler (bpf.py), whose encodings these constants are."""

from __future__ import annotations

Rule = tuple[str, int, int, str]

DEVCG_ACC_MKNOD = 1
DEVCG_ACC_READ = 2
DEVCG_ACC_WRITE = 4
DEVCG_DEV_BLOCK = 1
DEVCG_DEV_CHAR = 2
ACCESS_BITS = {"m": DEVCG_ACC_MKNOD, "r": DEVCG_ACC_READ, "w": DEVCG_ACC_WRITE}
TYPE_CODES = {"b": DEVCG_DEV_BLOCK, "c": DEVCG_DEV_CHAR}
MAX_MAJOR = (1 << 12) - 1  # Linux dev_t: 12-bit major, 20-bit minor
MAX_MINOR = (1 << 20) - 1


def access_mask(access: str) -> int:
    """'rw' -> READ|WRITE; rejects anything but a non-empty subset of 'rwm'."""
    if not access or len(set(access)) != len(access) or set(access) - set(ACCESS_BITS):
        raise ValueError(f"device access {access!r} is not a non-empty subset of 'rwm'")
    mask = 0
    for ch in access:
        mask |= ACCESS_BITS[ch]
    return mask


def check_rule(rule: Rule) -> None:
    """Raise ValueError unless the rule is a c/b device with sane numbers and access."""
    dtype, major, minor, access = rule
    if dtype not in TYPE_CODES:
        raise ValueError(f"device type {dtype!r} is not 'c' or 'b'")
    if not (major == -1 or 0 <= major <= MAX_MAJOR):
        raise ValueError(f"device major {major!r} is out of range 0..{MAX_MAJOR} (or -1 for any)")
    if not (minor == -1 or 0 <= minor <= MAX_MINOR):
        raise ValueError(f"device minor {minor!r} is out of range 0..{MAX_MINOR} (or -1 for any)")
    access_mask(access)
