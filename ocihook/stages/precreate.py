"""The precreate stage (podman's hooks.d extension, `ocihook-hook --stage precreate`): the
proposed OCI config on stdin, before the runtime's `create`; the config on stdout, with the
request's device nodes in `linux.devices` and the driver's bind mounts in `mounts`: the
runtime creates and mounts them itself.

The device *rules* are not put in `linux.resources.devices`: `podman update` (podman 5.4 and
later) sends the runtime podman's own stored device list, which never has them, and crun then
refuses the update (1.23 and later: the list differs from its pinned program) or rebuilds the
container's device program from that list (before 1.23, and under cgroupfs), dropping them.
The prestart stage grants them where the runtime and systemd keep them through reloads and
updates (ocihook/cgroups/grant.py; docs/cgroups.md, Routes).

The container and its request are adapted from the proposed config and assembled as the
prestart stage assembles them (request/assemble.py). The edit is rendered by the one
renderer of a plan (plan/edits.py, which the CDI spec is made of too) from the finalized
plan's executor view, nothing decided again, and applied here as a runtime applies a CDI
spec's edits. What the runtime cannot do (soname links, the ld cache, labels of what the
hook creates) is left to the prestart stage, which skips what it finds config.json already
has (ocihook/apply/owned.py).
Each mount source is resolved by fd inside the source root and written as the canonical
host path that fd names (docs/security.md, "The precreate route").

No request: the input bytes go back unchanged (parsed once, never re-encoded).
"""

from __future__ import annotations

import os

from ocihook import fastjson
from ocihook.config.compiled import load_config
from ocihook.errors import OcihookError
from ocihook.linux.userns import hook_namespace
from ocihook.request.state import (
    MAX_CONFIG_BYTES,
    Container,
    may_ask,
    parse_json,
    spec_container,
)

WHERE = "config on stdin (precreate)"


def run(data: bytes, config_path: str, cache_dir: str | None) -> bytes:
    """The config to hand back for the proposed config `data`: `data` itself when the
    container asks for nothing (or the hook runs rootless: the prestart stage does
    everything there, as root of the user's namespace), else the edited config. Bad input
    is one line before the config is loaded."""
    spec = read_spec(data)
    if hook_namespace().rootless:
        return data
    config = load_config(config_path, cache_dir)
    if not may_ask({"annotations": spec.get("annotations")}, config):
        return data
    from ocihook.request import assemble  # a container that may ask: its request

    container = spec_container(spec)
    try:
        request = assemble.container_request(container, config)
        if request.empty:
            return data
        return render(apply_edits(spec, plan_edits(container, config, request)))
    except OcihookError as error:
        # podman 4.3 drops a precreate hook's stderr and shows only "exit status 1": the
        # config goes back unchanged, and the prestart stage, which builds the same plan
        # from the same config, meets the same error and refuses the container with its
        # line (runc shows it); should it succeed, it injects as on the prestart route.
        from ocihook import records

        log = records.Log(config["log"]["target"], config["log"]["debug"])
        log.error(f"precreate: {error}; left to the prestart stage")
        return data


def read_spec(data: bytes) -> dict:
    """The proposed OCI config: a JSON object with a `root` object (one line otherwise)."""
    if len(data) > MAX_CONFIG_BYTES:
        raise OcihookError(f"{WHERE}: larger than 16 MiB")
    if not data.strip():
        raise OcihookError(f"{WHERE}: empty (podman passes the proposed OCI config)")
    spec = parse_json(data, WHERE)
    if "status" in spec and "bundle" in spec:
        raise OcihookError(
            f"{WHERE}: this is a container state, not an OCI config: --stage precreate "
            'belongs only in a registration whose stages are ["precreate"]'
        )
    if not isinstance(spec.get("root"), dict):
        raise OcihookError(f"{WHERE}: missing field 'root' (not an OCI runtime config)")
    return spec


def plan_edits(container: Container, config: dict, request) -> dict:
    """The runtime edits for one container (plan/edits.py's `runtime_edits`): the plan built,
    decided (a precreate target) and finalized for its image as the prestart stage will
    finalize it, with each mount's source resolved by fd in the source root."""
    from ocihook import records
    from ocihook.apply.sources import check_source_labels, close_trees, open_sources
    from ocihook.discover.roots import in_root
    from ocihook.linux import securepath
    from ocihook.pipeline import open_roots, plan_container
    from ocihook.plan.decide import Target
    from ocihook.plan.edits import runtime_edits
    from ocihook.plan.model import executor_view

    log = records.Log(config["log"]["target"], config["log"]["debug"])
    target = Target.precreate(container.userns, container.mount_label)
    with open_roots(config) as roots:
        planned = plan_container(config, roots, request, target)
        try:
            root_fd = securepath.open_dir(container.rootfs)
        except OSError as error:
            raise OcihookError(f"rootfs {container.rootfs}: {error.strerror}") from None
        try:
            final = planned.finalize(root_fd)
        finally:
            os.close(root_fd)
        trees = open_sources(final, roots.source_real, roots.source_fd)
        try:
            if final.file_label:
                check_source_labels(trees, config, log, roots.source_real, container.process_label)
            sources = []
            for tree in trees:
                real = os.readlink(securepath.fd_path(tree.fd))
                in_root(roots.source_real, real)  # raises when it left the root
                sources.append(real)
        finally:
            close_trees(trees)
    edits = runtime_edits(executor_view(final), sources)
    log.info(
        f"precreate: {len(edits['mounts'])} mounts, {len(edits['deviceNodes'])} device nodes for "
        f"the runtime (profile {final.profile}, request {final.request}, "
        f"source {final.source_root})"
    )
    return edits


def apply_edits(spec: dict, edits: dict) -> dict:
    """`spec` with the runtime edits (CDI's containerEdits shape: plan/edits.py) applied as a
    runtime applies a CDI spec's, every other field kept as it came: mounts appended as OCI
    bind mounts, device nodes as `linux.devices` owned by root with the host node's group,
    additionalGids to the process's user. A mount or node the config already has is not
    added twice; a node path the config already has for another device refuses the
    container."""
    linux = spec.setdefault("linux", {})
    if not isinstance(linux, dict):
        raise OcihookError(f"{WHERE}: field 'linux' must be an object")
    mounts = _list(spec, "mounts", "mounts")
    have = {(m.get("destination"), m.get("source")) for m in mounts if isinstance(m, dict)}
    for m in edits["mounts"]:
        if (m["containerPath"], m["hostPath"]) not in have:
            mounts.append(
                {
                    "destination": m["containerPath"],
                    "type": m["type"],
                    "source": m["hostPath"],
                    "options": m["options"],
                }
            )
    devices = _list(linux, "devices", "linux.devices")
    by_path = {d.get("path"): d for d in devices if isinstance(d, dict)}
    for d in edits["deviceNodes"]:
        old = by_path.get(d["path"])
        if old is None:
            devices.append(
                {
                    "path": d["path"],
                    "type": d["type"],
                    "major": d["major"],
                    "minor": d["minor"],
                    "fileMode": d["fileMode"],
                    "uid": 0,
                    "gid": d.get("gid", 0),  # the host node's group (additionalGids below)
                }
            )
        elif (old.get("type"), old.get("major"), old.get("minor")) != (
            d["type"],
            d["major"],
            d["minor"],
        ):
            raise OcihookError(
                f"{WHERE}: linux.devices has {d['path']} as another device "
                f"({old.get('type')} {old.get('major')}:{old.get('minor')}) than the driver's "
                f"({d['type']} {d['major']}:{d['minor']})"
            )
    if edits.get("additionalGids"):  # a non-root user gets the nodes' groups (toolkit 1.19)
        process = spec.setdefault("process", {})
        user = process.setdefault("user", {}) if isinstance(process, dict) else None
        if not isinstance(user, dict):
            raise OcihookError(f"{WHERE}: field 'process.user' must be an object")
        groups = _list(user, "additionalGids", "process.user.additionalGids")
        groups.extend(g for g in edits["additionalGids"] if g not in groups)
    return spec


def _list(obj: dict, key: str, where: str) -> list:
    value = obj.get(key)
    if value is None:
        value = obj[key] = []
    if not isinstance(value, list):
        raise OcihookError(f"{WHERE}: field '{where}' must be an array")
    return value


def render(spec: dict) -> bytes:
    return fastjson.dumps(spec, indent=None).encode() + b"\n"
