"""Inject the driver into one container: discover -> plan -> clone -> enter -> apply -> record."""

from __future__ import annotations

import os
import resource
import time

from ocihook import apply, cgroups, ldcache, privileges, record
from ocihook.devices import available_devices
from ocihook.discover import Roots, build_plan
from ocihook.errors import OcihookError, describe
from ocihook.plan import LIBRARY_KINDS, Plan, device_rules, finalize
from ocihook.request import DeviceRequest, select_indices
from ocihook.selinux import label as selinux_label
from ocihook.state import Container, hook_namespace


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
    available = available_devices(roots, profile["devices"])
    indices = select_indices(request, available)
    return build_plan(
        config, roots, indices, available, request.describe(), lib_dir, request.capabilities
    )


def check_source_labels(plan: Plan, config: dict, log: record.Log) -> dict[str, str | None]:
    """Labels of the bind-mounted sources; a label no container can read fails (or warns)."""
    labels = {m.host_path: selinux_label.get_label(m.host_path) for m in plan.mounts}
    mode = config["selinux"]["source_check"]
    if mode == "off":
        return labels
    fix = None
    writable = {m.host_path for m in plan.mounts if m.writable}
    for path, context in labels.items():
        if path in writable:
            problem = writable_label_problem(path, context)
        elif selinux_label.source_label_problem(path, context, "") is None:
            continue
        else:
            fix = fix or relabel_fix(config["source_root"])
            problem = selinux_label.source_label_problem(path, context, fix)
        if problem is None:
            continue
        if mode == "error":
            raise OcihookError(problem)
        log.info(f"warning: {problem}")
    return labels


def writable_label_problem(path: str, context: str | None) -> str | None:
    """A directory the profile mounts read-write (the MPS pipe dir) must be writable by every
    container: container_file_t at s0, no categories (container_ro_file_t would not do)."""
    try:
        _user, _role, type_, level = selinux_label.split_context(context or "")
    except ValueError:
        type_, level = None, None
    if type_ in selinux_label.CONTAINER_FILE_TYPES and level in ("", "s0"):
        return None
    return (
        f"{path} is mounted read-write but labelled {context or 'nothing'}, which containers "
        f"cannot write; run: chcon -R -t container_file_t -l s0 {path} (and make it "
        "persistent with semanage fcontext)"
    )


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
    # Rootless (the hook runs in the user's namespace): no mknod, no device cgroup edit.
    namespace = hook_namespace()
    strategy = "bind" if container.userns or namespace.rootless else "mknod"
    if namespace.rootless:
        from ocihook import rootless

        rootless.check_runtime_dir(namespace)
    api = apply.mount_api(config["mount_api"])
    with Roots(config["source_root"], config["device_root"]) as roots:
        plan = plan_for(config, roots, request)
        log.debug(f"{container.id}: planned {len(plan.mounts)} mounts, {len(plan.devices)} devices")
        for warning in plan.warnings:
            log.info(f"{container.id}: warning: {warning}")
        if namespace.rootless:
            rootless.check_nodes(namespace, plan.devices, roots.device_fd, container.annotations)
        source_labels = check_source_labels(plan, config, log) if label else {}
        # New mount API: clone the sources on the host now. Classic API: open them in the
        # container's mount namespace later (a bind mount cannot cross namespaces).
        trees = api.sources(plan, roots) if api.on_host else []
        node_trees: dict[str, int] = {}
        try:
            if strategy == "bind" and api.on_host:
                node_trees = api.nodes(plan, roots)
            ldconfig_fd = (
                ldcache.open_ldconfig(config["ldconfig"]["path"]) if plan.ldconfig else None
            )
            state_fd = record.open_state_dir(config["state_dir"])
            target, edits = None, []
            if not namespace.rootless:
                target = cgroups.find_container_cgroup(container.pid, container.cgroups_path)
                edits = cgroups.allow_devices(target, device_rules(plan))
                log.debug(f"{container.id}: cgroup {target.version} {target.path}: {edits}")
            try:
                plan, trees, ld_cache = _apply_in_container(
                    container,
                    config,
                    plan,
                    trees,
                    node_trees,
                    label,
                    ldconfig_fd,
                    log,
                    api,
                    roots,
                    strategy,
                )
            except BaseException:
                if target is not None:
                    _undo_cgroup(target, edits, log, container.id)
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
    body = _record(container, plan, trees, source_labels, label, edits, ld_cache)
    if namespace.rootless:
        body["rootless"] = {"host_uid": namespace.host_uid, "device_cgroup": "unchanged"}
    try:
        record.write_record(state_fd, config["state_dir"], container.id, body)
        settings = config["records"]
        record.sweep(state_fd, config["state_dir"], settings["max_age"], settings["max_count"])
    finally:
        os.close(state_fd)
    return body


def _undo_cgroup(target, edits, log: record.Log, container_id: str) -> None:
    """Revert the device cgroup edits; a failure is logged, never raised: the error that
    made the hook roll back is the one the runtime shows."""
    try:
        cgroups.revert_device_edits(target, edits)
    except Exception as error:
        cause = describe(error) if isinstance(error, OSError) else str(error)
        log.error(f"{container_id}: rollback: cgroup {target.version} {target.path}: {cause}")


def _apply_in_container(
    container, config, plan, trees, node_trees, label, ldconfig_fd, log, api, roots, strategy
):
    """Everything done inside the container's mount namespace: probe the image's library
    dir, finalize the plan (pure), then execute it. With the classic mount API the sources
    are opened here and added to `trees`/`node_trees` (the caller closes them).
    Returns (the finalized plan, its sources, how the ld cache was updated or None)."""
    shared = apply.host_superblocks()
    root_fd = apply.enter_container(container.pid, container.rootfs)
    try:
        lib_dir = config["container"]["lib_dir"]
        if lib_dir == "auto":
            lib_dir = apply.detect_lib_dir(root_fd)
        final = finalize(plan, lib_dir, apply.lib_dir32_for(lib_dir), strategy, label)
        if not api.on_host:
            trees.extend(api.sources(plan, roots))
            if strategy == "bind":
                node_trees.update(api.nodes(plan, roots))
        bound = apply.bind_sources(trees, final)
        writer = apply.ContainerWriter(
            root_fd, final.file_label, container.host_uid(0), container.host_gid(0), shared
        )
        try:
            apply.execute(writer, final, bound, node_trees, api)
            ld_cache = None  # "native" or "ldconfig": how the ld cache was updated
            if ldconfig_fd is not None and ldcache.is_glibc_image(root_fd):
                ld_cache = ldcache.update(
                    writer,
                    ldconfig_fd,
                    root_fd,
                    container.rootfs,
                    final.ld_dirs,
                    [m.target for m in final.mounts if m.kind in LIBRARY_KINDS],
                    config["ldconfig"],
                    container.host_uid(0),
                    container.host_gid(0),
                    lambda line: log.debug(f"{container.id}: {line}"),
                )
            log.debug(f"{container.id}: applied in {container.rootfs} (lib dir {lib_dir})")
        except BaseException:
            for failure in writer.rollback():
                log.error(f"{container.id}: rollback: {failure}")
            raise
        finally:
            writer.close()
    finally:
        os.close(root_fd)
        if ldconfig_fd is not None:
            os.close(ldconfig_fd)
    return final, bound, ld_cache


def _record(container, plan, trees, source_labels, label, edits, ld_cache) -> dict:
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
            "capabilities": plan.capabilities,
            "mount_label": container.mount_label,
            "process_label": container.process_label,
            "file_label": label,
            "mounts": [
                {
                    "source": t.mount.host_path,
                    "target": t.mount.target,
                    "kind": t.mount.kind,
                    "dev": t.dev,
                    "ino": t.ino,
                    "label": source_labels.get(t.mount.host_path),
                }
                for t in trees
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
            "ld_dirs": plan.ld_dirs if ld_cache else [],
            "ld_cache": ld_cache,
        },
    )
