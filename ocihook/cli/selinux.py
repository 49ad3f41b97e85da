"""`ocihook selinux`: label driver trees and devices, show what SELinux state matters."""

from __future__ import annotations

import click

from ocihook.cli.output import emit_json, json_option
from ocihook.selinux.label import DEVICE_TYPE


@click.group()
def selinux() -> None:
    """Label driver trees and device nodes for containers; show SELinux status."""


@selinux.command()
@click.option("--dry-run", is_flag=True, help="List the changes (path, old, new); change nothing.")
@click.option(
    "--device-type",
    default=DEVICE_TYPE,
    show_default=True,
    help="SELinux type for character device nodes.",
)
@json_option(
    help='Print the changes as JSON: {"dry_run": BOOL, "changes": [{"path", "kind", "old", '
    '"new"}], "count": N}.'
)
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=False))
def relabel(dry_run: bool, device_type: str, as_json: bool, paths: tuple[str, ...]) -> None:
    """Label driver trees container_ro_file_t and device nodes DEVICE_TYPE.

    PATH is a driver source tree (a volume root, /usr/lib/ocihook/driver, ...) or a
    device node under /dev. Host system directories are refused; symlinks are labelled
    as links and never followed; the walk stays on each PATH's file system.
    """
    from ocihook.selinux.relabel import relabel as do_relabel

    changes = do_relabel(paths, dry_run=dry_run, device_type=device_type)
    if as_json:
        listed = [{"path": c.path, "kind": c.kind, "old": c.old, "new": c.new} for c in changes]
        emit_json({"dry_run": dry_run, "changes": listed, "count": len(changes)})
        return
    verb = "would relabel" if dry_run else "relabelled"
    total = "to relabel" if dry_run else "relabelled"
    for change in changes:
        click.echo(
            f"{verb} {change.path} ({change.kind}): {change.old or '(none)'} -> {change.new}"
        )
    click.echo(f"{len(changes)} file(s) {total}" if changes else "all labels already right")


@selinux.command()
@click.option(
    "--source",
    type=click.Path(exists=True),
    help="Driver source tree to check (read only).",
)
@click.option("--limit", default=20, show_default=True, help="Mislabelled files to list.")
@json_option()
def status(source: str | None, limit: int, as_json: bool) -> None:
    """SELinux mode, the ocihook module, booleans that matter, and labels of SOURCE and /dev."""
    from ocihook.selinux.status import collect, render

    result = collect(source=source, limit=limit)
    if as_json:
        emit_json(result.as_dict())
    else:
        click.echo(render(result))
