"""Update a container's dynamic linker cache: natively, or with the host's ldconfig, sandboxed.

`update` writes the cache itself when it can be exact (ldnative: the image's cache plus the
injected libraries, no process) and otherwise runs the sandboxed ldconfig (`update_cache`).

Nothing of the container is executed: the host's (static) ldconfig is opened on the
host and run by file descriptor in a child that is chrooted into the rootfs inside a
private mount namespace where /proc and /sys are masked, with an empty environment,
resource limits, no capabilities and no_new_privs. `-X` keeps ldconfig from creating
or following links (CVE-2025-23267); the hook creates the soname links itself.
"""

from __future__ import annotations

import os
import resource
import select
import stat
import time

from ocihook import ldnative, linux, privileges, securepath
from ocihook.errors import OcihookError
from ocihook.selinux import label

TYPE_CHECKING = False  # typing costs imports at container start: annotations only
if TYPE_CHECKING:
    from collections.abc import Callable

    from ocihook.apply import ContainerWriter

TIMEOUT_SECONDS = 10.0
SIGKILL = 9  # the `signal` module would import enum on the hot path
LIMITS = {
    resource.RLIMIT_CPU: 10,
    resource.RLIMIT_AS: 1 << 30,
    resource.RLIMIT_FSIZE: 64 << 20,
    resource.RLIMIT_NOFILE: 256,
    resource.RLIMIT_CORE: 0,
}
# Dynamic loaders whose presence marks a glibc image (an ld cache is useless elsewhere).
GLIBC_LOADERS = (
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/ld-linux-aarch64.so.1",
    "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "/usr/lib64/ld-linux-x86-64.so.2",
    "/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
)


def update(
    writer: ContainerWriter,
    ldconfig_fd: int,
    root_fd: int,
    rootfs: str,
    ld_dirs: list[str],
    libraries: list[str],
    settings: dict,
    uid: int = 0,
    gid: int = 0,
    debug: Callable[[str], None] | None = None,
) -> str:
    """Bring the container's ld cache up to date for the injected `libraries` (container
    paths) in `ld_dirs`; returns which way ran: "native" or "ldconfig".

    `writer` (apply.ContainerWriter) creates the file; `settings` is the config's `ldconfig`
    section (`writer: native|ldconfig`, `path`); `debug` logs one line saying why."""
    why = "ldconfig.writer is ldconfig"
    if settings.get("writer", "native") == "native":
        why = _native(writer, root_fd, ld_dirs, libraries)
        if why is None:
            if debug:
                debug(f"ld cache: written natively for {', '.join(ld_dirs)}")
            return "native"
    if debug:
        debug(f"ld cache: sandboxed ldconfig ({why})")
    update_cache(ldconfig_fd, root_fd, rootfs, ld_dirs, uid, gid, settings["path"])
    return "ldconfig"


def _native(
    writer: ContainerWriter, root_fd: int, ld_dirs: list[str], libraries: list[str]
) -> str | None:
    """Write the merged cache; None when done, else why the sandboxed ldconfig must run.
    A container /etc on a file system the host shares is an error (OcihookError), not a
    reason: nothing is created there."""
    try:
        etc_fd = securepath.resolve(root_fd, "/etc", flags=os.O_PATH | os.O_DIRECTORY)
    except OSError as error:
        return f"/etc: {error.strerror}"
    try:
        writer.may_create_in(etc_fd, ldnative.CACHE)
        data = ldnative.build(root_fd, etc_fd, ld_dirs, libraries)
        if isinstance(data, str):
            return data
        writer.replace_file(etc_fd, ldnative.CACHE, data)
        return None
    finally:
        os.close(etc_fd)


def open_ldconfig(path: str) -> int:
    """The host's ldconfig, opened on the host before entering the container.

    It must be a static ELF executable: it runs chrooted in the rootfs, where a dynamic
    one would load the image's ld.so and libc (and a script the image's interpreter)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise OcihookError(f"ldconfig {path}: {error.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        problem = _not_static_elf(fd, mode)
        if problem is None and not mode & 0o111:
            problem = f"not executable (mode {stat.S_IMODE(mode):04o})"
    except OSError as error:
        problem = error.strerror
    if problem:
        os.close(fd)
        raise OcihookError(f"ldconfig {path}: {problem}; it must be a static executable")
    return fd


def _not_static_elf(fd: int, mode: int) -> str | None:
    """Why the file at `fd` (of st_mode `mode`) is not a static ELF executable (None when it
    is one)."""
    import struct

    if not stat.S_ISREG(mode):
        return "not a regular file"
    header = os.pread(fd, 64, 0)
    if len(header) < 64 or header[:4] != b"\x7fELF":
        return "not an ELF file"
    if header[4] != 2 or header[5] != 1:
        return "not a 64-bit little-endian ELF file"
    (phoff,) = struct.unpack_from("<Q", header, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
    if phentsize < 56 or phnum > 512:
        return "malformed ELF program headers"
    table = os.pread(fd, phentsize * phnum, phoff)
    if len(table) < phentsize * phnum:
        return "truncated ELF program headers"
    for i in range(phnum):
        (p_type,) = struct.unpack_from("<I", table, i * phentsize)
        if p_type == 3:  # PT_INTERP
            return "dynamically linked (it would load the container's ld.so)"
    return None


def is_glibc_image(root_fd: int) -> bool:
    for loader in GLIBC_LOADERS:
        try:
            os.close(securepath.resolve(root_fd, loader))
            return True
        except OSError:
            continue
    return False


def _mask(root_fd: int, path: str) -> None:
    """Cover a directory of the rootfs with an empty read-only tmpfs (in our private ns)."""
    try:
        fd = securepath.resolve(root_fd, path, flags=os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return
    try:
        linux.mount("tmpfs", securepath.fd_path(fd), "tmpfs", linux.MS_RDONLY, "size=4k,mode=555")
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
):
    """Runs in the forked child; never returns."""
    try:
        # No domain transition to ldconfig_t under no_new_privs: ldconfig stays confined by
        # this sandbox in the hook's own domain (docs/selinux.md).
        label.exec_in_current_domain()
        linux.unshare(linux.CLONE_NEWNS)
        linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE)
        root_fd = _reopen_root(root_fd, rootfs)
        for path in ("/proc", "/sys"):
            _mask(root_fd, path)
        os.fchdir(root_fd)
        os.chroot(".")
        os.chdir("/")
        for limit, value in LIMITS.items():
            resource.setrlimit(limit, (value, value))
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
    errr, errw = os.pipe2(os.O_CLOEXEC)
    outr, outw = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        os.close(errr)
        os.close(outr)
        os.dup2(outw, 1)
        os.dup2(outw, 2)
        _child(ldconfig_fd, root_fd, rootfs, dirs, uid, gid, errw, path)
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
