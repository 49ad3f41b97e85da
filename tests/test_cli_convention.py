"""The command line's one convention (ocihook/cli/output.py): every command that prints a report
takes --json; a failure is one line on stderr, "ocihook: ...", and the same status with or
without --json; with --json stdout then holds exactly one JSON object, {"error", "exit_code"};
usage errors are status 2, bugs 70 (errors.EXIT_SOFTWARE)."""

from __future__ import annotations

import json

import pytest

from ocihook.cli import commands
from ocihook.cli.main import SUBCOMMANDS, cli
from tests.support.cli import invoke

REPORTS = [
    ("plan",),
    ("check",),
    ("features",),
    ("audit",),
    ("selinux", "relabel"),
    ("selinux", "status"),
    ("cdi", "generate"),
    ("device-plugin",),  # its --list
]


def command(path: tuple[str, ...]):
    import click

    found = cli
    ctx = click.Context(cli)
    for name in path:
        found = found.get_command(ctx, name)
    return found


@pytest.mark.parametrize("path", REPORTS, ids=" ".join)
def test_every_report_command_takes_json(path):
    options = [opt for param in command(path).params for opt in param.opts]
    assert "--json" in options


def test_the_reports_listed_are_all_there_are():
    """A new command that prints a report belongs in REPORTS (and gets --json)."""
    hooks = {"prestart", "poststop", "cdi-hook"}  # the runtime's, they print no report
    daemons = {"exporter"}  # serves its metrics over HTTP until stopped: no report
    assert set(SUBCOMMANDS) - hooks - daemons == {p[0] for p in REPORTS}


def failures(tmp_path):
    missing = str(tmp_path / "missing")
    return [
        (["plan", "--config", missing], 1, f"ocihook: config {missing}: does not exist"),
        (["cdi", "generate", "--config", missing], 1, f"ocihook: config {missing}: does not exist"),
        (["device-plugin", "--config", missing], 1, f"ocihook: config {missing}: does not exist"),
        (
            ["device-plugin", "--list", "--config", missing],
            1,
            f"ocihook: config {missing}: does not exist",
        ),
        (
            ["audit", "--state-dir", str(tmp_path), missing],
            3,
            f"ocihook: {missing}: does not exist",
        ),
        (["plan", "--bogus"], 2, None),
        (["selinux", "status", "--source", missing], 2, None),
        (["selinux", "relabel", "--dry-run", "/usr"], 1, None),
    ]


def test_a_failure_is_one_line_and_one_status_with_or_without_json(tmp_path):
    for args, status, line in failures(tmp_path):
        code, out, err = invoke(args)
        assert code == status, (args, err)
        assert out == "", (args, out)
        assert err.startswith("ocihook: ") and err.count("\n") == 1, (args, err)
        assert line is None or err == line + "\n", (args, err)
        assert "No such file or directory" not in err
        code_json, out_json, err_json = invoke([*args, "--json"])
        assert (code_json, err_json) == (code, err), args
        assert json.loads(out_json) == {"error": err[len("ocihook: ") : -1], "exit_code": code}


def test_the_exporter_fails_in_one_line(tmp_path):
    """A daemon (no --json): a config that does not load is its one line and status 1."""
    missing = str(tmp_path / "missing")
    code, out, err = invoke(["exporter", "--config", missing])
    assert (code, out, err) == (1, "", f"ocihook: config {missing}: does not exist\n")


def test_cdi_generate_json_is_format_json(tmp_path):
    """--json with another --format is refused; with --format json it fails as --json does."""
    missing = str(tmp_path / "missing")
    code, out, err = invoke(["cdi", "generate", "--json", "--format", "yaml"])
    assert code == 2 and "--json" in err and err.count("\n") == 1
    assert json.loads(out)["exit_code"] == 2
    code, out, err = invoke(["cdi", "generate", "--config", missing, "--format", "json"])
    assert code == 1 and json.loads(out) == {"error": err[9:-1], "exit_code": 1}


def test_usage_error_is_one_line_status_2_and_names_the_help():
    code, out, err = invoke(["plan", "--bogus"])
    assert code == 2 and out == ""
    assert err.startswith("ocihook: ") and "--bogus" in err and err.count("\n") == 1
    assert err.rstrip().endswith("(try 'ocihook plan -h')")
    code, out, err = invoke(["nosuch"])
    assert code == 2 and err.startswith("ocihook: ") and "nosuch" in err
    code, out, err = invoke(["--json"])  # the group has no --json: no JSON object
    assert code == 2 and out == ""


def test_a_bug_is_status_70_and_one_line(monkeypatch, tmp_path):
    def broken(*args, **kwargs):
        raise KeyError("k")

    monkeypatch.setattr(commands, "compile_config", broken)
    code, out, err = invoke(["plan", "--config", str(tmp_path / "c")])
    assert (code, out, err) == (70, "", "ocihook: internal error: KeyError: 'k'\n")
    code, out, err = invoke(["plan", "--json", "--config", str(tmp_path / "c")])
    assert code == 70 and err == "ocihook: internal error: KeyError: 'k'\n"
    assert json.loads(out) == {"error": "internal error: KeyError: 'k'", "exit_code": 70}


def test_help_and_version_still_exit_0():
    code, out, _ = invoke(["--version"])
    assert code == 0 and out.startswith("ocihook, version ")
    code, out, _ = invoke(["plan", "-h"])
    assert code == 0 and "--json" in out
