"""ocihook/cgroups/systemd.py: the container's unit gets the rules as runtime DeviceAllow= entries.

systemd is not PID 1 on this machine, so the unit side is a stand-in for systemd's private
socket (tests/support/dbus.py StandInSystemd: a peer that serves GetUnit, Properties.Get and
SetUnitProperties from a dict); the real systemd answers in the enforcing guest
(tests/enforcing/guest_checks.py reload-prestart). The fallback to the system bus talks to a
real dbus-daemon of the test's own."""

from __future__ import annotations

import os

import pytest

from ocihook.cgroups import systemd
from ocihook.errors import OcihookError
from ocihook.plan.devrules import DeviceRule
from tests.support.dbus import Bus, StandInSystemd, Unit

NULL = DeviceRule("c", 1, 3, "rw")  # /dev/null: a node every host has
LOOP = DeviceRule("b", 7, 0, "r")


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    path = str(tmp_path / "private")
    units = {"libpod-c1.scope": Unit("strict", [("/dev/char/1:5", "rwm")])}
    server = StandInSystemd(path, units)
    monkeypatch.setattr(systemd, "PRIVATE_SOCKET", path)
    monkeypatch.setattr(systemd, "SYSTEM_BUS_SOCKET", str(tmp_path / "no-bus"))
    try:
        yield server
    finally:
        server.close()


def test_rules_are_named_by_number_exactly():
    assert systemd.device_allow([NULL, LOOP, NULL]) == [
        ("/dev/char/1:3", "rw"),
        ("/dev/block/7:0", "r"),
    ]
    with pytest.raises(OcihookError) as exc:
        systemd.device_path(DeviceRule("c", 195, -1, "rw"))
    assert str(exc.value) == (
        "device rule c 195:* rw: a systemd DeviceAllow= entry names one node, not a wildcard"
    )


@pytest.mark.parametrize(
    "text, want", [("252.22-1~deb12u1", 252), ("239 (239-58.el8)", 239), ("", None), ("v", None)]
)
def test_version(text, want):
    assert systemd.parse_version(text) == want


def test_missing_links(tmp_path):
    (tmp_path / "char").mkdir()
    os.symlink("/dev/null", tmp_path / "char" / "1:3")
    os.symlink("/dev/null", tmp_path / "char" / "1:5")  # the wrong node
    entries = [("/dev/char/1:3", "rw"), ("/dev/char/1:5", "rw"), ("/dev/char/1:7", "rw")]
    assert systemd.missing_links(entries, str(tmp_path)) == ["/dev/char/1:5", "/dev/char/1:7"]


def test_rules_are_added_once_as_runtime_properties(stand_in):
    added = systemd.allow_unit_devices("libpod-c1.scope", [NULL, LOOP]).added
    assert added == [("/dev/char/1:3", "rw"), ("/dev/block/7:0", "r")]
    sets = [body for member, body in stand_in.calls if member == "SetUnitProperties"]
    assert sets == [["libpod-c1.scope", True, [("DeviceAllow", ("a(ss)", added))]]]
    assert stand_in.units["libpod-c1.scope"].allow == [("/dev/char/1:5", "rwm"), *added]
    # the same rules again (a second hook run): nothing new to add, no call
    assert systemd.allow_unit_devices("libpod-c1.scope", [NULL]).added == []
    assert len([m for m, _ in stand_in.calls if m == "SetUnitProperties"]) == 1


def test_a_unit_systemd_does_not_restrict_is_left_alone(stand_in):
    stand_in.units["crun-c2.scope"] = Unit("auto", [])
    lines = []
    granted = systemd.allow_unit_devices("crun-c2.scope", [NULL], lines.append)
    assert granted.added == [] and granted.unit.device_programs() == []
    assert lines == [
        "systemd unit crun-c2.scope: DevicePolicy=auto, no DeviceAllow= and no "
        "BPFProgram=device: systemd does not restrict its devices, no unit property added"
    ]
    assert "SetUnitProperties" not in [m for m, _ in stand_in.calls]


def test_a_unit_with_a_pinned_device_program_is_read_and_not_given_device_allow(stand_in):
    """crun 1.23+: DevicePolicy=auto, no DeviceAllow=, BPFProgram=device:PIN. Adding a
    DeviceAllow= entry would make systemd restrict the unit to it (every other device
    denied); the program's path goes back to the caller (cgroups/pinned.py)."""
    pin = "/sys/fs/bpf/crun/libpod-c3_scope"
    programs = [("device", pin), ("ingress", "/sys/fs/bpf/other")]
    stand_in.units["libpod-c3.scope"] = Unit("auto", [], programs)
    lines = []
    granted = systemd.allow_unit_devices("libpod-c3.scope", [NULL], lines.append)
    assert granted.added == [] and lines == []
    assert granted.unit.programs == programs and granted.unit.device_programs() == [pin]
    assert "SetUnitProperties" not in [m for m, _ in stand_in.calls]


def test_a_systemd_without_bpf_program_answers_unknown_property(stand_in):
    """systemd before 249 has no BPFProgram property: read as none."""
    stand_in.units["libpod-c4.scope"] = Unit("strict", [], None)
    granted = systemd.allow_unit_devices("libpod-c4.scope", [NULL])
    assert granted.added == [("/dev/char/1:3", "rw")] and granted.unit.programs == []


def test_no_such_unit_is_one_line(stand_in):
    with pytest.raises(OcihookError) as exc:
        systemd.allow_unit_devices("libpod-gone.scope", [NULL])
    assert str(exc.value) == (
        "systemd unit libpod-gone.scope: DeviceAllow= not added: D-Bus "
        "org.freedesktop.systemd1.Manager.GetUnit: org.freedesktop.systemd1.NoSuchUnit: "
        "Unit libpod-gone.scope not loaded."
    )


def test_a_refused_set_is_one_line(stand_in):
    stand_in.fail_set = "org.freedesktop.DBus.Error.AccessDenied"
    with pytest.raises(OcihookError) as exc:
        systemd.allow_unit_devices("libpod-c1.scope", [NULL])
    assert str(exc.value) == (
        "systemd unit libpod-c1.scope: DeviceAllow= not added: D-Bus "
        "org.freedesktop.systemd1.Manager.SetUnitProperties: "
        "org.freedesktop.DBus.Error.AccessDenied: refused by the stand-in"
    )


def test_old_systemd_needs_the_links(stand_in, monkeypatch, tmp_path):
    stand_in.version = "239 (239-58.el8)"
    monkeypatch.setattr(systemd, "DEV", str(tmp_path))  # a /dev with one link, 1:3
    (tmp_path / "char").mkdir()
    os.symlink("/dev/null", tmp_path / "char" / "1:3")
    assert systemd.allow_unit_devices("libpod-c1.scope", [NULL]).added == [("/dev/char/1:3", "rw")]
    with pytest.raises(OcihookError) as exc:
        systemd.allow_unit_devices("libpod-c1.scope", [DeviceRule("c", 1, 7, "rw")])
    assert str(exc.value) == (
        "systemd unit libpod-c1.scope: systemd 239 needs the host links /dev/char/1:7 "
        "(udev makes them; systemd 240 and later do not need them)"
    )


def test_the_bus_first_then_the_private_socket(stand_in, monkeypatch, tmp_path):
    """A system bus without systemd on it (a real dbus-daemon: NameHasNoOwner): logged, and
    the private socket (the stand-in) takes the rules."""
    (tmp_path / "bus").mkdir()
    bus = Bus(str(tmp_path / "bus"))
    try:
        monkeypatch.setattr(systemd, "SYSTEM_BUS_SOCKET", bus.path)
        lines = []
        added = systemd.allow_unit_devices("libpod-c1.scope", [NULL], lines.append).added
    finally:
        bus.close()
    assert added == [("/dev/char/1:3", "rw")]
    assert lines == [
        "systemd unit libpod-c1.scope: D-Bus org.freedesktop.systemd1.Manager.GetUnit: "
        'org.freedesktop.DBus.Error.NameHasNoOwner: Name "org.freedesktop.systemd1" does not '
        "exist; trying systemd's private socket"
    ]
    assert stand_in.units["libpod-c1.scope"].allow == [("/dev/char/1:5", "rwm"), *added]


def test_neither_socket_and_both_failures_named(stand_in, monkeypatch, tmp_path):
    monkeypatch.setattr(systemd, "PRIVATE_SOCKET", str(tmp_path / "no-private"))
    with pytest.raises(OcihookError) as exc:
        systemd.allow_unit_devices("libpod-c1.scope", [NULL])
    assert str(exc.value) == (
        "systemd unit libpod-c1.scope: DeviceAllow= not added: cannot reach systemd: "
        f"D-Bus {tmp_path}/no-bus: does not exist; D-Bus {tmp_path}/no-private: does not exist"
    )


def test_a_systemd_that_does_not_answer_meets_the_deadline(stand_in, monkeypatch, tmp_path):
    """A systemd that takes the call and never answers (no bus here): the deadline, then
    one line naming both tries; no SetUnitProperties went out."""
    stand_in.stall = True
    monkeypatch.setattr(systemd, "TIMEOUT", 0.5)
    with pytest.raises(OcihookError) as exc:
        systemd.allow_unit_devices("libpod-c1.scope", [NULL])
    assert str(exc.value) == (
        "systemd unit libpod-c1.scope: DeviceAllow= not added: cannot reach systemd: "
        f"D-Bus {tmp_path}/no-bus: does not exist; D-Bus {stand_in.path}: no answer within "
        "0.5 s (org.freedesktop.systemd1.Manager.GetUnit)"
    )
    assert stand_in.calls == [("(stalled)", ["libpod-c1.scope"])]
