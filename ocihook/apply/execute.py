"""Execute a finalized Plan in a container: bind mounts, links, device nodes, labels.

The plan decides everything (targets, mount flags, node strategy, label); this module only
carries it out. Two phases with the new mount API, because the kernel lets a detached mount
cross mount namespaces but not a path: on the host, `NewMountApi.sources` resolves every
source inside its root and clones it into a detached mount with the plan's flags; then
`enter_container` joins the container's mount namespace and `execute` attaches those mounts
onto targets resolved inside the rootfs by file descriptor. `ClassicMountApi` (kernels
without open_tree/move_mount) opens the sources in the container's namespace instead and
bind-mounts then remounts them with the same flags. Every change is on an undo stack: a
failure rolls the container back to how it was.
"""

from __future__ import annotations

import errno
import os
import stat

from ocihook.errors import OcihookError, describe
from ocihook.linux import atomic, mountinfo, namespaces, securepath, syscalls
from ocihook.linux.filetypes import is_type, type_name
from ocihook.plan.kinds import KINDS, is_source
from ocihook.plan.model import NODE_BIND_FLAGS, DeviceNode, Link, Mount, Plan
from ocihook.selinux.label import label_at
from ocihook.structs import Struct

TYPE_CHECKING = False  # typing costs ~10 ms of imports at container start: annotations only
if TYPE_CHECKING:
    from collections.abc import Callable

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


def bind_sources(trees: list[SourceTree], plan: Plan) -> list[SourceTree]:
    """The sources opened for `trees`' plan bound to the mounts of the finalized `plan`: the
    same files in the same order (finalize moves targets only). A mismatch is a bug."""
    if len(trees) != len(plan.mounts):
        raise RuntimeError(f"{len(trees)} sources opened for {len(plan.mounts)} planned mounts")
    bound = []
    for tree, mount in zip(trees, plan.mounts):
        if (tree.mount.source, tree.mount.kind) != (mount.source, mount.kind):
            raise RuntimeError(f"source {tree.mount.source} opened for {mount.source}")
        bound.append(tree.replace(mount=mount))
    return bound


def execute(
    writer: ContainerWriter,
    plan: Plan,
    trees: list[SourceTree],
    node_trees: dict[str, int],
    api: NewMountApi | ClassicMountApi,
) -> None:
    """Carry out a finalized plan in the container: every mount (its source in `trees`, bound
    to the plan's mounts by `bind_sources`), link and device node (by its strategy)."""
    for tree in trees:
        m = tree.mount
        writer.attach(
            tree.fd,
            m.target,
            (tree.dev, tree.ino),
            m.host_path,
            mount_kinds(m),
            api.remount_flags(m.flags),
        )
    for link in plan.links:
        writer.link(link)
    for node in plan.devices:
        if node.strategy == "bind":
            writer.attach(
                node_trees[node.path],
                node.path,
                None,
                node.host_path,
                ("file",),
                api.remount_flags(NODE_BIND_FLAGS),
            )
        else:
            writer.device_node(node)
    writer.verify_dirs()


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def mount_kinds(mount: Mount) -> tuple[str, ...]:
    """File types (kinds.FILE_TYPES short names) an existing mountpoint in the image may
    have for this mount."""
    return KINDS[mount.kind].mount_points


def close_trees(trees: list[SourceTree]) -> None:
    for tree in trees:
        os.close(tree.fd)


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


class ContainerWriter:
    """Makes the planned changes inside one rootfs; remembers how to undo them.

    It creates things (directories, mount points, links, device nodes) only on the rootfs's
    own mount or on file systems that the host does not mount (the container's /dev tmpfs):
    never in a host directory that is bind-mounted into the container (a volume, /dev/shm),
    wherever the image's symlinks point.
    """

    def __init__(
        self,
        root_fd: int,
        label: str | None,
        uid: int = 0,
        gid: int = 0,
        shared: frozenset[int] = frozenset(),
    ) -> None:
        self.root_fd = root_fd
        self.root_mount = securepath.mount_id(root_fd)
        self.shared = shared
        self.label = label
        self.uid = uid
        self.gid = gid
        self._undo: list[tuple[str, Callable[[], None]]] = []
        # Directory fds resolved once inside the root, by in-root path: an fd keeps naming the
        # directory it was resolved to, so a later rename or symlink swap cannot redirect it.
        self._dirs: dict[str, int] = {}
        self._dirs_on_root: set[int] = set()  # cached dir fds on the rootfs's own mount
        self._to_verify: set[str] = set()  # dirs mounts were attached in (verify_dirs)
        self._dir_mounts: dict[int, int] = {}  # cached dir fd -> its mount id

    def close(self) -> None:
        """Close the cached directory fds (the changes stay)."""
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()
        self._dirs_on_root.clear()
        self._dir_mounts.clear()

    def _as_owner(self, operation: Callable[..., None], *args: object) -> None:
        """Run `operation` creating files as the container's root: in a user namespace the
        container's own tmpfs (/dev) cannot hold files owned by an unmapped uid such as the
        host's root."""
        if not (self.uid or self.gid):
            operation(*args)
            return
        old_gid = syscalls.setfsgid(self.gid)
        old_uid = syscalls.setfsuid(self.uid)
        try:
            operation(*args)
        finally:
            syscalls.setfsuid(old_uid)
            syscalls.setfsgid(old_gid)

    # -- helpers ---------------------------------------------------------
    def may_create_in(self, dir_fd: int, path: str) -> None:
        """Raise OcihookError if `path` may not be created in `dir_fd` (a host-shared fs)."""
        self._may_create_in(dir_fd, path)

    def _may_create_in(self, dir_fd: int, path: str) -> None:
        """Refuse to create `path` in directory `dir_fd` on a file system the host shares."""
        if dir_fd in self._dirs_on_root:
            return
        mount = self._dir_mounts.get(dir_fd)
        if mount is None:
            mount = securepath.mount_id(dir_fd)
            if dir_fd in self._dirs.values():  # a cached dir fd: its mount cannot change
                self._dir_mounts[dir_fd] = mount
        if mount == self.root_mount:
            return
        if os.fstat(dir_fd).st_dev in self.shared:
            raise OcihookError(
                f"container {path}: its directory is on a file system shared with the host "
                "(a volume or host bind mount); not creating anything there"
            )

    def replace_file(self, dir_fd: int, path: str, data: bytes, mode: int = 0o644) -> None:
        """Replace the file `path` (in the directory `dir_fd`, resolved in the root) with
        `data` (atomic.replace_at): the temporary file created by fd as the container's root,
        given `mode` and labelled like everything the hook creates, then renamed over `path`.
        Not synced: the file is rewritten at every start, a torn one after a crash is refused
        by the next start's parser (which then runs ldconfig), and podman's overlays are
        fsync=volatile anyway. Refused on a file system the host shares; nothing is left
        behind on failure."""
        self._may_create_in(dir_fd, path)

        def open_temp(temp: str) -> int:
            opened: list[int] = []
            self._as_owner(
                lambda: opened.append(os.open(temp, atomic.TEMP_FLAGS, 0o600, dir_fd=dir_fd))
            )
            return opened[0]

        def finish(fd: int, temp: str) -> None:
            os.fchmod(fd, mode)
            problem = label_at(dir_fd, temp, self.label) if self.label else None
            if problem:
                raise OcihookError(f"container {path}: {problem}")

        try:
            atomic.replace_at(dir_fd, path.rsplit("/", 1)[-1], data, open_temp, finish)
        except OSError as error:
            raise OcihookError(f"container {path}: {describe(error)}") from None

    def _parent(self, path: str) -> tuple[int, str]:
        """(fd of the parent directory, created if missing; cached, do not close), name."""
        parent, name = securepath.split(path)
        if parent in self._dirs:
            return self._dirs[parent], name
        created: list[str] = []
        try:
            fd = securepath.mkdirs(self.root_fd, parent, 0o755, created, self._may_create_in)
        except OSError as error:
            raise OcihookError(f"container {parent}: {error.strerror}") from None
        finally:
            for directory in created:
                self._created(directory)
        self._dirs[parent] = fd
        if securepath.mount_id(fd) == self.root_mount:
            self._dirs_on_root.add(fd)
        return fd, name

    def _created(self, path: str, parent_fd: int | None = None) -> None:
        """Label something we created at `path` (inside the rootfs), whose directory is
        `parent_fd` when the caller has it, and remember how to remove it."""
        parent, name = securepath.split(path)

        def remove() -> None:
            fd = securepath.resolve(self.root_fd, parent)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    os.rmdir(name, dir_fd=fd)
                else:
                    os.unlink(name, dir_fd=fd)
            finally:
                os.close(fd)

        self._undo.append((f"remove {path}", remove))  # before labelling: a failure undoes it
        if not self.label:
            return
        own_fd = securepath.resolve(self.root_fd, parent) if parent_fd is None else None
        try:
            problem = label_at(parent_fd if own_fd is None else own_fd, name, self.label)
        except OSError as error:
            raise OcihookError(
                f"container {path}: cannot set SELinux label {self.label:.80}: {describe(error)}"
            ) from None
        finally:
            if own_fd is not None:
                os.close(own_fd)
        if problem:
            raise OcihookError(f"container {path}: {problem}")

    def rollback(self) -> list[str]:
        """Undo every change in reverse order; keep going past errors, which are returned
        (one line each) for the caller to log: the error that caused the rollback wins."""
        failures = []
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
            except Exception as error:
                cause = describe(error) if isinstance(error, OSError) else str(error)
                failures.append(f"{what}: {cause}")
        return failures

    # -- mounts ----------------------------------------------------------
    def _mountpoint(self, path: str, kinds: tuple[str, ...]) -> int:
        """An fd of a file (or, for a directory mount, a directory) at `path` to mount onto,
        created empty if missing: the created file's own fd (a regular file, which every
        non-directory mount accepts), else an O_PATH fd of what the image has there."""
        parent_fd, name = self._parent(path)
        try:
            # (a directory on the rootfs's own mount always passes: no lookup needed)
            if parent_fd not in self._dirs_on_root and not os.path.lexists(
                securepath.fd_path(parent_fd, name)
            ):
                self._may_create_in(parent_fd, path)
            created = -1
            try:
                if kinds == ("dir",):
                    os.mkdir(name, 0o755, dir_fd=parent_fd)
                else:
                    created = os.open(
                        name,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                        0o644,
                        dir_fd=parent_fd,
                    )
                self._created(path, parent_fd)
            except FileExistsError:
                pass
            except BaseException:
                if created >= 0:
                    os.close(created)
                raise
            if created >= 0:
                return created
            target = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        except OSError as error:
            raise OcihookError(f"container {path}: {error.strerror}") from None
        mode = os.fstat(target).st_mode
        if not is_type(mode, kinds):
            os.close(target)
            raise OcihookError(
                f"container {path}: exists in the image as a {type_name(mode)}; "
                "not mounting over it"
            )
        return target

    def attach(self, *args: object) -> None:
        self._as_owner(self._attach, *args)

    def _attach(
        self,
        tree: int,
        path: str,
        expect: tuple[int, int] | None,
        what: str,
        kinds: tuple[str, ...] = ("file",),
        classic_flags: int | None = None,
    ) -> None:
        """Attach `tree` at `path` and verify it landed there. `tree` is a detached mount, or
        with `classic_flags` (kernels without the new mount API) an O_PATH fd of the source,
        bind-mounted and then remounted with those flags."""
        target = self._mountpoint(path, kinds)
        try:
            if classic_flags is None:
                syscalls.move_mount(
                    tree,
                    "",
                    target,
                    "",
                    syscalls.MOVE_MOUNT_F_EMPTY_PATH | syscalls.MOVE_MOUNT_T_EMPTY_PATH,
                )
            else:
                syscalls.mount(
                    securepath.fd_path(tree), securepath.fd_path(target), None, syscalls.MS_BIND
                )
        except OSError as error:
            raise OcihookError(f"container {path}: cannot mount {what}: {error.strerror}") from None
        finally:
            os.close(target)
        if classic_flags is None:
            self._landed(tree, path, expect)
            return
        try:
            check = securepath.resolve(self.root_fd, path, follow_final=False)
        except OSError as error:
            raise OcihookError(f"container {path}: gone after mounting: {error.strerror}") from None
        # Undo through the mount itself (an fd of the attached mount's root), not through
        # `path`: a parent swapped in the meantime must not keep our mount alive.
        handle = tree if classic_flags is None else check
        self._undo.append(
            (
                f"unmount {path}",
                lambda: syscalls.umount2(securepath.fd_path(handle), syscalls.MNT_DETACH),
            )
        )
        try:
            st = os.fstat(check)
            if classic_flags is not None:
                syscalls.mount(
                    None,
                    securepath.fd_path(check),
                    None,
                    syscalls.MS_REMOUNT | syscalls.MS_BIND | classic_flags,
                )
        except OSError as error:
            raise OcihookError(
                f"container {path}: cannot remount read-only: {error.strerror}"
            ) from None
        finally:
            if classic_flags is None:
                os.close(check)
        if expect is not None and (st.st_dev, st.st_ino) != expect:
            raise OcihookError(f"container {path}: the mount did not land where planned")

    def _landed(self, tree: int, path: str, expect: tuple[int, int] | None) -> None:
        """After a move_mount: the file at `path`, looked up in its parent directory's fd
        (resolved in the root and cached: lookups cross mounts), is the planned source;
        `verify_dirs` then checks once per directory that the root still resolves its
        path to that fd's directory. The undo goes through the mount itself (the detached
        tree's fd now names the attached mount), never through `path`."""
        self._undo.append(
            (
                f"unmount {path}",
                lambda: syscalls.umount2(securepath.fd_path(tree), syscalls.MNT_DETACH),
            )
        )
        parent_fd, name = self._parent(path)
        self._to_verify.add(securepath.split(path)[0])
        try:
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except OSError as error:
            raise OcihookError(f"container {path}: gone after mounting: {error.strerror}") from None
        if expect is not None and (st.st_dev, st.st_ino) != expect:
            raise OcihookError(f"container {path}: the mount did not land where planned")

    def verify_dirs(self) -> None:
        """Each directory a mount was attached in (`_landed`) is still the one its path
        names in the root: no component was swapped for another directory or a link."""
        for parent in sorted(self._to_verify):
            fd = self._dirs[parent]
            try:
                now = securepath.resolve(self.root_fd, parent)
            except OSError as error:
                raise OcihookError(
                    f"container {parent}: gone after mounting: {error.strerror}"
                ) from None
            try:
                same = _same_file(os.fstat(now), os.fstat(fd))
            finally:
                os.close(now)
            if not same:
                raise OcihookError(
                    f"container {parent}: replaced while mounting: the mounts did not land "
                    "where planned"
                )
        self._to_verify.clear()

    # -- links and nodes -------------------------------------------------
    def link(self, link: Link) -> None:
        self._as_owner(self._link, link)

    def _link(self, link: Link) -> None:
        parent_fd, name = self._parent(link.target)
        self._may_create_in(parent_fd, link.target)
        try:
            os.symlink(link.points_to, name, dir_fd=parent_fd)
        except FileExistsError:
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode):
                raise OcihookError(
                    f"container {link.target}: exists in the image as a {type_name(st.st_mode)}"
                ) from None
            old = os.readlink(name, dir_fd=parent_fd)
            if old == link.points_to:
                return
            os.unlink(name, dir_fd=parent_fd)
            os.symlink(link.points_to, name, dir_fd=parent_fd)
            self._undo.append(
                (f"restore link {link.target}", lambda: self._restore_link(link.target, old))
            )
            return
        self._created(link.target, parent_fd)

    def _restore_link(self, path: str, old: str) -> None:
        parent_fd, name = self._parent(path)
        os.unlink(name, dir_fd=parent_fd)
        os.symlink(old, name, dir_fd=parent_fd)

    def device_node(self, node: DeviceNode) -> None:
        """mknod the node (no user namespace: the container's /dev allows device nodes)."""
        parent_fd, name = self._parent(node.path)
        kind = stat.S_IFCHR if node.type == "c" else stat.S_IFBLK
        self._may_create_in(parent_fd, node.path)
        # The node gets the host node's mode whatever the hook's umask (0022 would leave
        # 0644: a container running as a non-root user could not open the device).
        old_umask = os.umask(0)
        try:
            os.mknod(name, kind | node.mode, os.makedev(node.major, node.minor), dir_fd=parent_fd)
        except FileExistsError:
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            if stat.S_IFMT(st.st_mode) == kind and st.st_rdev == os.makedev(node.major, node.minor):
                return  # the runtime created the same node (e.g. podman --device)
            raise OcihookError(
                f"container {node.path}: exists as a {type_name(st.st_mode)} "
                f"that is not {node.type} {node.major}:{node.minor}"
            ) from None
        except OSError as error:
            raise OcihookError(f"container {node.path}: mknod: {error.strerror}") from None
        finally:
            os.umask(old_umask)
        self._created(node.path, parent_fd)
        if node.gid:  # the host node's group: a user the runtime gave it may open the node
            try:
                os.chown(name, -1, node.gid, dir_fd=parent_fd, follow_symlinks=False)
            except OSError as error:
                raise OcihookError(f"container {node.path}: chown: {error.strerror}") from None
