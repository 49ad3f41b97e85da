"""`ocihook check`'s whole report: every check of the installation, as the hook and the
runtimes see it, in the order its lines are printed (`run_checks`). The command prints the
findings; `ocihook features` runs the same checks for its ready label."""

from __future__ import annotations

import os

from ocihook.check import hooksdirs, registration, routes, stages
from ocihook.check.driver import driver_findings
from ocihook.check.findings import FAILED, OK, WARNING, Finding
from ocihook.config.compiled import DEFAULTS, compile_config
from ocihook.errors import OcihookError


def run_checks(config_path: str, hooks_dirs: list[str], cache_dir: str) -> list[Finding]:
    """The config (schema, request.allow, trust of its files) and the mode it sets, the
    driver (check.driver), the config cache dir, the runtimes, where ocihook is registered in
    `hooks_dirs` (none: the dirs the runtimes read) and at which stage, and each runtime's
    route. A config that does not compile is a finding; the checks that need it are left
    out."""
    findings: list[Finding] = []
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
        config, _files = compile_config(config_path)
        message = f"config {config_path} is valid (profile {config['profile']['name']})"
        findings.append(Finding(OK, "config", message))
    except OcihookError as error:
        findings.append(Finding(FAILED, "config", str(error)))
    if config is not None:
        findings.append(Finding(OK, "mode", node_mode(config)))
        findings += driver_findings(config)
    findings += _cache_dir_findings(cache_dir)
    readers = hooksdirs.readers()
    findings += registration.runtime_findings(readers)
    findings += registration.registration_findings(readers, hooks_dirs)
    findings += registration.stage_findings(
        readers, hooks_dirs, stages.installed_runtimes(os.environ)
    )
    findings += routes.route_findings(readers, hooks_dirs)
    if config is not None and config["kubernetes"]["device_plugin"]:
        findings += [allocated_route(r.runtime) for r in readers if r.runtime == "CRI-O"]
    return findings


def node_mode(config: dict) -> str:
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


def allocated_route(runtime: str) -> Finding:
    """Kubernetes mode: the runtime holds the allocated devices itself."""
    return Finding(
        OK,
        "route",
        f"route: {runtime}: Kubernetes mode: the device plugin's device specs put the allocated "
        "devices in the container's config, so the runtime creates and allows them itself, "
        "whatever the hook's own cgroup edits do",
    )


def _is_empty(config_path: str) -> bool:
    """Whether the config file holds no settings at all (empty, or comments only)."""
    import yaml

    try:
        with open(config_path, "rb") as file:
            return yaml.safe_load(file.read(1 << 20)) is None
    except (OSError, yaml.YAMLError):
        return False  # the compile reports it


def _cache_dir_findings(cache_dir: str) -> list[Finding]:
    """The hook ignores a cache dir that is not root's (every start then compiles the YAML)."""
    from ocihook.linux import trusted

    try:
        st = os.lstat(cache_dir)
    except FileNotFoundError:
        return []
    except OSError as error:
        return [_cache(f"config cache dir {cache_dir}: {error.strerror}")]
    problem = trusted.dir_problem(st)
    if problem and problem.startswith("mode"):
        return [
            _cache(f"config cache dir {cache_dir}: {problem}: the hook tightens and empties it")
        ]
    if problem:
        return [
            _cache(
                f"config cache dir {cache_dir}: {problem}: the hook does not use it (slower starts)"
            )
        ]
    return []


def _cache(message: str) -> Finding:
    return Finding(WARNING, "cache", message)
