"""Update a container's dynamic linker cache: natively, or with the host's ldconfig, sandboxed.

`update` carries out the plan's `ld_writer`: with "native" it writes the cache itself when it
can be exact (ld.native: the image's cache plus the injected libraries, no process), and
otherwise, or with "ldconfig", it runs the sandboxed ldconfig (`update_cache`).

Nothing of the container is executed: the host's (static) ldconfig is opened on the
host and run by file descriptor in a child that is chrooted into the rootfs inside a
private mount namespace where /proc and /sys are masked, with an empty environment,
resource limits, no capabilities and no_new_privs. `-X` keeps ldconfig from creating
or following links (CVE-2025-23267); the hook creates the soname links itself.
"""

from __future__ import annotations

import os
import time

from ocihook.errors import OcihookError, describe
from ocihook.ld import native
from ocihook.linux import privileges, securepath, syscalls
from ocihook.plan.kinds import KINDS
from ocihook.selinux import label

TYPE_CHECKING = False  # typing costs imports at container start: annotations only
if TYPE_CHECKING:
    from collections.abc import Callable

    from ocihook.apply.writer import ContainerWriter
    from ocihook.plan.model import Plan

TIMEOUT_SECONDS = 10.0
SIGKILL = 9  # the `signal` module would import enum on the hot path
# The sandboxed ldconfig's limits, by `resource`'s names: that module (an extension, about
# 0.25 ms) is imported only when the sandbox runs, before the fork (the chroot has no Python).
LIMITS = {
    "RLIMIT_CPU": 10,
    "RLIMIT_AS": 1 << 30,
    "RLIMIT_FSIZE": 64 << 20,
    "RLIMIT_NOFILE": 256,
    "RLIMIT_CORE": 0,
}


def update(
    writer: ContainerWriter,
    ldconfig_fd: int,
    root_fd: int,
    rootfs: str,
    plan: Plan,
    ldconfig_path: str,
    uid: int = 0,
    gid: int = 0,
    debug: Callable[[str], None] | None = None,
    known: dict | None = None,
    learnt: dict | None = None,
) -> str:
    """Bring the container's ld cache up to date for the finalized `plan`'s libraries in its
    `ld_dirs`, the plan's way (`plan.ld_writer`); returns which way ran: "native" or
    "ldconfig" (the native writer falls back to the sandboxed ldconfig, the host's
    `ldconfig_path` open as `ldconfig_fd`, when it cannot be exact).

    `writer` (apply.ContainerWriter) creates the file; `debug` logs one line saying why;
    `known`, `learnt`: the libraries' entries of an earlier start, and those read now
    (ld/native.library_entries, ld/known.py)."""
    ld_dirs = plan.ld_dirs
    why = "ldconfig.writer is ldconfig"
    libraries = [m.target for m in plan.mounts if KINDS[m.kind].lib_dir]
    compat = plan.cuda_compat
    first = compat["dir"] if compat and compat["use"] else None  # the image's CUDA compat dir
    if plan.ld_writer == "native":
        why = _native(writer, root_fd, ld_dirs, libraries, first, known, learnt)
        if why is None:
            if debug:
                dirs = ([first] if first else []) + ld_dirs
                debug(f"ld cache: written natively for {', '.join(dirs)}")
            return "native"
    if debug:
        debug(f"ld cache: sandboxed ldconfig ({why})")
    # ldconfig keys each library by its DT_SONAME as well: the same check of the names the
    # native writer makes (an OcihookError when a soname names nothing in its dir).
    native.library_entries(root_fd, ld_dirs, libraries)
    # ldconfig keeps the first of equal entries, from its command line's dirs first.
    dirs = [first, *ld_dirs] if first else ld_dirs
    update_cache(ldconfig_fd, root_fd, rootfs, dirs, uid, gid, ldconfig_path)
    return "ldconfig"


def _native(
    writer: ContainerWriter,
    root_fd: int,
    ld_dirs: list[str],
    libraries: list[str],
    first: str | None = None,
    known: dict | None = None,
    learnt: dict | None = None,
) -> str | None:
    """Write the merged cache; None when done, else why the sandboxed ldconfig must run.
    A container /etc on a file system the host shares is an error (OcihookError), not a
    reason: nothing is created there."""
    try:
        etc_fd = securepath.resolve(root_fd, "/etc", flags=os.O_PATH | os.O_DIRECTORY)
    except OSError as error:
        return f"/etc: {describe(error)}"
    try:
        writer.may_create_in(etc_fd, native.CACHE)
        data = native.build(root_fd, etc_fd, ld_dirs, libraries, first, known, learnt)
        if isinstance(data, str):
            return data
        writer.replace_file(etc_fd, native.CACHE, data)
        return None
    finally:
        os.close(etc_fd)


def _mask(root_fd: int, path: str) -> None:
    """Cover a directory of the rootfs with an empty read-only tmpfs (in our private ns)."""
    try:
        fd = securepath.resolve(root_fd, path, flags=os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return
    try:
        syscalls.mount(
            "tmpfs", securepath.fd_path(fd), "tmpfs", syscalls.MS_RDONLY, "size=4k,mode=555"
        )
    finally:
        os.close(fd)


def _reopen_root(root_fd: int, rootfs: str) -> int:
    """The rootfs in our new mount namespace (fds from the old one cannot be mounted on)."""
    try:
        return securepath.reopen_dir(rootfs, root_fd)
    except securepath.Changed:
        raise OcihookError(f"rootfs {rootfs} changed under the hook") from None


def _child(
    ldconfig_fd: int,
    root_fd: int,
    rootfs: str,
    dirs: list[str],
    uid: int,
    gid: int,
    errw: int,
    path: str,
    resource,
):
    """Runs in the forked child; never returns."""
    try:
        # No domain transition to ldconfig_t under no_new_privs: ldconfig stays confined by
        # this sandbox in the hook's own domain (docs/selinux.md).
        label.exec_in_current_domain()
        syscalls.unshare(syscalls.CLONE_NEWNS)
        syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
        root_fd = _reopen_root(root_fd, rootfs)
        for path in ("/proc", "/sys"):
            _mask(root_fd, path)
        os.fchdir(root_fd)
        os.chroot(".")
        os.chdir("/")
        for limit, value in LIMITS.items():
            resource.setrlimit(getattr(resource, limit), (value, value))
        privileges.drop_bounding_set()
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
        privileges.clear_capabilities()
        try:
            os.execve(ldconfig_fd, ["ldconfig", "-X", *dirs], {})
        except OSError as error:
            raise OSError(error.errno, f"executing {path}: {error.strerror}") from None
    except BaseException as error:  # report and die: never return into the hook's code
        try:
            message = error.strerror if isinstance(error, OSError) else None
            message = message or f"{type(error).__name__}: {error}"
            os.write(errw, message.encode()[:512])
        finally:
            os._exit(127)


def update_cache(
    ldconfig_fd: int,
    root_fd: int,
    rootfs: str,
    dirs: list[str],
    uid: int = 0,
    gid: int = 0,
    path: str = "ldconfig",
) -> None:
    """Run ldconfig (the host's `path`, open as `ldconfig_fd`) for `dirs` inside the rootfs
    (`root_fd`, mounted at `rootfs` in the current mount namespace); raise OcihookError on
    failure."""
    import resource
    import select  # noqa: F401 - for _wait, imported before the fork like resource

    errr, errw = os.pipe2(os.O_CLOEXEC)
    outr, outw = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(errr)
        os.close(outr)
        os.dup2(outw, 1)
        os.dup2(outw, 2)
        _child(ldconfig_fd, root_fd, rootfs, dirs, uid, gid, errw, path, resource)
    os.close(errw)
    os.close(outw)
    try:
        output, status = _wait(pid, outr)
        setup_error = os.read(errr, 512).decode(errors="replace")
    finally:
        os.close(errr)
        os.close(outr)
    if setup_error:
        raise OcihookError(f"ldconfig sandbox: {setup_error}")
    if status != 0:
        detail = output.decode(errors="replace").strip().splitlines()
        raise OcihookError(
            f"ldconfig in the container failed ({_status_text(status)})"
            + (f": {detail[-1][:200]}" if detail else "")
        )


def _wait(pid: int, outr: int) -> tuple[bytes, int]:
    import select

    deadline = time.monotonic() + TIMEOUT_SECONDS
    output = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            os.kill(pid, SIGKILL)
            os.waitpid(pid, 0)
            raise OcihookError(f"ldconfig in the container timed out after {TIMEOUT_SECONDS:.0f}s")
        poller = select.poll()
        poller.register(outr, select.POLLIN | select.POLLHUP)
        ready = poller.poll(remaining * 1000)
        if ready:
            chunk = os.read(outr, 65536)
            if chunk:
                output = (output + chunk)[-4096:]
                continue
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return output, status
        if not ready:
            continue
        # Output closed but the child has not exited yet: wait for it, with the deadline.
        _, status = _waitpid_deadline(pid, deadline)
        return output, status


def _waitpid_deadline(pid: int, deadline: float) -> tuple[int, int]:
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return done, status
        time.sleep(0.001)
    os.kill(pid, SIGKILL)
    return os.waitpid(pid, 0)


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"
