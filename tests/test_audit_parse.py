"""Parser: every format users paste, with golden JSON of the parsed records."""

from __future__ import annotations

import gzip
import json
import time

import pytest
from audit_helpers import DATA, NOW, as_data, check_golden, utc

from ocihook.audit.parse import parse, parse_avc, split_fields

SAMPLES = [json.loads(line) for line in (DATA / "samples.jsonl").read_text().split("\n") if line]
FILES = [
    "audit.log",
    "ausearch-raw.txt",
    "ausearch-i.txt",
    "journald.txt",
    "dmesg.txt",
    "pasted.txt",
    "fragments.txt",
    "truncated.txt",
]


def lines(name: str) -> list[bytes]:
    # bytes: str.splitlines() would also split at \x1d, the enriched-field separator
    return (DATA / name).read_bytes().splitlines(keepends=True)


@pytest.fixture(autouse=True)
def _utc(monkeypatch):
    utc(monkeypatch)
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("index", range(len(SAMPLES)))
def test_published_samples(index):
    sample = SAMPLES[index]
    result = parse(sample["raw"].split("\n"), source=f"sample-{index}", now=NOW)
    assert not result.unreadable
    assert result.events and all(event.avcs for event in result.events)
    check_golden(f"sample-{index}", as_data(result))


@pytest.mark.parametrize("name", FILES)
def test_formats(name):
    raw = (DATA / name).read_bytes()
    result = parse(raw.splitlines(keepends=True), source=name, now=NOW)
    check_golden(name, as_data(result))


def test_gzipped_rotated_log_reads_like_plain(tmp_path):
    from ocihook.cli.audit import read_inputs

    plain = (DATA / "audit.log").read_bytes()
    rotated = tmp_path / "audit.log.1.gz"
    rotated.write_bytes(gzip.compress(plain))
    got = read_inputs([str(rotated)])
    want = parse(plain.splitlines(keepends=True), source=str(rotated))
    assert as_data(got) == as_data(want)


def test_raw_and_interpreted_ausearch_agree_on_the_denial():
    raw = parse(lines("ausearch-raw.txt"), now=NOW).events[0]
    cooked = parse(lines("ausearch-i.txt"), now=NOW).events[0]
    assert (
        (raw.timestamp, raw.serial) == (cooked.timestamp, cooked.serial) == (1764518400.101, 5001)
    )
    assert raw.avcs[0].scontext == cooked.avcs[0].scontext
    assert raw.proctitle == cooked.proctitle == "synth-smi --list"
    assert raw.paths[0]["name"] == cooked.paths[0]["name"] == "/usr/lib64/libsynth.so.1.2.3"


def test_event_groups_records_by_serial():
    event = parse(lines("audit.log"), now=NOW).events[0]
    assert event.serial == 5001
    assert event.syscall["exe"] == "/usr/bin/synth-smi"
    assert event.syscall["SYSCALL"] == "openat"  # enriched field after \x1d
    assert event.syscall["UID"] == "root"
    assert event.cwd == "/"
    assert event.proctitle == "synth-smi --list"  # hex decoded, NUL -> space


def test_hex_path_granted_permissive_user_avc_and_node():
    result = parse(lines("audit.log"), now=NOW)
    avcs = {e.serial: e.avcs[0] for e in result.events}
    assert avcs[5004].fields["path"] == "/opt/synth dir" and avcs[5004].permissive is True
    assert avcs[5005].result == "granted" and not avcs[5005].denied
    assert (
        avcs[5006].tclass == "system"
        and avcs[5006].fields["cmdline"] == "/usr/bin/systemctl status"
    )
    assert avcs[5006].fields["subj"] == "system_u:system_r:init_t:s0"  # outer USER_AVC field
    node = [e for e in result.events if e.serial == 5002][0]
    assert node.node == "gpu-host-7" and node.proctitle == "synth-smi"
    assert result.other_records == 4  # USER_LOGIN, MAC_POLICY_LOAD, policy-load AVC, EOE


def test_pasted_lines_with_quotes_wraps_and_crlf():
    result = parse(lines("pasted.txt"), now=NOW)
    assert [e.serial for e in result.events] == [5001, 5003, 5002]
    first = result.events[0].avcs[0]
    assert first.fields["pid"] == "4242"
    assert first.scontext == "system_u:system_r:container_t:s0:c123,c456"
    assert result.events[1].avcs[0].tcontext == "system_u:object_r:container_file_t:s0:c7,c9"
    assert [u.reason for u in result.unreadable] == ["not an audit record"] * 2


def test_pasted_fragments_without_header_or_avc_token_are_records():
    """Denials as bug reports and policy PRs paste them: the access vector alone (no
    `type=AVC msg=audit(...)`, no `avc:`), on one line, quoted, or wrapped over lines."""
    result = parse(lines("fragments.txt"), now=NOW)
    got = [(e.line, a.perms, a.tclass, a.fields.get("name") or a.fields.get("path"))
           for e in result.events for a in e.avcs]  # fmt: skip
    assert got == [
        (4, ["read"], "file", "libsynth.so.1.2.3"),
        (5, ["read", "write"], "chr_file", "synth0"),
        (9, ["map"], "file", "/usr/lib64/libsynth-ml.so.4"),
        (16, ["unlink"], "file", "btmp"),
    ]
    wrapped, quoted = result.events[2].avcs[0], result.events[3].avcs[0]
    assert wrapped.scontext == "system_u:system_r:container_t:s0:c7,c9"
    assert wrapped.tcontext == "system_u:object_r:container_file_t:s0:c123,c456"
    assert wrapped.permissive is False and quoted.permissive is True
    assert all(e.timestamp is None and e.serial is None for e in result.events)
    assert result.records == 4
    assert [u.line for u in result.unreadable] == [1, 2, 7, 14]  # the prose around them


def test_fragment_forms_and_what_is_not_one():
    """The header-less vector in every shape reports show, with the wrap right after `avc:`
    rejoined to its header; `denied { ... }` in prose with no context is no record."""
    context = "scontext=u:r:container_t:s0:c1,c2 tcontext=u:object_r:lib_t:s0 tclass=file"
    text = [
        f"denied {{ execute }} for pid=1 {context}",
        f"granted  {{ setenforce }} for  pid=2 {context.replace('file', 'security')}",
        "denied { read write",
        f"}} for pid=3 {context}",
        "type=AVC msg=audit(1764518400.500:77): avc:",
        f"denied {{ open }} for pid=4 {context} permissive=0",
        "the build was denied { by policy } for a week",
        "Permission denied {x} for nothing",
    ]
    result = parse(text, now=NOW)
    got = [(a.result, a.perms, e.serial) for e in result.events for a in e.avcs]
    assert got == [
        ("denied", ["execute"], None),
        ("granted", ["setenforce"], None),
        ("denied", ["read", "write"], None),
        ("denied", ["open"], 77),
    ]
    assert [(u.line, u.reason) for u in result.unreadable] == [
        (7, "not an audit record"),
        (8, "not an audit record"),
    ]
    missing = parse([f"denied {{ read }} for pid=5 {context.split(' tclass')[0]}"], now=NOW)
    assert [u.reason for u in missing.unreadable] == ["truncated record: AVC without tclass"]


def test_journald_groups_records_without_serial():
    result = parse(lines("journald.txt"), now=NOW)
    first = result.events[0]
    assert first.serial is None and first.timestamp == 1764518460.0
    assert first.syscall["pid"] == "4243" and first.proctitle == "synth-smi --list"
    assert result.events[1].timestamp == 1764518520.0  # short-iso with +0000
    assert result.events[2].serial == 5011  # kernel: audit: type=1400 audit(...)
    assert result.events[3].avcs[0].tclass == "system"


def test_truncated_records_are_reported():
    result = parse(lines("truncated.txt"), now=NOW)
    assert [e.serial for e in result.events] == [5003]
    reasons = [(u.line, u.reason.split(":")[0]) for u in result.unreadable]
    assert reasons == [
        (1, "truncated record"),
        (2, "truncated record"),
        (3, "truncated record"),
        (5, "unreadable record"),
        (6, "truncated record"),
    ]


def test_binary_and_garbage_are_unreadable_lines():
    data = b"\x7fELF\x02\x01\x01\x00\x00\n\xff\xfe garbage\nhello world\n"
    result = parse(data.splitlines(keepends=True))
    assert not result.events
    assert [u.reason for u in result.unreadable] == [
        "binary data",
        "binary data",
        "not an audit record",
    ]


def test_split_fields_handles_quotes_and_parentheses():
    fields, words = split_fields("a=\"x y\" b='p q' exit=EACCES(Permission denied) c=2 word")
    assert fields == {"a": "x y", "b": "p q", "exit": "EACCES(Permission denied)", "c": "2"}
    assert words == ["word"]


def test_parse_avc_without_denial_is_none():
    assert parse_avc("avc:  received policyload notice (seqno=2)") is None
