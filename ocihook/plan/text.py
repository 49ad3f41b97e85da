"""The plan as text for people (`ocihook plan`): fits a 100-column terminal.

Mount sources are paths inside the source root (named once at the top), grouped by
directory; each device is listed once, with its device cgroup rule.
"""

from __future__ import annotations

import os

from ocihook.plan.kinds import KINDS
from ocihook.plan.model import FLAGS_LEGEND, MigDevice, Plan

WIDTH = 100
_PLACEHOLDER_NOTE = "placeholder: the hook uses the image's own; --rootfs IMAGE_ROOT shows it"


def _wrap(items: list[str], indent: str = "  ") -> list[str]:
    """`items` joined by ", " (after a leading "kind:") into lines of at most WIDTH columns."""
    lines: list[str] = []
    line = ""
    for item in items:
        sep = " " if line.endswith(":") else ", "
        candidate = f"{line}{sep}{item}" if line else item
        lead = indent if not lines else indent + "    "
        if line and len(lead) + len(candidate) + 1 > WIDTH:
            lines.append(f"{lead}{line}{'' if line.endswith(':') else ','}")
            line = item
        else:
            line = candidate
    if line:
        lines.append(f"{indent if not lines else indent + '    '}{line}")
    return lines


def _field(name: str, value: str) -> str:
    return f"{name + ':':<14}{value}"


def _field_lines(name: str, value: str) -> list[str]:
    """The field, its value continued on lines of its own (at ", ") past WIDTH columns."""
    lines, line = [], _field(name, "")
    for word in value.split(" "):
        if len(line) + 1 + len(word) > WIDTH and line.strip() and not line.endswith(": "):
            lines.append(line.rstrip())
            line = " " * 14
        line += word if line.endswith(" ") else " " + word
    return lines + [line.rstrip()]


def _header(plan: Plan, all_capabilities: list[str] | None) -> list[str]:
    capabilities = ", ".join(plan.capabilities) or "-"
    others = [c for c in all_capabilities or () if c not in plan.capabilities]
    if others:
        capabilities += f" (also: {', '.join(others)})"
    lines = [
        _field("profile", plan.profile),
        *_field_lines("capabilities", capabilities),
        _field("source root", plan.source_root),
        _field("device root", plan.device_root),
        _field("request", plan.request),
    ]
    if plan.driver_version:
        lines.append(_field("driver", f"{plan.driver_version} (from {plan.version_source})"))
    else:
        lines.append(
            _field(
                "driver",
                "version unknown (no kernel module version file and no "
                "versioned library): {version} entries skipped",
            )
        )
    if plan.ld_cache:
        lines.append(_field("ld.so.cache", plan.ld_cache))
    note = f" ({_PLACEHOLDER_NOTE})" if plan.placeholder else ""
    lines.append(_field("library dir", plan.lib_dir + note))
    if any(KINDS[m.kind].lib_dir == "lib_dir32" for m in plan.mounts):
        lines.append(_field("32-bit dir", plan.lib_dir32 + (" (placeholder)" if note else "")))
    lines.extend(f"warning: {w}" for w in plan.warnings)
    return lines


def _mounts(plan: Plan) -> list[str]:
    lines = [
        f"mounts ({len(plan.mounts)}; container dir <- dir inside the source root):",
        f"  ({FLAGS_LEGEND})",
    ]
    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for m in plan.mounts:
        source_dir, source_name = os.path.split(m.source)
        target_dir, target_name = os.path.split(m.target)
        name = target_name if source_name == target_name else f"{target_name} <- {source_name}"
        if m.writable:
            name += "  [rw]"
        groups.setdefault((source_dir, target_dir), []).append((KINDS[m.kind].shown, name))
    for (source_dir, target_dir), items in groups.items():
        if source_dir == target_dir:
            lines.append(f"  {source_dir}/")
        else:
            lines.append(f"  {target_dir}/  <-  {source_dir}/")
        lines.extend(f"    {shown:<10}{name}" for shown, name in items)
    return lines


def _links(plan: Plan) -> list[str]:
    lines = [f"soname links ({len(plan.links)}):"]
    groups: dict[str, list[str]] = {}
    for link in plan.links:
        directory, name = os.path.split(link.target)
        groups.setdefault(directory, []).append(f"{name} -> {link.points_to}")
    for directory, items in groups.items():
        lines.append(f"  {directory}/")
        lines.extend(f"    {item}" for item in items)
    return lines


def _devices(plan: Plan) -> list[str]:
    """Each selected device once: its index (PCI address, kernel driver and UUID where the
    host told them) or MIG device (name, UUID, GPU and compute instance), then its nodes
    with mode and cgroup rule; then the shared control nodes."""
    lines = [
        f"devices ({len(plan.devices)} nodes; mknod with the mode shown, allowed in the device "
        "cgroup as shown):"
    ]
    width = max((len(d.path) for d in plan.devices), default=0)
    by_path = {d.path: d for d in plan.devices}
    listed: set[str] = set()
    for device in plan.device_list:
        lines.append(f"  {_device_title(device)}")
        for path in device.nodes:
            node = by_path.get(path)
            if node is not None:
                listed.add(path)
                lines.append(_node_line(node, width))
    others = [d for d in plan.devices if d.path not in listed]
    if others:
        lines.append("  control (shared by every device):")
        lines.extend(_node_line(d, width) for d in others)
    return lines


def _node_line(d, width: int) -> str:
    rule = f"{d.type} {d.major}:{d.minor} {d.access}"
    return f"    {d.path:<{width}}  mode {d.mode:04o}  allow {rule}"


def _device_title(device) -> str:
    if isinstance(device, MigDevice):
        uuid = f" {device.uuid}" if device.uuid else ""
        return f"MIG {device.name}{uuid} (on index {device.index}, GI {device.gi}, CI {device.ci}):"
    where = " ".join(x for x in (device.address, device.driver, device.uuid) if x)
    return f"index {device.index}:{' ' + where if where else ''}"


def _mig_devices(plan: Plan) -> list[str]:
    """The host's MIG devices that the request did not select (asked for by name)."""
    selected = {getattr(d, "name", None) for d in plan.device_list}
    others = [m for m in plan.mig_devices if m.name not in selected]
    if not others:
        return []
    lines = [
        f"MIG devices not requested ({len(others)}; ask by name or UUID; each also gets its "
        "GPU's nodes):"
    ]
    width = max(len(node.path) for m in others for node in m.caps)
    for mig in others:
        lines.append(f"  {_device_title(mig)}")
        lines.extend(_node_line(node, width) for node in mig.caps)
    return lines


def format_plan(plan: Plan, all_capabilities: list[str] | None = None) -> str:
    """The plan as a readable listing, lines of at most 100 columns for usual paths."""
    lines = _header(plan, all_capabilities)
    lines += _mounts(plan)
    if plan.links:
        lines += _links(plan)
    lines += _devices(plan)
    lines += _mig_devices(plan)
    ld = "update for " + ", ".join(plan.ld_dirs) if plan.ldconfig else "no"
    lines.append(_field("ld cache", ld))
    if plan.cuda_compat:
        lines.append(_field("cuda compat", _cuda_compat(plan.cuda_compat)))
    if plan.unmatched:
        lines.append(f"not found ({len(plan.unmatched)} profile entries matched nothing):")
        groups: dict[str, list[str]] = {}
        for item in plan.unmatched:
            kind, _, name = item.partition(": ")
            groups.setdefault(kind, []).append(name)
        for kind, names in groups.items():
            lines += _wrap([f"{kind}:"] + names, "  ")
    return "\n".join(lines)


def _cuda_compat(compat: dict) -> str:
    """CUDA forward compatibility in words: what the image's probe found, or the mode."""
    if compat["use"]:
        return f"{compat['dir']} first: {compat['reason']}"
    if compat["reason"] == "no image at hand to probe":
        return f"{compat['mode']}, per image (ocihook plan --rootfs IMAGE shows it)"
    return f"host libraries: {compat['reason']}"
