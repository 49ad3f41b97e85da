"""The one renderer of a finalized plan into runtime edits: bind mounts, device nodes (with
their cgroup access and group) and the createContainer hook steps, in CDI's
`containerEdits` shape.

Both users of a plan that hand the runtime work render through here: `ocihook cdi generate`
(cdi/spec.py groups these edits per device and writes the spec) and the precreate stage
(stages/precreate.py applies them to the proposed OCI config, as a runtime applies a CDI
spec's edits). The input is a finalized plan's executor view (`plan.model.executor_view`,
what `ocihook plan --json` prints): nothing is decided again here.
"""

from __future__ import annotations

from ocihook.plan.decide import PER_IMAGE
from ocihook.plan.model import additional_gids, bind_options

# The hook's environment is set explicitly: with no `env` a runtime may hand the hook the
# container's environment (LD_PRELOAD from the image, CVE-2025-23266).
HOOK_ENV = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"]
HOOK_TIMEOUT = 30


def mount(m: dict, host_path: str | None = None) -> dict:
    """A plan mount as a bind mount: the plan's flags, "bind" after the ones every mount
    has (read-only or read-write, nosuid, nodev), then noexec where the plan has it.
    `host_path`: the source to name instead of the plan's (the precreate stage's
    fd-resolved path)."""
    return {
        "hostPath": m["host_path"] if host_path is None else host_path,
        "containerPath": m["target"],
        "options": bind_options(m["flags"]),
        "type": "bind",
    }


def device_node(d: dict) -> dict:
    """A plan device node: its path, the host node, its numbers and mode, its cgroup access
    (`permissions`) and, where it has one, the host node's group."""
    node = {
        "path": d["path"],
        "hostPath": d["host_path"],
        "type": d["type"],
        "major": d["major"],
        "minor": d["minor"],
        "fileMode": d["mode"],
        "permissions": d["access"],
    }
    if d.get("gid"):
        node["gid"] = d["gid"]  # the host node's group: the runtime makes the node with it
    return node


def with_gids(edits: dict, nodes: list[dict], gids: bool = True) -> dict:
    """`edits` with `additionalGids` where `gids` and the plan's `nodes` need groups for a
    non-root user (plan.model.additional_gids: NVIDIA's 1.19 rule)."""
    wanted = additional_gids(nodes) if gids else []
    if wanted:
        edits["additionalGids"] = wanted
    return edits


def hook_steps(
    view: dict, hook_path: str, ldconfig_path: str, label: str, cuda: dict | None = None
) -> list[dict]:
    """The createContainer hooks that carry out what no runtime edit can (`ocihook
    cdi-hook`): the requirement check first (a refused container has nothing else done),
    the soname links (with `label`, plan.decide.label_choice's choice), the ld cache (with the
    CUDA compat probe where the plan left it to each image). `cuda` (a CUDA profile's):
    `require`, the check's arguments (None: no check), `library`, the compat library."""
    hooks = []
    if cuda and cuda.get("require") is not None:
        args = ["ocihook", "cdi-hook", "check-requirements", *cuda["require"]]
        hooks.append(_hook(hook_path, args))
    if view["links"]:
        args = ["ocihook", "cdi-hook", "create-symlinks", "--selinux-label", label]
        for link in view["links"]:
            args += ["--link", f"{link['points_to']}::{link['target']}"]
        hooks.append(_hook(hook_path, args))
    if view["ldconfig"] and view["ld_dirs"]:
        args = ["ocihook", "cdi-hook", "update-ldcache", "--ld-writer", view["ld_writer"]]
        args += ["--ldconfig", ldconfig_path]
        compat = view.get("cuda_compat")
        if (
            cuda
            and compat
            and compat["reason"] == PER_IMAGE
            and compat["host_version"]
            and cuda.get("library")
        ):
            args += ["--cuda-compat", compat["dir"], "--cuda-library", cuda["library"]]
            args += ["--host-driver-version", compat["host_version"]]
        for folder in view["ld_dirs"]:
            args += ["--folder", folder]
        hooks.append(_hook(hook_path, args))
    return hooks


def _hook(path: str, args: list[str]) -> dict:
    return {
        "hookName": "createContainer",
        "path": path,
        "args": args,
        "env": list(HOOK_ENV),
        "timeout": HOOK_TIMEOUT,
    }


def runtime_edits(view: dict, sources: list[str]) -> dict:
    """What the runtime does itself for one container (the precreate stage): every mount
    of the view from `sources` (the fd-resolved host path of each, in order), the nodes it
    makes (`mknod`; in a user namespace the prestart stage binds them) and the groups a
    non-root user needs for them. The nodes' rules are left out: the prestart stage grants
    them (stages/precreate.py says why)."""
    if len(sources) != len(view["mounts"]):
        raise RuntimeError(f"{len(sources)} sources for {len(view['mounts'])} mounts")
    made = [d for d in view["devices"] if d["strategy"] == "mknod"]
    nodes = []
    for d in made:
        node = device_node(d)
        del node["permissions"]
        nodes.append(node)
    edits = {
        "mounts": [mount(m, source) for m, source in zip(view["mounts"], sources)],
        "deviceNodes": nodes,
    }
    return with_gids(edits, made)
