"""`ocihook plan` run as a user runs it, and the golden files its output is compared with."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def run_plan(config: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m ocihook.cli plan --config CONFIG ARGS...` from the checkout."""
    return subprocess.run(
        [sys.executable, "-m", "ocihook.cli", "plan", "--config", str(config), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def golden_text(golden: Path, text: str) -> str:
    """The golden file's content to compare `text` with; OCIHOOK_UPDATE_GOLDEN=1 rewrites
    it with `text` first (review the diff)."""
    if os.environ.get("OCIHOOK_UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    return golden.read_text()
