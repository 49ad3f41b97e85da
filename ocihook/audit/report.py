"""Findings as a table grouped by container and cause, or as JSON."""

from __future__ import annotations

import time
from collections import OrderedDict

from ocihook.audit.explain import CAUSES, Finding
from ocihook.audit.parse import ParseResult
from ocihook.plan.kinds import audit_name

UNRELATED = "not related to ocihook"
SHOW_UNREADABLE = 5


HOOK = "ocihook's hook itself"


def _group(finding: Finding) -> str:
    if finding.match.container is not None:
        return finding.match.container.id
    if finding.cause == "hook":
        return HOOK
    if finding.match.candidates:
        return "injected into " + ", ".join(finding.match.candidates)
    return UNRELATED


def _iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))


def finding_dict(finding: Finding) -> dict:
    """One finding as plain JSON data."""
    avc, match, event = finding.avc, finding.match, finding.event
    injected = match.injected
    return {
        "container": match.container.id if match.container else None,
        "candidates": match.candidates,
        "profile": match.container.profile if match.container else None,
        "cause": finding.cause,
        "cause_text": CAUSES[finding.cause],
        "explanation": finding.explanation,
        "fixes": finding.fixes,
        "verdict": None
        if finding.verdict is None
        else {
            "verdict": finding.verdict.verdict,
            "booleans": [list(b) for b in finding.verdict.booleans],
            "constraint": finding.verdict.constraint,
        },
        "result": avc.result,
        "permissive": avc.permissive,
        "perms": avc.perms,
        "scontext": avc.scontext,
        "tcontext": avc.tcontext,
        "tclass": avc.tclass,
        "target": finding.target,
        "comm": avc.fields.get("comm") or event.syscall.get("comm"),
        "exe": avc.fields.get("exe") or event.syscall.get("exe"),
        "pid": avc.fields.get("pid"),
        "injected": None
        if injected is None
        else {
            "kind": injected.kind,
            "target": injected.target,
            "source": injected.source,
            "label": injected.label,
        },
        "matched_by": match.by,
        "time": _iso(event.timestamp),
        "serial": event.serial,
        "node": event.node,
        "source": event.source,
        "line": event.line,
    }


def _dedup(findings: list[Finding]) -> list[tuple[Finding, int]]:
    counted: OrderedDict[tuple, list] = OrderedDict()
    for finding in findings:
        avc = finding.avc
        key = (
            _group(finding),
            finding.cause,
            avc.result,
            avc.scontext,
            avc.tcontext,
            avc.tclass,
            tuple(avc.perms),
            finding.target,
        )
        if key in counted:
            counted[key][1] += 1
        else:
            counted[key] = [finding, 1]
    return [(f, n) for f, n in counted.values()]


def to_json(
    findings: list[Finding],
    parsed: ParseResult,
    warnings: list[str],
    exit_code: int,
    policy: str | None,
    not_listed: int = 0,
) -> dict:
    """The machine-readable report."""
    entries = []
    for finding, count in _dedup(findings):
        entry = finding_dict(finding)
        entry["count"] = count
        entries.append(entry)
    return {
        "version": 1,
        "exit_code": exit_code,
        "policy": policy,
        "summary": {
            "lines": parsed.lines,
            "records": parsed.records,
            "events": len(parsed.events),
            "denials": sum(1 for f in findings if f.avc.denied) + not_listed,
            "related": sum(1 for f in findings if f.avc.denied and f.related),
            "not_listed": not_listed,
            "unreadable": len(parsed.unreadable),
        },
        "findings": entries,
        "unreadable": [
            {"source": u.source, "line": u.line, "reason": u.reason, "text": u.text}
            for u in parsed.unreadable
        ],
        "warnings": warnings,
    }


def to_text(
    findings: list[Finding],
    parsed: ParseResult,
    warnings: list[str],
    policy: str | None,
    not_listed: int = 0,
) -> str:
    """The readable report: per container, per cause, one line per distinct denial."""
    out: list[str] = []
    groups: OrderedDict[str, OrderedDict[str, list]] = OrderedDict()
    containers = {}
    for finding, count in _dedup(findings):
        if finding.cause == "granted":
            continue
        name = _group(finding)
        containers[name] = finding.match.container
        groups.setdefault(name, OrderedDict()).setdefault(finding.cause, []).append(
            (finding, count)
        )
    order = sorted(groups, key=lambda g: (g == UNRELATED, g == HOOK, g))
    for name in order:
        container = containers.get(name)
        if container is not None:
            level = container.process_label or container.mount_label or "no label"
            out.append(
                f"Container {name[:12]}  profile {container.profile or '?'}  "
                f"source {container.source_root or '?'}  ({level})"
            )
        else:
            out.append(name[:1].upper() + name[1:])
        for cause, items in groups[name].items():
            out.append(f"  {CAUSES[cause]}:")
            for finding, count in items:
                out.extend(_lines(finding, count))
            fixes = list(OrderedDict.fromkeys(fix for f, _ in items for fix in f.fixes))
            for fix in fixes:
                out.append(f"    fix: {fix}")
        out.append("")
    denials = [f for f in findings if f.avc.denied]
    granted = len(findings) - len(denials)
    related = sum(1 for f in denials if f.related)
    tail = (
        f"{len(denials) + not_listed} denial(s), {related} related to ocihook"
        + (f", {granted} granted" if granted else "")
        + f"; {parsed.records} record(s) in {parsed.lines} line(s)"
    )
    if not_listed:
        tail += f"; {not_listed} denial(s) not related to ocihook not listed (--all lists them)"
    none = "No denials related to ocihook." if not_listed else "No AVC denials."
    out.append(tail if findings else f"{none} {tail}")
    if policy:
        out.append(f"Verdicts from audit2why with policy {policy}.")
    if parsed.unreadable:
        out.append(f"{len(parsed.unreadable)} unreadable line(s):")
        for item in parsed.unreadable[:SHOW_UNREADABLE]:
            out.append(f"  {item.source}:{item.line}: {item.reason}: {_clip(item.text, 80)}")
        if len(parsed.unreadable) > SHOW_UNREADABLE:
            out.append(
                f"  ... and {len(parsed.unreadable) - SHOW_UNREADABLE} more (--json lists all)"
            )
    out.extend(f"warning: {w}" for w in warnings)
    return "\n".join(out).rstrip() + "\n"


def _clip(text: str, width: int) -> str:
    """`text` cut to `width`, never inside a \\xNN escape of a binary line."""
    cut = text[:width]
    tail = cut.rfind("\\", len(cut) - 3)
    return cut[:tail] if len(text) > width and tail >= 0 else cut


def _lines(finding: Finding, count: int) -> list[str]:
    avc = finding.avc
    tag = "DENIED" if avc.permissive is not True else "denied (permissive)"
    comm = avc.fields.get("comm") or finding.event.syscall.get("comm") or "?"
    times = f"  x{count}" if count > 1 else ""
    line = (
        f"    {tag} {{ {' '.join(avc.perms)} }} {avc.tclass} {finding.target or '?'}  "
        f"comm={comm}  tcontext={avc.tcontext}{times}"
    )
    lines = [line]
    injected = finding.match.injected
    if injected is not None:
        from_ = f" from {injected.source}" if injected.source else ""
        lines.append(
            f"      injected {audit_name(injected.kind)} {injected.target}{from_} "
            f"(matched by {', '.join(finding.match.by)})"
        )
    lines.append(f"      {finding.explanation}")
    return lines
