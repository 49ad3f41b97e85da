"""Device rules: `DeviceRule`, the one type from the plan to the kernel (the cgroup v1 writer
and the BPF assembler take it as it is), its validity, its text form and the kernel's
encodings of it. The text form ("c 10:237 rw", cgroup v1 syntax) is for display, the v1
file writes and the records."""

from __future__ import annotations

from ocihook.structs import Struct

DEVCG_ACC_MKNOD = 1
DEVCG_ACC_READ = 2
DEVCG_ACC_WRITE = 4
DEVCG_DEV_BLOCK = 1
DEVCG_DEV_CHAR = 2
ACCESS_BITS = {"m": DEVCG_ACC_MKNOD, "r": DEVCG_ACC_READ, "w": DEVCG_ACC_WRITE}
TYPE_CODES = {"b": DEVCG_DEV_BLOCK, "c": DEVCG_DEV_CHAR}
MAX_MAJOR = (1 << 12) - 1  # Linux dev_t: 12-bit major, 20-bit minor
MAX_MINOR = (1 << 20) - 1


class DeviceRule(Struct):
    """One device the container may use: type "c"/"b", numbers (-1: any), access in "rwm"."""

    __slots__ = ("type", "major", "minor", "access")

    type: str
    major: int
    minor: int
    access: str

    def line(self) -> str:
        """The cgroup v1 syntax, e.g. 'c 10:237 rw' (-1 is '*')."""
        num = lambda v: "*" if v == -1 else str(v)  # noqa: E731
        return f"{self.type} {num(self.major)}:{num(self.minor)} {self.access}"


def access_mask(access: str) -> int:
    """'rw' -> READ|WRITE; rejects anything but a non-empty subset of 'rwm'."""
    if not access or len(set(access)) != len(access) or set(access) - set(ACCESS_BITS):
        raise ValueError(f"device access {access!r} is not a non-empty subset of 'rwm'")
    mask = 0
    for ch in access:
        mask |= ACCESS_BITS[ch]
    return mask


def _number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_rule(rule: DeviceRule) -> None:
    """Raise ValueError unless the rule is a c/b device with sane numbers and access."""
    if rule.type not in TYPE_CODES:
        raise ValueError(f"device type {rule.type!r} is not 'c' or 'b'")
    if not _number(rule.major) or not _number(rule.minor):
        raise ValueError("major and minor must be integers")
    if not (rule.major == -1 or 0 <= rule.major <= MAX_MAJOR):
        raise ValueError(
            f"device major {rule.major!r} is out of range 0..{MAX_MAJOR} (or -1 for any)"
        )
    if not (rule.minor == -1 or 0 <= rule.minor <= MAX_MINOR):
        raise ValueError(
            f"device minor {rule.minor!r} is out of range 0..{MAX_MINOR} (or -1 for any)"
        )
    access_mask(rule.access)
