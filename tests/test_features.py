"""`ocihook features`: the Node Feature Discovery features.d file, read back with a parser
written from NFD's documented format (local feature source: `<ns>/<name>[=<value>]` lines,
`#` comments, `# +expiry-time=RFC3339` applying to the lines after it, dot files ignored,
Kubernetes label name/value rules)."""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from ocihook.cli.features import label_value

OCIHOOK = str(Path(sys.executable).with_name("ocihook"))
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][A-Za-z0-9_.-]*)?[A-Za-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")


def nfd_labels(directory: Path, now: datetime.datetime) -> dict[str, str]:
    """The labels NFD's local source makes of a features.d dir, per its documented rules;
    an invalid line fails the test (NFD would drop it)."""
    labels = {}
    for path in sorted(directory.iterdir()):
        if path.name.startswith("."):
            continue
        assert path.stat().st_size <= 64 * 1024
        expiry = None
        for line in path.read_text().splitlines():
            line = line.strip()
            if line.startswith("# +expiry-time="):
                expiry = datetime.datetime.strptime(
                    line.split("=", 1)[1], "%Y-%m-%dT%H:%M:%SZ"
                ).replace(tzinfo=datetime.timezone.utc)
                continue
            if not line or line.startswith("#"):
                continue
            if expiry is not None and expiry < now:
                continue
            key, _, value = line.partition("=")
            value = value if _ else "true"
            namespace, slash, name = key.rpartition("/")
            assert slash, f"label without a namespace: {line}"
            assert DNS_SUBDOMAIN.match(namespace) and len(namespace) <= 253, line
            assert LABEL_NAME.match(name) and len(name) <= 63, line
            assert LABEL_VALUE.match(value) and len(value) <= 63, line
            labels[key] = value
    return labels


def features(config: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [OCIHOOK, "features", "--config", str(config), "--output", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def test_labels_of_a_ready_node(hook_setup, tmp_path):
    out = tmp_path / "features.d" / "ocihook"
    result = features(hook_setup.config, out, "--hooks-dir", str(hook_setup.hooks_dir))
    assert result.returncode == 0, result.stderr
    assert nfd_labels(out.parent, now()) == {
        "ocihook.io/profile": "synthetic",
        "ocihook.io/devices": "3",
        "ocihook.io/driver-version": "1.2.3",
        "ocihook.io/selinux": "disabled",
        "ocihook.io/ready": "true",
    }
    assert os.listdir(out.parent) == ["ocihook"], "no temporary file left"
    assert out.stat().st_mode & 0o777 == 0o644
    later = now() + datetime.timedelta(hours=2)
    assert nfd_labels(out.parent, later) == {}, "labels expire when not refreshed (1 h)"


def test_not_ready_when_check_fails(hook_setup, tmp_path, synth_root):
    """No hooks.d file in the dir given: `ocihook check` fails, so does the label; the file is
    written all the same, and one line on stderr says why, with status 1."""
    out = tmp_path / "features.d" / "ocihook"
    empty = tmp_path / "empty"
    result = features(hook_setup.config, out, "--hooks-dir", str(empty))
    assert result.returncode == 1
    assert nfd_labels(out.parent, now())["ocihook.io/ready"] == "false"
    assert result.stderr == (
        f"ocihook: not ready: ocihook check: no hooks.d file for ocihook in {empty}\n"
    )
    config = yaml.safe_load(hook_setup.config.read_text())
    config["source_root"] = str(tmp_path / "missing")
    hook_setup.config.write_text(yaml.safe_dump(config))
    result = features(hook_setup.config, out, "--hooks-dir", str(hook_setup.hooks_dir))
    assert result.returncode == 1
    assert result.stderr == f"ocihook: not ready: source root {tmp_path}/missing: does not exist\n"
    labels = nfd_labels(out.parent, now())
    assert labels["ocihook.io/ready"] == "false"
    assert labels["ocihook.io/profile"] == "synthetic"
    assert "ocihook.io/devices" not in labels


def test_broken_config_or_unknown_profile_says_why(hook_setup, tmp_path):
    """A config that does not compile: ready=false in the file, and the config's own error in
    one line on stderr, status 1."""
    out = tmp_path / "features.d" / "ocihook"
    config = yaml.safe_load(hook_setup.config.read_text())
    hooks = ("--hooks-dir", str(hook_setup.hooks_dir))
    for change, expected in (
        ({"profile": "no-such-profile"}, "profile 'no-such-profile' not found"),
        ({"source_root": 7}, "source_root"),
    ):
        hook_setup.config.write_text(yaml.safe_dump({**config, **change}))
        result = features(hook_setup.config, out, *hooks)
        assert result.returncode == 1
        assert nfd_labels(out.parent, now()) == {
            "ocihook.io/selinux": "disabled",
            "ocihook.io/ready": "false",
        }
        line = result.stderr
        assert line.startswith("ocihook: not ready: ") and expected in line, line
        assert line.count("\n") == 1, line
        assert result.stdout == ""


def test_json_prints_the_labels_and_writes_no_file(hook_setup, tmp_path, monkeypatch):
    """--json: the labels (NFD's names) as one JSON document; the NFD file is never touched,
    and --output or --interval with it is a usage error."""
    hooks = ("--hooks-dir", str(hook_setup.hooks_dir))
    config = ("--config", str(hook_setup.config))
    result = subprocess.run(
        [OCIHOOK, "features", *config, *hooks, "--json"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    facts = document.pop("facts")  # the synthetic driver tells nothing more of its devices
    assert document == {
        "labels": {
            "ocihook.io/profile": "synthetic",
            "ocihook.io/devices": "3",
            "ocihook.io/driver-version": "1.2.3",
            "ocihook.io/selinux": "disabled",
            "ocihook.io/ready": "true",
        },
        "ready": True,
        "reason": None,
    }
    assert [d["index"] for d in facts["devices"]] == [0, 1, 2]
    assert {d["memory"] for d in facts["devices"]} == {None}
    empty = str(tmp_path / "empty")
    result = subprocess.run(
        [OCIHOOK, "features", *config, "--hooks-dir", empty, "--json"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    document = json.loads(result.stdout)
    assert document["ready"] is False and document["labels"]["ocihook.io/ready"] == "false"
    reason = f"ocihook check: no hooks.d file for ocihook in {empty}"
    assert document["reason"] == reason
    assert result.stderr == f"ocihook: not ready: {reason}\n"
    for extra in (("--output", str(tmp_path / "f")), ("--interval", "5")):
        result = subprocess.run(
            [OCIHOOK, "features", *config, "--json", *extra], capture_output=True, text=True
        )
        assert result.returncode == 2 and f"not with {extra[0]}" in result.stderr
        assert json.loads(result.stdout)["exit_code"] == 2
    assert not (tmp_path / "f").exists()


def test_selinux_mode_label(hook_setup, tmp_path):
    """A stand-in selinuxfs (a dir with `enforce`): this machine runs no SELinux LSM."""
    fs = tmp_path / "selinuxfs"
    fs.mkdir()
    out = tmp_path / "features.d" / "ocihook"
    for content, mode in (("1", "enforcing"), ("0", "permissive")):
        (fs / "enforce").write_text(content)
        hooks = ("--hooks-dir", str(hook_setup.hooks_dir))
        result = features(hook_setup.config, out, "--selinuxfs", str(fs), *hooks)
        assert result.returncode == 0, result.stderr
        assert nfd_labels(out.parent, now())["ocihook.io/selinux"] == mode


def test_label_values_are_made_valid():
    assert label_value("550.54.14") == "550.54.14"
    assert label_value("1.2+custom build") == "1.2_custom_build"
    assert label_value("-x-") == "x"
    assert label_value("a" * 80) == "a" * 63
    assert label_value("+++") == ""


def test_bad_prefix_is_one_line(hook_setup, tmp_path):
    line = "ocihook: --prefix 'Not_A_Domain': must be a DNS subdomain such as ocihook.io\n"
    result = features(hook_setup.config, tmp_path / "f", "--prefix", "Not_A_Domain")
    assert (result.returncode, result.stderr) == (1, line)
    assert not (tmp_path / "f").exists()
    result = subprocess.run(
        [OCIHOOK, "features", "--config", str(hook_setup.config), "--prefix", "Not_A_Domain",
         "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert (result.returncode, result.stderr) == (1, line)
    assert json.loads(result.stdout) == {"error": line[9:-1], "exit_code": 1}


def test_timer_rewrites_the_file_and_stops_on_sigterm(hook_setup, tmp_path):
    out = tmp_path / "features.d" / "ocihook"
    process = subprocess.Popen(
        [OCIHOOK, "features", "--config", str(hook_setup.config), "--output", str(out),
         "--hooks-dir", str(hook_setup.hooks_dir), "--interval", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert nfd_labels(out.parent, now())["ocihook.io/ready"] == "true"
        expiry = re.search(r"expiry-time=(\S+)", out.read_text()).group(1)
        (hook_setup.hooks_dir / "ocihook.json").unlink()
        while time.monotonic() < deadline:
            labels = nfd_labels(out.parent, now())
            if labels.get("ocihook.io/ready") == "false":
                break
            time.sleep(0.2)
        assert labels["ocihook.io/ready"] == "false"
        assert re.search(r"expiry-time=(\S+)", out.read_text()).group(1) >= expiry
        # 3 x the interval: NFD drops the labels soon after the DaemonSet is gone.
        assert nfd_labels(out.parent, now() + datetime.timedelta(seconds=10)) == {}
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert os.listdir(out.parent) == ["ocihook"]


def test_a_check_that_breaks_is_reported_as_check_would_exit(monkeypatch, tmp_path):
    """features runs check's checks in-process; one that raises (a stand-in bug: the checks
    replaced by one that raises) reads as `ocihook check` would have exited, one line."""
    from ocihook.check import installation
    from ocihook.cli.features import check_problem
    from ocihook.errors import OcihookError

    def broken(*args):
        raise KeyError("k")

    monkeypatch.setattr(installation, "run_checks", broken)
    config = str(tmp_path / "config.yaml")
    assert check_problem(config, ()) == "ocihook check exited 70: internal error: KeyError: 'k'"

    def refused(*args):
        raise OcihookError("no", status=3)

    monkeypatch.setattr(installation, "run_checks", refused)
    assert check_problem(config, ()) == "ocihook check exited 3: no"
