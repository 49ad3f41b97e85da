"""Entering a container's mount namespace and opening its rootfs there, and the file systems
the host mounts (where nothing may be created): OS facts the hook's stages need before they
change anything in a container."""

from __future__ import annotations

import os

from ocihook.errors import OcihookError
from ocihook.linux import mountinfo, namespaces, securepath, syscalls


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
        if target in namespaces.host_mount_namespaces():
            raise OcihookError(f"state on stdin: pid {pid} is not in a container's mount namespace")
        syscalls.setns(ns_fd, syscalls.CLONE_NEWNS)
    finally:
        os.close(ns_fd)
    return open_rootfs(rootfs, f"the mount namespace of pid {pid}")


def open_rootfs(rootfs: str, where: str) -> int:
    """O_PATH fd of the container's rootfs in the current mount namespace (`where`, for
    messages): it must be a mount point there and not the namespace's root."""
    if not mountinfo.is_mount_point(rootfs):
        raise OcihookError(f"rootfs {rootfs} is not a mount point in {where}")
    try:
        root_fd = securepath.open_dir(rootfs)
    except OSError as error:
        raise OcihookError(f"rootfs {rootfs}: {error.strerror}") from None
    st, top = os.fstat(root_fd), os.stat("/")
    if (st.st_dev, st.st_ino) == (top.st_dev, top.st_ino):
        os.close(root_fd)
        raise OcihookError(f"rootfs {rootfs} is the root of {where}")
    return root_fd


def host_superblocks(mounts: list[mountinfo.Entry] | None = None) -> frozenset[int]:
    """st_dev of every file system mounted in our (the runtime's, the host's) mount namespace
    (`mounts`: its table, when the caller has read it); read before entering the container."""
    if mounts is None:
        return mountinfo.superblocks()
    return frozenset(entry.dev for entry in mounts)
