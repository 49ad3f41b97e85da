"""privileges.py drops capabilities for real: a forked child of the test (root) drops them,
then reads its own /proc/self/status (what the kernel says, not what we set) and tries a
privileged call."""

from __future__ import annotations

import os

import pytest

from ocihook.linux import privileges
from tests.support.sandbox import in_child

pytestmark = pytest.mark.root

CAP_CHOWN = 0
CAP_SYS_ADMIN = 21
CAP_SYS_PTRACE = 19
FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")


def _drop_and_report(keep: list[int], probe: str) -> dict:
    """In the child: drop, then the status fields (hex masks as ints) and whether it may
    chown `probe` (a file of the test's own) to another user."""
    privileges.drop_capabilities(tuple(keep))
    with open("/proc/self/status") as status:
        fields = {
            name: int(value, 16) if name.startswith("Cap") else int(value)
            for name, value in (line.split(":\t") for line in status)
            if name in FIELDS
        }
    try:
        os.chown(probe, 1, 1)  # needs CAP_CHOWN
        fields["chown"] = "ok"
    except OSError as error:
        fields["chown"] = error.strerror
    return fields


def dropped(keep: tuple[int, ...], tmp_path) -> dict:
    probe = tmp_path / "probe"
    probe.write_text("")
    return in_child(_drop_and_report, list(keep), str(probe))


def test_drop_everything(tmp_path):
    status = dropped((), tmp_path)
    assert {name: status[name] for name in FIELDS} == {
        "CapInh": 0,
        "CapPrm": 0,
        "CapEff": 0,
        "CapBnd": 0,
        "CapAmb": 0,
        "NoNewPrivs": 1,
    }
    assert status["chown"] == "Operation not permitted"


def test_keep_some_including_one_above_31(tmp_path):
    """Capabilities above 31 live in the second word of capset's data (CAP_SYS_ADMIN is 21;
    CAP_SYSLOG is 34, CAP_BPF 39 on kernels that have it)."""
    keep = (CAP_CHOWN, CAP_SYS_ADMIN, 34)
    status = dropped(keep, tmp_path)
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


def _drop_twice() -> str:
    """In the child: everything dropped (CAP_SETPCAP too), then the bounding set again."""
    privileges.drop_capabilities(())
    try:
        privileges.drop_bounding_set()
    except OSError as error:
        return error.strerror
    return "ok"


def _drop_without_setpcap() -> str:
    """In the child: CAP_SETPCAP (8) gone from the effective set while the bounding set is
    still full: dropping it must fail, not pass silently."""
    privileges.clear_capabilities(keep=(CAP_SYS_ADMIN,))
    try:
        privileges.drop_bounding_set()
    except OSError as error:
        return error.strerror
    return "ok"


def test_dropping_an_empty_bounding_set_again_needs_no_capability():
    """The bounding set is dropped capability by capability without reading it first; a
    capability no longer in it is no error even without CAP_SETPCAP (a second drop), and
    one still in it is."""
    assert in_child(_drop_twice) == "ok"
    assert in_child(_drop_without_setpcap) == "prctl(24): Operation not permitted"
