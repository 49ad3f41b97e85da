"""Inject the driver into one container: discover -> plan -> clone -> enter -> apply -> record."""

from __future__ import annotations

import os
import resource
import stat
import time

from ocihook import apply, cgroups, ldcache, linux, privileges, record
from ocihook.discover import Roots, build_plan, device_indices
from ocihook.errors import OcihookError
from ocihook.plan import Plan
from ocihook.request import DeviceRequest, select_indices
from ocihook.selinux import label as selinux_label
from ocihook.state import Container


def file_label(config: dict, container: Container) -> str | None:
    """The label for what the hook creates in the container, or None to leave labels alone."""
    settings = config["selinux"]
    if settings["mode"] == "disabled":
        return None
    if settings["mode"] == "auto" and not selinux_label.selinux_enabled():
        return None
    return settings["label"] or container.mount_label


def plan_for(
    config: dict, roots: Roots, request: DeviceRequest, lib_dir: str | None = None
) -> Plan:
    profile = config["profile"]
    available = device_indices(roots, profile["devices"]["node"])
    indices = select_indices(request, sorted(available))
    kwargs = {"lib_dir": lib_dir} if lib_dir else {}
    return build_plan(config, roots, indices, available, request.describe(), **kwargs)


def device_rules(plan: Plan) -> list[cgroups.DeviceRule]:
    return [cgroups.DeviceRule(d.type, d.major, d.minor, d.access) for d in plan.devices]


def check_source_labels(plan: Plan, config: dict, log: record.Log) -> dict[str, str | None]:
    """Labels of the bind-mounted sources; a label no container can read fails (or warns)."""
    labels = {m.host_path: selinux_label.get_label(m.host_path) for m in plan.mounts}
    mode = config["selinux"]["source_check"]
    if mode == "off":
        return labels
    fix = None
    for path, context in labels.items():
        if selinux_label.source_label_problem(path, context, "") is None:
            continue
        fix = fix or relabel_fix(config["source_root"])
        problem = selinux_label.source_label_problem(path, context, fix)
        if mode == "error":
            raise OcihookError(problem)
        log.info(f"warning: {problem}")
    return labels


def relabel_fix(source_root: str) -> str:
    """What to tell the user: relabel the driver's root, unless it is a host system dir."""
    from ocihook.selinux.relabel import refusal

    if refusal(os.path.realpath(source_root)) is None:
        return f"run: ocihook selinux relabel {source_root}"
    return (
        f"the source root {source_root} is host system content that ocihook does not relabel: "
        "serve the driver from its own root (a driver container's volume) and relabel that, "
        "or set selinux.source_check: warn"
    )


def inject(container: Container, config: dict, request: DeviceRequest) -> dict:
    """Do it; returns the record written to the state dir."""
    started = time.monotonic()
    log = record.Log(config["log"]["target"], config["log"]["debug"])
    try:
        result = _inject(container, config, request, log)
    except OcihookError as error:
        log.error(f"{container.id}: {error}")
        raise
    elapsed = 1000 * (time.monotonic() - started)
    log.info(
        f"{container.id}: injected {len(result['mounts'])} files, {len(result['links'])} links, "
        f"{len(result['devices'])} devices (profile {result['profile']}, "
        f"request {result['request']}, source {result['source_root']}) in {elapsed:.1f} ms"
    )
    return result


def _raise_fd_limit() -> None:
    """Two descriptors per injected file stay open until the end (the detached mount and
    its undo handle): allow as many as the hard limit permits."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _inject(container: Container, config: dict, request: DeviceRequest, log: record.Log) -> dict:
    _raise_fd_limit()
    label = file_label(config, container)
    with Roots(config["source_root"], config["device_root"]) as roots:
        plan = plan_for(config, roots, request)
        log.debug(f"{container.id}: planned {len(plan.mounts)} mounts, {len(plan.devices)} devices")
        source_labels = check_source_labels(plan, config, log) if label else {}
        classic = config["mount_api"] == "classic" or not apply.have_new_mount_api()
        # New mount API: clone the sources on the host now. Classic API: open them in the
        # container's mount namespace later (a bind mount cannot cross namespaces).
        trees = [] if classic else apply.clone_sources(plan, roots.source_fd)
        node_trees: dict[str, int] = {}
        try:
            if container.userns and not classic:
                node_trees = apply.clone_device_nodes(plan, roots.device_fd)
            ldconfig_fd = (
                ldcache.open_ldconfig(config["ldconfig"]["path"]) if plan.ldconfig else None
            )
            state_fd = record.open_state_dir(config["state_dir"])
            target = cgroups.find_container_cgroup(container.pid, container.cgroups_path)
            edits = cgroups.allow_devices(target, device_rules(plan))
            log.debug(f"{container.id}: cgroup {target.version} {target.path}: {edits}")
            try:
                plan, ldconfig_ran = _apply_in_container(
                    container,
                    config,
                    plan,
                    trees,
                    node_trees,
                    label,
                    ldconfig_fd,
                    log,
                    roots if classic else None,
                )
            except BaseException:
                cgroups.revert_device_edits(target, edits)
                raise
        finally:
            apply.close_trees(trees)
            for fd in node_trees.values():
                os.close(fd)
    # Everything that needs privilege is done: what is left is writing our own files.
    privileges.drop_capabilities()
    log.debug(
        f"{container.id}: capabilities dropped, CapEff {privileges.effective_capabilities():x}"
    )
    body = _record(container, plan, trees, source_labels, label, edits, ldconfig_ran)
    try:
        record.write_record(state_fd, config["state_dir"], container.id, body)
        settings = config["records"]
        record.sweep(state_fd, config["state_dir"], settings["max_age"], settings["max_count"])
    finally:
        os.close(state_fd)
    return body


def _apply_in_container(
    container, config, plan, trees, node_trees, label, ldconfig_fd, log, classic_roots=None
):
    """Everything done inside the container's mount namespace. With `classic_roots` (the
    classic mount API) the sources are opened there and added to `trees`/`node_trees`."""
    shared = apply.host_superblocks()
    root_fd = apply.enter_container(container.pid, container.rootfs)
    try:
        if classic_roots is not None:
            roots = classic_roots
            trees.extend(apply.open_sources(plan, roots.source_real, roots.source_fd))
            if container.userns:
                node_trees.update(apply.open_device_nodes(plan, roots.device_real, roots.device_fd))
        lib_dir = config["container"]["lib_dir"]
        if lib_dir == "auto":
            lib_dir = apply.detect_lib_dir(root_fd)
        plan = plan.with_lib_dir(lib_dir)
        writer = apply.ContainerWriter(
            root_fd, label, container.host_uid(0), container.host_gid(0), shared
        )
        try:
            for tree, mount in zip(trees, plan.mounts):
                writer.attach(
                    tree.fd,
                    mount.target,
                    (tree.dev, tree.ino),
                    mount.host_path,
                    apply.mount_kinds(mount),
                    apply.classic_flags(mount) if classic_roots is not None else None,
                )
            for link in plan.links:
                writer.link(link)
            for node in plan.devices:
                if container.userns:
                    writer.attach(
                        node_trees[node.path],
                        node.path,
                        None,
                        node.host_path,
                        (stat.S_ISREG,),
                        linux.MS_NOSUID if classic_roots is not None else None,
                    )
                else:
                    writer.device_node(node)
            ldconfig_ran = False
            if ldconfig_fd is not None and ldcache.is_glibc_image(root_fd):
                ldcache.update_cache(
                    ldconfig_fd,
                    root_fd,
                    container.rootfs,
                    plan.ld_dirs,
                    container.host_uid(0),
                    container.host_gid(0),
                )
                ldconfig_ran = True
            log.debug(f"{container.id}: applied in {container.rootfs} (lib dir {lib_dir})")
        except BaseException:
            writer.rollback()
            raise
        finally:
            writer.close()
    finally:
        os.close(root_fd)
        if ldconfig_fd is not None:
            os.close(ldconfig_fd)
    return plan, ldconfig_ran


def _record(container, plan, trees, source_labels, label, edits, ldconfig_ran) -> dict:
    return record.new_record(
        container.id,
        container.pid,
        {
            "bundle": container.bundle,
            "rootfs": container.rootfs,
            "profile": plan.profile,
            "request": plan.request,
            "source_root": plan.source_root,
            "device_root": plan.device_root,
            "driver_version": plan.driver_version,
            "mount_label": container.mount_label,
            "process_label": container.process_label,
            "file_label": label,
            "mounts": [
                {
                    "source": m.host_path,
                    "target": m.target,
                    "kind": m.kind,
                    "dev": t.dev,
                    "ino": t.ino,
                    "label": source_labels.get(m.host_path),
                }
                for t, m in zip(trees, plan.mounts)
            ],
            "links": [{"target": link.target, "points_to": link.points_to} for link in plan.links],
            "devices": [
                {
                    "path": d.path,
                    "host_path": d.host_path,
                    "type": d.type,
                    "major": d.major,
                    "minor": d.minor,
                    "index": d.index,
                    "label": label,
                }
                for d in plan.devices
            ],
            "cgroup": edits,
            "ld_dirs": plan.ld_dirs if ldconfig_ran else [],
        },
    )
