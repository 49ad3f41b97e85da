"""Bad input: one clear line on stderr, a non-zero exit, and (through podman) a failed start."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import base_config


def run_hook(hook_setup, stdin: bytes, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(hook_setup.hook),
            "--config",
            str(hook_setup.config),
            "--cache-dir",
            str(hook_setup.cache_dir),
            *args,
        ],
        input=stdin,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin"},
    )


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        (b"", "ocihook: state on stdin: empty (the runtime passes the container state)"),
        (b"{not json", "ocihook: state on stdin: not valid JSON"),
        (b"[]", "ocihook: state on stdin: must be a JSON object"),
        (
            b'{"ociVersion": "1.0.2", "status": "creating", "bundle": "/x"}',
            "ocihook: state on stdin: missing field 'id'",
        ),
        (
            b'{"ociVersion": "1.0.2", "id": "a", "status": "creating", "bundle": "rel"}',
            "ocihook: state on stdin: field 'bundle' must be an absolute path",
        ),
        (
            b'{"ociVersion": "1.0.2", "id": "a", "status": "creating", "bundle": "/x", "pid": "1"}',
            "ocihook: state on stdin: field 'pid' must be an integer",
        ),
        (
            b'{"ociVersion": "1.0.2", "id": "../x", "status": "creating", "bundle": "/x"}',
            "ocihook: state on stdin: field 'id' is not a valid container id",
        ),
    ],
)
def test_malformed_state(hook_setup, stdin, message):
    result = run_hook(hook_setup, stdin)
    assert result.returncode == 1
    assert one_line(result).startswith(message)


def test_missing_bundle(hook_setup, tmp_path):
    state = {
        "ociVersion": "1.0.2",
        "id": "abc",
        "status": "creating",
        "pid": 1,
        "bundle": str(tmp_path / "no-such-bundle"),
    }
    result = run_hook(hook_setup, json.dumps(state).encode())
    assert result.returncode == 1
    assert one_line(result) == f"ocihook: bundle {tmp_path}/no-such-bundle: does not exist"


def test_unknown_argument(hook_setup):
    result = run_hook(hook_setup, b"{}", "--bogus")
    assert result.returncode == 1
    assert one_line(result).startswith("ocihook: unknown argument '--bogus'")


def _fails_with(hook_setup, image, devices, expected):
    result = hook_setup.run(image, ["/bin/true"], devices=devices)
    assert result.returncode != 0
    assert expected in result.stderr, result.stderr
    line = [x for x in result.stderr.splitlines() if "ocihook:" in x][0]
    assert line.count("ocihook:") == 1


def test_bad_config_key_fails_the_container(hook_setup, synth_root, image_busybox):
    hook_setup.write_config(**base_config(hook_setup.dir, synth_root, ldconfg={"enabled": True}))
    _fails_with(
        hook_setup,
        image_busybox,
        "all",
        f"ocihook: config {hook_setup.config}: (top level): unknown key ('ldconfg' was unexpected)",
    )


def test_bad_config_value_names_the_key(hook_setup, synth_root, image_busybox):
    hook_setup.write_config(**base_config(hook_setup.dir, synth_root, request={"env": "yes"}))
    _fails_with(
        hook_setup,
        image_busybox,
        "all",
        f"ocihook: config {hook_setup.config}: request.env: 'yes' is not of type 'boolean'",
    )


def test_missing_source_fails_the_container(hook_setup, synth_root, image_busybox, tmp_path):
    hook_setup.write_config(
        **base_config(hook_setup.dir, synth_root, source_root=str(tmp_path / "gone"))
    )
    _fails_with(
        hook_setup,
        image_busybox,
        "all",
        f"ocihook: source root {tmp_path}/gone: does not exist",
    )


def test_unknown_index_fails_the_container(hook_setup, image_busybox):
    _fails_with(
        hook_setup,
        image_busybox,
        "5",
        "ocihook: annotation ocihook.io/devices: device index 5 does not exist (available: 0,1,2)",
    )


def test_bad_request_fails_the_container(hook_setup, image_busybox):
    _fails_with(
        hook_setup,
        image_busybox,
        "gpu0",
        "ocihook: annotation ocihook.io/devices: invalid device request 'gpu0'",
    )


def test_none_request_runs_without_injection(hook_setup, image_busybox):
    result = hook_setup.run(image_busybox, ["/bin/sh", "-c", "ls /dev"], devices="none")
    assert result.returncode == 0, result.stderr
    assert "synth" not in result.stdout
    assert hook_setup.records() == []
