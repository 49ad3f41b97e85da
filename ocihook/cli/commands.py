"""The hook and inspection commands: prestart, poststop, plan, check."""

from __future__ import annotations

import sys

import click

from ocihook.cli.output import emit_json, exit_after_report, json_option
from ocihook.config.compiled import DEFAULT_CACHE_DIR, DEFAULT_CONFIG, compile_config
from ocihook.errors import EXIT_FAILURE

config_option = click.option(
    "--config",
    "config_path",
    default=DEFAULT_CONFIG,
    show_default=True,
    type=click.Path(dir_okay=False),
    help="The ocihook configuration file.",
)


@click.command()
@config_option
@click.option(
    "--cache-dir",
    default=DEFAULT_CACHE_DIR,
    show_default=True,
    help="Where the compiled config is cached.",
)
def prestart(config_path: str, cache_dir: str) -> None:
    """Run the hook: read the OCI state JSON on stdin and inject the driver.

    This is what the runtime runs (through the lean `ocihook-hook` executable that
    hooks.d points at); a container that asks for no devices costs nothing.
    """
    from ocihook.hook import main

    sys.exit(main(["--config", config_path, "--cache-dir", cache_dir]))


@click.command()
@config_option
@click.option("--cache-dir", default=DEFAULT_CACHE_DIR, show_default=True)
def poststop(config_path: str, cache_dir: str) -> None:
    """Mark the container's record exited (state JSON on stdin, status "stopped").

    The record stays for `ocihook audit`; old records are pruned at prestart."""
    from ocihook.hook import main

    sys.exit(main(["--config", config_path, "--cache-dir", cache_dir]))


@click.command()
@config_option
@click.option(
    "--devices",
    default="all",
    show_default=True,
    help="The request to plan for: all, none, or a list of indices (0,2 or 0-3), PCI "
    "addresses (0000:c1:00.0), node names (renderD129) and, for NVIDIA, GPU UUIDs "
    "(GPU-...) and MIG devices (MIG-... or 0:1).",
)
@click.option(
    "--capabilities",
    default=None,
    help="Driver capabilities to plan for: compute,utility,... or all "
    "(default: the profile's default_capabilities; GPUDirect's gdrcopy, gds and rdma only "
    "by name).",
)
@click.option(
    "--imex-channels",
    default=None,
    help="NVIDIA IMEX channels to plan for: all or a list (0,2 or 0-3), as the "
    "ocihook.io/imex-channels annotation or NVIDIA_IMEX_CHANNELS asks.",
)
@click.option(
    "--lib-dir",
    default=None,
    help="Container library dir (default: the config's; 'auto': the image's with --rootfs, "
    "else the placeholder /usr/lib64, marked as such).",
)
@click.option(
    "--rootfs",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Probe this image root file system as the hook probes a container's: its library "
    "dir (when the library dir is 'auto') and its glibc loader (no ld cache without one).",
)
@click.option(
    "--userns",
    is_flag=True,
    help="Plan for a container with a user namespace: device nodes are bind-mounted from the "
    "host instead of created with mknod.",
)
@json_option(
    help="Print exactly what the hook's executor consumes, as JSON: each mount's source, "
    "target, kind and flags, each device node's strategy and mode, the typed cgroup rules, "
    "the library dirs, links and ld cache dirs."
)
def plan(
    config_path: str,
    devices: str,
    capabilities: str | None,
    imex_channels: str | None,
    lib_dir: str | None,
    rootfs: str | None,
    userns: bool,
    as_json: bool,
) -> None:
    """Show what a container asking for DEVICES would get, without touching anything.

    Lists the driver version and where it came from (the loaded kernel module, or the
    libraries), every bind mount grouped by directory (container dir <- dir inside the
    source root), soname link, device index (PCI address, kernel driver, nodes), device node
    (type, major:minor, mode, cgroup rule), the ld cache dirs, and the profile entries that
    matched nothing, resolved against the configured source and device roots exactly as the
    hook resolves them.
    """
    from ocihook.pipeline import finalized_plan
    from ocihook.plan.decide import Target
    from ocihook.plan.model import executor_view
    from ocihook.plan.text import format_plan
    from ocihook.request.parse import parse_capabilities, parse_request

    config, _ = compile_config(config_path)
    request = parse_request(devices, "--devices")
    available = list(config["profile"]["capabilities"])
    if capabilities is not None:
        by_name = [n for n, c in config["profile"]["capabilities"].items() if c.get("by_name")]
        request.capabilities = parse_capabilities(
            capabilities, "--capabilities", available, by_name
        )
    if imex_channels is not None:
        from ocihook.request.imex import parse_channels

        request.imex = parse_channels(imex_channels, "--imex-channels")
        request.imex_origin = "--imex-channels"
    target = Target.command_line(userns, lib_dir, image=bool(rootfs))
    result = finalized_plan(config, request, target, rootfs=rootfs, verify=True, describe="plan")
    if as_json:
        emit_json(executor_view(result))
    else:
        click.echo(format_plan(result, available))


@click.command()
@config_option
@click.option(
    "--hooks-dir",
    "hooks_dirs",
    multiple=True,
    help="hooks.d directory to check, as `podman --hooks-dir` reads it (repeatable; default: "
    "the directories podman and CRI-O read by their configuration).",
)
@click.option(
    "--cache-dir",
    default=DEFAULT_CACHE_DIR,
    show_default=True,
    help="The hook's config cache dir (its trust is checked).",
)
@json_option(
    help='Print the findings as JSON: {"findings": [{"status", "topic", "message", "path"}], '
    '"failed": N, "exit_code": 0 or 1}.'
)
def check(config_path: str, hooks_dirs: tuple[str, ...], cache_dir: str, as_json: bool) -> None:
    """Check the installation as the hook and the runtimes will see it: the config (schema,
    request.allow regexes, trust of every file it reads), the profile against the source root
    (a partial driver fails: dangling soname links, a library whose DT_SONAME its soname link
    does not name, one that is not ELF, a missing driver_version library that would drop the
    firmware; soname links the container gets that the host lacks are warnings), ldconfig,
    the config cache dir, the hooks.d directories podman (rootless podman, for a user) and
    CRI-O read by their configuration files, every hooks.d file there as they parse it (Go's
    JSON, Go's regexp), where ocihook is registered, and for each runtime the route the hook
    takes (precreate, or prestart with the cgroup manager it uses) and whether the devices it
    grants survive systemctl daemon-reload and a runtime update.

    Prints one line per check (ok, WARNING or FAILED) and exits 1 when anything FAILED.
    """
    from ocihook.check.findings import FAILED, as_data, failed, render
    from ocihook.check.installation import run_checks

    findings = run_checks(config_path, list(hooks_dirs), cache_dir)
    status = EXIT_FAILURE if failed(findings) else 0
    if as_json:
        emit_json(
            {
                "findings": as_data(findings),
                "failed": sum(1 for f in findings if f.status == FAILED),
                "exit_code": status,
            }
        )
    else:
        click.echo(render(findings), nl=False)
    if status:
        exit_after_report(status)
