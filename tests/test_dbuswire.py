"""ocihook/cgroups/dbuswire.py against real peers: a dbus-daemon of the test's own (it validates
every message it routes and disconnects a client that sends a malformed one) and GLib's gdbus,
whose own marshaller sends SetUnitProperties' exact signature to our client and parses our
reply. Plus the failure modes: no socket, a refused authentication, a peer that never
answers (the deadline), an ERROR reply, malformed input."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time

import pytest

from ocihook.cgroups import dbuswire as d
from tests.support.dbus import Bus, serve_one_call

DBUS = ("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus")
DEVICE_ALLOW = [("DeviceAllow", ("a(ss)", [("/dev/char/1:3", "rw"), ("/dev/block/7:0", "r")]))]


@pytest.fixture
def bus(tmp_path):
    daemon = Bus(str(tmp_path))
    try:
        yield daemon
    finally:
        daemon.close()


def test_hello_and_credentials_from_the_daemon(bus):
    with d.Connection(bus.path, 5) as conn:
        assert conn.unique_name.startswith(":1.")
        (creds,) = conn.call(*DBUS, "GetConnectionCredentials", "s", (conn.unique_name,))
        got = dict(creds)
        assert got["UnixUserID"] == ("u", os.geteuid())
        assert got["ProcessID"] == ("u", os.getpid())
        (names,) = conn.call(*DBUS, "ListNames")
        assert conn.unique_name in names and "org.freedesktop.DBus" in names
        assert conn.call(*DBUS, "NameHasOwner", "s", ("org.freedesktop.systemd1",)) == [False]


def test_error_reply_is_a_bus_error_with_its_name(bus):
    with d.Connection(bus.path, 5) as conn:
        with pytest.raises(d.BusError) as exc:
            conn.call(
                "org.freedesktop.systemd1",
                "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager",
                "SetUnitProperties",
                "sba(sv)",
                ("libpod-x.scope", True, DEVICE_ALLOW),
            )
        assert exc.value.name == "org.freedesktop.DBus.Error.NameHasNoOwner"
        assert str(exc.value).startswith(
            "D-Bus org.freedesktop.systemd1.Manager.SetUnitProperties: "
            "org.freedesktop.DBus.Error.NameHasNoOwner: "
        )
        # the daemon routed (so accepted) the call and keeps us connected
        assert conn.call(*DBUS, "GetId")[0]


def _gdbus(bus, dest, *args):
    return subprocess.Popen(
        ["gdbus", "call", "--address", bus.address, "--dest", dest, "--object-path", "/t"]
        + ["--method", "org.ocihook.Test.Echo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_gdbus_marshals_set_unit_properties_as_we_read_it_and_reads_ours(bus):
    with d.Connection(bus.path, 10) as conn:
        text = "[('DeviceAllow', <[('/dev/char/1:3', 'rw'), ('/dev/block/7:0', 'r')]>)]"
        caller = _gdbus(bus, conn.unique_name, "'libpod-x.scope'", "true", text)
        message = serve_one_call(conn)  # echoes the call's body back, marshalled by us
        out, err = caller.communicate(timeout=10)
    assert message.fields[d.SIGNATURE] == "sba(sv)"
    assert message.body == ["libpod-x.scope", True, DEVICE_ALLOW]
    assert (caller.returncode, err) == (0, "")
    assert out.strip() == f"('libpod-x.scope', true, {text})"


def test_gdbus_reads_every_basic_type_we_marshal(bus):
    sig = "ybnqiuxtdsogv"
    values = (255, False, -2, 65535, -(2**31), 2**32 - 1, -(2**63), 2**64 - 1, 0.5)
    values += ("é/x", "/o/p", "a{sv}", ("as", ["a", ""]))
    with d.Connection(bus.path, 10) as conn:
        caller = _gdbus(bus, conn.unique_name)
        serve_one_call(conn, lambda m: (sig + "a{su}", values + ([("k", 7)],)))
        out, err = caller.communicate(timeout=10)
    assert (caller.returncode, err) == (0, "")
    assert out.strip() == (
        "(byte 0xff, false, int16 -2, uint16 65535, -2147483648, uint32 4294967295, "
        "int64 -9223372036854775808, uint64 18446744073709551615, 0.5, 'é/x', "
        "objectpath '/o/p', signature 'a{sv}', <['a', '']>, {'k': uint32 7})"
    )


def test_a_call_nobody_answers_meets_the_deadline(bus):
    with d.Connection(bus.path, 10) as callee, d.Connection(bus.path, 0.4) as caller:
        began = time.monotonic()
        with pytest.raises(d.BusError) as exc:
            caller.call(callee.unique_name, "/t", "org.ocihook.Test", "Never")
        assert 0.3 < time.monotonic() - began < 2
    assert str(exc.value) == f"D-Bus {bus.path}: no answer within 0.4 s (org.ocihook.Test.Never)"
    assert exc.value.name is None


def test_no_socket(tmp_path):
    with pytest.raises(d.BusError) as exc:
        d.Connection(str(tmp_path / "absent"), 1)
    assert str(exc.value) == f"D-Bus {tmp_path / 'absent'}: does not exist"


def _peer(tmp_path, answer: bytes | None):
    """A listening socket whose one connection gets `answer` (None: nothing, ever)."""
    path = str(tmp_path / "peer")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    held = []

    def serve():
        sock, _ = listener.accept()
        held.append(sock)
        sock.recv(4096)
        if answer is not None:
            sock.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return path, listener, held


def test_a_peer_that_never_answers_meets_the_deadline(tmp_path):
    path, listener, held = _peer(tmp_path, None)
    began = time.monotonic()
    with pytest.raises(d.BusError) as exc:
        d.Connection(path, 0.3, bus=False)
    assert time.monotonic() - began < 2
    assert str(exc.value) == f"D-Bus {path}: no answer within 0.3 s (authentication)"
    listener.close()


def test_refused_authentication(tmp_path):
    path, listener, held = _peer(tmp_path, b"REJECTED DBUS_COOKIE_SHA1\r\n")
    with pytest.raises(d.BusError) as exc:
        d.Connection(path, 2, bus=False)
    assert str(exc.value) == f"D-Bus {path}: authentication refused (REJECTED DBUS_COOKIE_SHA1)"
    listener.close()


def test_round_trip_and_alignment():
    sig = "ya(sv)a{sa(ss)}(yt)"
    values = [7, [("a", ("y", 1)), ("b", ("a(ss)", [("p", "rw")]))], [("k", [("x", "y")])]]
    values.append((1, 2**40))
    data = d.marshal(sig, values)
    got, end = d.unmarshal(sig, data)
    assert end == len(data)
    assert got == [
        7,
        [("a", ("y", 1)), ("b", ("a(ss)", [("p", "rw")]))],
        [("k", [("x", "y")])],
        (1, 2**40),
    ]
    # the struct after the byte is 8-aligned; an empty array still pads to its element
    assert d.marshal("ya(t)", [1, []]) == bytes([1, 0, 0, 0, 0, 0, 0, 0])


def test_big_endian_message_is_read():
    little = d.encode_message(d.METHOD_RETURN, 9, {d.REPLY_SERIAL: 3}, "su", ("x", 5))
    # the same message as a big-endian peer sends it, built by hand
    fields = bytes([5, 1]) + b"u\0" + (3).to_bytes(4, "big")
    fields += bytes([8, 1]) + b"g\0" + bytes([2]) + b"su\0"
    head = b"B" + bytes([2, 0, 1]) + (12).to_bytes(4, "big") + (9).to_bytes(4, "big")
    head += len(fields).to_bytes(4, "big") + fields
    head += b"\0" * (-len(head) % 8)
    body = (1).to_bytes(4, "big") + b"x\0" + b"\0\0" + (5).to_bytes(4, "big")
    big = d.decode_message(head + body)
    assert (big.kind, big.serial, big.body) == (d.METHOD_RETURN, 9, ["x", 5])
    assert d.decode_message(little).body == ["x", 5]


@pytest.mark.parametrize(
    "sig, data, error",
    [
        ("s", b"\x05\0\0\0ab\0", "D-Bus message: a string runs past its end"),
        ("s", b"\x02\0\0\0abc", "D-Bus message: a string runs past its end"),
        ("as", b"\xff\xff\0\0", "D-Bus message: an array runs past its end"),
        ("u", b"\x01\x02", "D-Bus message ends inside a value"),
        ("s", b"\x01\0\0\0\xff\0", "D-Bus message: a string is not UTF-8"),
        ("v", b"\x02a(\0", "D-Bus signature 'a(': unclosed or empty ("),
    ],
)
def test_malformed_input_is_one_error(sig, data, error):
    with pytest.raises(d.BusError) as exc:
        d.unmarshal(sig, data)
    assert str(exc.value) == error


def test_marshal_refuses_what_the_wire_cannot_carry():
    with pytest.raises(d.BusError, match="holds a NUL"):
        d.marshal("s", ["a\0b"])
    with pytest.raises(d.BusError, match="2 values for 1 members"):
        d.marshal("(s)", [("a", "b")])
    with pytest.raises(d.BusError, match="not one complete type"):
        d.marshal("v", [("ss", ("a", "b"))])
    assert d.split_signature("sba(sv)a{sv}") == ["s", "b", "a(sv)", "a{sv}"]
