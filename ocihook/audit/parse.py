"""Parse audit text in the forms users have: audit.log, ausearch (raw and -i), journald, dmesg,
and denials pasted without their header (`denied { ... } for ... tclass=...`, no `avc:`).

Input is lines of bytes or text. Records are grouped into events by (node, time, serial); an
event keeps its AVC/USER_AVC denials with the SYSCALL, PATH, CWD and PROCTITLE records that
share its serial. Lines that cannot be read are counted with a reason, never raised.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Iterable, Iterator

# Record types we keep (name and the kernel's numeric type as dmesg prints it).
TYPE_NUMBERS = {
    "1107": "USER_AVC",
    "1300": "SYSCALL",
    "1302": "PATH",
    "1307": "CWD",
    "1320": "EOE",
    "1327": "PROCTITLE",
    "1400": "AVC",
    "1401": "SELINUX_ERR",
    "1403": "MAC_POLICY_LOAD",
    "1404": "MAC_STATUS",
}
AVC_TYPES = ("AVC", "USER_AVC")
EVENT_TYPES = ("AVC", "USER_AVC", "SYSCALL", "PATH", "CWD", "PROCTITLE")
# Fields that auditd writes hex-encoded (unquoted) when they hold spaces or odd bytes.
HEX_FIELDS = frozenset(
    {"proctitle", "comm", "exe", "path", "name", "cwd", "cmd", "old", "new", "data", "cmdline"}
)
MAX_TEXT = 200  # characters of an unreadable line kept for the report

_RAW_HEADER = re.compile(
    r"(?:node=(?P<node>\S+)\s+)?type=(?P<type>[A-Za-z0-9_\[\]]+)\s+"
    r"msg=audit\((?P<stamp>[^)]*)\)\s*:\s?"
)
_KERNEL_HEADER = re.compile(r"audit:\s+type=(?P<type>\d+)\s+audit\((?P<stamp>[^)]*)\)\s*:\s?")
_JOURNAL_HEADER = re.compile(r"\baudit(?:\[(?P<pid>\d+)\])?:\s+(?P<type>[A-Z][A-Z_]+)\s")
_BARE_AVC = re.compile(r"avc:\s+(?:denied|granted)\s+\{")
# A denial as pasted in bug reports and policy PRs: no header and no `avc:` token, the
# access vector alone (`denied { unlink } for pid=... scontext=... tclass=file`); its
# permission list closed and followed by `for`, or wrapped to the next line.
_FRAGMENT_AVC = re.compile(r"(?<![\w:-])(?:denied|granted)\s+\{(?:[^}]*\}\s*for\b|[^}]*$)")
_AVC_BODY = re.compile(
    r"(?:\bavc:\s+|(?<![\w:-]))(?P<result>denied|granted)\s+\{(?P<perms>[^}]*)\}\s*(?:for\b)?"
)
_AVC_START = re.compile(r"(?:\bavc:\s+|(?<![\w:-]))(?:denied|granted)\s+\{")
_RAW_STAMP = re.compile(r"^(?P<secs>\d+)\.(?P<frac>\d+):(?P<serial>\d+)$")
_INTERPRETED_STAMP = re.compile(
    r"^(?P<mon>\d\d)/(?P<day>\d\d)/(?P<year>\d{4}|\d\d) (?P<hms>\d\d:\d\d:\d\d)"
    r"\.(?P<frac>\d+):(?P<serial>\d+)$"
)
_SYSLOG_TIME = re.compile(
    r"^(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+(?P<day>\d{1,2})\s+"
    r"(?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?\s"
)
_ISO_TIME = re.compile(
    r"^(?P<dt>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?"
    r"(?P<tz>Z|[+-]\d\d:?\d\d)?\s"
)
_RECORD_START = re.compile(r"\btype=\w+\s+msg=audit\(|\baudit:\s+type=\d|\baudit\[\d+\]:|\bavc:\s")
_ALL_FIELDS = re.compile(r"^(?:[A-Za-z_][\w-]*=\S*\s*)+$")
_QUOTE_MARKERS = re.compile(r"^(?:\s*>)+ ?")
_KEY = re.compile(r"[A-Za-z_][\w-]*=")
_HEX = re.compile(r"^(?:[0-9A-Fa-f]{2})+$")
_BINARY = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1c\x1e\x1f\x7f\ufffd]")
_MONTHS = {m: i for i, m in enumerate("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split(), 1)}


@dataclass
class Avc:
    """One access vector: `avc:  denied|granted  { perms } for ...` (AVC or USER_AVC)."""

    result: str
    perms: list[str]
    scontext: str
    tcontext: str
    tclass: str
    permissive: bool | None
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def denied(self) -> bool:
        return self.result == "denied"


@dataclass
class Record:
    """One audit record (one logical line), with its fields unquoted and hex decoded."""

    type: str
    source: str
    line: int
    timestamp: float | None
    serial: int | None
    node: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    enriched: dict[str, str] = field(default_factory=dict)
    avc: Avc | None = None
    # raw, interpreted (ausearch -i), kernel (dmesg), journal, bare (`avc:` without an
    # audit header), fragment (the access vector alone, as pasted)
    form: str = "raw"


@dataclass
class Unreadable:
    """A line that could not be read, and why."""

    source: str
    line: int
    reason: str
    text: str


@dataclass
class Event:
    """The records of one audit event that carries at least one AVC."""

    source: str
    line: int
    timestamp: float | None
    serial: int | None
    node: str | None
    avcs: list[Avc] = field(default_factory=list)
    syscall: dict[str, str] = field(default_factory=dict)
    paths: list[dict[str, str]] = field(default_factory=list)
    cwd: str | None = None
    proctitle: str | None = None
    form: str = "raw"


@dataclass
class ParseResult:
    """What a parse produced: events with AVCs, unreadable lines and counts."""

    events: list[Event] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    lines: int = 0
    records: int = 0
    other_records: int = 0


class _Incomplete(ValueError):
    """A record that ended before its required fields: truncated or wrapped."""


# ---------------------------------------------------------------------------- fields


def split_fields(text: str, decode_hex: bool = True) -> tuple[dict[str, str], list[str]]:
    """Split `key=value` pairs; values may be "quoted", 'quoted', bare or (bare with spaces).

    Returns the fields and the bare words between them. Unquoted values of HEX_FIELDS that
    are valid hex are decoded when `decode_hex` (auditd's encoding of untrusted strings).
    """
    fields: dict[str, str] = {}
    words: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        match = _KEY.match(text, i)
        if not match:
            end = i
            while end < n and not text[end].isspace():
                end += 1
            words.append(text[i:end])
            i = end
            continue
        key = match.group()[:-1]
        i = match.end()
        if i < n and text[i] in "\"'":
            close = text.find(text[i], i + 1)
            if close < 0:
                raise _Incomplete(f"unterminated quote in {key}=")
            value = text[i + 1 : close]
            i = close + 1
        else:
            start, depth = i, 0
            while i < n and (depth > 0 or not text[i].isspace()):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            value = text[start:i]
            if decode_hex and key.lower() in HEX_FIELDS and _HEX.match(value):
                value = _unhex(value)
        fields.setdefault(key, value)
    return fields, words


def _unhex(value: str) -> str:
    raw = bytes.fromhex(value)
    return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


def parse_avc(body: str, decode_hex: bool = True) -> Avc | None:
    """The AVC in `body` (`avc:  denied { ... } for ...`), None when it holds no access vector."""
    match = _AVC_BODY.search(body)
    if not match:
        if re.search(r"avc:\s+(?:denied|granted)", body) or _AVC_START.search(body):
            raise _Incomplete("AVC without a complete { permissions } list")
        return None
    fields, _ = split_fields(body[match.end() :], decode_hex)
    missing = [k for k in ("scontext", "tcontext", "tclass") if not fields.get(k)]
    if missing:
        raise _Incomplete(f"AVC without {', '.join(missing)}")
    permissive = fields.pop("permissive", None)
    return Avc(
        result=match.group("result"),
        perms=match.group("perms").split(),
        scontext=fields.pop("scontext"),
        tcontext=fields.pop("tcontext"),
        tclass=fields.pop("tclass"),
        permissive=None if permissive is None else permissive in ("1", "yes"),
        fields=fields,
    )


# ---------------------------------------------------------------------------- time


def _parse_stamp(stamp: str) -> tuple[float, int, str]:
    match = _RAW_STAMP.match(stamp.strip())
    if match:
        secs = float(f"{match['secs']}.{match['frac']}")
        return secs, int(match["serial"]), "raw"
    match = _INTERPRETED_STAMP.match(stamp.strip())
    if match:
        year = int(match["year"])
        year += 2000 if year < 100 else 0
        local = time.strptime(
            f"{year}-{match['mon']}-{match['day']} {match['hms']}", "%Y-%m-%d %H:%M:%S"
        )
        secs = time.mktime(local) + float(f"0.{match['frac']}")
        return secs, int(match["serial"]), "interpreted"
    raise ValueError(f"unknown audit timestamp {stamp!r}")


def _prefix_time(prefix: str, now: float) -> float | None:
    """The time of a syslog/journald prefix (`Jan 23 15:31:28 host ...` or ISO), else None."""
    prefix = prefix.lstrip()
    match = _ISO_TIME.match(prefix)
    if match:
        moment = datetime.strptime(match["dt"].replace(" ", "T"), "%Y-%m-%dT%H:%M:%S")
        frac = float(f"0.{match['frac']}") if match["frac"] else 0.0
        tz = match["tz"]
        if not tz:
            return time.mktime(moment.timetuple()) + frac
        offset = timedelta(0)
        if tz != "Z":
            tz = tz.replace(":", "")
            sign = -1 if tz[0] == "-" else 1
            offset = sign * timedelta(hours=int(tz[1:3]), minutes=int(tz[3:5]))
        moment = moment.replace(tzinfo=timezone(offset))
        return moment.timestamp() + frac
    match = _SYSLOG_TIME.match(prefix)
    if match:
        year = time.localtime(now).tm_year
        for candidate in (year, year - 1):
            try:
                local = time.strptime(
                    f"{candidate}-{_MONTHS[match['mon']]}-{match['day']} {match['hms']}",
                    "%Y-%m-%d %H:%M:%S",
                )
            except ValueError:  # Feb 29 in a year without one
                continue
            secs = time.mktime(local)
            if secs <= now + 86400:  # syslog has no year: the latest one not in the future
                frac = float(f"0.{match['frac']}") if match["frac"] else 0.0
                return secs + frac
    return None


def utc_timestamp(text: str) -> float:
    """Seconds since the epoch of an ISO UTC time (`2023-05-07T22:08:07Z`); for tests and JSON."""
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))


# ---------------------------------------------------------------------------- records


def _find_header(text: str) -> tuple[str, re.Match[str]] | None:
    for form, pattern in (
        ("raw", _RAW_HEADER),
        ("kernel", _KERNEL_HEADER),
        ("journal", _JOURNAL_HEADER),
        ("bare", _BARE_AVC),
        ("fragment", _FRAGMENT_AVC),
    ):
        match = pattern.search(text)
        if match:
            return form, match
    return None


def parse_record(
    text: str, source: str = "-", line: int = 0, now: float | None = None
) -> Record | None:
    """One logical line as a Record; None when it holds no audit record.

    Raises ValueError (with the reason) for a record that is there but cannot be read.
    """
    now = time.time() if now is None else now
    found = _find_header(text)
    if found is None:
        return None
    form, match = found
    raw_part, _, enriched_part = text.partition("\x1d")
    node = None
    timestamp: float | None = None
    serial: int | None = None
    if form in ("raw", "kernel"):
        rtype = match["type"]
        rtype = TYPE_NUMBERS.get(rtype, rtype) if form == "kernel" else rtype
        node = match.groupdict().get("node")
        timestamp, serial, stamp_form = _parse_stamp(match["stamp"])
        if stamp_form == "interpreted":
            form = "interpreted"
        body = raw_part[match.end() :]
    elif form == "journal":
        rtype = match["type"]
        timestamp = _prefix_time(text[: match.start()], now)
        body = raw_part[match.end() :]
    else:
        rtype = "AVC"
        body = raw_part[match.start() :]
        if form == "fragment" and not any(k in body for k in ("scontext=", "tcontext=", "tclass=")):
            return None  # "denied { ... } for" in prose: no context of an access vector
        timestamp = _prefix_time(text[: match.start()], now)
    decode_hex = form != "interpreted"
    record = Record(rtype, source, line, timestamp, serial, node, form=form)
    if rtype == "PROCTITLE" and form == "interpreted":
        record.fields = {"proctitle": body.split("=", 1)[-1].strip()}
    elif rtype == "AVC":
        record.avc = parse_avc(body, decode_hex)
    elif rtype == "USER_AVC":
        fields, _ = split_fields(body, decode_hex=False)
        record.fields = fields
        record.avc = parse_avc(fields.get("msg", ""), decode_hex=False)
    elif rtype in EVENT_TYPES:
        record.fields, _ = split_fields(body, decode_hex)
    if enriched_part:
        record.enriched, _ = split_fields(enriched_part.replace("\x1d", " "), decode_hex=False)
    return record


def _record_type(text: str) -> str | None:
    found = _find_header(text)
    if not found:
        return None
    form, match = found
    return "AVC" if form in ("bare", "fragment") else TYPE_NUMBERS.get(match["type"], match["type"])


def _incomplete(text: str, rtype: str) -> bool:
    """Whether a record line lacks what ends it (so the next line may be its wrapped rest)."""
    if rtype == "USER_AVC":
        body = text.split("msg='", 1)[-1]
        return "'" not in body or "tclass=" not in body
    if rtype == "AVC":
        if text.rstrip().endswith("avc:"):
            return True  # wrapped right after the token
        return bool(_AVC_START.search(text)) and ("}" not in text or "tclass=" not in text)
    if rtype == "SYSCALL":
        return " key=" not in text
    return rtype == "PROCTITLE"


def _continues(pending: str, text: str) -> bool:
    """Whether `text` is the hard-wrapped rest of the record line `pending`."""
    rtype = _record_type(pending)
    if rtype is None:
        return False
    vector_next = rtype == "AVC" and pending.rstrip().endswith("avc:")
    if (_find_header(text) or _RECORD_START.search(text)) and not vector_next:
        return False
    if _ALL_FIELDS.match(text) and rtype in AVC_TYPES:
        return True  # word-wrapped trailing fields (permissive=0, trawcon=...)
    if not _incomplete(pending, rtype):
        return False
    if rtype == "PROCTITLE":
        return bool(_HEX.match(text)) and bool(_HEX.match(pending.split("=")[-1]))
    return "=" in text or "}" in text


def _join(pending: str, text: str) -> str:
    """Join a hard-wrapped line: a space when the wrap fell between tokens, none mid-token."""
    words = pending.split()
    last = words[-1] if words else ""
    if _HEX.match(text) and _HEX.match(last.split("=")[-1]):
        return pending + text
    at_token = bool(_KEY.match(text)) or text[:1] in "{}" or pending.endswith("avc:")
    partial_key = "}" in pending and "=" not in last and last not in ("}", "for")
    open_quote = last.count('"') % 2 == 1
    return pending + (" " if at_token and not partial_key and not open_quote else "") + text


# ---------------------------------------------------------------------------- lines


def _clean(raw: bytes | str) -> tuple[str, bool]:
    """Decode and strip a line; True when it holds binary (undecodable or control) data."""
    if isinstance(raw, bytes):
        text = raw.decode("utf-8", "replace")
    else:
        text = raw
    text = text.rstrip("\r\n").replace("\r", "")
    text = _QUOTE_MARKERS.sub("", text).strip()
    return text, bool(_BINARY.search(text))


def _logical_lines(lines: Iterable[bytes | str], result: ParseResult) -> Iterator[tuple[int, str]]:
    """Clean lines, drop framing, record binary ones as unreadable, and rejoin hard wraps."""
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(lines, 1):
        result.lines += 1
        text, binary = _clean(raw)
        if binary:
            if pending:
                yield pending
                pending = None
            result.unreadable.append(Unreadable("", number, "binary data", _escaped(raw)))
            continue
        if (
            not text
            or text.startswith("----")
            or text.startswith("time->")
            or text.startswith("```")
        ):
            if pending:
                yield pending
                pending = None
            continue
        if pending and _continues(pending[1], text):
            pending = (pending[0], _join(pending[1], text))
            continue
        if pending:
            yield pending
        pending = (number, text)
    if pending:
        yield pending


def _escaped(raw: bytes | str) -> str:
    """A binary line as printable ASCII, never its raw bytes: each byte outside 0x20-0x7e,
    and the backslash, as \\xNN."""
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")
    data = data.rstrip(b"\r\n")[:MAX_TEXT]
    text = "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x5C else f"\\x{b:02x}" for b in data)
    return text[:MAX_TEXT]


def _short(text: str) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text[:MAX_TEXT]


# ---------------------------------------------------------------------------- events


def parse_text(text: str, source: str = "-", now: float | None = None) -> ParseResult:
    """Parse a string; lines end at \\n only (str.splitlines() would split at \\x1d too)."""
    return parse(text.split("\n"), source, now)


def parse(lines: Iterable[bytes | str], source: str = "-", now: float | None = None) -> ParseResult:
    """Parse audit lines (bytes or text) into events with AVCs; never raises on bad input."""
    now = time.time() if now is None else now
    result = ParseResult()
    events: dict[tuple, Event] = {}
    last_untimed: tuple | None = None
    untimed = 0
    for number, text in _logical_lines(lines, result):
        try:
            record = parse_record(text, source, number, now)
        except ValueError as error:
            reason = "truncated record" if isinstance(error, _Incomplete) else "unreadable record"
            result.unreadable.append(Unreadable(source, number, f"{reason}: {error}", _short(text)))
            continue
        if record is None:
            reason = "not an audit record"
            if _RECORD_START.search(text):
                reason = "truncated record: incomplete header"
            result.unreadable.append(Unreadable(source, number, reason, _short(text)))
            continue
        result.records += 1
        if record.type not in EVENT_TYPES or (record.type in AVC_TYPES and record.avc is None):
            result.other_records += 1
            continue
        if record.serial is not None:
            key: tuple = (record.node, record.timestamp, record.serial)
        else:
            # No serial (journald, bare AVC): consecutive records of one second are one
            # event, until a record comes that such an event has only once.
            stamp = None if record.timestamp is None else int(record.timestamp)
            event = events.get(last_untimed) if last_untimed else None
            if (
                event is None
                or stamp is None
                or last_untimed[1] != stamp
                or _repeats(event, record)
            ):
                untimed += 1
                last_untimed = ("untimed", stamp, untimed)
            key = last_untimed
        event = events.get(key)
        if event is None:
            event = events[key] = Event(
                source, number, record.timestamp, record.serial, record.node, form=record.form
            )
        _add(event, record)
    for item in result.unreadable:
        item.source = item.source or source
    result.events = [e for e in events.values() if e.avcs]
    return result


def _repeats(event: Event, record: Record) -> bool:
    if record.type == "SYSCALL":
        return bool(event.syscall)
    if record.type == "PROCTITLE":
        return event.proctitle is not None
    return record.type in AVC_TYPES and bool(event.syscall or event.proctitle or event.paths)


def _add(event: Event, record: Record) -> None:
    if record.avc is not None:
        if record.type == "USER_AVC":
            record.avc.fields = {
                **{k: v for k, v in record.fields.items() if k != "msg"},
                **record.avc.fields,
            }
        event.avcs.append(record.avc)
        event.line = min(event.line, record.line)
    elif record.type == "SYSCALL":
        event.syscall = {**record.fields, **record.enriched}
    elif record.type == "PATH":
        event.paths.append(record.fields)
    elif record.type == "CWD":
        event.cwd = record.fields.get("cwd")
    elif record.type == "PROCTITLE":
        event.proctitle = record.fields.get("proctitle")
