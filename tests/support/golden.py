"""Golden files: the one helper every golden test compares with (plans, CDI specs, device
cgroup edits, audit reports). OCIHOOK_UPDATE_GOLDEN=1 rewrites the goldens from what the
code produces (review the diff); a missing golden is written and the test fails, asking
for that review."""

from __future__ import annotations

import json
import os
from pathlib import Path


def updating() -> bool:
    return os.environ.get("OCIHOOK_UPDATE_GOLDEN") == "1"


def golden_text(golden: Path, text: str) -> str:
    """The golden file's content to compare `text` with (written first with `text` when
    updating, or when it is missing: then the test fails)."""
    if updating() or not golden.exists():
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text, encoding="utf-8")
        if not updating():
            raise AssertionError(f"wrote missing golden {golden}: review and commit it")
    return golden.read_text(encoding="utf-8")


def golden_json(golden: Path, value: object) -> object:
    """The golden JSON file's value to compare `value` (plain JSON data) with; the file
    holds it indented with sorted keys (golden_text's rules)."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return json.loads(golden_text(golden, text))
