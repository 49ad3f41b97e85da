"""`ocihook check`'s driver lines: the profile against the source root and the device root
(the plan the hook would make for every device, its files, links, nodes and warnings; each
device found; the driver version the profile's paths need) and the host's ldconfig."""

from __future__ import annotations

import os

from ocihook.check.findings import FAILED, OK, WARNING, Finding
from ocihook.errors import OcihookError


def driver_findings(config: dict) -> list[Finding]:
    """The driver's lines, in order (topic "driver"): what the plan holds, its warnings, one
    line per device, a version the profile needs but lacks; then ldconfig (when enabled)."""
    from ocihook.pipeline import open_roots, plan_container
    from ocihook.plan.decide import Target
    from ocihook.request.parse import parse_request

    findings: list[Finding] = []
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
        findings.append(
            _driver(
                OK,
                f"source root {config['source_root']}: {len(result.mounts)} files, "
                f"{len(result.links)} links, {len(result.devices)} device nodes "
                f"(capabilities {', '.join(result.capabilities) or 'none'}); {version}",
            )
        )
        findings += [_driver(WARNING, warning) for warning in result.warnings]
        findings += _device_findings(config, result.device_list + result.mig_devices)
        findings += _version_findings(config["profile"], result.driver_version)
    except OcihookError as error:
        findings.append(_driver(FAILED, str(error)))
    ldconfig = config["ldconfig"]
    if ldconfig["enabled"]:
        from ocihook.ld.elf import open_static_executable

        try:
            os.close(open_static_executable(ldconfig["path"], "ldconfig"))
            findings.append(_driver(OK, f"ldconfig {ldconfig['path']}"))
        except OcihookError as error:
            findings.append(_driver(FAILED, str(error)))
    return findings


def _driver(status: str, message: str) -> Finding:
    return Finding(status, "driver", message)


def _device_findings(config: dict, device_list: list) -> list[Finding]:
    """One line per device the profile finds (index, address, driver, nodes); none is wrong."""
    from ocihook.plan.model import MigDevice

    spec = config["profile"]["devices"]
    patterns = ([spec["node"]] if spec["node"] else []) + spec["nodes"]
    if not patterns:
        return []  # a profile without per-device nodes
    findings = []
    if not device_list:
        sysfs = spec["sysfs"]
        if sysfs:
            where = f"sysfs classes {', '.join(sysfs['classes'])}"
            if sysfs.get("drivers"):
                where += f", drivers {', '.join(sysfs['drivers'])}"
        else:
            where = f"nodes {', '.join(patterns)}"
        name = config["profile"]["name"]
        findings.append(
            _driver(
                FAILED,
                f"device root {config['device_root']}: no device of profile {name} ({where})",
            )
        )
    for d in device_list:
        if isinstance(d, MigDevice):
            message = (
                f"MIG device {d.name}: {d.uuid or '-'} GI {d.gi} CI {d.ci} {' '.join(d.nodes)}"
            )
        else:
            uuid = f" {d.uuid}" if d.uuid else ""
            where = f"{d.address or '-'} {d.driver or '-'}{uuid}"
            message = f"device {d.index}: {where} {' '.join(d.nodes)}"
        findings.append(_driver(OK, message))
    return findings


def _version_findings(profile: dict, version: str | None) -> list[Finding]:
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
        message = (
            f"profile {profile['name']}: driver version unknown ({', '.join(sources)} not "
            f"found): {', '.join(needing)} would be skipped"
        )
        return [_driver(FAILED, message)]
    return []
