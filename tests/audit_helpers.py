"""Shared helpers for the audit tests: fixed clock and time zone, golden files."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

DATA = Path(__file__).parent / "data" / "avc"
GOLDEN = Path(__file__).parent / "golden" / "audit"
# 2026-01-01T00:00:00Z: syslog lines (no year) resolve to the latest past year.
NOW = 1767225600.0
UPDATE = os.environ.get("OCIHOOK_UPDATE_GOLDEN") == "1"


def utc(monkeypatch) -> None:
    """Run in UTC so that ausearch -i and syslog times (local time) are stable."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def as_data(value) -> object:
    return json.loads(json.dumps(dataclasses.asdict(value), sort_keys=True))


def check_golden(name: str, value: object) -> None:
    """Compare with tests/golden/audit/NAME.json; OCIHOOK_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / f"{name}.json"
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if UPDATE or not path.exists():
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if not UPDATE:
            raise AssertionError(f"wrote missing golden {path}: review and commit it")
    assert json.loads(path.read_text(encoding="utf-8")) == value, f"differs from {path}"
