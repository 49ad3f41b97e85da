"""Replace a file so that readers see the old content or the new, never a part: the one
writer behind the hook's records and config cache (linux/trusted.py), the container's ld cache
(apply.ContainerWriter.replace_file) and the CDI spec and NFD files (write_atomic)."""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs imports at container start: annotations only
if TYPE_CHECKING:
    from collections.abc import Callable

TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def replace_at(
    dir_fd: int,
    name: str,
    data: bytes,
    open_temp: Callable[[str], int],
    finish: Callable[[int, str], None] | None = None,
) -> None:
    """Replace `name` in the directory `dir_fd` with `data`: a new hidden temporary file
    (`.NAME.ocihook-PID-RAND.tmp`, created by `open_temp(temp_name)` with TEMP_FLAGS, which
    returns its fd) is written, given `finish(fd, temp_name)` (a mode, a label, an fsync),
    closed and renamed over `name`. The temporary file never survives a failure; the error
    (OSError or the caller's own) propagates for the caller to word."""
    temp = f".{name}.ocihook-{os.getpid()}-{os.urandom(4).hex()}.tmp"
    fd = open_temp(temp)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if finish is not None:
                finish(fd, temp)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    """Write `text` to `path` (its directory made if missing), `mode` whatever the umask,
    synced. Readers that skip dot files or read only *.yaml/*.json (NFD's features.d, the
    runtimes' CDI dirs) never see the temporary file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o755, exist_ok=True)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def finish(fd: int, _temp: str) -> None:
        os.fchmod(fd, mode)
        os.fsync(fd)

    try:
        replace_at(
            dir_fd,
            os.path.basename(path),
            text.encode(),
            lambda temp: os.open(temp, TEMP_FLAGS, 0o600, dir_fd=dir_fd),
            finish,
        )
    finally:
        os.close(dir_fd)
