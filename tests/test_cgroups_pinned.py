"""crun 1.23+ under systemd (ocihook/cgroups/pinned.py): the scope names a pinned device program
(BPFProgram=device:PIN), and the hook pins an extended copy and names it in a drop-in.

Real kernel parts: a bpf file system of the test's own (mounted and unmounted here), real
programs loaded, pinned, attached to a real cgroup v2 scope and its crun subgroup, and opens
of real device nodes from inside them (tests/test_cgroups.py's lab). Stand-ins, named: systemd
is not PID 1 on this machine, so the unit is served by the D-Bus stand-in of
tests/support/dbus.py, and systemd's re-attachment at `daemon-reload` (detach the program it
attached, attach the one its BPFProgram= now names, from its pin) is done by the test; the
real systemd 262 with crun 1.28 does it in the today's-stack guest
(tests/enforcing/today_checks.py, make test-enforcing)."""

from __future__ import annotations

import os
import subprocess

import pytest

from ocihook.cgroups import bpf, grant, pinned, systemd
from ocihook.cgroups.grant import CgroupTarget, allow_devices, revert_device_edits
from ocihook.errors import OcihookError
from tests.support import device_programs
from tests.support.dbus import StandInSystemd, Unit
from tests.test_cgroups import (  # noqa: F401 (lab: a fixture)
    ACCEL_NODE,
    ACCEL_RW,
    OTHER_NODE,
    RO,
    RUNTIME_RULES,
    RW,
    lab,
    probe,
)

UNIT = "libpod-c0ffee.scope"


@pytest.fixture
def bpffs(tmp_path):
    """A bpf file system of the test's own (crun's /sys/fs/bpf)."""
    path = tmp_path / "bpf"
    path.mkdir()
    subprocess.run(["mount", "-t", "bpf", "bpf", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


@pytest.fixture
def host(tmp_path, bpffs, monkeypatch):
    """Our pin dir in that bpffs, systemd's runtime unit and transient dirs in tmp."""
    units = tmp_path / "run-systemd-system"
    transient = tmp_path / "run-systemd-transient"
    units.mkdir()
    transient.mkdir()
    monkeypatch.setattr(pinned, "PIN_DIR", str(bpffs / "ocihook"))
    monkeypatch.setattr(pinned, "UNIT_DIR", str(units))
    monkeypatch.setattr(pinned, "TRANSIENT_DIR", str(transient))
    return units, transient


@pytest.fixture
def crun_123(lab, bpffs, tmp_path, monkeypatch):  # noqa: F811
    """crun 1.23+'s layout: <scope>/container, no program on the subgroup; crun's program
    pinned under bpffs/crun/ and attached to the scope (as systemd attaches it from the pin);
    the unit served with DevicePolicy=auto, no DeviceAllow=, BPFProgram=device:PIN."""
    root = "/sys/fs/cgroup/unified"
    top = f"ocihook-test-{os.urandom(6).hex()}"
    scope = lab.mkdir(root, f"{top}/{UNIT}")
    sub = lab.mkdir(root, f"{top}/{UNIT}/container")
    (bpffs / "crun").mkdir()
    crun_pin = str(bpffs / "crun" / UNIT.replace(".", "_"))
    fd = bpf.prog_load(bpf.device_filter(RUNTIME_RULES), "GPL", "crun_test")
    try:
        bpf.obj_pin(fd, crun_pin)
        cfd = os.open(scope, os.O_RDONLY | os.O_DIRECTORY)
        try:
            bpf.prog_attach(cfd, fd, bpf.BPF_F_ALLOW_MULTI)
        finally:
            os.close(cfd)
    finally:
        os.close(fd)
    socket_path = str(tmp_path / "private")
    server = StandInSystemd(socket_path, {UNIT: Unit("auto", [], [("device", crun_pin)])}, "262")
    monkeypatch.setattr(systemd, "PRIVATE_SOCKET", socket_path)
    monkeypatch.setattr(systemd, "SYSTEM_BUS_SOCKET", str(tmp_path / "no-bus"))
    monkeypatch.setattr(systemd, "BOOTED_DIR", str(tmp_path))  # "systemd is PID 1"
    try:
        yield scope, sub, crun_pin, server
    finally:
        server.close()


def _pinned_program(path):
    fd = bpf.obj_get(path)
    try:
        info = bpf.prog_info(fd)
    finally:
        os.close(fd)
    return info.id, info.xlated


def _reload_like_systemd(scope, attached_from, now_named):
    """What systemd does to the scope at daemon-reload (bpf-foreign): detach the program it
    attached (already swapped out by the hook: ENOENT, ignored), attach the one its
    BPFProgram= names now, opened from its pin."""
    cfd = os.open(scope, os.O_RDONLY | os.O_DIRECTORY)
    try:
        old = bpf.obj_get(attached_from)
        try:
            bpf.prog_detach(cfd, old)
        except bpf.BpfError:
            pass
        finally:
            os.close(old)
        new = bpf.obj_get(now_named)
        try:
            bpf.prog_attach(cfd, new, bpf.BPF_F_ALLOW_MULTI)
        finally:
            os.close(new)
    finally:
        os.close(cfd)


@pytest.mark.root
def test_extended_copy_is_pinned_and_named_on_the_unit(crun_123, host):
    scope, sub, crun_pin, server = crun_123
    units, _ = host
    crun_before = _pinned_program(crun_pin)
    assert probe(sub, (ACCEL_NODE, RW), ("/dev/null", RW)) == ["EPERM", 0]
    lines = []
    target = CgroupTarget("v2", sub, scope, UNIT)
    edits = allow_devices(target, [ACCEL_RW], lines.append)
    ours = f"{pinned.PIN_DIR}/{UNIT.replace('.', '_')}"
    assert [(e.cgroup, e.path, e.action) for e in edits] == [
        ("v2", sub, grant.V2_ACTION),
        ("v2", scope, grant.V2_ACTION),
        ("systemd", UNIT, grant.PIN_ACTION),
    ]
    assert "SetUnitProperties" not in [m for m, _ in server.calls]  # no DeviceAllow= entry
    # now: the hook's copy swapped in on the scope
    assert probe(sub, (ACCEL_NODE, RW), (OTHER_NODE, RO), ("/dev/null", RW)) == [0, "EPERM", 0]
    # crun's pin is crun's own, unchanged: crun update compares its program with it
    assert _pinned_program(crun_pin) == crun_before
    # our pin: our allow block, then crun's program unchanged
    _, insns = _pinned_program(ours)
    assert insns == bpf.allow_prefix([ACCEL_RW]) + crun_before[1]
    decoded = device_programs.decode_device_filter(insns)
    assert decoded.rules == ((ACCEL_RW, True), *RUNTIME_RULES) and decoded.default_allow is False
    dropin = units / f"{UNIT}.d" / pinned.DROPIN
    assert dropin.read_text().splitlines()[1:] == [
        "[Scope]",
        "BPFProgram=",
        f"BPFProgram=device:{ours}",
    ]
    assert lines == [
        f"systemd unit {UNIT}: its device program (BPFProgram=device:{crun_pin}) extended as "
        f"{ours}, which {dropin} names on the unit from the next daemon-reload on"
    ]
    # daemon-reload: systemd attaches what BPFProgram= names; ours beside the hook's copy
    _reload_like_systemd(scope, crun_pin, ours)
    assert probe(sub, (ACCEL_NODE, RW), (OTHER_NODE, RO), ("/dev/null", RW)) == [0, "EPERM", 0]
    # rollback: the pins and the drop-in go, the copy is stripped again
    revert_device_edits(target, edits)
    assert not os.path.exists(ours) and not dropin.exists() and not dropin.parent.exists()
    assert os.path.exists(crun_pin)


@pytest.mark.root
def test_without_the_drop_in_a_reload_brings_back_cruns_program(crun_123, host):
    """Why the copy is named on the unit: systemd re-attaches crun's pinned original beside
    the hook's copy, and every attached program must allow (the field's failure)."""
    scope, sub, crun_pin, _ = crun_123
    allow_devices(CgroupTarget("v2", sub, scope, UNIT), [ACCEL_RW])
    _reload_like_systemd(scope, crun_pin, crun_pin)
    assert probe(sub, (ACCEL_NODE, RW), ("/dev/null", RW)) == ["EPERM", 0]


@pytest.mark.root
def test_a_program_that_cannot_be_copied_leaves_nothing(crun_123, host, bpffs):
    scope, sub, _, server = crun_123
    units, _ = host
    odd = str(bpffs / "crun" / "odd")
    helper = [
        (bpf.JMP_CALL, 0, 0, 0, 15),
        (bpf.ALU32_MOV_K, 0, 0, 0, 0),
        (bpf.JMP_EXIT, 0, 0, 0, 0),
    ]
    fd = bpf.prog_load(helper, "GPL", "odd")
    try:
        bpf.obj_pin(fd, odd)
    finally:
        os.close(fd)
    server.units[UNIT].programs = [("device", odd)]
    with pytest.raises(OcihookError) as exc:
        allow_devices(CgroupTarget("v2", sub, scope, UNIT), [ACCEL_RW])
    assert str(exc.value) == (
        f"systemd unit {UNIT}: BPFProgram=device:{odd} instruction 0 calls a helper or uses a "
        "map; cannot extend it"
    )
    assert os.listdir(pinned.PIN_DIR) == [] and os.listdir(units) == []
    assert probe(sub, (ACCEL_NODE, RW), ("/dev/null", RW)) == ["EPERM", 0]  # cgroup undone


@pytest.mark.root
def test_poststop_and_sweep_remove_what_a_gone_unit_left(crun_123, host):
    scope, sub, _, _ = crun_123
    units, transient = host
    allow_devices(CgroupTarget("v2", sub, scope, UNIT), [ACCEL_RW])
    (transient / UNIT).write_text("[Scope]\n")  # systemd still holds the unit
    assert pinned.sweep() == []
    assert os.listdir(pinned.PIN_DIR) == [UNIT.replace(".", "_")]
    (transient / UNIT).unlink()  # freed: its transient file is gone
    (units / "other.service.d").mkdir()  # someone else's drop-in dir: not ours
    (units / "other.service.d" / "10-x.conf").write_text("[Service]\n")
    assert pinned.sweep() == [UNIT]
    assert os.listdir(pinned.PIN_DIR) == [] and sorted(os.listdir(units)) == ["other.service.d"]


def test_names_and_drop_in_text():
    assert pinned.pin_names("crio-ab.scope", 3) == [
        "crio-ab_scope",
        "crio-ab_scope-1",
        "crio-ab_scope-2",
    ]
    programs = [("ingress", "/sys/fs/bpf/fw"), ("device", "/sys/fs/bpf/crun/x")]
    text = pinned.dropin_text("x.service", programs, {"/sys/fs/bpf/crun/x": "/ours/x"})
    assert text.splitlines()[1:] == [
        "[Service]",
        "BPFProgram=",
        "BPFProgram=ingress:/sys/fs/bpf/fw",
        "BPFProgram=device:/ours/x",
    ]
    for bad in ("../x.scope", "a/b.scope", "", ".scope", "x.socket"):
        with pytest.raises(OcihookError):
            pinned.pin_names(bad, 1)


def test_the_update_warning_names_the_runtimes_that_drop():
    """Logged at start where a later podman update (5.4+) will drop the grant: crun without
    a pinned program (before 1.23, or cgroupfs), never for runc, CRI-O or a pinned copy."""
    v2 = grant.DeviceEdit("v2", "/sys/fs/cgroup/x", grant.V2_ACTION, ACCEL_RW)
    pin = grant.DeviceEdit("systemd", UNIT, grant.PIN_ACTION, ACCEL_RW)
    line = grant.update_warning([v2], "crun", crio=False)
    assert line.startswith("warning: a podman update (podman 5.4 and later) drops these devices")
    assert grant.update_warning([v2, pin], "crun", crio=False) is None
    assert grant.update_warning([v2], "runc", crio=False) is None
    assert grant.update_warning([v2], "crun", crio=True) is None
    assert grant.update_warning([], "crun", crio=False) is None
