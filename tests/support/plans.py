"""`ocihook plan` run as a user runs it (its golden files: tests/support/golden.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def run_plan(config: Path, *args: str) -> subprocess.CompletedProcess:
    """`python -m ocihook.cli.main plan --config CONFIG ARGS...` from the checkout."""
    return subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "plan", "--config", str(config), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
