"""The hook's own user namespace: the initial one (root podman, CRI-O run hooks there) or a
user's (rootless podman runs hooks as root of the user's; request/rootless.py says what
changes then). Read from this process's /proc/self/uid_map, once: nothing a container
controls changes it.
"""

from __future__ import annotations

import os

from ocihook.errors import OcihookError
from ocihook.structs import Struct

UID_MAP = "/proc/self/uid_map"
OVERFLOW_UID = "/proc/sys/kernel/overflowuid"
OVERFLOW_GID = "/proc/sys/kernel/overflowgid"
IDENTITY_MAP = ((0, 0, 4294967295),)  # the initial user namespace


class HookNamespace(Struct):
    """The hook process's user namespace: the initial one (root podman, CRI-O) or a user's
    (rootless podman; ocihook/request/rootless.py says what changes then)."""

    __slots__ = ("rootless", "uid_map", "host_uid", "overflow_uid", "overflow_gid")
    rootless: bool  # not the initial user namespace
    uid_map: tuple  # ((inside, outside, count), ...) as /proc/self/uid_map lists it
    host_uid: int | None  # the outside uid of the hook's euid (the rootless user)
    overflow_uid: int  # what every unmapped uid shows as inside the namespace
    overflow_gid: int  # and every unmapped gid


def parse_id_map(text: str) -> tuple[tuple[int, int, int], ...]:
    """/proc/<pid>/uid_map (or gid_map) as ((inside, outside, count), ...); ValueError
    when a line is not three numbers."""
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 3 or not all(f.isdigit() for f in fields):
            raise ValueError(f"not 'inside outside count': {line.strip()!r:.60}")
        rows.append((int(fields[0]), int(fields[1]), int(fields[2])))
    return tuple(rows)


def outside_id(id_map: tuple, inside: int) -> int | None:
    """The outside id that `inside` maps to, or None when it is not mapped."""
    for first, outside, count in id_map:
        if first <= inside < first + count:
            return outside + inside - first
    return None


def _read_small(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536).decode("ascii")
    finally:
        os.close(fd)


def _overflow(path: str) -> int:
    try:
        return int(_read_small(path).strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return 65534  # the kernel's default


def detect_namespace(uid_map_path: str = UID_MAP) -> HookNamespace:
    """Read this process's own uid_map: the identity map is the initial user namespace,
    anything else a user namespace, whose uid mapped to our euid is the user we act for.
    Nothing a container controls changes it (the runtime's user namespace is not the
    container's to choose). A kernel without user namespaces has no uid_map (then there is
    only the initial one); any other failure is an error: guessing "root" in a user
    namespace would apply the wrong trust rule."""
    try:
        id_map = parse_id_map(_read_small(uid_map_path))
    except FileNotFoundError:
        if not os.path.isdir("/proc/self"):
            raise OcihookError(
                f"cannot tell whether the hook runs in a user namespace: {uid_map_path}: "
                "/proc is not mounted"
            ) from None
        id_map = IDENTITY_MAP
    except (OSError, ValueError, UnicodeDecodeError) as error:
        cause = error.strerror if isinstance(error, OSError) else str(error)
        raise OcihookError(
            f"cannot tell whether the hook runs in a user namespace: {uid_map_path}: {cause}"
        ) from None
    if id_map == IDENTITY_MAP:
        return HookNamespace(False, id_map, None, 65534, 65534)
    host_uid = outside_id(id_map, os.geteuid())
    return HookNamespace(True, id_map, host_uid, _overflow(OVERFLOW_UID), _overflow(OVERFLOW_GID))


_NAMESPACE: list[HookNamespace] = []


def hook_namespace() -> HookNamespace:
    """This process's user namespace, read once."""
    if not _NAMESPACE:
        _NAMESPACE.append(detect_namespace())
    return _NAMESPACE[0]
