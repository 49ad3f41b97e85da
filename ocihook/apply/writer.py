"""The changes a plan makes inside one rootfs (mount points, attaches, links, device nodes,
labels), each made by file descriptor and put on an undo stack: a failure rolls the container
back to how it was."""

from __future__ import annotations

import os
import stat

from ocihook.errors import OcihookError, describe
from ocihook.linux import atomic, securepath, syscalls
from ocihook.linux.filetypes import is_type, type_name
from ocihook.plan.model import DeviceNode, Link
from ocihook.selinux.label import label_at

TYPE_CHECKING = False  # typing costs ~10 ms of imports at container start: annotations only
if TYPE_CHECKING:
    from collections.abc import Callable


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


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
