"""The `ocihook` command line. Subcommands live in their own modules and load on use."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Sequence

import click

from ocihook import __version__
from ocihook.cli import output

# name -> "module:attribute" of a click command; imported only when that command runs.
SUBCOMMANDS = {
    "prestart": "ocihook.cli.commands:prestart",
    "poststop": "ocihook.cli.commands:poststop",
    "plan": "ocihook.cli.commands:plan",
    "check": "ocihook.cli.commands:check",
    "selinux": "ocihook.cli.selinux:selinux",
    "audit": "ocihook.cli.audit:audit",
    "cdi": "ocihook.cli.cdi:cdi",
    "cdi-hook": "ocihook.cli.cdi:cdi_hook",
    "features": "ocihook.cli.features:features",
    "device-plugin": "ocihook.cli.deviceplugin:device_plugin",
    "exporter": "ocihook.cli.exporter:exporter",
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

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """click's main under the command line's convention (ocihook.cli.output.run) and exit
        with its status; standalone_mode=False is click's own (tests call it so)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        sys.exit(
            output.run(super().main, args, prog_name=prog_name, complete_var=complete_var, **extra)
        )


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
    """Every command: exit 1 and one line for an expected or environmental failure, 2 for a
    usage error, 70 and one line ("internal error") for a bug; never a traceback
    (ocihook.cli.output.run)."""
    cli.main(prog_name="ocihook")


if __name__ == "__main__":
    main()
