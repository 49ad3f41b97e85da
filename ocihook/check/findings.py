"""`ocihook check`'s findings: plain records, rendered as text at the end (or as data)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

OK, WARNING, FAILED = "ok", "warning", "failed"
_PREFIX = {OK: "ok      ", WARNING: "WARNING ", FAILED: "FAILED  "}


@dataclass(frozen=True)
class Finding:
    """One thing check looked at: its status, what it is about, and what it found."""

    status: str  # ok, warning or failed
    topic: str  # config, driver, device, ldconfig, cache, runtime, hooks-dir, hooks.d, route
    message: str
    path: str | None = None


def render(findings: list[Finding]) -> str:
    """One line per finding: "ok      ...", "WARNING ..." or "FAILED  ..."."""
    return "".join(f"{_PREFIX[f.status]}{f.message}\n" for f in findings)


def as_data(findings: list[Finding]) -> list[dict]:
    return [asdict(f) for f in findings]


def failed(findings: list[Finding]) -> bool:
    return any(f.status == FAILED for f in findings)
