"""Build a CDI spec (plain dict) from a finalized plan, choose its cdiVersion, validate and
write it.

The edits come from the one renderer of a plan (plan/edits.py: the driver files as bind
mounts with the plan's flags, the device nodes with their modes and cgroup access, the
createContainer hooks that run `ocihook cdi-hook` for the requirement check, the soname
links and the ld cache: stages/cdihook.py); this module groups them into CDI devices (one
per index, per GPU UUID, per MIG device, and `all`), names the kind and picks the lowest
cdiVersion that holds them.
"""

from __future__ import annotations

import json
import os
import re

from ocihook.errors import OcihookError
from ocihook.plan.decide import MOUNT_LABEL, NO_LABEL
from ocihook.plan.edits import device_node, hook_steps, mount, with_gids

DEFAULT_VENDOR = "ocihook.io"
# (version, why) in ascending order: the first whose feature the spec uses sets the minimum.
VERSION_FEATURES = (
    ((0, 4, 0), "a mount with a type"),
    ((0, 5, 0), "a device node with a hostPath, or a device name starting with a digit"),
    ((0, 6, 0), "annotations, or a dot in the class of the kind"),
    ((0, 7, 0), "additionalGids"),
)
BASE_VERSION = (0, 3, 0)
CLASS_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
VENDOR_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")


def default_kind(profile_name: str, profile_kind: str | None = None) -> str:
    """The profile's `devices.cdi_kind` (NVIDIA's: nvidia.com/gpu, the kind NVIDIA's
    device plugin asks for), else ocihook.io/<profile name>."""
    if profile_kind:
        return profile_kind
    cls = re.sub(r"[^A-Za-z0-9_-]", "-", profile_name).strip("-_") or "device"
    if not cls[0].isalpha():
        cls = "d" + cls
    return f"{DEFAULT_VENDOR}/{cls}"


def check_kind(kind: str) -> str:
    vendor, sep, cls = kind.partition("/")
    if not sep or not VENDOR_RE.match(vendor) or not CLASS_RE.match(cls):
        raise OcihookError(
            f"--kind {kind!r}: must be VENDOR/CLASS, e.g. ocihook.io/gpu (letters, digits, "
            "'-', '_', '.'; each part starting with a letter and ending with a letter or digit)"
        )
    return kind


def build_spec(
    view: dict,
    kind: str,
    hook_path: str,
    ldconfig_path: str,
    label: str,
    cuda: dict | None = None,
    gids: bool = True,
) -> dict:
    """The spec for the executor view (`plan.model.executor_view`) of a finalized plan of every
    device (request "all", described: `build_plan(..., describe="strict")`): shared edits
    (mounts, control nodes, hooks) at the top; one device per index with its nodes, named
    by the index and, where the host has one, by the GPU's UUID (`GPU-...`); one per MIG
    device with its GPU's nodes and its two cap nodes, named `G:M` and `MIG-...`, as
    NVIDIA's generator names them (device plugins ask for these names); and `all`, every
    index's nodes (the hook's `all`: whole devices, no MIG device). `label` is the links'
    label choice (plan.decide.label_choice), written into their hook's arguments. `cuda` (a
    CUDA profile's): `require`, the check-requirements hook's arguments (None: no check),
    `library`, the compat library the update-ldcache hook probes each image for. `gids`:
    each device's (and the shared nodes') `additionalGids`, the groups a non-root user needs
    to open its nodes (CDI 0.7.0; NVIDIA's no-additional-gids-for-device-nodes turns it off)."""
    plain = {d["path"]: d for d in view["devices"]}
    by_path = {path: device_node(d) for path, d in plain.items()}
    whole = view["device_list"]  # the request "all": whole devices only
    devices = []
    every: list[dict] = []
    every_plain: list[dict] = []
    for device in whole:
        nodes = [by_path[path] for path in device["nodes"]]
        every += [dict(node) for node in nodes]
        every_plain += [plain[path] for path in device["nodes"]]
        for name in (str(device["index"]), device.get("uuid")):
            if name:  # copies: one YAML node each (no anchors and aliases in the file)
                edits = {"deviceNodes": [dict(node) for node in nodes]}
                edits = with_gids(edits, [plain[p] for p in device["nodes"]], gids)
                devices.append({"name": name, "containerEdits": edits})
    for mig in view.get("mig_devices") or ():
        caps = {c["path"]: c for c in mig["caps"]}
        sources = [plain.get(path) or caps[path] for path in mig["nodes"]]
        for name in (mig["name"], mig["uuid"]):
            if name:
                edits = {"deviceNodes": [device_node(d) for d in sources]}
                devices.append({"name": name, "containerEdits": with_gids(edits, sources, gids)})
    devices.append(
        {
            "name": "all",
            "containerEdits": with_gids({"deviceNodes": every}, every_plain, gids),
        }
    )
    shared = [d for d in view["devices"] if d["index"] is None]
    control = [dict(by_path[d["path"]]) for d in shared]
    edits: dict = {"mounts": [mount(m) for m in view["mounts"]]}
    if control:
        edits["deviceNodes"] = control
        with_gids(edits, shared, gids)
    hooks = hook_steps(view, hook_path, ldconfig_path, label, cuda)
    if hooks:
        edits["hooks"] = hooks
    spec = {"cdiVersion": "", "kind": check_kind(kind), "devices": devices, "containerEdits": edits}
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def build_channel_spec(nodes: list[dict], kind: str) -> dict:
    """A spec of NVIDIA IMEX channels (the executor view's device nodes of each channel):
    one device per channel named by its number, as NVIDIA's generator names them
    (nvidia.com/imex-channel=0), and `all`; nothing shared."""
    devices = []
    for node in nodes:
        number = node["path"].rsplit("channel", 1)[1]
        devices.append({"name": number, "containerEdits": {"deviceNodes": [device_node(node)]}})
    devices.append(
        {"name": "all", "containerEdits": {"deviceNodes": [device_node(n) for n in nodes]}}
    )
    spec = {"cdiVersion": "", "kind": check_kind(kind), "devices": devices}
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def _edits(spec: dict) -> list[dict]:
    return [spec.get("containerEdits") or {}] + [d["containerEdits"] for d in spec["devices"]]


def required_features(spec: dict) -> list[tuple[int, int, int]]:
    """The CDI versions that the features used by `spec` need (as nvidia-ctk computes it)."""
    needed = []
    edits = _edits(spec)
    if any("type" in m for e in edits for m in e.get("mounts", [])):
        needed.append((0, 4, 0))
    if any("hostPath" in n for e in edits for n in e.get("deviceNodes", [])) or any(
        d["name"][:1].isdigit() for d in spec["devices"]
    ):
        needed.append((0, 5, 0))
    if "annotations" in spec or any("annotations" in d for d in spec["devices"]):
        needed.append((0, 6, 0))
    if any("additionalGids" in e for e in edits):
        needed.append((0, 7, 0))
    if "." in spec["kind"].partition("/")[2]:
        needed.append((0, 6, 0))
    return needed


def minimum_version(spec: dict) -> str:
    """The lowest cdiVersion that accepts `spec`: runtimes refuse a spec whose cdiVersion is
    newer than they know (podman 4.3 knows up to 0.5.0), and also one whose features need a
    newer version than it declares."""
    version = max([BASE_VERSION, *required_features(spec)])
    return ".".join(map(str, version))


def schema() -> dict:
    with open(os.path.join(os.path.dirname(__file__), "schema.json")) as f:
        return json.load(f)


def validate(spec: dict) -> None:
    """Raise OcihookError when `spec` breaks the schema or declares too old a cdiVersion."""
    import jsonschema

    validator = jsonschema.Draft7Validator(schema())
    errors = sorted(validator.iter_errors(spec), key=lambda e: list(e.absolute_path))
    if errors:
        error = errors[0]
        where = "/".join(str(p) for p in error.absolute_path) or "(top)"
        raise OcihookError(f"CDI spec: {where}: {error.message}")
    declared = tuple(int(p) for p in spec["cdiVersion"].split("."))
    needed = minimum_version(spec)
    if declared < tuple(int(p) for p in needed.split(".")):
        raise OcihookError(f"CDI spec: cdiVersion {spec['cdiVersion']} is older than {needed}")
    names = [d["name"] for d in spec["devices"]]
    if len(set(names)) != len(names):
        raise OcihookError("CDI spec: device names are not unique")


def render(spec: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(spec, indent=2) + "\n"
    import yaml

    return yaml.safe_dump(spec, sort_keys=False, default_flow_style=False)


# An SELinux context as the config's `selinux.label` (ocihook/schema.json) may be one.
_LABEL_RE = re.compile(r"[a-z0-9_]+:[a-z0-9_]+:[a-z0-9_]+:s[0-9][^\s\0]*")


def parse_label(value: str | None) -> str | None:
    """--selinux-label: none, mount-label (the container's mount label) or a fixed SELinux
    context; None (not given: a spec of an earlier release) stays None."""
    if value is None or value in (NO_LABEL, MOUNT_LABEL) or _LABEL_RE.fullmatch(value):
        return value
    raise OcihookError(
        f"--selinux-label {value!r}: expected {NO_LABEL}, {MOUNT_LABEL} or an SELinux "
        "context (user:role:type:level)"
    )
