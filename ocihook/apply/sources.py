"""The plan's sources and device nodes opened from the roots, ready to mount, by the mount API
the kernel has.

With the new mount API (open_tree/move_mount/mount_setattr, Linux >= 5.12) every source is
resolved inside its root on the host and cloned into a detached mount that already carries the
plan's flags: the kernel lets a detached mount cross mount namespaces but not a path.
`ClassicMountApi` (kernels without it) opens the sources as O_PATH fds in the container's mount
namespace instead, to be bind-mounted and then remounted with the same flags
(apply/writer.py).

The sources' SELinux labels are read from the fds that are mounted (not from their host
paths) and checked against selinux/source_policy.py's rules as the config's
`selinux.source_check` says (error, warn, off): `check_source_labels`.
"""

from __future__ import annotations

import errno
import os

from ocihook.errors import OcihookError
from ocihook.linux import securepath, syscalls
from ocihook.plan.kinds import KINDS, LABEL_WRITABLE, is_source
from ocihook.plan.model import NODE_BIND_FLAGS, DeviceNode, Mount, Plan
from ocihook.selinux import label as selinux_label
from ocihook.structs import Struct

TYPE_CHECKING = False  # typing costs imports at container start: annotations only
if TYPE_CHECKING:
    from ocihook.records import Log

# A plan's mount flag names in the two mount APIs ("rw": the absence of read-only).
_NEW_API_ATTRS = {
    "ro": syscalls.MOUNT_ATTR_RDONLY,
    "rw": 0,
    "nosuid": syscalls.MOUNT_ATTR_NOSUID,
    "nodev": syscalls.MOUNT_ATTR_NODEV,
    "noexec": syscalls.MOUNT_ATTR_NOEXEC,
}
_CLASSIC_FLAGS = {
    "ro": syscalls.MS_RDONLY,
    "rw": 0,
    "nosuid": syscalls.MS_NOSUID,
    "nodev": syscalls.MS_NODEV,
    "noexec": syscalls.MS_NOEXEC,
}


class SourceTree(Struct):
    """A source file ready to mount: a detached mount (new mount API), or with the classic
    API an O_PATH fd of the file itself, opened in the container's mount namespace."""

    __slots__ = ("mount", "fd", "dev", "ino", "source_stat")
    _defaults = {"source_stat": None}

    mount: Mount
    fd: int
    dev: int
    ino: int
    source_stat: os.stat_result | None  # the fstat of the fd that was cloned (ld/known.py)


def _clone(root_fd: int, inner: str, attrs: int, what: str) -> tuple[int, os.stat_result]:
    try:
        fd = securepath.resolve(root_fd, inner)
    except OSError as error:
        raise OcihookError(f"{what}: {error.strerror}") from None
    try:
        st = os.fstat(fd)
        tree = syscalls.open_tree(
            fd, "", syscalls.AT_EMPTY_PATH | syscalls.OPEN_TREE_CLONE | syscalls.OPEN_TREE_CLOEXEC
        )
    except OSError as error:
        raise OcihookError(f"{what}: cannot clone for a bind mount: {error.strerror}") from None
    finally:
        os.close(fd)
    try:
        syscalls.mount_setattr(tree, attrs)
    except OSError as error:
        os.close(tree)
        raise OcihookError(f"{what}: cannot set the mount's flags: {error.strerror}") from None
    return tree, st


def _add_source(sources: list[SourceTree], m: Mount, fd: int, st: os.stat_result) -> None:
    """Append the source (so that it is closed on failure), then check it is still the kind
    of file that was planned."""
    sources.append(SourceTree(m, fd, st.st_dev, st.st_ino, st))
    if not is_source(m.kind, st.st_mode):
        raise OcihookError(f"source {m.host_path}: is no longer a {m.kind} file")


def _check_node(node: DeviceNode, st: os.stat_result) -> None:
    if os.major(st.st_rdev) != node.major or os.minor(st.st_rdev) != node.minor:
        raise OcihookError(f"device {node.host_path}: changed since it was planned")


def clone_sources(plan: Plan, source_fd: int) -> list[SourceTree]:
    """Detached read-only mounts of every planned file (host side, before setns). Each
    planned source is a canonical in-root path (discovery resolved it): its directory is
    resolved inside the source root once, and the file cloned from that directory's fd
    without following a link there (a link swapped in since is refused by the type check,
    never followed)."""
    trees: list[SourceTree] = []
    dirs: dict[str, int] = {}
    try:
        for m in plan.mounts:
            attrs = new_api_attrs(m.flags)
            what = f"source {m.host_path}"
            tree, st = _clone_in_dir(dirs, source_fd, m.source, attrs, what)
            _add_source(trees, m, tree, st)
    except BaseException:
        close_trees(trees)
        raise
    finally:
        for fd in dirs.values():
            os.close(fd)
    return trees


def _clone_in_dir(
    dirs: dict[str, int], root_fd: int, inner: str, attrs: int, what: str
) -> tuple[int, os.stat_result]:
    """`_clone` of `inner` through its directory's fd (resolved in the root once: `dirs`)."""
    if not inner.strip("/"):  # the root itself has no directory to clone it from
        return _clone(root_fd, inner, attrs, what)
    try:
        parent, name = securepath.split(inner)
        dir_fd = dirs.get(parent)
        if dir_fd is None:
            dir_fd = dirs[parent] = securepath.resolve(
                root_fd, parent, flags=os.O_PATH | os.O_DIRECTORY
            )
    except OSError as error:
        raise OcihookError(f"{what}: {error.strerror}") from None
    try:
        tree = syscalls.open_tree(
            dir_fd,
            name,
            syscalls.AT_SYMLINK_NOFOLLOW | syscalls.OPEN_TREE_CLONE | syscalls.OPEN_TREE_CLOEXEC,
        )
    except OSError as error:
        raise OcihookError(f"{what}: cannot clone for a bind mount: {error.strerror}") from None
    try:
        st = os.fstat(tree)
        syscalls.mount_setattr(tree, attrs)
    except OSError as error:
        os.close(tree)
        raise OcihookError(f"{what}: cannot set the mount's flags: {error.strerror}") from None
    return tree, st


def clone_device_nodes(plan: Plan, device_fd: int) -> dict[str, int]:
    """Detached mounts of the host's device nodes (for containers with a user namespace)."""
    trees: dict[str, int] = {}
    try:
        for node in plan.devices:
            tree, st = _clone(
                device_fd, node.path, new_api_attrs(NODE_BIND_FLAGS), f"device {node.host_path}"
            )
            trees[node.path] = tree
            _check_node(node, st)
    except BaseException:
        for tree in trees.values():
            os.close(tree)
        raise
    return trees


def have_new_mount_api() -> bool:
    """Whether the kernel has open_tree/move_mount/mount_setattr (Linux >= 5.12)."""
    try:
        syscalls.mount_setattr(-1, 0)
    except OSError as error:
        return error.errno != errno.ENOSYS
    return True


def _reopen_root(real_path: str, host_fd: int, what: str) -> int:
    """`real_path` opened again in the current (container) mount namespace, checked to be
    the same directory as `host_fd` (opened on the host before setns)."""
    try:
        return securepath.reopen_dir(real_path, host_fd)
    except securepath.Changed:
        raise OcihookError(
            f"{what} {real_path}: differs in the container's mount namespace"
        ) from None
    except OSError as error:
        raise OcihookError(
            f"{what} {real_path}: not visible in the container's mount namespace: {error.strerror}"
        ) from None


def open_sources(plan: Plan, real_path: str, host_fd: int) -> list[SourceTree]:
    """Classic mount API: O_PATH fds of every planned file, resolved inside the source root
    as seen from the container's mount namespace (where runc has not pivoted yet)."""
    root_fd = _reopen_root(real_path, host_fd, "source root")
    sources: list[SourceTree] = []
    try:
        for m in plan.mounts:
            try:
                fd = securepath.resolve(root_fd, m.source)
            except OSError as error:
                raise OcihookError(f"source {m.host_path}: {error.strerror}") from None
            _add_source(sources, m, fd, os.fstat(fd))
    except BaseException:
        close_trees(sources)
        raise
    finally:
        os.close(root_fd)
    return sources


def open_device_nodes(plan: Plan, real_path: str, host_fd: int) -> dict[str, int]:
    """Classic mount API: O_PATH fds of the host's device nodes (user namespace containers)."""
    root_fd = _reopen_root(real_path, host_fd, "device root")
    nodes: dict[str, int] = {}
    try:
        for node in plan.devices:
            fd = securepath.resolve(root_fd, node.path)
            nodes[node.path] = fd
            _check_node(node, os.fstat(fd))
    except OSError as error:
        for fd in nodes.values():
            os.close(fd)
        raise OcihookError(f"device root {real_path}: {error.strerror}") from None
    except BaseException:
        for fd in nodes.values():
            os.close(fd)
        raise
    finally:
        os.close(root_fd)
    return nodes


def new_api_attrs(flags: tuple[str, ...]) -> int:
    """mount_setattr attributes of a plan's flag names."""
    attrs = 0
    for flag in flags:
        attrs |= _NEW_API_ATTRS[flag]
    return attrs


def classic_flags(flags: tuple[str, ...]) -> int:
    """mount(2) remount flags of a plan's flag names."""
    value = 0
    for flag in flags:
        value |= _CLASSIC_FLAGS[flag]
    return value


class NewMountApi:
    """open_tree/move_mount/mount_setattr (Linux >= 5.12): sources cloned on the host, before
    entering the container, into detached mounts that already carry their flags."""

    name = "new"
    on_host = True

    def sources(self, plan: Plan, roots) -> list[SourceTree]:
        return clone_sources(plan, roots.source_fd)

    def nodes(self, plan: Plan, roots) -> dict[str, int]:
        return clone_device_nodes(plan, roots.device_fd)

    def remount_flags(self, flags: tuple[str, ...]) -> int | None:
        return None  # the detached mount has them already


class ClassicMountApi:
    """mount(2) bind + remount: sources opened in the container's mount namespace (a bind
    mount cannot cross namespaces), flags set by a remount after the bind."""

    name = "classic"
    on_host = False

    def sources(self, plan: Plan, roots) -> list[SourceTree]:
        return open_sources(plan, roots.source_real, roots.source_fd)

    def nodes(self, plan: Plan, roots) -> dict[str, int]:
        return open_device_nodes(plan, roots.device_real, roots.device_fd)

    def remount_flags(self, flags: tuple[str, ...]) -> int | None:
        return classic_flags(flags)


def mount_api(setting: str) -> NewMountApi | ClassicMountApi:
    """The mount API for the config's `mount_api` ("auto" or "classic")."""
    if setting == "classic" or not have_new_mount_api():
        return ClassicMountApi()
    return NewMountApi()


def close_trees(trees: list[SourceTree]) -> None:
    for tree in trees:
        os.close(tree.fd)


def check_source_labels(
    sources: list[SourceTree],
    config: dict,
    log: Log,
    source_real: str | None = None,
    process_label: str | None = None,
) -> list[str | None]:
    """The SELinux labels of the bind-mount sources, in order; a label no container can
    read (or, for a read-write mount, write) fails the start, or is logged with
    `selinux.source_check: warn`. `source_real` is the source root's canonical path (for
    the fix's wording); `process_label` the container's domain, whose use of a read-only
    source the loaded policy may allow (SourceLabelPolicy)."""
    labels = [
        selinux_label.get_label(securepath.fd_path(s.fd), follow_symlinks=True) for s in sources
    ]
    mode = config["selinux"]["source_check"]
    if mode == "off":
        return labels
    from ocihook.selinux.source_policy import SourceLabelPolicy  # labels to check: SELinux on

    policy = SourceLabelPolicy(process_label, config["source_root"], source_real)
    seen = set()
    for source, context in zip(sources, labels):
        mount = source.mount
        if mount.host_path in seen:
            continue  # one file mounted at two targets: one line about it
        seen.add(mount.host_path)
        kind = KINDS[mount.kind]
        writable = mount.writable or kind.label == LABEL_WRITABLE
        problem = policy.problem(mount.host_path, context, writable, kind.source, kind.executable)
        if problem is None:
            continue
        if mode == "error":
            raise OcihookError(problem)
        log.info(f"warning: {problem}")
    return labels
