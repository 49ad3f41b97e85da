"""D-Bus peers for the tests of ocihook/cgroups/dbuswire.py and ocihook/cgroups/systemd.py.

`Bus`: a real dbus-daemon (Debian's dbus-daemon) on a socket in a temporary directory,
session-type policy, EXTERNAL auth: the other side the client talks to, and the router
through which gdbus (GLib's own marshaller) calls it.

`StandInSystemd`: a stand-in for systemd's private socket (/run/systemd/private, a peer
connection: no bus daemon, no Hello), serving the few Manager and Properties methods the
hook calls from a plain dict of units, and recording each SetUnitProperties. It is not
systemd: the real one answers in the enforcing guest (tests/enforcing/guest_checks.py
reload-prestart). It marshals with ocihook.cgroups.dbuswire, whose wire format the gdbus tests pin.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import threading
import time

from ocihook.cgroups import dbuswire as d

BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={path}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""


class Bus:
    """A dbus-daemon of the test's own; `path` is its socket."""

    def __init__(self, directory: str) -> None:
        daemon = shutil.which("dbus-daemon")
        assert daemon, "dbus-daemon is missing: scripts/install-deps.sh installs it"
        self.path = os.path.join(directory, "bus")
        config = os.path.join(directory, "bus.conf")
        with open(config, "w") as f:
            f.write(BUS_CONFIG.format(path=self.path))
        self.proc = subprocess.Popen(
            [daemon, f"--config-file={config}", "--nofork", "--print-address"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline()  # printed once it listens
        assert line.startswith("unix:path="), line
        self.address = f"unix:path={self.path}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def serve_one_call(conn: d.Connection, reply=None) -> d.Message:
    """Wait for one method call to `conn` (Introspect is refused, as by a bare object),
    answer it (`reply(message)` -> (sig, body); echo by default) and return it."""
    while True:
        message = conn.read_message()
        if message.kind != d.METHOD_CALL:
            continue
        back = {d.REPLY_SERIAL: message.serial, d.DESTINATION: message.fields[d.SENDER]}
        if message.fields.get(d.MEMBER) == "Introspect":
            back[d.ERROR_NAME] = "org.freedesktop.DBus.Error.UnknownMethod"
            conn.send(d.ERROR, back, "s", ("no introspection",))
            continue
        sig, body = (
            reply(message) if reply else (message.fields.get(d.SIGNATURE, ""), tuple(message.body))
        )
        conn.send(d.METHOD_RETURN, back, sig, body)
        return message


# ---------------------------------------------------------------------------
# the stand-in for systemd's private socket


class Unit:
    """A unit as the stand-in serves it; `programs`: its BPFProgram= entries, None for a
    systemd before 249 (which has no such property: UnknownProperty)."""

    def __init__(
        self, policy: str = "strict", allow: list | None = None, programs: list | None = ()
    ) -> None:
        self.policy = policy
        self.allow = list(allow or [])
        self.programs = None if programs is None else list(programs)


class StandInSystemd:
    """Serves `units` (name -> Unit) on a peer socket at `path` in a thread."""

    def __init__(self, path: str, units: dict[str, Unit], version: str = "252.22-1") -> None:
        self.path, self.units, self.version = path, units, version
        self.calls: list[tuple[str, list]] = []
        self.fail_set: str | None = None  # an error name SetUnitProperties answers with
        self.stall = False  # read the calls, answer none (a hung systemd)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(4)
        self.listener.settimeout(0.2)
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stopping = True
        self.thread.join(5)
        self.listener.close()

    def _serve(self) -> None:
        while not self.stopping:
            try:
                sock, _ = self.listener.accept()
            except socket.timeout:
                continue
            with sock:
                sock.settimeout(5)
                try:
                    self._session(sock)
                except (OSError, d.BusError, EOFError):
                    pass

    def _session(self, sock: socket.socket) -> None:
        buf = b""
        while b"BEGIN\r\n" not in buf:
            chunk = sock.recv(4096)
            if not chunk:
                raise EOFError
            buf += chunk
            if b"AUTH EXTERNAL" in buf and b"\r\n" in buf and b"OK" not in buf:
                sock.sendall(b"OK 0123456789abcdef0123456789abcdef\r\n")
                buf += b"OK"
        buf = buf.split(b"BEGIN\r\n", 1)[1]
        serial = 0
        while True:
            while len(buf) < 16:
                chunk = sock.recv(65536)
                if not chunk:
                    return
                buf += chunk
            body_len, _, fields_len = struct.unpack_from("<III", buf, 4)
            total = 16 + fields_len
            total += -total % 8
            total += body_len
            while len(buf) < total:
                buf += sock.recv(65536)
            message, buf = d.decode_message(buf[:total]), buf[total:]
            if self.stall:
                self.calls.append(("(stalled)", message.body))
                continue
            serial += 1
            kind, fields, sig, body = self._answer(message)
            fields[d.REPLY_SERIAL] = message.serial
            sock.sendall(d.encode_message(kind, serial, fields, sig, body))

    def _error(self, name: str, text: str):
        return d.ERROR, {d.ERROR_NAME: name}, "s", (text,)

    def _answer(self, m: d.Message):
        member = m.fields.get(d.MEMBER)
        self.calls.append((member, m.body))
        if member == "GetUnit":
            (name,) = m.body
            if name not in self.units:
                return self._error(
                    "org.freedesktop.systemd1.NoSuchUnit", f"Unit {name} not loaded."
                )
            return d.METHOD_RETURN, {}, "o", (f"/org/freedesktop/systemd1/unit/{name}",)
        if member == "Get":
            iface, prop = m.body
            path = m.fields[d.PATH]
            if prop == "Version":
                return d.METHOD_RETURN, {}, "v", (("s", self.version),)
            unit = self.units[path.rsplit("/", 1)[1]]
            if prop == "DevicePolicy":
                return d.METHOD_RETURN, {}, "v", (("s", unit.policy),)
            if prop == "DeviceAllow":
                return d.METHOD_RETURN, {}, "v", (("a(ss)", unit.allow),)
            if prop == "BPFProgram":
                if unit.programs is None:
                    return self._error(
                        "org.freedesktop.DBus.Error.UnknownProperty", f"Unknown property {prop}"
                    )
                return d.METHOD_RETURN, {}, "v", (("a(ss)", unit.programs),)
        if member == "SetUnitProperties":
            if self.fail_set:
                return self._error(self.fail_set, "refused by the stand-in")
            name, _runtime, props = m.body
            for key, (sig, value) in props:
                assert key == "DeviceAllow" and sig == "a(ss)"
                self.units[name].allow += [tuple(e) for e in value]
            return d.METHOD_RETURN, {}, "", ()
        return self._error("org.freedesktop.DBus.Error.UnknownMethod", f"{member}?")


def wait_for(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False
