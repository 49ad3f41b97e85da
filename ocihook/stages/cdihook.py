"""The CDI hook step (`ocihook cdi-hook`): the createContainer hooks that a CDI spec from
`ocihook cdi generate` names (plan/edits.py renders them), for what CDI cannot express:
NVIDIA_REQUIRE_* (check-requirements), soname links and the container's ld cache (with
the image's CUDA compat libraries first where NVIDIA's rule takes them). Its input is the
OCI state and the spec's arguments, adapted into a container and a decision.

The runtime runs createContainer hooks in the container's mount namespace before
pivot_root, with the OCI state on stdin. The same pieces as the prestart path do the work:
state.py validates the state and config.json, securepath.py resolves every path in the
rootfs by fd, writer.ContainerWriter creates the links (never in a host-shared directory,
an image file in the way is an error, labelled as the spec says), and ldcache.py runs the
host's static ldconfig sandboxed in the rootfs.

What to do was decided when the spec was generated, from its config (plan.decide for a
static target): each command's arguments carry it (`--selinux-label none|mount-label|LABEL`,
`--ld-writer ldconfig|none`) and no config or default is read at container start. A spec
written by an earlier release has neither argument: for it the defaults' `selinux` and
`ldconfig` sections decide, as that release did.
Run from outside the container (createRuntime or prestart) they join its mount namespace
first, exactly as the hook does.
"""

from __future__ import annotations

import os
import sys

from ocihook.apply import ldcache
from ocihook.apply.writer import ContainerWriter
from ocihook.errors import OcihookError
from ocihook.ld.elf import open_static_executable
from ocihook.linux import mountinfo, namespaces
from ocihook.pipeline import legacy_step_decision
from ocihook.plan.decide import (
    NO_LABEL,
    Decision,
    Target,
    carried_decision,
)
from ocihook.plan.model import Link
from ocihook.request.state import MAX_STATE_BYTES, Container, load_container, read_state


def read_container(stdin=None) -> Container:
    data = (stdin or sys.stdin.buffer).read(MAX_STATE_BYTES + 1)
    return load_container(read_state(data))


def parse_link(value: str) -> Link:
    """TARGET::LINK -> Link(LINK, TARGET): LINK an absolute container path, TARGET its content."""
    target, sep, link = value.partition("::")
    if not sep or not target or not link.startswith("/") or "\0" in value:
        raise OcihookError(f"--link {value!r}: expected TARGET::/ABSOLUTE/LINK")
    if os.path.normpath(link) in ("/", "//"):
        raise OcihookError(f"--link {value!r}: the link cannot be the root")
    return Link(os.path.normpath(link), target)


def _in_container_of(pid: int) -> bool:
    """Whether we already run in the mount namespace of the container whose init is `pid`.

    At createContainer runc runs us from the container's init, in its namespaces, before
    /proc is remounted: the state's pid is then its pid in the container's pid namespace
    (1), which the host's /proc still mounted here does not show. So: a pid namespace other
    than that of the mounted /proc means we are inside; otherwise compare mount namespaces.
    """
    if os.getpid() != int(os.readlink("/proc/self")):
        return True
    try:
        return namespaces.mount_namespace() == namespaces.mount_namespace(pid)
    except OSError as error:
        raise OcihookError(f"state on stdin: pid {pid}: {error.strerror}") from None


class _Rootfs:
    """An O_PATH fd of the container's rootfs, in the container's mount namespace; and
    whether we joined it from outside (then created files belong to the container's root)."""

    def __init__(self, container: Container) -> None:
        self.container = container
        if container.pid < 0:
            raise OcihookError("state on stdin: field 'pid' is negative")
        # crun runs createContainer hooks from the container's init, in its namespaces, with
        # no pid in the state (its do_hooks(def, 0, ...)); runc with the init's pid.
        inside = container.pid == 0 or _in_container_of(container.pid)
        self.joined = not inside
        # st_dev of every file system mounted where we start: a directory on one of them,
        # other than the rootfs's own mount, is shared with the host (a volume, /dev, and
        # inside the container already, the CDI mounts); nothing is created there.
        self.shared = mountinfo.superblocks()
        if self.joined:
            self.fd = namespaces.enter_container(container.pid, container.rootfs)
        else:
            self.fd = self._open_inside(container.rootfs)

    @staticmethod
    def _open_inside(rootfs: str) -> int:
        if namespaces.init_mount_namespace() == namespaces.mount_namespace():
            raise OcihookError("cdi-hook: runs in the host's mount namespace, not a container's")
        return namespaces.open_rootfs(rootfs, "this mount namespace")

    def ids(self) -> tuple[int, int]:
        """uid/gid to create files as: the container's root, mapped when we came from outside
        (inside a user namespace the runtime already runs us as the container's root)."""
        if self.joined:
            return self.container.host_uid(0), self.container.host_gid(0)
        return 0, 0

    def close(self) -> None:
        os.close(self.fd)


# The arguments of a spec from an earlier release, which carries no decision.
LEGACY = object()


def _decision(
    container: Container,
    links: list[Link],
    folders: list[str],
    label: object = LEGACY,
    ld_writer: object = LEGACY,
    compat: tuple[str, str, str, str | None] | None = None,
) -> Decision:
    """The decision for the part of the spec's plan that a cdi-hook command carries out (its
    links, its ld cache dirs) in this container: the label of what it creates and whether
    the ld cache is updated (the sandboxed ldconfig; left to the image's loader), with the
    CUDA compat probe `compat` (dir, library, mode, host driver version) where the spec
    carries one. The spec's arguments say them (`label`: plan.decide.label_choice's choice,
    `ld_writer`: the decided writer or None), read by plan.decide.carried_decision for this
    container's mount label.
    Where the spec says nothing (LEGACY: a spec of an earlier release), plan.decide with
    the defaults' `selinux` and `ldconfig` sections decides, as that release did."""
    target = Target.spec_container(container.userns, container.mount_label)
    if label is not LEGACY or ld_writer is not LEGACY:
        return carried_decision(
            NO_LABEL if label is LEGACY else label,  # type: ignore[arg-type]
            None if ld_writer is LEGACY else ld_writer,  # type: ignore[arg-type]
            target,
            compat,
        )
    return legacy_step_decision(target, links, folders)


def create_symlinks(container: Container, links: list[Link], label: object = LEGACY) -> int:
    """Create each link in the rootfs, labelled as the spec's label choice (`label`) says
    for this container; an existing identical link is fine. Returns how many were created
    or changed. All or nothing: a failure undoes what this call did."""
    label = _decision(container, links, [], label=label).file_label
    rootfs = _Rootfs(container)
    try:
        uid, gid = rootfs.ids()
        writer = ContainerWriter(rootfs.fd, label, uid, gid, rootfs.shared)
        try:
            for link in links:
                writer.link(link)
        except BaseException:
            writer.rollback()
            raise
        finally:
            writer.close()
        return len(links)
    finally:
        rootfs.close()


def update_ldcache(
    container: Container,
    ldconfig_path: str,
    folders: list[str],
    ld_writer: object = LEGACY,
    compat: tuple[str, str, str, str | None] | None = None,
) -> bool:
    """Run the host's ldconfig sandboxed in the rootfs for `folders` when the spec's ld
    cache choice (`ld_writer`) says so; False when it does not, or when the image has no
    glibc loader (an ld cache means nothing there). `compat` (compat dir, library, mode,
    host driver version), as the spec carries it: the image's CUDA compat dir comes first
    where NVIDIA's rule takes its library (plan/cuda.py, probed by fd as the hook does)."""
    for folder in folders:
        if not folder.startswith("/") or "\0" in folder:
            raise OcihookError(f"--folder {folder!r}: must be an absolute path")
    if compat is not None and (not compat[0].startswith("/") or "\0" in compat[0]):
        raise OcihookError(f"--cuda-compat {compat[0]!r}: must be an absolute path")
    decision = _decision(container, [], folders, ld_writer=ld_writer, compat=compat)
    if decision.ld_writer is None:
        return False
    ldconfig_fd = open_static_executable(ldconfig_path, "ldconfig")
    try:
        rootfs = _Rootfs(container)
        try:
            found = decision.in_image(rootfs.fd)
            if found.ld_writer is None:
                return False
            first = (
                found.cuda_compat["dir"] if found.cuda_compat and found.cuda_compat["use"] else None
            )
            dirs = [first, *[f for f in folders if f != first]] if first else folders
            uid, gid = rootfs.ids()
            ldcache.update_cache(ldconfig_fd, rootfs.fd, container.rootfs, dirs, uid, gid)
            return True
        finally:
            rootfs.close()
    finally:
        os.close(ldconfig_fd)


def parse_gpu(value: str) -> tuple[int, int, str, str | None, str | None]:
    """--gpu INDEX=MAJOR:MINOR,BRAND,ARCH (BRAND and ARCH "-" when NVML could not tell) ->
    (major, minor, its label, brand, arch)."""
    index, eq, rest = value.partition("=")
    fields = rest.split(",")
    numbers = fields[0].split(":") if fields else []
    if (
        not eq
        or len(fields) != 3
        or len(numbers) != 2
        or not all(n.isascii() and n.isdigit() and len(n) <= 7 for n in numbers)
        or not index.isascii()
        or not index.isdigit()
        or len(index) > 4
    ):
        raise OcihookError(f"--gpu {value[:80]!r}: expected INDEX=MAJOR:MINOR,BRAND,ARCH")
    brand, arch = (None if f == "-" else f for f in fields[1:])
    return int(numbers[0]), int(numbers[1]), f"GPU {int(index)}", brand, arch


def check_requirements(
    container: Container,
    driver: str | None,
    cuda: str | None,
    gpus: list[tuple[int, int, str, str | None, str | None]],
    brand: str | None = None,
) -> None:
    """NVIDIA_REQUIRE_* of the container (its config.json's env) against the facts the spec
    carries (the host's driver and CUDA version, each GPU's brand and compute capability,
    written by `cdi generate`), for the GPUs whose nodes the container got (its
    config.json's linux.devices, which the runtime filled from the spec): one line and a
    refused container when one does not hold (plan/require.py, as the hook decides it)."""
    from ocihook.plan import require

    found = require.requirements(container.env)
    if not found:
        return
    nodes = {(major, minor) for _path, kind, major, minor in container.runtime.nodes if kind == "c"}
    selected, facts = [], {}
    for major, minor, label, gpu_brand, arch in gpus:
        if (major, minor) in nodes:
            selected.append(require.Gpu(label, minor))
            facts[minor] = (gpu_brand, arch)
    host = require.Host(driver, cuda, selected, lambda: (facts, None), brand)
    require.check(found, host)
