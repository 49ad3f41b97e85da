"""Inject the driver into one container: plan -> decide -> clone -> enter -> finalize ->
apply -> record.

The plan and every decision about the container come from the pipeline
(pipeline.plan_container: discovery, then plan.decide); this module only runs the steps in
their order, on the host and then in the container's mount namespace, and undoes them on
failure.
"""

from __future__ import annotations

import os
import time

from ocihook import records as record
from ocihook.apply import execute, ldcache, owned
from ocihook.cgroups import grant
from ocihook.discover.roots import Roots
from ocihook.errors import OcihookError, describe
from ocihook.ld import elf
from ocihook.ld import known as ld_known
from ocihook.linux import mountinfo, privileges, securepath
from ocihook.linux.userns import hook_namespace
from ocihook.pipeline import Planned, open_roots, plan_container
from ocihook.plan.decide import Decision, Target
from ocihook.plan.kinds import KINDS, LABEL_WRITABLE, Kind
from ocihook.plan.model import Plan
from ocihook.selinux import label as selinux_label

TYPE_CHECKING = False  # typing costs imports at container start: annotations only
if TYPE_CHECKING:
    from ocihook.request.parse import DeviceRequest
    from ocihook.request.state import Container


def check_source_labels(
    sources: list[execute.SourceTree],
    config: dict,
    log: record.Log,
    source_real: str | None = None,
    process_label: str | None = None,
) -> list[str | None]:
    """The SELinux labels of the bind-mount sources, in order, read from the fds that are
    mounted (not from their host paths); a label no container can read (or, for a
    read-write mount, write) fails the start, or is logged with `selinux.source_check:
    warn`. `source_real` is the source root's canonical path (for the fix's wording).
    A read-only source of a type outside the ones every container policy grants (a host
    driver's /usr/bin binary is bin_t) is fine when the loaded policy lets the container's
    `process_label` use it as its kind needs (selinux/access.py asks the kernel)."""
    labels = [
        selinux_label.get_label(securepath.fd_path(s.fd), follow_symlinks=True) for s in sources
    ]
    mode = config["selinux"]["source_check"]
    if mode == "off":
        return labels
    fix = None
    seen = set()
    asked: dict[tuple[str, str], bool | None] = {}
    for source, context in zip(sources, labels):
        mount = source.mount
        if mount.host_path in seen:
            continue  # one file mounted at two targets: one line about it
        seen.add(mount.host_path)
        rule = LABEL_WRITABLE if mount.writable else KINDS[mount.kind].label
        if rule == LABEL_WRITABLE:
            problem = writable_label_problem(mount.host_path, context)
        elif selinux_label.source_label_problem(mount.host_path, context, "") is None:
            continue
        elif policy_allows(process_label, context, KINDS[mount.kind], asked):
            continue
        else:
            fix = fix or relabel_fix(config["source_root"], source_real)
            problem = selinux_label.source_label_problem(mount.host_path, context, fix)
        if problem is None:
            continue
        if mode == "error":
            raise OcihookError(problem)
        log.info(f"warning: {problem}")
    return labels


def policy_allows(process_label: str | None, context: str | None, kind: Kind, asked: dict) -> bool:
    """Whether the running policy lets the container's domain use a source labelled
    `context` as `kind` needs (asked once per label and kind's needs: `asked`)."""
    if not process_label or not context:
        return False
    from ocihook.selinux import access

    tclass, perms = access.use(kind.source, kind.executable)
    key = (context, f"{tclass} {' '.join(perms)}")
    if key not in asked:
        asked[key] = access.allowed(process_label, context, tclass, perms)
    return asked[key] is True


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


def relabel_fix(source_root: str, real: str | None = None) -> str:
    """What to tell the user: relabel the driver's root, unless it is a host system dir.
    `real` is the root's canonical path (Roots.source_real: what its fd names)."""
    from ocihook.selinux.relabel import refusal

    if refusal(real or os.path.realpath(source_root)) is None:
        return f"run: ocihook selinux relabel {source_root}"
    return (
        f"the source root {source_root} is host system content that ocihook does not relabel: "
        "serve the driver from its own root (a driver container's volume) and relabel that, "
        "or set selinux.source_check: warn"
    )


def inject(
    container: Container, config: dict, request: DeviceRequest, started: float | None = None
) -> dict:
    """Do it; returns the record written to the state dir. `started`: the monotonic time
    the hook saw the request (the record's duration counts from there). A failure is
    recorded in <state_dir>/failed (records.write_failure) and raised again."""
    started = time.monotonic() if started is None else started
    log = record.Log(config["log"]["target"], config["log"]["debug"])
    injection = _Injection(container, config, log, started)
    try:
        result = injection.run(request)
    except Exception as error:
        if isinstance(error, OcihookError):
            log.error(f"{container.id}: {error}")
        record.write_failure(
            config, container.id, injection.route, injection.step, injection.changed, started, error
        )
        raise
    elapsed = 1000 * (time.monotonic() - started)
    log.info(
        f"{container.id}: injected {len(result['mounts'])} files, {len(result['links'])} links, "
        f"{len(result['devices'])} devices (profile {result['profile']}, "
        f"request {result['request']}, source {result['source_root']}) in {elapsed:.1f} ms"
    )
    return result


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


class _Injection:
    """One injection's steps, the handles they hold until it ends (the sources opened for
    the plan's mounts and device nodes, the host's ldconfig) and what they did (the
    finalized plan, the device cgroup edits, how the ld cache was updated): the record."""

    def __init__(self, container: Container, config: dict, log: record.Log, started: float) -> None:
        self.container = container
        self.started = started
        self.step = "plan"  # where a failure happened: the failure record's reason
        self.changed = False  # whether anything was changed (a failure is then rolled back)
        self.route = record.PRESTART  # PRECREATE when the runtime made mounts or nodes
        self.config = config
        self.log = log
        self.api = execute.mount_api(config["mount_api"])
        self.sources: list[execute.SourceTree] = []
        self.labels: list[str | None] = []
        self.node_sources: dict[str, int] = {}
        self.ldconfig_fd: int | None = None
        self.closed = False
        self.final: Plan | None = None
        self.edits: list[grant.DeviceEdit] = []
        self.ld_cache: str | None = None  # "native" or "ldconfig": how the ld cache was updated
        self.host_mounts: list | None = None  # mountinfo.Entry of our (the runtime's) namespace
        self.state_fd = -1
        # The libraries' ld cache entries: target -> source key, those of an earlier start,
        # those read now (ld/known.py), stored again after the record when something was read.
        self.ld_keys: dict[str, tuple] = {}
        self.ld_known: dict[str, tuple] = {}
        self.ld_learnt: dict[str, tuple] = {}
        self.ld_clock = 0  # ld_known.clock() before the reads

    def _debug(self, line: str) -> None:
        self.log.debug(f"{self.container.id}: {line}")

    def run(self, request: DeviceRequest) -> dict:
        container, config = self.container, self.config
        namespace = hook_namespace()  # rootless podman: the hook in the user's namespace
        target = Target.container(container.userns, container.mount_label, namespace.rootless)
        if namespace.rootless:
            from ocihook.request import rootless

            rootless.check_runtime_dir(namespace)
        state_fd = -1
        try:
            with open_roots(config) as roots:
                planned = plan_container(config, roots, request, target)
                plan, decision = planned.plan, planned.decision
                _raise_fd_limit(len(plan.mounts) + len(plan.devices))
                self._debug(f"planned {len(plan.mounts)} mounts, {len(plan.devices)} devices")
                for warning in plan.warnings:
                    self.log.info(f"{container.id}: warning: {warning}")
                if config["cuda"]["require"] and config["profile"].get("cuda"):
                    self.step = "requirement"
                    self._check_cuda_requirements(plan, roots)  # before any change
                if namespace.rootless:  # a node the user cannot open: refused before changes
                    self.step = "rootless"
                    rootless.check_nodes(
                        namespace, plan.devices, roots.device_fd, container.annotations
                    )
                # New mount API: clone the sources on the host now. Classic API: open them in
                # the container's mount namespace (a bind mount cannot cross namespaces).
                self.step = "sources"
                if self.api.on_host:
                    self._open_sources(plan, decision, roots)
                if decision.ld_writer is not None:
                    self.ldconfig_fd = elf.open_static_executable(
                        config["ldconfig"]["path"], "ldconfig"
                    )
                self.step = "state-dir"
                state_fd = self.state_fd = record.open_state_dir(config["state_dir"])
                self.step = "cgroup"
                self.host_mounts = mountinfo.read()  # our mount table: the cgroups, the shared fs
                self._with_device_cgroup(plan, decision, roots)
            self._close()
            if any(e.action == grant.PIN_ACTION for e in self.edits):
                from ocihook.cgroups import pinned  # crun 1.23+ under systemd only

                for unit in pinned.sweep():  # units of containers that are gone (no poststop)
                    self._debug(f"removed the pinned device programs of {unit} (gone)")
            # Everything that needs privilege is done: what is left is writing our own files.
            privileges.drop_capabilities()
            if self.log.debug_enabled:  # (reads /proc/self/status: only for the debug line)
                caps = privileges.effective_capabilities()
                self._debug(f"capabilities dropped, CapEff {caps:x}")
            self.step = "record"
            body = record.injection_record(
                container,
                self.final,
                self.sources,
                self.labels,
                self.edits,
                self.ld_cache,
                namespace.host_uid if namespace.rootless else None,
                self.route,
                time.monotonic() - self.started,
            )
            record.write_record(state_fd, config["state_dir"], container.id, body)
            if self.ld_learnt:
                entries = {**self.ld_known, **self.ld_learnt}
                keys, before = self.ld_keys, self.ld_clock
                stored = {
                    keys[t]: e
                    for t, e in entries.items()
                    if t in keys and ld_known.settled(keys[t], before)
                }
                ld_known.save(state_fd, config["state_dir"], stored)
            settings = config["records"]
            record.sweep(state_fd, config["state_dir"], settings["max_age"], settings["max_count"])
            return body
        finally:
            self._close()
            if state_fd >= 0:
                os.close(state_fd)

    def _open_sources(self, plan: Plan, decision: Decision, roots: Roots) -> None:
        """The plan's sources (and, for bind-mounted nodes, the host's nodes) opened for
        mounting by the mount API; their labels checked when the hook labels."""
        self.sources = self.api.sources(plan, roots)
        if decision.node_strategy == "bind":
            self.node_sources = self.api.nodes(plan, roots)
        if decision.file_label:
            step, self.step = self.step, "selinux"
            self.labels = check_source_labels(
                self.sources,
                self.config,
                self.log,
                roots.source_real,
                self.container.process_label,
            )
            self.step = step
        else:
            self.labels = [None] * len(self.sources)

    def _with_device_cgroup(self, plan: Plan, decision: Decision, roots: Roots) -> None:
        """The device cgroup edits (when the decision makes them), then the container part;
        the edits are undone when that fails."""
        cgroup = None
        container = self.container
        # The rules config.json has the runtime apply (the precreate stage's) are its own.
        rules = owned.cgroup_rules(plan, container.runtime) if decision.device_cgroup else []
        if rules:
            cgroup = grant.find_container_cgroup(
                container.pid, container.cgroups_path, annotations=container.annotations
            )
            info = lambda line: self.log.info(f"{container.id}: {line}")  # noqa: E731
            self.edits = grant.allow_devices(cgroup, rules, info)
            self.changed = bool(self.edits)
            warning = grant.update_warning(
                self.edits, _runtime_name(), CRIO_ANNOTATION in container.annotations
            )
            if warning:
                info(warning)
            if self.log.debug_enabled:
                records = [e.record() for e in self.edits]
                self._debug(f"cgroup {cgroup.version} {cgroup.path}: {records}")
        self.step = "container"
        try:
            self._in_container(plan, decision, roots)
        except BaseException:
            if cgroup is not None:
                _undo_cgroup(cgroup, self.edits, self.log, self.container.id)
            raise

    def _in_container(self, plan: Plan, decision: Decision, roots: Roots) -> None:
        """Everything done inside the container's mount namespace: complete the decision
        from the image (its lib dir, its loader), finalize the plan (pure), execute it; the
        finalized plan and how the ld cache was updated are kept for the record."""
        container = self.container
        shared = execute.host_superblocks(self.host_mounts)
        root_fd = execute.enter_container(container.pid, container.rootfs)
        try:
            final = Planned(plan, decision).finalize(root_fd)
            if not self.api.on_host:
                self._open_sources(plan, decision, roots)
            self.sources = execute.bind_sources(self.sources, final)
            uid, gid = container.host_uid(0), container.host_gid(0)
            writer = execute.ContainerWriter(root_fd, final.file_label, uid, gid, shared)
            # What the runtime made from config.json (the precreate stage's) is not redone.
            todo, trees = owned.left_to_do(final, self.sources, root_fd, container.runtime)
            if len(trees) != len(self.sources) or len(todo.devices) != len(final.devices):
                self.route = record.PRECREATE
                self._debug(
                    f"made by the runtime: {len(self.sources) - len(trees)} mounts, "
                    f"{len(final.devices) - len(todo.devices)} device nodes"
                )
            self.changed = True
            try:
                execute.execute(writer, todo, trees, self.node_sources, self.api)
                if final.ld_writer is not None and self.ldconfig_fd is not None:
                    self._known_libraries()
                    self.ld_cache = ldcache.update(
                        writer,
                        self.ldconfig_fd,
                        root_fd,
                        container.rootfs,
                        final,
                        self.config["ldconfig"]["path"],
                        uid,
                        gid,
                        self._debug,
                        self.ld_known,
                        self.ld_learnt,
                    )
                self._debug(f"applied in {container.rootfs} (lib dir {final.lib_dir})")
            except BaseException:
                for failure in writer.rollback():
                    self.log.error(f"{container.id}: rollback: {failure}")
                raise
            finally:
                writer.close()
            self.final = final
        finally:
            os.close(root_fd)

    def _known_libraries(self) -> None:
        """The ld cache entries of the libraries mounted now that an earlier start read
        (ld/known.py), by the identity of each source file that was cloned."""
        self.ld_keys = {
            s.mount.target: ld_known.key_of(s.source_stat)
            for s in self.sources
            if s.source_stat is not None and KINDS[s.mount.kind].lib_dir
        }
        self.ld_clock = ld_known.clock()
        stored = ld_known.load(self.state_fd) if self.ld_keys else {}
        found = {t: ld_known.entry(stored, k) for t, k in self.ld_keys.items()} if stored else {}
        self.ld_known = {t: e for t, e in found.items() if e is not None}

    def _check_cuda_requirements(self, plan: Plan, roots: Roots) -> None:
        """The image's NVIDIA_REQUIRE_* against the host's driver and the selected GPUs, as
        NVIDIA decides them (plan/require.py): OcihookError when one fails, before anything
        is changed. NVML (brand, arch) is asked only when evaluation reaches a brand or arch
        constraint. The container's environment is read for this check only."""
        from ocihook.plan import require

        found = require.requirements(self.container.env)
        if not found:
            return
        from ocihook.discover.nvidia import GpuFacts
        from ocihook.plan.cuda import cuda_for_driver

        facts = GpuFacts(roots, self.config["profile"], plan.driver_version)
        host = require.Host(
            plan.driver_version,
            cuda_for_driver(plan.driver_version),
            require.selected_gpus(plan),
            facts,
            self.config["cuda"]["brand"],
        )
        try:
            require.check(found, host)
        finally:
            if facts.error:
                line = f"NVIDIA_REQUIRE_*: brand and arch taken as unknown: {facts.error}"
                self.log.info(f"{self.container.id}: warning: {line}")
            elif host.asked is not None:
                self._debug(f"NVIDIA_REQUIRE_*: NVML: {host.asked}")

    def _close(self) -> None:
        """Close the handles (once; the sources stay listed for the record)."""
        if not self.closed:
            self.closed = True
            execute.close_trees(self.sources)
            for fd in self.node_sources.values():
                os.close(fd)
            if self.ldconfig_fd is not None:
                os.close(self.ldconfig_fd)


CRIO_ANNOTATION = "io.kubernetes.cri-o.ContainerID"  # CRI-O writes it into every container's


def _runtime_name() -> str:
    """The name of the program that runs the hook (the OCI runtime: runc, crun), or ""."""
    try:
        return os.path.basename(os.readlink(f"/proc/{os.getppid()}/exe"))
    except OSError:
        return ""


def _undo_cgroup(target, edits, log: record.Log, container_id: str) -> None:
    """Revert the device cgroup edits; a failure is logged, never raised: the error that
    made the hook roll back is the one the runtime shows."""
    try:
        grant.revert_device_edits(target, edits)
    except Exception as error:
        cause = describe(error) if isinstance(error, OSError) else str(error)
        log.error(f"{container_id}: rollback: cgroup {target.version} {target.path}: {cause}")
