"""RHEL 9's Python stack for the tests that need it beside this interpreter: .venv-py39, as
scripts/py39-venv.sh builds it (pyenv's CPython 3.9.18 with packaging/rhel9-python.txt's
versions). `make test` builds it before the run; here it is built if missing or stale.
The tests that use it carry the `py39` mark (tests/conftest.py): where pyenv's 3.9.18 is
not to be found (`missing`: a contributor without pyenv, an ordinary user who cannot read
root's) they are skipped with the script's one line, and under `make test`
(OCIHOOK_REQUIRE_TIERS=1) they fail with it instead."""

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
def missing() -> str | None:
    """Why RHEL 9's stack cannot be had here (the script's line), None when it can: the
    tests run under it, or pyenv's 3.9.18 is where the script looks for it."""
    if is_this_interpreter():
        return None
    found = subprocess.run(
        [str(SCRIPT), "--find"], capture_output=True, text=True, timeout=60, check=False
    )
    if found.returncode == 0:
        return None
    return found.stderr.strip().splitlines()[-1] if found.stderr.strip() else SCRIPT.name


@functools.cache
def python() -> Path:
    """.venv-py39's python, built or refreshed first."""
    made = subprocess.run(
        [str(SCRIPT), str(VENV)], capture_output=True, text=True, timeout=900, check=False
    )
    assert made.returncode == 0, f"{SCRIPT.name}: {made.stderr[-4000:]}"
    return Path(made.stdout.split()[-1])
