"""Mount namespaces: which one a process is in (by inode), which ones are the host's;
entering a container's and opening its rootfs there; the file systems the host mounts
(where nothing may be created). OS facts the hook's stages need before they change anything
in a container."""

from __future__ import annotations

import os

from ocihook.errors import OcihookError
from ocihook.linux import mountinfo, securepath, syscalls


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


def enter_container(pid: int, rootfs: str) -> int:
    """Join the mount namespace of `pid`; return an O_PATH fd of the container's rootfs.

    Refuses a pid whose mount namespace is ours or the host's (pid 1), and a rootfs that is
    not a mount point in that namespace: a wrong pid must not redirect mounts onto the host.
    """
    if pid <= 0:
        raise OcihookError(
            "state on stdin: field 'pid' is missing or 0; the hook needs the container's pid"
        )
    try:
        ns_fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise OcihookError(f"state on stdin: pid {pid}: {error.strerror}") from None
    try:
        target = os.fstat(ns_fd).st_ino
        if target in host_mount_namespaces():
            raise OcihookError(f"state on stdin: pid {pid} is not in a container's mount namespace")
        syscalls.setns(ns_fd, syscalls.CLONE_NEWNS)
    finally:
        os.close(ns_fd)
    return open_rootfs(rootfs, f"the mount namespace of pid {pid}")


def open_rootfs(rootfs: str, where: str) -> int:
    """O_PATH fd of the container's rootfs in the current mount namespace (`where`, for
    messages): it must be the root of a mount there (its own mount, not its parent's: told by
    mount id, not by a path in the mount table, which costs a parse of every line on a node
    with thousands of mounts) and not the namespace's root."""
    try:
        root_fd = securepath.open_dir(rootfs)
    except OSError as error:
        raise OcihookError(f"rootfs {rootfs}: {error.strerror}") from None
    try:
        st, top = os.fstat(root_fd), os.stat("/")
        if (st.st_dev, st.st_ino) == (top.st_dev, top.st_ino):
            raise OcihookError(f"rootfs {rootfs} is the root of {where}")
        if not securepath.is_mount_root(root_fd):
            raise OcihookError(f"rootfs {rootfs} is not a mount point in {where}")
    except OSError as error:
        os.close(root_fd)
        raise OcihookError(f"rootfs {rootfs}: {error.strerror}") from None
    except BaseException:
        os.close(root_fd)
        raise
    return root_fd


def host_superblocks(mountinfo_text: str | None = None) -> frozenset[int]:
    """st_dev of every file system mounted in our (the runtime's, the host's) mount namespace
    (`mountinfo_text`: its table, when the caller has read it); read before entering the
    container."""
    return mountinfo.superblocks(mountinfo_text)
