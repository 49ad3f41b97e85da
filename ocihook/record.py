"""What was injected into each container: /run/ocihook/<id>.json, and the log line."""

from __future__ import annotations

import os
import time

from ocihook import fastjson

RECORD_VERSION = 1


def open_state_dir(path: str) -> int:
    """O_PATH fd of the state dir (created 0700), opened on the host before setns."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def write_record(state_dir_fd: int, container_id: str, record: dict) -> None:
    """Atomically write <id>.json in the state dir (the id was validated: no '/')."""
    body = {"version": RECORD_VERSION, "id": container_id, **record}
    tmp = f".{container_id}.json.tmp"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
        dir_fd=state_dir_fd,
    )
    with os.fdopen(fd, "w") as file:
        file.write(fastjson.dumps(body, indent=1))
    os.replace(tmp, f"{container_id}.json", src_dir_fd=state_dir_fd, dst_dir_fd=state_dir_fd)


def remove_record(state_dir: str, container_id: str) -> bool:
    try:
        os.unlink(os.path.join(state_dir, f"{container_id}.json"))
        return True
    except FileNotFoundError:
        return False


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Log:
    """One line per container to syslog or a file; every step too when debug is on."""

    def __init__(self, target: str, debug: bool) -> None:
        self.debug_enabled = debug
        self._fd: int | None = None
        self._syslog = None
        if target == "syslog":
            import syslog

            syslog.openlog("ocihook", syslog.LOG_PID, syslog.LOG_DAEMON)
            self._syslog = syslog
        elif target != "none":
            try:
                self._fd = os.open(
                    target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o640
                )
            except OSError:
                self._fd = None  # logging must never fail a container start

    def info(self, message: str) -> None:
        self._emit("info", message)

    def debug(self, message: str) -> None:
        if self.debug_enabled:
            self._emit("debug", message)

    def error(self, message: str) -> None:
        self._emit("error", message)

    def _emit(self, level: str, message: str) -> None:
        if self._syslog is not None:
            priority = {"info": self._syslog.LOG_INFO, "debug": self._syslog.LOG_DEBUG}.get(
                level, self._syslog.LOG_ERR
            )
            self._syslog.syslog(priority, message)
        elif self._fd is not None:
            line = f"{utc_now()} ocihook[{os.getpid()}] {level}: {message}\n"
            try:
                os.write(self._fd, line.encode(errors="replace"))
            except OSError:
                pass
