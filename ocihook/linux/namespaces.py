"""Mount namespaces by inode: which one a process is in, and which ones are the host's."""

from __future__ import annotations

import os


def mount_namespace(pid: int | str = "self") -> int:
    """The inode of the mount namespace of `pid` ("self": ours). OSError: no such pid, or
    not ours to read."""
    return os.stat(f"/proc/{pid}/ns/mnt").st_ino


def init_mount_namespace() -> int | None:
    """The mount namespace of pid 1 (the host's), or None where it cannot be read (pid 1
    not ptrace-readable: a sandbox)."""
    try:
        return mount_namespace(1)
    except OSError:
        return None


def host_mount_namespaces() -> set[int]:
    """Our own mount namespace and pid 1's where readable: where a hook must never mount
    on a container's behalf."""
    init = init_mount_namespace()
    return {mount_namespace()} | ({init} if init is not None else set())
