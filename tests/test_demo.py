"""`make demo` runs: the README's first command works on this machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import synthetic

pytestmark = [pytest.mark.root, pytest.mark.podman, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent


def test_demo_succeeds():
    result = subprocess.run(
        [sys.executable, "scripts/demo.py"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "DEMO OK" in result.stdout
    assert f"synth-smi: {synthetic.opened('synth0')}" in result.stdout
