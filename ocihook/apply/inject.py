"""Inject the driver into one container: plan -> decide -> clone -> enter -> finalize ->
apply -> record.

The plan and every decision about the container come from the pipeline
(pipeline.plan_container: discovery, then plan.decide); this module only runs the steps in
their order, on the host and then in the container's mount namespace. Each step does one
thing, pushes its undo onto an UndoStack (a handle to close whatever happens, a change to
revert when a later step fails) and returns what the record needs; `Progress` is where the
injection got to, for the failure record.
"""

from __future__ import annotations

import os
import time

from ocihook import records
from ocihook.apply import execute, ldcache, owned, sources
from ocihook.apply.sources import check_source_labels
from ocihook.apply.writer import ContainerWriter
from ocihook.cgroups import grant
from ocihook.errors import OcihookError, describe
from ocihook.ld import elf
from ocihook.ld import known as ld_known
from ocihook.linux import mountinfo, namespaces, privileges
from ocihook.linux.userns import hook_namespace
from ocihook.pipeline import open_roots, plan_container
from ocihook.plan.decide import Target
from ocihook.plan.kinds import KINDS
from ocihook.structs import Struct

TYPE_CHECKING = False  # typing costs imports at container start: annotations only
if TYPE_CHECKING:
    from collections.abc import Callable

    from ocihook.apply.sources import ClassicMountApi, NewMountApi, SourceTree
    from ocihook.discover.roots import Roots
    from ocihook.plan.decide import Decision
    from ocihook.plan.model import Plan
    from ocihook.request.parse import DeviceRequest
    from ocihook.request.state import Container


def inject(
    container: Container, config: dict, request: DeviceRequest, started: float | None = None
) -> dict:
    """Do it; returns the record written to the state dir. `started`: the monotonic time
    the hook saw the request (the record's duration counts from there). A failure is
    recorded in <state_dir>/failed (records.write_failure) and raised again."""
    started = time.monotonic() if started is None else started
    log = records.Log(config["log"]["target"], config["log"]["debug"])
    progress = Progress()
    try:
        result = _inject(container, config, request, log, progress, started)
    except Exception as error:
        if isinstance(error, OcihookError):
            log.error(f"{container.id}: {error}")
        records.write_failure(
            config, container.id, progress.route, progress.step, progress.changed, started, error
        )
        raise
    elapsed = 1000 * (time.monotonic() - started)
    log.info(
        f"{container.id}: injected {len(result['mounts'])} files, {len(result['links'])} links, "
        f"{len(result['devices'])} devices (profile {result['profile']}, "
        f"request {result['request']}, source {result['source_root']}) in {elapsed:.1f} ms"
    )
    return result


class Progress:
    """Where the injection got to, for the failure record (records.write_failure): the step
    running, whether anything was changed (a failure is then rolled back) and the route
    (PRECREATE when the runtime made mounts or nodes)."""

    __slots__ = ("step", "changed", "route")

    def __init__(self) -> None:
        self.step = "plan"
        self.changed = False
        self.route = records.PRESTART


class UndoStack:
    """What to undo, last first, when the `with` block ends: the handles pushed with `close`
    always, the changes pushed with `revert` only when the block raised. Every undo runs
    even past one that raises; the last such error is raised (as nested `finally`s would)."""

    def __init__(self) -> None:
        self._undo: list[tuple[Callable[[], object], bool]] = []

    def close(self, undo: Callable[[], object]) -> None:
        self._undo.append((undo, False))

    def revert(self, undo: Callable[[], object]) -> None:
        self._undo.append((undo, True))

    def __enter__(self) -> UndoStack:
        return self

    def __exit__(self, failed: object, *exc: object) -> None:
        error = None
        while self._undo:
            undo, on_failure = self._undo.pop()
            if on_failure and failed is None:
                continue
            try:
                undo()
            except BaseException as raised:
                error = raised
        if error is not None:
            raise error


class LdEntries(Struct):
    """The mounted libraries' ld cache entries (ld/known.py): their source keys by target,
    the clock before the reads, the entries an earlier start stored and those read now."""

    __slots__ = ("keys", "clock", "known", "learnt")

    keys: dict[str, tuple]
    clock: int
    known: dict[str, tuple]
    learnt: dict[str, tuple]


def _inject(
    container: Container,
    config: dict,
    request: DeviceRequest,
    log: records.Log,
    progress: Progress,
    started: float,
) -> dict:
    """The steps, in order: those that need privilege over `undo` (their handles closed when
    they are done, their changes reverted when one fails), then the record, written to the
    state dir that `kept` holds open until the end."""
    api = sources.mount_api(config["mount_api"])
    namespace = hook_namespace()  # rootless podman: the hook in the user's namespace
    target = Target.container(container.userns, container.mount_label, namespace.rootless)
    if namespace.rootless:
        from ocihook.request import rootless

        rootless.check_runtime_dir(namespace)
    with UndoStack() as kept:
        with UndoStack() as undo:
            roots = open_roots(config)
            undo.close(roots.close)
            planned = plan_container(config, roots, request, target)
            plan, decision = planned.plan, planned.decision
            _raise_fd_limit(len(plan.mounts) + len(plan.devices))
            log.debug(
                f"{container.id}: planned {len(plan.mounts)} mounts, {len(plan.devices)} devices"
            )
            for warning in plan.warnings:
                log.info(f"{container.id}: warning: {warning}")
            if config["cuda"]["require"] and config["profile"].get("cuda"):
                progress.step = "requirement"
                _check_cuda_requirements(container, config, log, plan, roots)  # before any change
            if namespace.rootless:  # a node the user cannot open: refused before changes
                progress.step = "rootless"
                rootless.check_nodes(
                    namespace, plan.devices, roots.device_fd, container.annotations
                )
            # New mount API: clone the sources on the host now. Classic API: open them in the
            # container's mount namespace (a bind mount cannot cross namespaces).
            progress.step = "sources"
            opened, labels = None, []
            if api.on_host:
                opened = _open_sources(undo, api, plan, decision, roots)
                labels = _source_labels(
                    opened.trees, decision, container, config, log, roots, progress
                )
            ldconfig_fd = None
            if decision.ld_writer is not None:
                ldconfig_fd = elf.open_static_executable(config["ldconfig"]["path"], "ldconfig")
                undo.close(lambda: os.close(ldconfig_fd))
            progress.step = "state-dir"
            state_fd = records.open_state_dir(config["state_dir"])
            kept.close(lambda: os.close(state_fd))
            progress.step = "cgroup"
            host_mounts = mountinfo.read_text()  # our mount table: the cgroups, the shared fs
            edits = _allow_devices(undo, plan, decision, container, log, progress, host_mounts)
            progress.step = "container"
            shared = namespaces.host_superblocks(host_mounts)
            root_fd = namespaces.enter_container(container.pid, container.rootfs)
            undo.close(lambda: os.close(root_fd))
            final = planned.finalize(root_fd)  # the decision completed from the image
            if opened is None:
                opened = _open_sources(undo, api, plan, decision, roots)
                labels = _source_labels(
                    opened.trees, decision, container, config, log, roots, progress
                )
            trees = execute.bind_sources(opened.trees, final)
            uid, gid = container.host_uid(0), container.host_gid(0)
            writer = _container_writer(
                undo, root_fd, final.file_label, uid, gid, shared, container, log
            )
            # What the runtime made from config.json (the precreate stage's) is not redone.
            todo, todo_trees = owned.left_to_do(final, trees, root_fd, container.runtime)
            if len(todo_trees) != len(trees) or len(todo.devices) != len(final.devices):
                progress.route = records.PRECREATE
                log.debug(
                    f"{container.id}: made by the runtime: {len(trees) - len(todo_trees)} "
                    f"mounts, {len(final.devices) - len(todo.devices)} device nodes"
                )
            progress.changed = True
            execute.execute(writer, todo, todo_trees, opened.nodes, api)
            ld_cache, ld = None, None
            if final.ld_writer is not None and ldconfig_fd is not None:
                ld = _known_libraries(trees, state_fd)
                ld_cache = ldcache.update(
                    writer,
                    ldconfig_fd,
                    root_fd,
                    container.rootfs,
                    final,
                    config["ldconfig"]["path"],
                    uid,
                    gid,
                    lambda line: log.debug(f"{container.id}: {line}"),
                    ld.known,
                    ld.learnt,
                )
            log.debug(f"{container.id}: applied in {container.rootfs} (lib dir {final.lib_dir})")
        _sweep_pinned_units(edits, container, log)
        # Everything that needs privilege is done: what is left is writing our own files.
        _drop_capabilities(container, log)
        progress.step = "record"
        body = records.injection_record(
            container,
            final,
            trees,
            labels,
            edits,
            ld_cache,
            namespace.host_uid if namespace.rootless else None,
            progress.route,
            time.monotonic() - started,
        )
        records.write_record(state_fd, config["state_dir"], container.id, body)
        if ld is not None and ld.learnt:
            _store_ld_entries(state_fd, config["state_dir"], ld)
        settings = config["records"]
        records.sweep(state_fd, config["state_dir"], settings["max_age"], settings["max_count"])
        return body


def _raise_fd_limit(files: int) -> None:
    """Two descriptors per injected file stay open until the end (the detached mount and
    its undo handle): allow as many as the hard limit permits where the soft limit (read
    by sysconf, which spares importing `resource`, an extension module) may not do."""
    if os.sysconf("SC_OPEN_MAX") >= 2 * files + 128:
        return
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _check_cuda_requirements(
    container: Container, config: dict, log: records.Log, plan: Plan, roots: Roots
) -> None:
    """The image's NVIDIA_REQUIRE_* against the host's driver and the selected GPUs, as
    NVIDIA decides them (plan/require.py): OcihookError when one fails, before anything
    is changed. NVML (brand, arch) is asked only when evaluation reaches a brand or arch
    constraint. The container's environment is read for this check only."""
    from ocihook.plan import require

    found = require.requirements(container.env)
    if not found:
        return
    from ocihook.discover.nvidia import GpuFacts
    from ocihook.plan.cuda import cuda_for_driver

    facts = GpuFacts(roots, config["profile"], plan.driver_version)
    host = require.Host(
        plan.driver_version,
        cuda_for_driver(plan.driver_version),
        require.selected_gpus(plan),
        facts,
        config["cuda"]["brand"],
    )
    try:
        require.check(found, host)
    finally:
        if facts.error:
            line = f"NVIDIA_REQUIRE_*: brand and arch taken as unknown: {facts.error}"
            log.info(f"{container.id}: warning: {line}")
        elif host.asked is not None:
            log.debug(f"{container.id}: NVIDIA_REQUIRE_*: NVML: {host.asked}")


class OpenedSources(Struct):
    """The plan's sources opened for mounting (in plan order) and the host's device nodes
    to bind-mount (by path)."""

    __slots__ = ("trees", "nodes")

    trees: list[SourceTree]
    nodes: dict[str, int]


def _open_sources(
    undo: UndoStack,
    api: NewMountApi | ClassicMountApi,
    plan: Plan,
    decision: Decision,
    roots: Roots,
) -> OpenedSources:
    """The plan's sources and, for bind-mounted nodes, the host's nodes, opened for mounting
    by the mount API; closed when the injection ends."""
    trees = api.sources(plan, roots)
    undo.close(lambda: sources.close_trees(trees))
    nodes: dict[str, int] = {}
    if decision.node_strategy == "bind":
        nodes = api.nodes(plan, roots)
        undo.close(lambda: _close_fds(nodes))
    return OpenedSources(trees, nodes)


def _source_labels(
    trees: list[SourceTree],
    decision: Decision,
    container: Container,
    config: dict,
    log: records.Log,
    roots: Roots,
    progress: Progress,
) -> list[str | None]:
    """The opened sources' labels, checked (step "selinux") when the hook labels."""
    if not decision.file_label:
        return [None] * len(trees)
    step, progress.step = progress.step, "selinux"
    labels = check_source_labels(trees, config, log, roots.source_real, container.process_label)
    progress.step = step
    return labels


def _close_fds(fds: dict[str, int]) -> None:
    for fd in fds.values():
        os.close(fd)


def _allow_devices(
    undo: UndoStack,
    plan: Plan,
    decision: Decision,
    container: Container,
    log: records.Log,
    progress: Progress,
    host_mounts: str,
) -> list[grant.DeviceEdit]:
    """The device cgroup edits (when the decision makes them), reverted when a later step
    fails; the rules config.json has the runtime apply (the precreate stage's) are its own.
    `host_mounts`: our mountinfo text (its cgroup mounts locate the container's cgroup)."""
    rules = owned.cgroup_rules(plan, container.runtime) if decision.device_cgroup else []
    if not rules:
        return []
    cgroup = grant.find_container_cgroup(
        container.pid,
        container.cgroups_path,
        mounts=mountinfo.parse(host_mounts, grant.CGROUP_FSTYPES),
        annotations=container.annotations,
    )
    info = lambda line: log.info(f"{container.id}: {line}")  # noqa: E731
    edits = grant.allow_devices(cgroup, rules, info)
    undo.revert(lambda: _undo_cgroup(cgroup, edits, log, container.id))
    progress.changed = bool(edits)
    warning = grant.update_warning(edits, _runtime_name(), CRIO_ANNOTATION in container.annotations)
    if warning:
        info(warning)
    if log.debug_enabled:
        log.debug(
            f"{container.id}: cgroup {cgroup.version} {cgroup.path}: {[e.record() for e in edits]}"
        )
    return edits


def _container_writer(
    undo: UndoStack,
    root_fd: int,
    label: str | None,
    uid: int,
    gid: int,
    shared: frozenset[int],
    container: Container,
    log: records.Log,
) -> ContainerWriter:
    """The writer of the changes in the rootfs: its changes rolled back (each failure
    logged) when a later step fails, its directory fds closed when the injection ends."""
    writer = ContainerWriter(root_fd, label, uid, gid, shared)
    undo.close(writer.close)

    def rollback() -> None:
        for failure in writer.rollback():
            log.error(f"{container.id}: rollback: {failure}")

    undo.revert(rollback)
    return writer


def _known_libraries(trees: list[SourceTree], state_fd: int) -> LdEntries:
    """The ld cache entries of the libraries mounted now that an earlier start read
    (ld/known.py), by the identity of each source file that was cloned."""
    keys = {
        s.mount.target: ld_known.key_of(s.source_stat)
        for s in trees
        if s.source_stat is not None and KINDS[s.mount.kind].lib_dir
    }
    clock = ld_known.clock()
    stored = ld_known.load(state_fd) if keys else {}
    found = {t: ld_known.entry(stored, k) for t, k in keys.items()} if stored else {}
    return LdEntries(keys, clock, {t: e for t, e in found.items() if e is not None}, {})


def _store_ld_entries(state_fd: int, state_dir: str, ld: LdEntries) -> None:
    """The entries known and read now, stored for the next start where their files are
    settled (ld_known.settled: not changed since just before the reads)."""
    entries = {**ld.known, **ld.learnt}
    stored = {
        ld.keys[t]: e
        for t, e in entries.items()
        if t in ld.keys and ld_known.settled(ld.keys[t], ld.clock)
    }
    ld_known.save(state_fd, state_dir, stored)


def _sweep_pinned_units(
    edits: list[grant.DeviceEdit], container: Container, log: records.Log
) -> None:
    """Pinned device programs (crun 1.23+ under systemd only) of containers that are gone
    (no poststop stage), removed when this start pinned some."""
    if any(e.action == grant.PIN_ACTION for e in edits):
        from ocihook.cgroups import pinned

        for unit in pinned.sweep():
            log.debug(f"{container.id}: removed the pinned device programs of {unit} (gone)")


def _drop_capabilities(container: Container, log: records.Log) -> None:
    privileges.drop_capabilities()
    if log.debug_enabled:  # (reads /proc/self/status: only for the debug line)
        caps = privileges.effective_capabilities()
        log.debug(f"{container.id}: capabilities dropped, CapEff {caps:x}")


CRIO_ANNOTATION = "io.kubernetes.cri-o.ContainerID"  # CRI-O writes it into every container's


def _runtime_name() -> str:
    """The name of the program that runs the hook (the OCI runtime: runc, crun), or ""."""
    try:
        return os.path.basename(os.readlink(f"/proc/{os.getppid()}/exe"))
    except OSError:
        return ""


def _undo_cgroup(target, edits, log: records.Log, container_id: str) -> None:
    """Revert the device cgroup edits; a failure is logged, never raised: the error that
    made the hook roll back is the one the runtime shows."""
    try:
        grant.revert_device_edits(target, edits)
    except Exception as error:
        cause = describe(error) if isinstance(error, OSError) else str(error)
        log.error(f"{container_id}: rollback: cgroup {target.version} {target.path}: {cause}")
