"""RHEL 9's Python stack for the tests that need it beside this interpreter: .venv-py39, as
scripts/py39-venv.sh builds it (pyenv's CPython 3.9.18 with packaging/rhel9-python.txt's
versions). `make test` builds it before the run; here it is built if missing or stale, and a
host without pyenv's 3.9.18 fails with the script's one line, not a skip."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
VENV = REPO / ".venv-py39"
SCRIPT = REPO / "scripts/py39-venv.sh"


def is_this_interpreter() -> bool:
    """Whether the tests run in .venv-py39 itself (make test-py39)."""
    return Path(sys.prefix).resolve() == VENV.resolve()


@functools.cache
def python() -> Path:
    """.venv-py39's python, built or refreshed first."""
    made = subprocess.run(
        [str(SCRIPT), str(VENV)], capture_output=True, text=True, timeout=900, check=False
    )
    assert made.returncode == 0, f"{SCRIPT.name}: {made.stderr[-4000:]}"
    return Path(made.stdout.split()[-1])
