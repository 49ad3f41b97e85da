"""Run `ocihook` in-process through its real entry (ocihook.cli.main.cli, under the command line's
convention), with stdout and stderr kept apart under click 7 and 8 alike."""

from __future__ import annotations

from typing import Sequence

from click.testing import CliRunner


def runner() -> CliRunner:
    """A CliRunner whose result has .stdout and .stderr apart."""
    try:
        return CliRunner(mix_stderr=False)  # click 7.1 to 8.1
    except TypeError:
        return CliRunner()  # click 8.2 and later: apart by default


def invoke(args: Sequence[str], stdin: bytes | str | None = None) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `ocihook ARGS`."""
    from ocihook.cli.main import cli

    result = runner().invoke(cli, list(args), input=stdin, prog_name="ocihook")
    return result.exit_code, result.stdout, result.stderr
