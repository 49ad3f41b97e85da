"""`ocihook cdi generate` and `ocihook cdi-hook ...` (the hooks a generated spec names)."""

from __future__ import annotations

import os
import shutil
import sys

import click

from ocihook.cli.commands import config_option
from ocihook.cli.output import json_option, mark_json, usage_error
from ocihook.errors import OcihookError

SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")


def _default_hook_path() -> str:
    """The ocihook executable running now (as invoked), else the one on PATH."""
    for candidate in (sys.argv[0], "ocihook"):
        found = shutil.which(candidate)
        if found and os.path.basename(found) == "ocihook":
            return os.path.abspath(found)
    return "/usr/bin/ocihook"


@click.group()
def cdi() -> None:
    """Container Device Interface (CDI) specs, for runtimes that read no hooks.d (containerd)
    or where declarative devices are wanted (podman --device VENDOR/CLASS=N)."""


@cdi.command()
@config_option
@click.option(
    "--output",
    "-o",
    default="-",
    show_default=True,
    help="Spec file to write atomically (e.g. /etc/cdi/ocihook.yaml or /var/run/cdi/...), "
    "or a directory (the file is then KIND with '/' as '_'); '-' prints it.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["yaml", "json"]),
    default=None,
    help="Output format (default: from the file's extension, else yaml).",
)
@json_option(help="The same as --format json (a different --format with it is a usage error).")
@click.option(
    "--kind",
    default=None,
    help="VENDOR/CLASS of the devices [the profile's devices.cdi_kind (nvidia: "
    "nvidia.com/gpu), else ocihook.io/<profile>].",
)
@click.option(
    "--lib-dir",
    default=None,
    help="Container library dir. A CDI spec is static, so the image layout cannot be "
    "detected: the config's container.lib_dir, or with 'auto' the dir the libraries "
    "have in the source root (the host's layout; the ld cache hook lists it).",
)
@click.option(
    "--hook-path",
    default=None,
    help="Absolute path of the ocihook executable the runtime runs for the createContainer "
    "hooks [the ocihook found on PATH].",
)
def generate(
    config_path: str,
    output: str,
    fmt: str | None,
    as_json: bool,
    kind: str | None,
    lib_dir: str | None,
    hook_path: str | None,
) -> None:
    """Write a CDI spec for the configured profile and source root.

    One device per index (VENDOR/CLASS=0, =1, ...), per GPU UUID (=GPU-...) and per MIG
    device (=0:1 and =MIG-...: NVML's names, as NVIDIA's generator writes them) and `all`
    (every index); shared edits for every
    device: the driver files as read-only bind mounts, the control device nodes, and
    createContainer hooks that run `ocihook cdi-hook` for the soname links and the ld
    cache. cdiVersion is the lowest version the features used need (0.5.0: device
    nodes with hostPath, names starting with a digit), which podman 4.3 accepts.
    The spec is validated against ocihook's CDI schema before it is written.
    """
    from ocihook.cdi import spec as cdispec
    from ocihook.config.compiled import compile_config
    from ocihook.pipeline import finalized_plan
    from ocihook.plan.decide import STATIC, Target, label_choice
    from ocihook.plan.model import executor_view
    from ocihook.request.parse import parse_request

    if as_json and fmt not in (None, "json"):
        raise usage_error(f"--json is --format json: not with --format {fmt}")
    fmt = "json" if as_json else fmt
    if fmt == "json":
        mark_json()
    config, _ = compile_config(config_path)
    hook_path = hook_path or _default_hook_path()
    if not os.path.isabs(hook_path):
        raise OcihookError(f"--hook-path {hook_path}: must be an absolute path")
    request = parse_request("all", "cdi generate")
    target = Target(STATIC, lib_dir=lib_dir)
    plan = finalized_plan(config, request, target, verify=True, describe="strict")
    profile = config["profile"]
    kind = kind or cdispec.default_kind(profile["name"], profile["devices"].get("cdi_kind"))
    label = cdispec.parse_label(label_choice(config["selinux"], target))  # as cdi-hook will read it
    spec = cdispec.build_spec(
        executor_view(plan), kind, hook_path, config["ldconfig"]["path"], label
    )
    cdispec.validate(spec)
    if output != "-" and os.path.isdir(output):
        output = os.path.join(output, kind.replace("/", "_") + "." + (fmt or "yaml"))
    if fmt is None:
        fmt = "json" if output.endswith(".json") else "yaml"
    text = cdispec.render(spec, fmt)
    if output == "-":
        click.echo(text, nl=False)
        return
    if not output.endswith((".yaml", ".json")):
        raise OcihookError(f"--output {output}: runtimes read only *.yaml and *.json spec files")
    from ocihook.linux.atomic import write_atomic

    write_atomic(output, text)
    names = ", ".join(f"{kind}={d['name']}" for d in spec["devices"])
    click.echo(f"wrote {output} (cdiVersion {spec['cdiVersion']}): {names}", err=True)


@click.group("cdi-hook")
def cdi_hook() -> None:
    """The createContainer hooks of a spec from `ocihook cdi generate` (the runtime runs
    them, OCI state JSON on stdin). Paths are resolved in the rootfs by fd, as the hook does;
    failures follow the hook's error contract (ocihook.cli.main.main: errors.exit_line)."""


@cdi_hook.command("create-symlinks")
@click.option(
    "--link",
    "links",
    multiple=True,
    required=True,
    help="TARGET::LINK: create the symlink LINK (absolute, in the container) pointing to TARGET.",
)
@click.option(
    "--selinux-label",
    "label",
    default=None,
    metavar="none|mount-label|LABEL",
    help="The label of the links, as the config that generated the spec decided: none, the "
    "container's mount label, or a fixed SELinux context [not given (a spec of an earlier "
    "release): the default config's, the mount label where SELinux is enabled].",
)
def create_symlinks(links: tuple[str, ...], label: str | None) -> None:
    """Create soname links in the container (an identical existing link is kept; an image
    file in the way fails the container)."""
    from ocihook.cdi import hooks
    from ocihook.cdi.spec import parse_label

    parsed = [hooks.parse_link(value) for value in links]
    choice = parse_label(label)
    kwargs = {} if choice is None else {"label": choice}
    hooks.create_symlinks(hooks.read_container(), parsed, **kwargs)


@cdi_hook.command("update-ldcache")
@click.option(
    "--folder",
    "folders",
    multiple=True,
    required=True,
    help="Library dir in the container to add to its ld cache (repeatable).",
)
@click.option(
    "--ldconfig",
    "ldconfig_path",
    default="/sbin/ldconfig",
    show_default=True,
    help="The host's static ldconfig, run sandboxed in the rootfs.",
)
@click.option(
    "--ld-writer",
    type=click.Choice(["ldconfig", "none"]),
    default=None,
    help="Whether the ld cache is written (by the sandboxed ldconfig), as the config that "
    "generated the spec decided [not given (a spec of an earlier release): the default "
    "config's, ldconfig].",
)
def update_ldcache(folders: tuple[str, ...], ldconfig_path: str, ld_writer: str | None) -> None:
    """Update the container's ld cache for FOLDERs (glibc images; others are left alone)."""
    from ocihook.cdi import hooks

    kwargs = {} if ld_writer is None else {"ld_writer": None if ld_writer == "none" else ld_writer}
    hooks.update_ldcache(hooks.read_container(), ldconfig_path, list(folders), **kwargs)
