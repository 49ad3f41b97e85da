"""privileges.py drops capabilities for real: a forked child of the test (root) drops them,
then reads its own /proc/self/status (what the kernel says, not what we set) and tries a
privileged call."""

from __future__ import annotations

import json
import os

import pytest

from ocihook import privileges

pytestmark = pytest.mark.root

CAP_CHOWN = 0
CAP_SYS_ADMIN = 21
CAP_SYS_PTRACE = 19
FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")


def in_child(keep: tuple[int, ...]) -> dict:
    """Drop in a forked child; its status fields (hex masks as ints) and whether chown works."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            privileges.drop_capabilities(keep)
            with open("/proc/self/status") as status:
                fields = {
                    name: int(value, 16) if name.startswith("Cap") else int(value)
                    for name, value in (line.split(":\t") for line in status)
                    if name in FIELDS
                }
            try:
                os.chown("/proc/self/fd/0", 1, 1)  # needs CAP_CHOWN (a pipe: harmless)
                fields["chown"] = "ok"
            except OSError as error:
                fields["chown"] = error.strerror
            os.write(write, json.dumps(fields).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def test_drop_everything():
    status = in_child(())
    assert {name: status[name] for name in FIELDS} == {
        "CapInh": 0,
        "CapPrm": 0,
        "CapEff": 0,
        "CapBnd": 0,
        "CapAmb": 0,
        "NoNewPrivs": 1,
    }
    assert status["chown"] == "Operation not permitted"


def test_keep_some_including_one_above_31():
    """Capabilities above 31 live in the second word of capset's data (CAP_SYS_ADMIN is 21;
    CAP_SYSLOG is 34, CAP_BPF 39 on kernels that have it)."""
    keep = (CAP_CHOWN, CAP_SYS_ADMIN, 34)
    status = in_child(keep)
    mask = sum(1 << cap for cap in keep)
    assert (status["CapEff"], status["CapPrm"], status["CapBnd"]) == (mask, mask, mask)
    assert (status["CapInh"], status["CapAmb"], status["NoNewPrivs"]) == (0, 0, 1)
    assert status["chown"] == "ok"


def test_bounding_set_is_read_without_proc():
    """Probed with prctl, not read from /proc (the ldconfig sandbox masks /proc)."""
    caps = privileges.bounding_set()
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("CapBnd:"))
    assert sum(1 << cap for cap in caps) == int(line.split()[1], 16)
    assert CAP_SYS_PTRACE in caps  # the test runs as root with a full bounding set
