"""`ocihook check`: the whole installation in one report (the hooks.d rules themselves are
tests/test_hooksd.py's, the hooks directories tests/test_hooksdirs.py's)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from ocihook.check.installation import allocated_route, node_mode
from ocihook.config.compiled import compile_config
from tests.conftest import REPO, base_config
from tests.support import synthetic


def test_shipped_hooks_d_gates_by_annotation_with_explicit_env():
    document = json.loads((REPO / "hooks.d/ocihook.json").read_text())
    assert document["when"] == {"annotations": {r"^ocihook\.io/devices$": ".+"}}
    assert document["hook"]["env"] and all("=" in e for e in document["hook"]["env"])
    assert document["stages"] == ["createRuntime"]  # no poststop: records end by liveness
    env = json.loads((REPO / "hooks.d/ocihook-env.json").read_text())
    assert env["stages"] == ["createRuntime"]


def run_check(config: Path, hooks_dir: Path | None, env: dict | None = None):
    args = [sys.executable, "-m", "ocihook.cli.main", "check", "--config", str(config)]
    args += ["--hooks-dir", str(hooks_dir)] if hooks_dir else []
    return subprocess.run(
        args, capture_output=True, text=True, cwd=REPO, env={**os.environ, **(env or {})}
    )


def test_check_passes_on_a_good_installation(hook_setup):
    result = run_check(hook_setup.config, hook_setup.hooks_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok      config" in result.stdout
    assert "files," in result.stdout and "device nodes" in result.stdout
    assert f"ok      hooks.d file {hook_setup.hooks_dir}/ocihook.json" in result.stdout
    # the stage: this host's runc (Debian 12's 1.1.5) runs the createRuntime registration
    stage = f"ok      stage: hooks.d file {hook_setup.hooks_dir}/ocihook.json (read by "
    assert stage in result.stdout, result.stdout
    assert "registers ocihook at createRuntime, which runc " in result.stdout


def test_check_names_what_is_wrong(hook_setup, synth_root, tmp_path):
    hook_setup.write_config(**base_config(hook_setup.dir, synth_root, request={"env": "yes"}))
    empty = tmp_path / "empty-hooks.d"
    empty.mkdir()
    result = run_check(hook_setup.config, empty)
    assert result.returncode == 1
    assert "FAILED  config" in result.stdout and "request.env" in result.stdout
    assert f"FAILED  no hooks.d file for ocihook in {empty}" in result.stdout


def test_check_json_is_the_same_findings(hook_setup, synth_root, tmp_path):
    """--json: every finding as data, the number FAILED, and the same status (1)."""
    empty = tmp_path / "empty-hooks.d"
    empty.mkdir()
    text = run_check(hook_setup.config, empty)
    args = [sys.executable, "-m", "ocihook.cli.main", "check", "--json"]
    args += ["--config", str(hook_setup.config), "--hooks-dir", str(empty)]
    result = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    assert (result.returncode, text.returncode) == (1, 1)
    document = json.loads(result.stdout)
    assert document["exit_code"] == 1 and document["failed"] == text.stdout.count("FAILED  ")
    lines = [(f["status"], f["message"]) for f in document["findings"]]
    prefix = {"ok": "ok      ", "warning": "WARNING ", "failed": "FAILED  "}
    assert "".join(f"{prefix[s]}{m}\n" for s, m in lines) == text.stdout
    assert ("failed", f"no hooks.d file for ocihook in {empty}") in lines


def test_check_reports_a_missing_source_root(hook_setup, synth_root, tmp_path):
    driver = tmp_path / "moved"
    shutil.rmtree(driver, ignore_errors=True)
    hook_setup.write_config(**base_config(hook_setup.dir, synth_root, source_root=str(driver)))
    result = run_check(hook_setup.config, hook_setup.hooks_dir)
    assert result.returncode == 1
    assert f"FAILED  source root {driver}: does not exist" in result.stdout


def test_check_fails_on_a_pattern_go_rejects(hook_setup):
    """A lookahead compiles in Python's re; podman and CRI-O (Go's regexp) refuse the file."""
    path = hook_setup.hooks_dir / "ocihook.json"
    document = json.loads(path.read_text())
    document["when"] = {"annotations": {r"^ocihook\.io/devices$": "(?!none).+"}}
    path.write_text(json.dumps(document))
    result = run_check(hook_setup.config, hook_setup.hooks_dir)
    assert result.returncode == 1
    key, value = r"^ocihook\.io/devices$", "(?!none).+"
    assert (
        f"FAILED  hooks.d file {path}: when.annotations[{key!r}] {value!r}: not a Go regexp "
        "(invalid or unsupported Perl syntax: `(?!`)\n"
    ) in result.stdout, result.stdout
    assert f"FAILED  no hooks.d file for ocihook in {hook_setup.hooks_dir}\n" in result.stdout


def test_check_names_a_hooks_dir_no_runtime_reads(hook_setup, tmp_path):
    """--hooks-dir checks a directory as `podman --hooks-dir` reads it, and says that podman
    reads it only so (here CONTAINERS_CONF keeps this host's containers.conf out)."""
    conf = tmp_path / "containers.conf"
    conf.write_text("")
    result = run_check(hook_setup.config, hook_setup.hooks_dir, {"CONTAINERS_CONF": str(conf)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        "ok      hooks dirs: podman reads /usr/share/containers/oci/hooks.d (default)\n"
    ) in result.stdout
    assert (
        f"WARNING hooks dir {hook_setup.hooks_dir}: read only by a runtime started with "
        "--hooks-dir (podman reads /usr/share/containers/oci/hooks.d"
    ) in result.stdout


def test_check_renders_plain_records():
    """check's findings are records (status, topic, message, path) rendered at the end."""
    from ocihook.check.findings import Finding, render

    lines = [
        Finding("ok", "config", "config x is valid"),
        Finding("warning", "cache", "config cache dir y: mode 0777"),
        Finding("failed", "hooks.d", "no hooks.d file for ocihook in z"),
    ]
    assert render(lines) == (
        "ok      config x is valid\n"
        "WARNING config cache dir y: mode 0777\n"
        "FAILED  no hooks.d file for ocihook in z\n"
    )


def test_check_says_which_mode_the_node_is_in(tmp_path):
    direct = synthetic.config(tmp_path)
    path = tmp_path / "config.yaml"
    for settings, words in (
        (direct, "mode: direct: a container asks with the ocihook.io/devices annotation"),
        ({**direct, "kubernetes": {"device_plugin": True}}, "mode: Kubernetes"),
    ):
        path.write_text(yaml.safe_dump(settings))
        assert node_mode(compile_config(str(path))[0]).startswith(words)
    line = allocated_route("CRI-O")
    assert line.status == "ok"
    assert "Kubernetes mode: the device plugin's device specs" in line.message
