"""The hook and inspection commands: prestart, poststop, plan, check."""

from __future__ import annotations

import json
import os
import sys

import click

from ocihook import hooksd
from ocihook.config import DEFAULT_CACHE_DIR, DEFAULT_CONFIG, DEFAULTS, compile_config
from ocihook.errors import OcihookError

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
    help="The request to plan for: all, none, or indices such as 0,2.",
)
@click.option(
    "--lib-dir",
    default=None,
    help="Container library dir (default: the config's; 'auto' shows /usr/lib64).",
)
@click.option(
    "--rootfs",
    type=click.Path(file_okay=False, exists=True),
    default=None,
    help="Detect the library dir from this image root file system.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan as JSON.")
def plan(
    config_path: str, devices: str, lib_dir: str | None, rootfs: str | None, as_json: bool
) -> None:
    """Show what a container asking for DEVICES would get, without touching anything.

    Lists every bind mount (source, container path, flags), soname link, device node
    (type, major:minor, mode, cgroup access) and ld cache dir, resolved against the
    configured source root exactly as the hook resolves it.
    """
    from ocihook import apply, securepath
    from ocihook.discover import Roots
    from ocihook.inject import plan_for
    from ocihook.plan import format_plan
    from ocihook.request import parse_request

    config, _ = compile_config(config_path)
    request = parse_request(devices, "--devices")
    if rootfs:
        root_fd = securepath.open_dir(os.path.abspath(rootfs))
        try:
            lib_dir = apply.detect_lib_dir(root_fd)
        finally:
            os.close(root_fd)
    elif lib_dir is None and config["container"]["lib_dir"] != "auto":
        lib_dir = config["container"]["lib_dir"]
    with Roots(config["source_root"], config["device_root"]) as roots:
        result = plan_for(config, roots, request, lib_dir)
    if as_json:
        from ocihook.plan import cgroup_rules

        click.echo(json.dumps({**result.to_dict(), "cgroup_rules": cgroup_rules(result)}, indent=2))
    else:
        click.echo(format_plan(result))


@click.command()
@config_option
@click.option(
    "--hooks-dir",
    "hooks_dirs",
    multiple=True,
    help="hooks.d directory to check (repeatable; default: podman's and CRI-O's).",
)
@click.option(
    "--cache-dir",
    default=DEFAULT_CACHE_DIR,
    show_default=True,
    help="The hook's config cache dir (its trust is checked).",
)
def check(config_path: str, hooks_dirs: tuple[str, ...], cache_dir: str) -> None:
    """Check the installation as the hook will see it: the config (schema, request.allow
    regexes, trust of every file it reads), the profile against the source root (a partial
    driver fails: dangling soname links, a missing driver_version library that would drop
    the firmware), ldconfig, the config cache dir and every hooks.d file.

    Prints one line per check (ok, WARNING or FAILED) and exits 1 when anything FAILED.
    """
    problems: list[str] = []

    def ok(message: str) -> None:
        click.echo(f"ok      {message}")

    def bad(message: str) -> None:
        problems.append(message)
        click.echo(f"FAILED  {message}")

    def warn(message: str) -> None:
        click.echo(f"WARNING {message}")

    config = None
    if _is_empty(config_path):
        warn(
            f"config {config_path} is empty: every key takes its default (profile "
            f"{DEFAULTS['profile']}, source root {DEFAULTS['source_root']})"
        )
    try:
        config, files = compile_config(config_path)
        ok(f"config {config_path} is valid (profile {config['profile']['name']})")
    except OcihookError as error:
        bad(str(error))
    if config is not None:
        _check_driver(config, ok, bad)
    _check_cache_dir(cache_dir, warn)
    directories = hooks_dirs or hooksd.DEFAULT_DIRS
    found = hooksd.ocihook_files(directories)
    if not found:
        bad(f"no hooks.d file for ocihook in {', '.join(directories)}")
    for path in found:
        file_problems = hooksd.check_hook_file(path)
        for problem in file_problems:
            bad(problem)
        if not file_problems:
            ok(f"hooks.d file {path}")
    if problems:
        raise SystemExit(1)


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
    from ocihook import store

    try:
        st = os.lstat(cache_dir)
    except FileNotFoundError:
        return
    except OSError as error:
        warn(f"config cache dir {cache_dir}: {error.strerror}")
        return
    problem = store.dir_problem(st)
    if problem and problem.startswith("mode"):
        warn(f"config cache dir {cache_dir}: {problem}: the hook tightens and empties it")
    elif problem:
        warn(f"config cache dir {cache_dir}: {problem}: the hook does not use it (slower starts)")


def _check_driver(config: dict, ok, bad) -> None:
    from ocihook.discover import Roots
    from ocihook.inject import plan_for
    from ocihook.request import parse_request

    try:
        with Roots(config["source_root"], config["device_root"]) as roots:
            result = plan_for(config, roots, parse_request("all", "check"))
        ok(
            f"source root {config['source_root']}: {len(result.mounts)} files, "
            f"{len(result.links)} links, {len(result.devices)} device nodes"
        )
        _check_version(config["profile"], result.driver_version, bad)
    except OcihookError as error:
        bad(str(error))
    ldconfig = config["ldconfig"]
    if ldconfig["enabled"]:
        from ocihook.ldcache import open_ldconfig

        try:
            os.close(open_ldconfig(ldconfig["path"]))
            ok(f"ldconfig {ldconfig['path']}")
        except OcihookError as error:
            bad(str(error))


def _check_version(profile: dict, version: str | None, bad) -> None:
    """A profile whose firmware or files need {version} but whose version library is not
    there: the hook would silently inject the driver without them."""
    spec = profile.get("driver_version")
    needing = [
        entry if isinstance(entry, str) else entry["path"]
        for entry in [*profile["firmware"], *profile["files"]]
        if "{version}" in (entry if isinstance(entry, str) else entry["path"])
    ]
    if version is None and spec and needing:
        bad(
            f"profile {profile['name']}: driver_version library {spec['library']} not found "
            f"in {', '.join(profile['library_dirs'])}: {', '.join(needing)} would be skipped"
        )
