"""An interpreter that has Python 3.11's tomllib, the reference TOML reader of
tests/test_tomlread.py: this one, else the system's python3 (Debian 12's is 3.11), so the
RHEL 9 tier (3.9) compares its tomlread with the same reference."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys


@functools.cache
def tomllib_python() -> str | None:
    """The path of a Python with tomllib, or None."""
    if sys.version_info >= (3, 11):
        return sys.executable
    for name in ("python3", "python3.13", "python3.12", "python3.11"):
        for path in dict.fromkeys([shutil.which(name), f"/usr/bin/{name}"]):
            if path and _has_tomllib(path):
                return path
    return None


def _has_tomllib(python: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-I", "-c", "import tomllib"], capture_output=True, timeout=30, check=False
        )
    except OSError:
        return False
    return done.returncode == 0
