"""Any text or bytes parses without an unhandled exception, and the CLI exits 0, 1 or 3 with
one complete JSON document on stdout."""

from __future__ import annotations

import json

from audit_helpers import DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ocihook.audit.parse import parse, parse_text
from tests.support.cli import invoke

REAL = (DATA / "audit.log").read_bytes() + (DATA / "ausearch-i.txt").read_bytes()
PIECES = st.sampled_from(
    [
        b"type=AVC msg=audit(",
        b"1.2:3): ",
        b"avc:  denied  { ",
        b"}",
        b" for ",
        b"scontext=",
        b"tcontext=",
        b"tclass=",
        b'"',
        b"'",
        b"\x1d",
        b"\n",
        b"\r\n",
        b"> ",
        b"----",
        b"time->",
        b"audit[1]: AVC ",
        b"audit: type=1400 audit(",
        b"proctitle=",
        b"msg='",
        b"=",
        b"(",
        b")",
        b"node=x ",
        b"\x00",
        b"\xff",
        b"c1,c2",
        b"s0:",
        b"11/30/2025 16:00:00.1:5) : ",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.binary())
def test_any_bytes(data):
    parse(data.splitlines(keepends=True))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text(text):
    parse_text(text)
    parse(text.splitlines())


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=60), st.integers(0, len(REAL)), st.integers(0, 400))
def test_mangled_audit_lines(pieces, start, length):
    data = REAL[start : start + length] + b"".join(pieces) + REAL[: length // 2]
    parse(data.splitlines(keepends=True))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=2000))
def test_cli_on_any_bytes(tmp_path, data):
    code, out, err = invoke(["audit", "--json", "--state-dir", str(tmp_path), "-"], data)
    assert code in (0, 1, 3), err
    document = json.loads(out)
    assert code != 3 or document == {"error": err[len("ocihook: ") : -1], "exit_code": 3}
    assert err.count("\n") <= 1 and "internal error" not in err
