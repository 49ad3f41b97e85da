"""The one "fake runtime process in a private namespace" that tests and bench share.

What runc has made when it runs a prestart/createRuntime hook, without runc: a forked process
(optionally) in a private mount namespace, with the container's rootfs mounted there (an
overlay, or a bind of a directory onto itself), in a cgroup v1 devices cgroup. The process
waits on a pipe until `close()`; then its namespace and the mounts in it vanish.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from pathlib import Path

from ocihook.linux import syscalls

CGROUP_V1_DEVICES = Path("/sys/fs/cgroup/devices")
# runc's default device rules (libcontainer/specconv AllowedDevices), written after "a" is denied.
RUNC_DEFAULT_RULES = (
    "c *:* m",
    "b *:* m",
    "c 1:3 rwm",
    "c 1:5 rwm",
    "c 1:7 rwm",
    "c 1:8 rwm",
    "c 1:9 rwm",
    "c 5:0 rwm",
    "c 5:1 rwm",
    "c 5:2 rwm",
    "c 136:* rwm",
    "c 10:200 rwm",
)

# (source, target, fstype, flags, data) as for mount(2)
Mount = tuple[str, str, "str | None", int, str]


def overlay(lower: Path, upper: Path, work: Path, target: Path) -> Mount:
    """An overlay of an image at `target`, like runc's rootfs before pivot_root."""
    return (
        "overlay",
        str(target),
        "overlay",
        0,
        f"lowerdir={lower},upperdir={upper},workdir={work}",
    )


def bind_onto_itself(path: Path) -> Mount:
    """`path` bind-mounted onto itself (a rootfs that is a mount point of its own)."""
    return (str(path), str(path), None, syscalls.MS_BIND, "")


def v1_write(cgroup: Path, name: str, line: str) -> None:
    """One write(2) per rule, as the devices controller wants them."""
    fd = os.open(cgroup / name, os.O_WRONLY)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def make_devices_cgroup(cgroup: Path, rules: tuple[str, ...]) -> Path:
    """A fresh v1 devices cgroup that denies everything but `rules`."""
    cgroup.mkdir(parents=True)
    v1_write(cgroup, "devices.deny", "a")
    for rule in rules:
        v1_write(cgroup, "devices.allow", rule)
    return cgroup


def remove_cgroup(cgroup: Path) -> None:
    """rmdir a cgroup, waiting a little for its last process to be reaped."""
    for _ in range(100):
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


class FakeRuntimeProcess:
    """A process that stands in for a container at createRuntime.

    cgroup: the devices cgroup it joins; with `rules` it is created (deny all, allow the rules)
    and removed on close, without rules it must exist. private: a mount namespace of its own
    (propagation private), in which `mounts` are made before the process reports ready."""

    def __init__(
        self,
        cgroup: Path | None = None,
        rules: tuple[str, ...] | None = None,
        private: bool = True,
        mounts: tuple[Mount, ...] = (),
    ) -> None:
        self.cgroup = cgroup
        self.owns_cgroup = rules is not None and cgroup is not None
        if self.owns_cgroup:
            make_devices_cgroup(cgroup, rules)
        self.pid = 0
        ready_r, ready_w = os.pipe()
        hold_r, hold_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the "container": never returns
            status = 1
            try:
                os.close(ready_r)
                os.close(hold_w)
                if private:
                    syscalls.unshare(syscalls.CLONE_NEWNS)
                    syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
                for source, target, fstype, flags, data in mounts:
                    syscalls.mount(source, target, fstype, flags, data)
                os.write(ready_w, b"ok")
                os.close(ready_w)
                os.read(hold_r, 1)  # until closed
                status = 0
            except BaseException as error:  # report to the parent, never return into it
                try:
                    os.write(ready_w, f"error: {error}".encode()[:500])
                except OSError:
                    pass
            finally:
                os._exit(status)
        os.close(ready_w)
        os.close(hold_r)
        self.pid = pid
        self._hold = hold_w
        try:
            if cgroup is not None:
                v1_write(cgroup, "cgroup.procs", str(pid))
            answer = os.read(ready_r, 512)
        finally:
            os.close(ready_r)
        if answer != b"ok":
            self.close()
            raise RuntimeError(f"fake runtime process: {answer.decode(errors='replace') or 'died'}")

    def close(self) -> None:
        if self.pid:
            os.close(self._hold)
            os.waitpid(self.pid, 0)
            self.pid = 0
        if self.owns_cgroup:
            remove_cgroup(self.cgroup)

    def __enter__(self) -> FakeRuntimeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def in_private_mount_ns(function) -> None:
    """Run `function` in a forked child in a private mount namespace; fail on its failure."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            syscalls.unshare(syscalls.CLONE_NEWNS)
            syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
            function()
            code = 0
        except BaseException as error:  # report to the parent through the exit status
            os.write(2, f"child: {type(error).__name__}: {error}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def in_child(fn, *args):
    """Run fn(*args) in a forked child; return its JSON result (an exception is re-raised)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        try:
            os.close(r)
            try:
                out = {"ok": fn(*args)}
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                out = {"error": f"{type(exc).__name__}: {exc}", "tb": traceback.format_exc()}
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    out = json.loads(data or b'{"error": "child died"}')
    if "error" in out:
        raise AssertionError(f"child failed: {out['error']}\n{out.get('tb', '')}")
    return out["ok"]
