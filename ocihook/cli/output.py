"""The command line's one convention: `--json`, whole documents, one error line and its status.

Every command that prints a report takes `--json` (`json_option`) and prints the whole
document at once (`emit_json`). Any failure is one line on stderr, "ocihook: ...", with the
status of errors.exit_line (click's usage errors: 2), with or without --json; with --json,
stdout then holds exactly one JSON object, {"error": "<the line without 'ocihook: '>",
"exit_code": N}, and no report (`run`, which `ocihook.cli.main` runs every command under). A
report that is complete and says something failed (a failed check, listed denials, a node
that is not ready) is printed whole; `exit_after_report` then exits with its status.
"""

from __future__ import annotations

import errno
import json
import sys
from typing import Any, Callable, NoReturn, Sequence

import click

from ocihook.errors import EXIT_FAILURE, exit_line

PREFIX = "ocihook: "
_run = {"json": False}  # whether this run asked for JSON (reset by `run`)


def mark_json() -> None:
    """Note that this run prints JSON (an error then prints the error object)."""
    _run["json"] = True


def _json_callback(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        mark_json()
    return value


def json_option(help: str = "Print the report as one JSON document.") -> Callable:
    """The `--json` flag (parameter `as_json`) of every command that prints a report."""
    return click.option(
        "--json", "as_json", is_flag=True, is_eager=True, callback=_json_callback, help=help
    )


def emit_json(document: Any) -> None:
    """Print `document` as JSON, built whole before anything is written."""
    text = json.dumps(document, indent=2)
    click.echo(text)


def exit_after_report(status: int, message: str | None = None) -> NoReturn:
    """After a complete report: exit with `status`, with its one line on stderr if any."""
    if message:
        click.echo(PREFIX + message, err=True)
    sys.exit(status)


def usage_error(message: str) -> click.UsageError:
    """A usage error (status 2) of the command running now, for options it cannot combine."""
    return click.UsageError(message, ctx=click.get_current_context(silent=True))


def error_document(line: str, status: int) -> dict:
    """The JSON object stdout holds, with --json, for a failure reported as `line`."""
    message = line[len(PREFIX) :] if line.startswith(PREFIX) else line
    return {"error": message, "exit_code": status}


def _asked_in_args(error: click.ClickException, args: Sequence[str] | None) -> bool:
    """Whether the command that failed to parse its arguments was given --json (or cdi
    generate's --format json): its callbacks did not run."""
    ctx = getattr(error, "ctx", None)
    if ctx is None or not any(p.name == "as_json" for p in ctx.command.params):
        return False
    words = list(sys.argv[1:] if args is None else args)
    if "--" in words:
        words = words[: words.index("--")]
    pairs = zip(words, words[1:])
    return "--json" in words or "--format=json" in words or ("--format", "json") in pairs


def usage_line(error: click.ClickException) -> str:
    """A click error (usage: status 2) as the one line every failure is."""
    line = PREFIX + " ".join(error.format_message().split()).rstrip(".")
    ctx = getattr(error, "ctx", None)
    if isinstance(error, click.UsageError) and ctx is not None:
        line += f" (try '{ctx.command_path} -h')"
    return line


def run(main: Callable[..., Any], args: Sequence[str] | None, **kwargs: Any) -> int:
    """Run click's `main` (standalone_mode=False) under the convention; the exit status."""
    _run["json"] = False
    try:
        result = main(args=args, standalone_mode=False, **kwargs)
        return result if isinstance(result, int) and not isinstance(result, bool) else 0
    except click.exceptions.Exit as done:  # --help, --version: click 7 raises it here
        return done.exit_code
    except click.ClickException as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # click 8.2: `ocihook` alone
            error.show()
            return error.exit_code
        status, line = error.exit_code, usage_line(error)
        wanted = _run["json"] or _asked_in_args(error, args)
    except click.Abort:
        status, line, wanted = EXIT_FAILURE, PREFIX + "aborted", _run["json"]
    except OSError as error:
        if error.errno == errno.EPIPE:  # `ocihook plan | head`: as click's standalone mode
            from click.utils import PacifyFlushWrapper

            sys.stdout = PacifyFlushWrapper(sys.stdout)  # type: ignore[assignment]
            return EXIT_FAILURE
        status, line = exit_line(error)
        wanted = _run["json"]
    except Exception as error:  # one line and the contract's status (errors.exit_line)
        status, line = exit_line(error)
        wanted = _run["json"]
    click.echo(line, err=True)
    if wanted:
        emit_json(error_document(line, status))
    return status
