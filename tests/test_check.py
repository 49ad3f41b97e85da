"""`ocihook check` and the hooks.d files: what podman and CRI-O accept, checked before they run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ocihook import hooksd
from tests.conftest import REPO, base_config


def shipped(name: str, tmp_path: Path, hook: Path) -> Path:
    """A shipped hooks.d file with its hook path pointed at this checkout's executable."""
    document = json.loads((REPO / "hooks.d" / name).read_text())
    document["hook"]["path"] = str(hook)
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


@pytest.mark.parametrize("name", ["ocihook.json", "ocihook-env.json"])
def test_shipped_hooks_d_files_are_valid(name, tmp_path, hook_exe):
    assert hooksd.check_hook_file(str(shipped(name, tmp_path, hook_exe))) == []


def test_shipped_hooks_d_gates_by_annotation_with_explicit_env():
    document = json.loads((REPO / "hooks.d/ocihook.json").read_text())
    assert document["when"] == {"annotations": {r"^ocihook\.io/devices$": ".+"}}
    assert document["hook"]["env"] and all("=" in e for e in document["hook"]["env"])
    assert document["stages"] == ["prestart", "poststop"]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d.update(version="1.0"), 'version must be "1.0.0"'),
        (lambda d: d.update(when={}), "when: no conditions"),
        (lambda d: d["when"].update(annotations={"(": ".+"}), "invalid regular expression"),
        (lambda d: d.update(stages=["prestart", "bogus"]), "unknown stage 'bogus'"),
        (lambda d: d["hook"].pop("env"), "hook.env: missing"),
        (lambda d: d["hook"].update(path="/nonexistent/hook"), "is not an executable file"),
        (lambda d: d["hook"].update(timeout=0), "hook.timeout: must be a positive integer"),
    ],
)
def test_invalid_hooks_d_files_are_reported(change, problem, tmp_path, hook_exe):
    path = shipped("ocihook.json", tmp_path, hook_exe)
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))
    problems = hooksd.check_hook_file(str(path))
    assert any(problem in p for p in problems), problems


def run_check(config: Path, hooks_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ocihook.cli",
            "check",
            "--config",
            str(config),
            "--hooks-dir",
            str(hooks_dir),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )


def test_check_passes_on_a_good_installation(hook_setup):
    result = run_check(hook_setup.config, hook_setup.hooks_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok      config" in result.stdout
    assert "files," in result.stdout and "device nodes" in result.stdout
    assert f"ok      hooks.d file {hook_setup.hooks_dir}/ocihook.json" in result.stdout


def test_check_names_what_is_wrong(hook_setup, synth_root, tmp_path):
    hook_setup.write_config(**base_config(hook_setup.dir, synth_root, request={"env": "yes"}))
    empty = tmp_path / "empty-hooks.d"
    empty.mkdir()
    result = run_check(hook_setup.config, empty)
    assert result.returncode == 1
    assert "FAILED  config" in result.stdout and "request.env" in result.stdout
    assert f"FAILED  no hooks.d file for ocihook in {empty}" in result.stdout


def test_check_reports_a_missing_source_root(hook_setup, synth_root, tmp_path):
    driver = tmp_path / "moved"
    shutil.rmtree(driver, ignore_errors=True)
    hook_setup.write_config(**base_config(hook_setup.dir, synth_root, source_root=str(driver)))
    result = run_check(hook_setup.config, hook_setup.hooks_dir)
    assert result.returncode == 1
    assert f"FAILED  source root {driver}: does not exist" in result.stdout
