"""The `ocihook` command line. Subcommands live in their own modules and load on use."""

from __future__ import annotations

import importlib
import sys

import click

from ocihook import __version__
from ocihook.errors import exit_line

# name -> "module:attribute" of a click command; imported only when that command runs.
SUBCOMMANDS = {
    "prestart": "ocihook.commands:prestart",
    "poststop": "ocihook.commands:poststop",
    "plan": "ocihook.commands:plan",
    "check": "ocihook.commands:check",
    "selinux": "ocihook.selinux.cli:selinux",
    "audit": "ocihook.audit.cli:audit",
    "cdi": "ocihook.cdi.cli:cdi",
    "cdi-hook": "ocihook.cdi.cli:cdi_hook",
    "features": "ocihook.features:features",
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        return getattr(importlib.import_module(module_name), attribute)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ocihook")
def cli() -> None:
    """Inject accelerator drivers into OCI containers, with SELinux labels done right.

    The runtime runs `ocihook prestart` (through the hooks.d file) at container start;
    the other commands are for people: see what a container would get (plan), check
    the installation (check), label and inspect SELinux (selinux), explain AVC
    denials (audit).
    """


def main() -> None:
    """Every command: exit 1 and one line for an expected or environmental failure, exit 2
    and one line ("internal error") for a bug; never a traceback."""
    try:
        cli.main(prog_name="ocihook", standalone_mode=True)
    except Exception as error:  # one line and the contract's status (errors.exit_line)
        status, line = exit_line(error)
        print(line, file=sys.stderr)
        sys.exit(status)


if __name__ == "__main__":
    main()
