"""Shared helpers for the audit tests: fixed clock and time zone, golden files."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from tests.support.golden import golden_json

DATA = Path(__file__).parent / "data" / "avc"
GOLDEN = Path(__file__).parent / "golden" / "audit"
# 2026-01-01T00:00:00Z: syslog lines (no year) resolve to the latest past year.
NOW = 1767225600.0


def utc(monkeypatch) -> None:
    """Run in UTC so that ausearch -i and syslog times (local time) are stable."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def as_data(value) -> object:
    return json.loads(json.dumps(dataclasses.asdict(value), sort_keys=True))


def check_golden(name: str, value: object) -> None:
    """Compare with tests/golden/audit/NAME.json (tests/support/golden.py)."""
    path = GOLDEN / f"{name}.json"
    assert golden_json(path, value) == value, f"differs from {path}"
