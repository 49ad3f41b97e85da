"""The hook's contract with the runtime, unprivileged: exit status 0 (nothing to do or done),
1 (one line "ocihook: ..."), 70 (a bug: one line "ocihook: internal error: ..."), and the
import budget of the no-request and injection paths (no click, PyYAML, jsonschema or `re`
while the compiled config is fresh).

The budgets are measured in a child python started with -I -S (no site, so nothing but the
interpreter's own start-up modules are loaded before ocihook) and this venv's sys.path; the
forbidden modules the interpreter loads at start-up (`re`) are dropped from sys.modules first,
so that an import of them by ocihook shows."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ocihook import hook
from tests.support import synthetic

REPO = Path(__file__).resolve().parent.parent
# Never on the hot path: each costs milliseconds at every container start.
FORBIDDEN = {"click", "yaml", "jsonschema", "re", "fnmatch", "glob", "subprocess", "logging"}
# What the no-request path may import beyond interpreter start-up (stdlib top-level names).
NO_REQUEST_BUDGET = {"__future__", "_collections_abc", "_json", "_stat", "errno", "genericpath"}
NO_REQUEST_BUDGET |= {"os", "posixpath", "stat", "zlib"}
# What importing the injection path (and running the precreate stage's config edit and
# output) may add on top of that: the syscalls' ctypes, nothing else (`resource` and
# `select` come only where they are used: a driver of more files than the fd limit allows,
# the sandboxed ldconfig).
INJECTION_BUDGET = {"_ctypes", "_struct", "ctypes", "struct"}

NO_REQUEST_STATE = {
    "ociVersion": "1.0.2",
    "id": "contract",
    "status": "creating",
    "pid": 1,
    "bundle": "/",
    "annotations": {"org.opencontainers.image.os": "linux"},
}

MEASURE = """
import json, sys
sys.path[:] = json.loads(sys.argv[1])
for name in json.loads(sys.argv[2]):  # loaded at start-up (re is): an import shows again
    sys.modules.pop(name, None)
start = set(sys.modules)
from ocihook import hook
status = hook.main(sys.argv[3:])
after_hook = set(sys.modules)
import ocihook.apply.inject
# The precreate stage's config edit and output (the work after its plan, as it runs them).
from ocihook.stages import precreate
from ocihook.plan.edits import runtime_edits
view = {"mounts": [{"target": "/usr/lib64/libx.so.1", "flags": ["ro", "nosuid"]}], "devices": []}
precreate.render(precreate.apply_edits({"root": {}}, runtime_edits(view, ["/x"])))
after_inject = set(sys.modules)
print(json.dumps([status, sorted(after_hook - start), sorted(after_inject - after_hook)]))
"""


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "config.yaml"
    (tmp_path / "driver").mkdir()
    path.write_text(json.dumps(synthetic.config(tmp_path / "driver", tmp_path)))
    os.utime(path, (time.time() - 10, time.time() - 10))  # older than the cache's racy window
    return path


def run_hook(config: Path, cache: Path, state: bytes) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-I", "-m", "ocihook.hook", "--config", str(config)]
        + ["--cache-dir", str(cache)],
        input=state,
        capture_output=True,
        cwd=REPO,
    )


def toplevel(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules if not m.startswith("ocihook")}


def measure(config: Path, cache: Path) -> tuple[int, set[str], set[str]]:
    path = json.dumps([str(REPO), *sys.path])
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", MEASURE, path, json.dumps(sorted(FORBIDDEN))]
        + ["--config", str(config)]
        + ["--cache-dir", str(cache)],
        input=json.dumps(NO_REQUEST_STATE).encode(),
        capture_output=True,
        check=True,
    )
    status, hook_modules, inject_modules = json.loads(result.stdout)
    return status, toplevel(hook_modules), toplevel(inject_modules)


def test_no_request_and_injection_import_budgets(config, tmp_path):
    cache = tmp_path / "cache"
    first_status, compiling, _ = measure(config, cache)
    assert first_status == 0
    assert "yaml" in compiling, "the first run compiles the config (the measure can see imports)"
    for _ in range(5):  # a compile may leave the cache unwritten (racy guard): run again
        status, hot, injection = measure(config, cache)
        if "yaml" not in hot:
            break
    assert status == 0
    assert not hot & FORBIDDEN, hot & FORBIDDEN
    assert hot <= NO_REQUEST_BUDGET, (
        f"new imports on the no-request path: {hot - NO_REQUEST_BUDGET}"
    )
    assert not injection & FORBIDDEN, injection & FORBIDDEN
    assert injection <= INJECTION_BUDGET, (
        f"new imports on the injection path: {injection - INJECTION_BUDGET}"
    )


def test_exit_0_no_request(config, tmp_path):
    result = run_hook(config, tmp_path / "cache", json.dumps(NO_REQUEST_STATE).encode())
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


@pytest.mark.parametrize(
    "state, words",
    [
        (b"{", "state on stdin"),
        (json.dumps({**NO_REQUEST_STATE, "status": "running"}).encode(), "status 'running'"),
    ],
)
def test_exit_1_one_line(config, tmp_path, state, words):
    result = run_hook(config, tmp_path / "cache", state)
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert lines[0].startswith("ocihook: ") and "internal error" not in lines[0]
    assert words in lines[0]


def test_exit_1_missing_config_says_does_not_exist(tmp_path):
    result = run_hook(
        tmp_path / "absent.yaml", tmp_path / "cache", json.dumps(NO_REQUEST_STATE).encode()
    )
    line = result.stderr.decode()
    assert result.returncode == 1 and line.count("\n") == 1, line
    assert "does not exist" in line and "No such file" not in line


@pytest.mark.parametrize(
    "bug", [ValueError("unexpected"), OSError(9, "Bad file descriptor"), KeyError("x")]
)
def test_exit_70_a_bug_is_one_line(config, tmp_path, monkeypatch, capsys, bug):
    """A bug (a stand-in: `run` raising) is status 70 (EX_SOFTWARE) and one "internal error"
    line."""

    def broken(*args):
        raise bug

    monkeypatch.setattr(hook.prestart, "run", broken)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"{}")))
    status = hook.main(["--config", str(config), "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert status == 70, err
    assert err.startswith("ocihook: internal error: ") and err.count("\n") == 1, err
