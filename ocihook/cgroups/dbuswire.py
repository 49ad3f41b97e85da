"""A minimal D-Bus client in the standard library: one Unix socket, SASL EXTERNAL, method
calls marshalled by hand (little-endian) and their replies read back. Enough for systemd's
SetUnitProperties (systemd.py); imported only under the systemd cgroup manager.

Values: basic types as Python ints/bools/strs, arrays as lists, structs as tuples, dict
entries as 2-tuples in a list, variants as (signature, value). Every read and write has a
deadline (the connection's timeout); an ERROR reply raises BusError with its name.
"""

from __future__ import annotations

import os
import socket
import struct
import time

from ocihook.errors import OcihookError

METHOD_CALL, METHOD_RETURN, ERROR, SIGNAL = 1, 2, 3, 4
NO_AUTO_START = 0x2
MAX_MESSAGE = 1 << 20  # far above anything systemd answers us; a bigger one is refused

# header field codes and their signatures
PATH, INTERFACE, MEMBER, ERROR_NAME, REPLY_SERIAL, DESTINATION, SENDER, SIGNATURE = range(1, 9)
_FIELD_SIG = {1: "o", 2: "s", 3: "s", 4: "s", 5: "u", 6: "s", 7: "s", 8: "g", 9: "u"}

_FIXED = {"y": "B", "b": "I", "n": "h", "q": "H", "i": "i", "u": "I", "x": "q", "t": "Q"}
_FIXED.update({"d": "d", "h": "I"})
_ALIGN = {"y": 1, "b": 4, "n": 2, "q": 2, "i": 4, "u": 4, "x": 8, "t": 8, "d": 8, "h": 4}
_ALIGN.update({"s": 4, "o": 4, "g": 1, "a": 4, "(": 8, "{": 8, "v": 1})


class BusError(OcihookError):
    """A D-Bus failure: `name` is the error name of an ERROR reply, else None."""

    def __init__(self, message: str, name: str | None = None) -> None:
        super().__init__(message)
        self.name = name


# ---------------------------------------------------------------------------
# Signatures


def split_signature(sig: str) -> list[str]:
    """The complete types of a signature: 'sba(sv)' -> ['s', 'b', 'a(sv)']."""
    out, i = [], 0
    while i < len(sig):
        end = _type_end(sig, i)
        out.append(sig[i:end])
        i = end
    return out


def _type_end(sig: str, i: int) -> int:
    """The index after the complete type starting at sig[i]."""
    if i >= len(sig):
        raise BusError(f"D-Bus signature {sig!r} ends inside a type")
    c = sig[i]
    if c in _FIXED or c in "sogv":
        return i + 1
    if c == "a":
        return _type_end(sig, i + 1)
    if c in "({":
        close = ")" if c == "(" else "}"
        j = i + 1
        while j < len(sig) and sig[j] != close:
            j = _type_end(sig, j)
        if j >= len(sig) or j == i + 1:
            raise BusError(f"D-Bus signature {sig!r}: unclosed or empty {c}")
        return j + 1
    raise BusError(f"D-Bus signature {sig!r}: unknown type {c!r}")


# ---------------------------------------------------------------------------
# Marshalling (always little-endian)


def _pad(buf: bytearray, align: int) -> None:
    buf.extend(b"\0" * (-len(buf) % align))


def _put(buf: bytearray, t: str, value) -> None:
    c = t[0]
    _pad(buf, _ALIGN[c])
    if c in _FIXED:
        buf.extend(struct.pack("<" + _FIXED[c], int(value) if c == "b" else value))
    elif c in "so":
        data = value.encode()
        if b"\0" in data:
            raise BusError(f"D-Bus string {value!r} holds a NUL")
        buf.extend(struct.pack("<I", len(data)) + data + b"\0")
    elif c == "g":
        data = value.encode()
        if len(data) > 255:
            raise BusError(f"D-Bus signature {value!r} is too long")
        buf.extend(bytes([len(data)]) + data + b"\0")
    elif c == "v":
        sig, inner = value
        if len(split_signature(sig)) != 1:
            raise BusError(f"D-Bus variant signature {sig!r} is not one complete type")
        _put(buf, "g", sig)
        _put(buf, sig, inner)
    elif c == "a":
        element = t[1:]
        at = len(buf)
        buf.extend(b"\0\0\0\0")
        _pad(buf, _ALIGN[element[0]])
        start = len(buf)
        items = value.items() if isinstance(value, dict) else value
        for item in items:
            _put(buf, element, item)
        struct.pack_into("<I", buf, at, len(buf) - start)
    elif c in "({":
        members = split_signature(t[1:-1])
        if len(members) != len(value):
            raise BusError(f"D-Bus struct {t}: {len(value)} values for {len(members)} members")
        for member, item in zip(members, value):
            _put(buf, member, item)


def marshal(sig: str, values: list | tuple, buf: bytearray | None = None) -> bytes:
    """The values of signature `sig`, aligned from the start of `buf` (a new body if None)."""
    types = split_signature(sig)
    if len(types) != len(values):
        raise BusError(f"D-Bus signature {sig!r}: {len(values)} values for {len(types)} types")
    out = bytearray() if buf is None else buf
    for t, value in zip(types, values):
        _put(out, t, value)
    return bytes(out)


def unmarshal(sig: str, data: bytes, offset: int = 0, endian: str = "<") -> tuple[list, int]:
    """(values, end offset) of signature `sig` in `data` from `offset` (alignment counted
    from data's start); BusError on a short or malformed buffer."""
    values = []
    try:
        for t in split_signature(sig):
            value, offset = _get(data, offset, t, endian, 0)
            values.append(value)
    except (struct.error, IndexError):
        raise BusError("D-Bus message ends inside a value") from None
    except UnicodeDecodeError:
        raise BusError("D-Bus message: a string is not UTF-8") from None
    return values, offset


def _get(data: bytes, i: int, t: str, endian: str, depth: int):
    if depth > 32:
        raise BusError("D-Bus message nests too deep")
    c = t[0]
    i += -i % _ALIGN[c]
    if c in _FIXED:
        fmt = endian + _FIXED[c]
        (value,) = struct.unpack_from(fmt, data, i)
        return (bool(value) if c == "b" else value), i + struct.calcsize(fmt)
    if c in "sog":
        if c == "g":
            n, i = data[i], i + 1
        else:
            (n,), i = struct.unpack_from(endian + "I", data, i), i + 4
        if i + n >= len(data) or data[i + n] != 0:
            raise BusError("D-Bus message: a string runs past its end")
        return data[i : i + n].decode(), i + n + 1
    if c == "v":
        sig, i = _get(data, i, "g", endian, depth + 1)
        if len(split_signature(sig)) != 1:
            raise BusError(f"D-Bus variant signature {sig!r} is not one complete type")
        value, i = _get(data, i, sig, endian, depth + 1)
        return (sig, value), i
    if c == "a":
        (n,) = struct.unpack_from(endian + "I", data, i)
        i += 4
        i += -i % _ALIGN[t[1]]
        end = i + n
        if end > len(data) or n > MAX_MESSAGE:
            raise BusError("D-Bus message: an array runs past its end")
        items = []
        while i < end:
            item, i = _get(data, i, t[1:], endian, depth + 1)
            items.append(item)
        return items, i
    if c in "({":
        items = []
        for member in split_signature(t[1:-1]):
            item, i = _get(data, i, member, endian, depth + 1)
            items.append(item)
        return tuple(items), i
    raise BusError(f"D-Bus signature: unknown type {c!r}")


# ---------------------------------------------------------------------------
# Messages


class Message:
    """One message read from the bus: its type, flags, serial, header fields and body."""

    def __init__(self, kind: int, flags: int, serial: int, fields: dict, body: list) -> None:
        self.kind, self.flags, self.serial, self.fields, self.body = (
            kind,
            flags,
            serial,
            fields,
            body,
        )

    def __repr__(self) -> str:
        return f"Message({self.kind}, serial {self.serial}, {self.fields}, {self.body})"


def encode_message(
    kind: int, serial: int, fields: dict[int, object], sig: str = "", body: tuple = (), flags=0
) -> bytes:
    """A whole message: the fixed header, the header fields, padding, the body."""
    payload = marshal(sig, body) if sig else b""
    if sig:
        fields = {**fields, SIGNATURE: sig}
    header = bytearray(struct.pack("<BBBBII", ord("l"), kind, flags, 1, len(payload), serial))
    items = [(code, (_FIELD_SIG[code], value)) for code, value in sorted(fields.items())]
    marshal("a(yv)", [items], header)
    _pad(header, 8)
    return bytes(header) + payload


def decode_message(data: bytes) -> Message:
    """A whole message (from `read_message`) decoded."""
    endian = {ord("l"): "<", ord("B"): ">"}.get(data[0])
    if endian is None or data[3] != 1:
        raise BusError("D-Bus message: bad endianness or protocol version")
    kind, flags = data[1], data[2]
    body_len, serial = struct.unpack_from(endian + "II", data, 4)
    (items,), end = unmarshal("a(yv)", data, 12, endian)
    fields = {code: value for code, (_, value) in items}
    end += -end % 8
    sig = fields.get(SIGNATURE, "")
    body, stop = unmarshal(sig, data[end:], 0, endian) if sig else ([], 0)
    if stop != body_len or end + body_len != len(data):
        raise BusError("D-Bus message: the body does not fill its declared length")
    return Message(kind, flags, serial, fields, body)


# ---------------------------------------------------------------------------
# The connection


class Connection:
    """A client connection to a D-Bus socket: `bus` says whether a bus daemon is on the
    other side (then Hello is sent first and calls name a destination), else a peer
    (systemd's private socket). Every step has a deadline of `timeout` seconds."""

    def __init__(self, path: str, timeout: float = 5.0, bus: bool = True) -> None:
        self.path, self.timeout, self.bus = path, timeout, bus
        self.serial = 0
        self.unique_name: str | None = None
        self.waiting = " (authentication)"  # what a timeout waited for, in its message
        self._buf = b""
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.deadline = time.monotonic() + timeout
        try:
            self._settimeout()
            self.sock.connect(path)
            self._authenticate()
            if bus:
                (self.unique_name,) = self.call(
                    "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello"
                )
        except OSError as exc:
            self.close()
            raise BusError(f"D-Bus {path}: {exc.strerror or exc}") from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _settimeout(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise BusError(f"D-Bus {self.path}: no answer within {self.timeout:g} s{self.waiting}")
        self.sock.settimeout(left)

    def _recv(self) -> bytes:
        self._settimeout()
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            raise BusError(
                f"D-Bus {self.path}: no answer within {self.timeout:g} s{self.waiting}"
            ) from None
        if not chunk:
            raise BusError(f"D-Bus {self.path}: the peer closed the connection")
        return chunk

    def _send(self, data: bytes) -> None:
        self._settimeout()
        try:
            self.sock.sendall(data)
        except socket.timeout:
            raise BusError(f"D-Bus {self.path}: cannot send within {self.timeout:g} s") from None

    def _line(self) -> str:
        while b"\r\n" not in self._buf:
            if len(self._buf) > 4096:
                raise BusError(f"D-Bus {self.path}: authentication line too long")
            self._buf += self._recv()
        line, _, self._buf = self._buf.partition(b"\r\n")
        return line.decode("ascii", "replace")

    def _authenticate(self) -> None:
        uid = str(os.geteuid()).encode().hex()
        self._send(b"\0AUTH EXTERNAL " + uid.encode() + b"\r\n")
        reply = self._line()
        if not reply.startswith("OK "):
            raise BusError(f"D-Bus {self.path}: authentication refused ({reply.strip()})")
        self._send(b"BEGIN\r\n")

    def read_message(self) -> Message:
        """The next message from the peer."""
        while len(self._buf) < 16:
            self._buf += self._recv()
        endian = "<" if self._buf[0] == ord("l") else ">"
        body_len, _, fields_len = struct.unpack_from(endian + "III", self._buf, 4)
        total = 16 + fields_len
        total += -total % 8
        total += body_len
        if total > MAX_MESSAGE:
            raise BusError(f"D-Bus {self.path}: a message of {total} bytes is refused")
        while len(self._buf) < total:
            self._buf += self._recv()
        data, self._buf = self._buf[:total], self._buf[total:]
        return decode_message(data)

    def send(self, kind: int, fields: dict, sig: str = "", body: tuple = (), flags=0) -> int:
        """Send one message; returns its serial."""
        self.serial += 1
        self._send(encode_message(kind, self.serial, fields, sig, body, flags))
        return self.serial

    def call(
        self,
        destination: str | None,
        path: str,
        interface: str,
        member: str,
        sig: str = "",
        args: tuple = (),
    ) -> list:
        """Call a method and return the reply's body; BusError on an ERROR reply."""
        self.deadline = time.monotonic() + self.timeout
        fields: dict[int, object] = {PATH: path, INTERFACE: interface, MEMBER: member}
        if destination is not None and self.bus:
            fields[DESTINATION] = destination
        self.waiting = f" ({interface}.{member})"
        serial = self.send(METHOD_CALL, fields, sig, args, NO_AUTO_START)
        while True:
            message = self.read_message()
            if message.fields.get(REPLY_SERIAL) != serial:
                continue  # a signal (NameAcquired after Hello) or someone else's
            if message.kind == ERROR:
                name = message.fields.get(ERROR_NAME, "?")
                text = message.body[0] if message.body and isinstance(message.body[0], str) else ""
                detail = f": {text}" if text else ""
                raise BusError(f"D-Bus {interface}.{member}: {name}{detail}", name)
            if message.kind == METHOD_RETURN:
                return message.body
