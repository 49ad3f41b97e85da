"""The hook and inspection commands: prestart, poststop, plan, check."""

from __future__ import annotations

import os
import sys

import click

from ocihook.cli.output import emit_json, exit_after_report, json_option
from ocihook.config.compiled import DEFAULT_CACHE_DIR, DEFAULT_CONFIG, DEFAULTS, compile_config
from ocihook.errors import EXIT_FAILURE, OcihookError

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
    from ocihook.check import hooksdirs, registration, routes
    from ocihook.check.findings import FAILED, OK, WARNING, Finding, as_data, failed, render

    findings: list[Finding] = []

    def record(status: str, topic: str):
        return lambda message: findings.append(Finding(status, topic, message))

    config = None
    if _is_empty(config_path):
        findings.append(
            Finding(
                WARNING,
                "config",
                f"config {config_path} is empty: every key takes its default (profile "
                f"{DEFAULTS['profile']}, source root {DEFAULTS['source_root']})",
            )
        )
    try:
        config, files = compile_config(config_path)
        message = f"config {config_path} is valid (profile {config['profile']['name']})"
        findings.append(Finding(OK, "config", message))
    except OcihookError as error:
        findings.append(Finding(FAILED, "config", str(error)))
    if config is not None:
        findings.append(Finding(OK, "mode", _mode(config)))
        _check_driver(
            config, record(OK, "driver"), record(FAILED, "driver"), record(WARNING, "driver")
        )
    _check_cache_dir(cache_dir, record(WARNING, "cache"))
    readers = hooksdirs.readers()
    findings += registration.runtime_findings(readers)
    findings += registration.registration_findings(readers, list(hooks_dirs))
    from ocihook.check import stages

    findings += registration.stage_findings(
        readers, list(hooks_dirs), stages.installed_runtimes(os.environ)
    )
    findings += routes.route_findings(readers, list(hooks_dirs))
    if config is not None and config["kubernetes"]["device_plugin"]:
        findings += [_allocated_route(r.runtime) for r in readers if r.runtime == "CRI-O"]
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


def _mode(config: dict) -> str:
    """Which channel gives a container devices on this node."""
    annotation = config["request"]["annotation"]
    if config["kubernetes"]["device_plugin"]:
        from ocihook.deviceplugin.inventory import resource_name

        return (
            f"mode: Kubernetes (kubernetes.device_plugin: true): a container gets exactly what "
            f"ocihook device-plugin allocated to it ({resource_name(config)}), read from CRI-O's "
            f"record of the container's own annotations; a pod's own {annotation} annotation "
            "or env gets nothing"
        )
    env = " or the image's env (request.env)" if config["request"]["env"] else ""
    return (
        f"mode: direct: a container asks with the {annotation} annotation{env}; on Kubernetes "
        "nothing counts devices (Kubernetes mode with ocihook device-plugin: "
        "kubernetes.device_plugin: true, docs/kubernetes.md)"
    )


def _allocated_route(runtime: str):
    """Kubernetes mode: the runtime holds the allocated devices itself."""
    from ocihook.check.findings import OK, Finding

    return Finding(
        OK,
        "route",
        f"route: {runtime}: Kubernetes mode: the device plugin's device specs put the allocated "
        "devices in the container's config, so the runtime creates and allows them itself, "
        "whatever the hook's own cgroup edits do",
    )


def _check_devices(config: dict, device_list: list, ok, bad) -> None:
    """One line per device the profile finds (index, address, driver, nodes); none is wrong."""
    from ocihook.plan.model import MigDevice

    spec = config["profile"]["devices"]
    patterns = ([spec["node"]] if spec["node"] else []) + spec["nodes"]
    if not patterns:
        return  # a profile without per-device nodes
    if not device_list:
        sysfs = spec["sysfs"]
        if sysfs:
            where = f"sysfs classes {', '.join(sysfs['classes'])}"
            if sysfs.get("drivers"):
                where += f", drivers {', '.join(sysfs['drivers'])}"
        else:
            where = f"nodes {', '.join(patterns)}"
        name = config["profile"]["name"]
        bad(f"device root {config['device_root']}: no device of profile {name} ({where})")
    for d in device_list:
        if isinstance(d, MigDevice):
            ok(f"MIG device {d.name}: {d.uuid or '-'} GI {d.gi} CI {d.ci} {' '.join(d.nodes)}")
        else:
            uuid = f" {d.uuid}" if d.uuid else ""
            where = f"{d.address or '-'} {d.driver or '-'}{uuid}"
            ok(f"device {d.index}: {where} {' '.join(d.nodes)}")


def _is_empty(config_path: str) -> bool:
    """Whether the config file holds no settings at all (empty, or comments only)."""
    import yaml

    try:
        with open(config_path, "rb") as file:
            return yaml.safe_load(file.read(1 << 20)) is None
    except (OSError, yaml.YAMLError):
        return False  # the compile reports it


def _check_cache_dir(cache_dir: str, warn) -> None:
    """The hook ignores a cache dir that is not root's (every start then compiles the YAML)."""
    from ocihook.linux import trusted

    try:
        st = os.lstat(cache_dir)
    except FileNotFoundError:
        return
    except OSError as error:
        warn(f"config cache dir {cache_dir}: {error.strerror}")
        return
    problem = trusted.dir_problem(st)
    if problem and problem.startswith("mode"):
        warn(f"config cache dir {cache_dir}: {problem}: the hook tightens and empties it")
    elif problem:
        warn(f"config cache dir {cache_dir}: {problem}: the hook does not use it (slower starts)")


def _check_driver(config: dict, ok, bad, warn) -> None:
    from ocihook.pipeline import open_roots, plan_container
    from ocihook.plan.decide import Target
    from ocihook.request.parse import parse_request

    try:
        with open_roots(config) as roots:
            request = parse_request("all", "check")
            planned = plan_container(
                config, roots, request, Target.command_line(), verify=True, describe="plan"
            )
        result = planned.plan
        version = (
            f"driver {result.driver_version} (from {result.version_source})"
            if result.driver_version
            else "driver version unknown"
        )
        ok(
            f"source root {config['source_root']}: {len(result.mounts)} files, "
            f"{len(result.links)} links, {len(result.devices)} device nodes "
            f"(capabilities {', '.join(result.capabilities) or 'none'}); {version}"
        )
        for warning in result.warnings:
            warn(warning)
        _check_devices(config, result.device_list + result.mig_devices, ok, bad)
        _check_version(config["profile"], result.driver_version, bad)
    except OcihookError as error:
        bad(str(error))
    ldconfig = config["ldconfig"]
    if ldconfig["enabled"]:
        from ocihook.ld.elf import open_static_executable

        try:
            os.close(open_static_executable(ldconfig["path"], "ldconfig"))
            ok(f"ldconfig {ldconfig['path']}")
        except OcihookError as error:
            bad(str(error))


def _check_version(profile: dict, version: str | None, bad) -> None:
    """A profile whose firmware or files need {version} when no version was found (no kernel
    module version file, no version library): the hook would silently inject the driver
    without them."""
    from ocihook.discover.build import select_parts

    spec = profile.get("driver_version")
    parts = select_parts(profile, profile["default_capabilities"])
    needing = []
    for entry in parts["firmware"] + parts["files"]:
        path = entry if isinstance(entry, str) else entry["path"]
        if "{version}" in path and path not in needing:
            needing.append(path)
    if version is None and spec and needing:
        sources = [*(spec.get("kernel") or ()), *([spec["library"]] if spec.get("library") else [])]
        bad(
            f"profile {profile['name']}: driver version unknown ({', '.join(sources)} not "
            f"found): {', '.join(needing)} would be skipped"
        )
