"""What SELinux state matters to ocihook on this host (`ocihook selinux status`)."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ocihook.errors import OcihookError
from ocihook.selinux import names
from ocihook.selinux.label import (
    DEVICE_CONTEXT,
    DEVICE_TYPE,
    SELINUXFS,
    source_label_problem,
)
from ocihook.selinux.relabel import device_context, label_type, resolve, walk

MODULE = names.MODULE_NAME
SELINUX_CONFIG = Path("/etc/selinux/config")
STORE_ROOT = Path("/var/lib/selinux")
# Device nodes that selinux/ocihook.fc labels.
DEVICE_RE = re.compile(
    r"^(nvidia[0-9]+|nvidiactl|nvidia-uvm.*|synth[0-9]+|synthctl|hl[0-9]+|hl_controlD[0-9]+)$"
)
ACCEL_DIR = "accel"  # every char node in /dev/accel is ocihook_device_t (ocihook.fc)
# name -> what it does for ocihook (container-selinux and refpolicy spell them alike).
BOOLEANS = {
    names.VENDOR_DEVICES_TUNABLE: "containers may use vendor-typed nodes "
    f"({', '.join(sorted(names.VENDOR_DEVICE_TYPES))}); ocihook module",
    "container_use_devices": "containers may use every device node (container-selinux)",
    "container_use_dri_devices": "containers may use /dev/dri nodes (container-selinux)",
}


@dataclass
class Mislabel:
    """A file whose label containers cannot use as the hook needs."""

    path: str
    label: str | None
    expected: str


@dataclass
class Status:
    """Plain data for `ocihook selinux status` (printed as text or JSON)."""

    selinux: str
    policy: str | None
    module: str
    booleans: dict[str, str | None]
    source: str | None = None
    checked: int = 0
    mislabelled_total: int = 0
    mislabelled: list[Mislabel] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def selinux_mode(selinuxfs: str = SELINUXFS) -> str:
    """ "enforcing", "permissive" or "disabled" (no SELinux LSM running)."""
    try:
        with open(os.path.join(selinuxfs, "enforce")) as f:
            return "enforcing" if f.read().strip() == "1" else "permissive"
    except OSError:
        return "disabled"


def configured_policy(config: Path = SELINUX_CONFIG) -> str | None:
    """SELINUXTYPE from /etc/selinux/config, or None."""
    try:
        text = config.read_text()
    except OSError:
        return None
    match = re.search(r"^\s*SELINUXTYPE\s*=\s*(\S+)", text, re.M)
    return match.group(1) if match else None


def module_state(policy: str | None, store_root: Path = STORE_ROOT) -> str:
    """Whether the ocihook module is installed in the policy store (what `semodule -l` lists)."""
    if policy is None:
        return "unknown: no SELINUXTYPE in /etc/selinux/config"
    modules = store_root / policy / "active" / "modules"
    if not modules.is_dir():
        return f"unknown: no policy store at {modules}"
    found = sorted(modules.glob(f"*/{MODULE}"))
    if not found:
        return "not installed (make -C selinux install, or semodule -i ocihook.pp)"
    disabled = any((path / "disabled").exists() for path in found)
    priority = found[-1].parent.name
    return f"installed (store {policy}, priority {priority}{', disabled' if disabled else ''})"


def boolean_values(selinuxfs: str = SELINUXFS) -> dict[str, str | None]:
    """Current value ("on"/"off") of each boolean that matters; None when unreadable."""
    values: dict[str, str | None] = {}
    for name in BOOLEANS:
        try:
            with open(os.path.join(selinuxfs, "booleans", name)) as f:
                values[name] = "on" if f.read().split()[0] == "1" else "off"
        except (OSError, IndexError):
            values[name] = None
    return values


def device_nodes(dev: str = "/dev") -> list[str]:
    """Accelerator nodes in `dev` that the module's file contexts cover."""
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    found = [os.path.join(dev, name) for name in names if DEVICE_RE.match(name)]
    try:
        accel = os.path.join(dev, ACCEL_DIR)
        found += [
            e.path for e in os.scandir(accel) if stat.S_ISCHR(e.stat(follow_symlinks=False).st_mode)
        ]
    except OSError:
        pass
    return sorted(found)


def check_labels(paths: list[str], status: Status, limit: int, dev_ctx: str) -> None:
    """Add mislabelled files under `paths` (files: readable by containers; devices: dev_ctx)."""
    want_dev = label_type(dev_ctx)
    for path in paths:
        for entry in walk(path, dev_ctx):
            if entry.expected is None:
                continue
            status.checked += 1
            if entry.kind == "chr":
                if label_type(entry.current) == want_dev:
                    continue
                expected = dev_ctx
            elif entry.kind == "link" or source_label_problem(entry.path, entry.current) is None:
                continue  # a bind mount resolves links: their own label never matters
            else:
                expected = entry.expected
            status.mislabelled_total += 1
            if len(status.mislabelled) < limit:
                status.mislabelled.append(Mislabel(entry.path, entry.current, expected))


def collect(
    source: str | None = None,
    limit: int = 20,
    dev: str = "/dev",
    device_type: str = DEVICE_TYPE,
) -> Status:
    """Gather the status; `source` is a driver tree to check (any path, read only)."""
    mode = selinux_mode()
    policy = configured_policy()
    status = Status(
        selinux=mode,
        policy=policy,
        module=module_state(policy),
        booleans=boolean_values(),
        source=source,
    )
    if mode == "disabled":
        status.notes.append(
            "SELinux is disabled (no SELinux LSM running): nothing is enforced, "
            "the module is not loaded in a kernel and booleans cannot be read; "
            "labels are still checked so they are right once SELinux runs"
        )
    dev_ctx = DEVICE_CONTEXT if device_type == DEVICE_TYPE else device_context(device_type)
    status.devices = device_nodes(dev)
    if not status.devices:
        status.notes.append(f"no accelerator device nodes found in {dev}")
    check_labels(status.devices, status, limit, dev_ctx)
    if source is not None:
        check_labels([os.path.realpath(source)], status, limit, dev_ctx)
    if status.mislabelled_total:
        fix = " ".join(resolve_safe([source] if source else []) or ["DIR"])
        status.notes.append(
            f"{status.mislabelled_total} file(s) mislabelled: run ocihook selinux relabel {fix}"
            + (" (and restorecon for /dev nodes)" if status.devices else "")
        )
    return status


def resolve_safe(paths: list[str]) -> list[str]:
    """resolve(), but an empty list where relabel would refuse (e.g. the host root)."""
    try:
        return resolve(paths)
    except OcihookError:
        return []


def render(status: Status) -> str:
    """Human-readable text for the status."""
    lines = [
        f"SELinux: {status.selinux}" + (f" (policy {status.policy})" if status.policy else ""),
        f"ocihook module: {status.module}",
        "booleans:",
    ]
    for name, value in status.booleans.items():
        lines.append(f"  {name} = {value or 'unknown'}: {BOOLEANS[name]}")
    lines.append(f"devices: {', '.join(status.devices) or 'none'}")
    if status.source is not None:
        lines.append(f"source: {status.source}")
    lines.append(f"labels checked: {status.checked}, mislabelled: {status.mislabelled_total}")
    for item in status.mislabelled:
        lines.append(f"  {item.path}: {item.label or '(none)'} (want {item.expected})")
    if status.mislabelled_total > len(status.mislabelled):
        lines.append(f"  ... and {status.mislabelled_total - len(status.mislabelled)} more")
    lines.extend(f"note: {note}" for note in status.notes)
    return "\n".join(lines)
