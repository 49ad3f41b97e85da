"""`ocihook audit`: explain AVC denials in terms of ocihook's containers and injected files."""

from __future__ import annotations

import gzip
import re
import sys
import time
import zlib
from datetime import datetime
from typing import IO, Iterable, Iterator

import click

from ocihook.audit import parse as parse_mod
from ocihook.audit.explain import Finding, explain_all
from ocihook.audit.records import DEFAULT_STATE_DIR, load_records, match
from ocihook.audit.report import to_json, to_text
from ocihook.cli.output import emit_json, exit_after_report, json_option
from ocihook.errors import EXIT_FAILURE, EXIT_INPUT, EXIT_OK, OcihookError, describe

DEFAULT_LOG = "/var/log/audit/audit.log"
EXIT_CLEAN, EXIT_DENIED = EXIT_OK, EXIT_FAILURE
NOT_RECORDS = ("binary data", "not an audit record")  # Unreadable reasons: not audit at all
_RELATIVE = re.compile(r"^(\d+)\s*(s|sec|m|min|h|hour|d|day|w|week)s?$")
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400}
_UNITS.update({"day": 86400, "w": 604800, "week": 604800})


def parse_since(text: str, now: float | None = None) -> float:
    """`--since`: epoch seconds, ISO date/time (local, or UTC with Z), `10m`, `1h`, `2d`,
    `today`, `yesterday`, `recent` (10 minutes, as ausearch says it)."""
    now = time.time() if now is None else now
    value = text.strip().lower()
    match = _RELATIVE.match(value)
    if match:
        return now - int(match[1]) * _UNITS[match[2]]
    if value in ("today", "yesterday"):
        midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight.timestamp() - (86400 if value == "yesterday" else 0)
    if value == "recent":
        return now - 600
    if re.match(r"^\d+(\.\d+)?$", value):
        return float(value)
    iso = text.strip().replace(" ", "T")
    if iso.endswith(("Z", "z")):
        for form in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"):
            try:
                return parse_mod.utc_timestamp(
                    datetime.strptime(iso[:-1], form).strftime("%Y-%m-%dT%H:%M:%SZ")
                )
            except ValueError:
                continue
    for form in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
        try:
            return datetime.strptime(iso, form).timestamp()
        except ValueError:
            continue
    raise ValueError(f"not a time: {text!r} (use 10m, 1h, 2d, today, 2026-11-30 16:00, epoch)")


def _open(path: str) -> IO[bytes]:
    """A binary stream of `path` ('-' is stdin), gunzipped when it is gzip."""
    handle = sys.stdin.buffer if path == "-" else open(path, "rb")
    peek = getattr(handle, "peek", None)
    if peek is not None and peek(2)[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=handle, mode="rb")  # type: ignore[return-value]
    return handle


def _lines(handle: IO[bytes], path: str, errors: list[str]) -> Iterator[bytes]:
    try:
        yield from handle
    except (OSError, EOFError, zlib.error) as error:
        errors.append(f"{path}: read error: {error or error.__class__.__name__}")


def _not_audit(result: parse_mod.ParseResult, name: str) -> str | None:
    """Why an input that holds no audit record at all is not an audit log (None when it
    holds one, or holds nothing: an empty log is a clean one)."""
    if result.records or not result.unreadable:
        return None
    binary = sum(1 for u in result.unreadable if u.reason == "binary data")
    if binary == result.lines:
        lines = f"{binary} line(s) of binary data"
    else:
        lines = f"{result.lines} line(s)" + (f", {binary} of them binary data" if binary else "")
    return f"{name}: not audit records: {lines}, no audit record"


def read_inputs(paths: Iterable[str]) -> parse_mod.ParseResult:
    """Parse every input into one result; raises OcihookError (status EXIT_INPUT) when one
    cannot be read, or holds lines but no audit record."""
    total = parse_mod.ParseResult()
    for path in paths:
        errors: list[str] = []
        name = "<stdin>" if path == "-" else path
        try:
            handle = _open(path)
        except OSError as error:
            raise OcihookError(f"{name}: {describe(error)}", EXIT_INPUT) from None
        try:
            result = parse_mod.parse(_lines(handle, name, errors), source=name)
        finally:
            if path != "-":
                handle.close()
        if errors and result.lines == 0:
            raise OcihookError(f"{name}: {errors[0].split(': ', 1)[-1]}", EXIT_INPUT)
        problem = _not_audit(result, name)
        if problem:
            raise OcihookError(problem, EXIT_INPUT)
        for error in errors:
            result.unreadable.append(
                parse_mod.Unreadable(name, result.lines + 1, error.split(": ", 1)[1], "")
            )
        total.events.extend(result.events)
        total.unreadable.extend(result.unreadable)
        total.lines += result.lines
        total.records += result.records
        total.other_records += result.other_records
    return total


def stray_lines(parsed: parse_mod.ParseResult) -> str | None:
    """The stderr note for input that mixes audit records with other lines, or None."""
    stray = [u for u in parsed.unreadable if u.reason in NOT_RECORDS]
    if not stray:
        return None
    binary = sum(1 for u in stray if u.reason == "binary data")
    what = f" ({binary} binary)" if binary else ""
    return f"warning: {len(stray)} of {parsed.lines} line(s) are not audit records{what}"


def _wanted(finding: Finding, container: str | None) -> bool:
    if container is None:
        return True
    if finding.match.container is not None:
        return finding.match.container.id.startswith(container)
    return any(c.startswith(container) for c in finding.match.candidates)


def listed(findings: list[Finding], include_all: bool = False) -> list[Finding]:
    """What the report lists: denials tied to ocihook (its containers, injected files, the hook
    itself), or every one with --all."""
    return [f for f in findings if include_all or f.related]


def exit_code(findings: list[Finding]) -> int:
    """1 whenever the report lists a denial, else 0 (pass the listed findings)."""
    return EXIT_DENIED if any(f.avc.denied for f in findings) else EXIT_CLEAN


@click.command("audit")
@click.argument("files", nargs=-1, type=str)
@click.option(
    "--since", "since", metavar="TIME", help="Only events since TIME: 10m, 1h, today, ISO, epoch."
)
@click.option("--container", "container", metavar="ID", help="Only this container (id prefix).")
@click.option(
    "--state-dir",
    default=DEFAULT_STATE_DIR,
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where the hook records its containers.",
)
@click.option(
    "--policy",
    metavar="FILE",
    help="Binary policy for audit2why verdicts (default: the loaded one, when SELinux is on).",
)
@json_option(help="Print the report as one JSON document.")
@click.option(
    "--all",
    "include_all",
    is_flag=True,
    help="Also list denials not related to ocihook (they are counted, not listed, by default).",
)
def audit(
    files: tuple[str, ...],
    since: str | None,
    container: str | None,
    state_dir: str,
    policy: str | None,
    as_json: bool,
    include_all: bool,
) -> None:
    """Explain SELinux AVC denials for containers that ocihook set up.

    Reads FILES (audit.log, rotated or gzipped logs, ausearch or journalctl output, dmesg;
    '-' is stdin; default /var/log/audit/audit.log). Lists the denials of containers ocihook
    set up, of files it injected and of the hook itself (--all: every denial). Records of
    containers that exited are kept, so their denials are tied to them after removal.
    Exit status: 0 no denial listed (also for an empty log), 1 a denial is listed, 2 a usage
    error, 3 input that cannot be read or holds no audit record (a policy too).
    """
    try:
        since_ts = None if since is None else parse_since(since)
    except ValueError as error:
        # ctx given: click 7 prints the "Try ... -h" hint only then (click 8 finds it itself)
        context = click.get_current_context()
        raise click.BadParameter(str(error), ctx=context, param_hint="--since") from None
    parsed = read_inputs(files or (DEFAULT_LOG,))
    if since_ts is not None:
        parsed.events = [e for e in parsed.events if e.timestamp is None or e.timestamp >= since_ts]
    containers, warnings = load_records(state_dir)
    if not containers:
        warnings.append(f"no ocihook records in {state_dir}: denials cannot be tied to containers")
    if container and not any(c.id.startswith(container) for c in containers):
        warnings.append(f"no record of a container {container!r} in {state_dir}")
    oracle = None
    policy_path = None
    if policy is not None or _selinux_enabled():
        from ocihook.audit.policy import Policy

        try:
            oracle = Policy(policy)
            policy_path = oracle.path
        except OcihookError as error:
            if policy is not None:
                raise OcihookError(str(error), EXIT_INPUT) from None
            warnings.append(str(error))
    findings = explain_all(parsed.events, lambda event, avc: match(event, avc, containers), oracle)
    findings = [f for f in findings if _wanted(f, container)]
    shown = listed(findings, include_all)
    hidden = sum(1 for f in findings if f.avc.denied) - sum(1 for f in shown if f.avc.denied)
    code = exit_code(shown)
    if as_json:
        emit_json(to_json(shown, parsed, warnings, code, policy_path, hidden))
    else:
        click.echo(to_text(shown, parsed, warnings, policy_path, hidden), nl=False)
    note = stray_lines(parsed)
    if note:
        click.echo(f"ocihook: {note}", err=True)
    exit_after_report(code)


def _selinux_enabled() -> bool:
    from ocihook.selinux.label import selinux_enabled

    return selinux_enabled()
