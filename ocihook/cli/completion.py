"""Shell completion scripts for `ocihook`, asked of the click that is installed.

click 8 (`_OCIHOOK_COMPLETE=bash_source|zsh_source`) and click 7.1 (RHEL 9's python3-click:
`source_bash|source_zsh`) write different scripts that speak different protocols back to
the program, so a script must come from the click the installed command runs with: `make
install` and the RPM's %install run this module with that interpreter.

    python3 -m ocihook.cli.completion bash|zsh     the script on stdout
"""

from __future__ import annotations

import sys

PROG = "ocihook"
COMPLETE_VAR = "_OCIHOOK_COMPLETE"
SHELLS = ("bash", "zsh")
USAGE = f"usage: python3 -m ocihook.cli.completion {'|'.join(SHELLS)}"


def script(shell: str) -> str:
    """The completion script for `shell` from the installed click, ending in a newline."""
    if shell not in SHELLS:
        raise ValueError(f"no completion for {shell!r}: {', '.join(SHELLS)}")
    from ocihook.cli.main import cli

    try:
        from click.shell_completion import get_completion_class  # click 8
    except ImportError:  # click 7
        from click._bashcomplete import get_completion_script

        text = get_completion_script(PROG, COMPLETE_VAR, shell)
    else:
        completion = get_completion_class(shell)
        text = completion(cli, {}, PROG, COMPLETE_VAR).source()  # type: ignore[misc]
    return text.rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Print the script for the one shell named; 2 and the usage otherwise."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in SHELLS:
        print(USAGE, file=sys.stderr)
        return 2
    sys.stdout.write(script(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
