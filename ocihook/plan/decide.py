"""Where a plan goes, and everything that decides: the one decision site.

A `Target` is what is known of where a plan goes: a container at hand (the prestart hook),
its proposed OCI config before the runtime creates it (the precreate stage), the command
line of `ocihook plan`, or a static CDI spec (`ocihook cdi generate`, and the
`ocihook cdi-hook` commands that carry out its links and ld cache). `decide` turns the
config, the plan from discovery and the target into a `Decision`: everything
`plan.decide.finalize` needs (library dirs, device node strategy, file label, ld cache writer)
and what the executor does around the plan (whether it edits the device cgroup). The hook,
`ocihook plan`, `ocihook cdi generate` and `ocihook cdi-hook` all call it; nothing else
decides these.

What only the image can tell (its library dir, whether it has a glibc loader) the hook
learns inside the container's mount namespace: the decision names what is left to probe
(`Decision.probe`) and `Decision.in_image` completes it from the image's root, by fd.
"""

from __future__ import annotations

import os
import stat

from ocihook.errors import OcihookError
from ocihook.linux import securepath
from ocihook.plan.kinds import KINDS
from ocihook.plan.model import LD_WRITERS, NODE_STRATEGIES, Plan
from ocihook.selinux.label import selinux_enabled
from ocihook.structs import Struct

CONTAINER = "container"  # a container at hand: the prestart hook
CLI = "cli"  # `ocihook plan`: what the command line says of a container
STATIC = "static"  # a CDI spec, written before any container (and its cdi-hook commands)
# The precreate stage (podman): the proposed OCI config of a container whose root is mounted
# but not started; the runtime creates, allows and mounts what the config gets.
PRECREATE = "precreate"
TARGET_KINDS = (CONTAINER, CLI, STATIC, PRECREATE)
# The label choice (label_choice): no label, the container's own mount label, or else a
# fixed label (the config's `selinux.label`). A CDI spec carries it to its cdi-hook commands.
NO_LABEL = "none"
MOUNT_LABEL = "mount-label"
# A CDI spec's CUDA compat decision: carried to its update-ldcache hook, taken per image there.
PER_IMAGE = "per image, at container start (cdi-hook update-ldcache)"

_MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
_MULTIARCH32 = {"x86_64": "i386-linux-gnu", "aarch64": "arm-linux-gnueabihf"}
# Dynamic loaders whose presence marks a glibc image (an ld cache is useless elsewhere).
GLIBC_LOADERS = (
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/ld-linux-aarch64.so.1",
    "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
    "/usr/lib64/ld-linux-x86-64.so.2",
    "/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
)


class Target(Struct):
    """What is known of where a plan goes (plain data: the facts `decide` reads)."""

    __slots__ = ("kind", "userns", "mount_label", "lib_dir", "image", "rootless")
    _defaults = {
        "userns": False,
        "mount_label": None,
        "lib_dir": None,
        "image": False,
        "rootless": False,
    }
    kind: str  # TARGET_KINDS
    userns: bool  # the container has a user namespace (`ocihook plan --userns`)
    mount_label: str | None  # the container's SELinux mount label, when one is at hand
    lib_dir: str | None  # the library dir the command line gives (`--lib-dir`), else None
    image: bool  # the image's root is at hand to probe (the rootfs, `ocihook plan --rootfs`)
    # The hook itself runs in a user namespace (rootless podman: linux.userns.hook_namespace, the
    # hook's own uid_map, never the container's config): no mknod, no device cgroup edit.
    rootless: bool

    @classmethod
    def container(cls, userns: bool, mount_label: str | None, rootless: bool = False) -> Target:
        """A container at hand (the prestart stage): its rootfs is there to probe."""
        return cls(CONTAINER, userns, mount_label, None, True, rootless)

    @classmethod
    def precreate(cls, userns: bool, mount_label: str | None) -> Target:
        """A container's proposed OCI config (podman's precreate stage): its root is mounted."""
        return cls(PRECREATE, userns, mount_label, None, True, False)

    @classmethod
    def spec_container(cls, userns: bool, mount_label: str | None) -> Target:
        """The container a CDI spec's cdi-hook command runs for: a static target whose
        rootfs is at hand."""
        return cls(STATIC, userns, mount_label, None, True, False)

    @classmethod
    def static(cls, lib_dir: str | None = None) -> Target:
        """A CDI spec, written before any container (`ocihook cdi generate`, the device
        plugin's inventory)."""
        return cls(STATIC, False, None, lib_dir, False, False)

    @classmethod
    def command_line(
        cls, userns: bool = False, lib_dir: str | None = None, image: bool = False
    ) -> Target:
        """What a command line says of a container (`ocihook plan`, `check`, `features`):
        `image` when a rootfs is given to probe."""
        return cls(CLI, userns, None, lib_dir, image, False)


class Decision(Struct):
    """Everything decided for one target: what `plan.decide.finalize` stamps into the plan and
    what the executor does around it."""

    __slots__ = (
        "lib_dir",
        "lib_dir32",
        "node_strategy",
        "file_label",
        "ld_writer",
        "device_cgroup",
        "probe",
        "cuda_compat",
        "compat_probe",
    )
    _defaults = {"cuda_compat": None, "compat_probe": None}
    lib_dir: str | None  # where 64-bit libraries go; None: the plan's placeholder
    lib_dir32: str | None  # where 32-bit (compat32) ones go; None: the plan's placeholder
    node_strategy: str  # plan.NODE_STRATEGIES: mknod, or bind (a user namespace)
    file_label: str | None  # the SELinux label of what the hook creates; None: untouched
    ld_writer: str | None  # plan.LD_WRITERS: how the ld cache is written; None: not at all
    device_cgroup: bool  # the executor lets the container use its devices in the cgroup
    probe: tuple[str, ...]  # left to the image: "lib_dir", "glibc", "cuda_compat"
    # CUDA forward compatibility (cuda.py's dict for the plan), or None without `cuda`
    cuda_compat: dict | None
    # (compat dir, library, mode) that the probe of the image looks for; None: no probe
    compat_probe: tuple[str, str, str] | None

    def in_image(self, root_fd: int) -> Decision:
        """The decision completed with what the image's root (`root_fd`) shows: its library
        dir when the decision leaves that to the image, and whether it has a glibc loader
        when the ld cache is to be written (without one the cache means nothing)."""
        if not self.probe:
            return self
        changes: dict = {"probe": ()}
        if "lib_dir" in self.probe:
            lib_dir = probe_lib_dir(root_fd)
            changes.update(lib_dir=lib_dir, lib_dir32=lib_dir32_for(lib_dir))
        if "glibc" in self.probe and not has_glibc_loader(root_fd):
            changes["ld_writer"] = None
        if "cuda_compat" in self.probe:
            if changes.get("ld_writer", self.ld_writer) is None:
                reason = "the image has no glibc loader (no ld cache)"
                changes["cuda_compat"] = {**self.cuda_compat, "reason": reason}
            else:
                from ocihook.plan import cuda  # only for a CUDA profile's image

                changes["cuda_compat"] = cuda.probe_compat(
                    root_fd, *self.compat_probe, self.cuda_compat["host_version"]
                )
        return self.replace(**changes)


def decide(config: dict, target: Target, plan: Plan) -> Decision:
    """Everything that depends on the target, for `plan` (discover.build.build_plan's), from the
    config (`container`, `ldconfig` and `selinux` sections) and the facts in `target`."""
    if target.kind not in TARGET_KINDS:
        raise ValueError(f"target kind {target.kind!r}")
    lib_dir, probe = _lib_dir(config, target, plan)
    ld_writer = _ld_writer(config, target, plan)
    if ld_writer is not None and target.image:
        probe += ("glibc",)
    compat, compat_probe = _cuda_compat(config, target, plan, ld_writer)
    if compat_probe is not None:
        probe += ("cuda_compat",)
    return Decision(
        lib_dir=lib_dir,
        lib_dir32=lib_dir32_for(lib_dir) if lib_dir is not None else None,
        node_strategy="bind" if target.userns or target.rootless else "mknod",
        file_label=_file_label(config["selinux"], target),
        ld_writer=ld_writer,
        # With a CDI spec or at precreate the runtime allows the nodes; rootless, only host
        # root could (v1 devices.allow, v2 BPF programs need the initial namespace's
        # CAP_SYS_ADMIN).
        device_cgroup=target.kind not in (STATIC, PRECREATE) and not target.rootless,
        probe=probe,
        cuda_compat=compat,
        compat_probe=compat_probe,
    )


def _cuda_compat(config: dict, target: Target, plan: Plan, ld_writer: str | None):
    """(the plan's cuda_compat before the image is probed, what the probe looks for):
    only for a profile with `cuda`, and an image probe only where the image is at hand,
    the ld cache is written and the profile's library (libcuda) is injected (cuda.py)."""
    profile = config["profile"]
    settings = profile.get("cuda") if isinstance(profile, dict) else None
    if not settings:
        return None, None
    mode = config["cuda"]["compat"]
    libraries = [m.target for m in plan.mounts if KINDS[m.kind].lib_dir]
    pending = {
        "mode": mode,
        "dir": settings["compat_dir"],
        "use": False,
        "library": None,
        "version": None,
        "host_version": plan.driver_version,
        "rule": None,
        "note": None,
        "reason": "",
    }
    prefix = settings["library"] + "."
    if mode == "disabled":
        return {**pending, "reason": "disabled (cuda.compat)"}, None
    if not any(os.path.basename(t).startswith(prefix) for t in libraries):
        return {**pending, "reason": f"no {prefix}* injected"}, None
    if ld_writer is None:
        return {**pending, "reason": "the ld cache is not written"}, None
    if target.kind == STATIC:  # a CDI spec: its update-ldcache hook probes each image
        return {**pending, "reason": PER_IMAGE}, None
    if not target.image:
        return {**pending, "reason": "no image at hand to probe"}, None
    return pending, (settings["compat_dir"], settings["library"], mode)


def _lib_dir(config: dict, target: Target, plan: Plan) -> tuple[str | None, tuple[str, ...]]:
    """(the 64-bit library dir or None for the plan's placeholder, what is left to probe):
    the command line's, else the config's `container.lib_dir`; with `auto` the image's own
    when its root is at hand (probed), for a CDI spec the dir the libraries have in the
    source root (the host's layout), else the placeholder."""
    wanted = target.lib_dir or config["container"]["lib_dir"]
    if wanted != "auto":
        if not wanted.startswith("/"):
            raise OcihookError(f"lib_dir {wanted}: must be an absolute path")
        return wanted, ()
    if target.kind == STATIC:
        for mount in plan.mounts:
            if KINDS[mount.kind].lib_dir == "lib_dir":
                return os.path.dirname(mount.source), ()
        return plan.lib_dir, ()
    if target.image:
        return None, ("lib_dir",)
    return None, ()


def _ld_writer(config: dict, target: Target, plan: Plan) -> str | None:
    """How the ld cache is written: not at all without libraries or with `ldconfig.enabled`
    off; the config's `ldconfig.writer`; the sandboxed ldconfig for a CDI spec (its hook is
    given folders, not the libraries the native writer adds entries for)."""
    settings = config["ldconfig"]
    if not settings["enabled"] or not plan.ld_dirs:
        return None
    return "ldconfig" if target.kind == STATIC else settings["writer"]


def _file_label(settings: dict, target: Target) -> str | None:
    """The label for what the hook creates in the container, or None to leave labels alone
    (label_choice's choice, for the target's mount label)."""
    return chosen_label(label_choice(settings, target), target.mount_label)


def label_choice(settings: dict, target: Target) -> str:
    """How what the hook creates is labelled, from the config's `selinux` section: a fixed
    label (`selinux.label`), else MOUNT_LABEL (the container's mount label); NO_LABEL with
    `selinux.mode: disabled`, or with `auto` on a host without SELinux (`ocihook plan`
    shows what the config sets). `cdi generate` writes the choice into the spec's hook."""
    if settings["mode"] == "disabled":
        return NO_LABEL
    if settings["mode"] == "auto" and target.kind != CLI and not selinux_enabled():
        return NO_LABEL
    return settings["label"] or MOUNT_LABEL


def chosen_label(choice: str, mount_label: str | None) -> str | None:
    """The label that `choice` (label_choice's) gives a container whose mount label is
    `mount_label` (None: it has none, or it is not known yet); None leaves labels alone."""
    if choice == NO_LABEL:
        return None
    if choice == MOUNT_LABEL:
        return mount_label
    return choice


def carried_decision(
    label: str,
    ld_writer: str | None,
    target: Target,
    compat: tuple[str, str, str, str | None] | None = None,
) -> Decision:
    """The decision a CDI spec carries to its `cdi-hook` commands (what `cdi generate`
    decided from its config: the label choice, the ld cache writer or None, and the CUDA
    compat probe: (compat dir, library, mode, host driver version) or None), for the
    container at hand (`target`, a STATIC one with its mount label): no config is read. The
    links and the ld cache only: the runtime made the nodes and the device cgroup rules."""
    probe: tuple[str, ...] = ("glibc",) if ld_writer is not None and target.image else ()
    pending = compat_probe = None
    if compat is not None and probe:
        from ocihook.plan.cuda import compat_result  # NVIDIA profiles with a compat dir only

        directory, library, mode, host = compat
        pending = compat_result(mode, directory, host, "")
        compat_probe = (directory, library, mode)
        probe += ("cuda_compat",)
    return Decision(
        lib_dir=None,  # the spec's links and ld dirs are container paths already
        lib_dir32=None,
        node_strategy="bind" if target.userns or target.rootless else "mknod",
        file_label=chosen_label(label, target.mount_label),
        ld_writer=ld_writer,
        device_cgroup=False,
        probe=probe,
        cuda_compat=pending,
        compat_probe=compat_probe,
    )


def lib_dir32_for(lib_dir: str) -> str:
    """Where 32-bit (compat32) libraries go, given the image's 64-bit library dir: the
    multiarch dir beside a multiarch one (Debian), else /usr/lib (RHEL's 32-bit dir), or
    /usr/lib32 when the 64-bit libraries themselves are in /usr/lib."""
    machine = os.uname().machine
    if lib_dir == f"/usr/lib/{_MULTIARCH.get(machine)}" and machine in _MULTIARCH32:
        return f"/usr/lib/{_MULTIARCH32[machine]}"
    return "/usr/lib32" if lib_dir.rstrip("/") == "/usr/lib" else "/usr/lib"


def probe_lib_dir(root_fd: int) -> str:
    """Where the image (its root `root_fd`) keeps its libraries: Debian multiarch, RHEL
    lib64, or plain lib. Every lookup is resolved inside the image's root."""
    candidates = []
    triplet = _MULTIARCH.get(os.uname().machine)
    if triplet:
        candidates.append(f"/usr/lib/{triplet}")
    candidates += ["/usr/lib64", "/lib64"]
    for candidate in candidates:
        try:
            fd = securepath.resolve(root_fd, candidate)
        except OSError:
            continue
        try:
            is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        finally:
            os.close(fd)
        # /lib64 alone (a loader link dir on Debian) is not a library dir.
        if is_dir and (candidate != "/lib64" or _exists(root_fd, "/lib64/libc.so.6")):
            return os.path.normpath(candidate)
    return "/usr/lib"


def has_glibc_loader(root_fd: int) -> bool:
    """Whether the image has a glibc dynamic loader (resolved inside its root)."""
    return any(_exists(root_fd, loader) for loader in GLIBC_LOADERS)


def _exists(root_fd: int, path: str) -> bool:
    """Whether `path` exists inside the root `root_fd` (its links resolved in the root)."""
    try:
        os.close(securepath.resolve(root_fd, path))
    except OSError:
        return False
    return True


def finalize(plan: Plan, decision: Decision) -> Plan:
    """The plan for one target, pure: what `decide` decided for it stamped in.
    Libraries placed in the decision's lib dirs (None keeps the plan's placeholders),
    device nodes made by its node strategy, what the hook creates labelled with its file
    label, the ld cache written its way. Nothing is patched later: apply executes this."""
    if decision.probe:
        raise ValueError(f"decision: the image is not probed yet ({', '.join(decision.probe)})")
    if decision.node_strategy not in NODE_STRATEGIES:
        raise ValueError(f"node strategy {decision.node_strategy!r}")
    if decision.ld_writer not in (None, *LD_WRITERS):
        raise ValueError(f"ld cache writer {decision.ld_writer!r}")
    final = plan
    if decision.lib_dir is not None:
        final = plan.with_lib_dir(decision.lib_dir, decision.lib_dir32)
    return final.replace(
        devices=[d.replace(strategy=decision.node_strategy) for d in final.devices],
        file_label=decision.file_label,
        ldconfig=decision.ld_writer is not None,
        ld_writer=decision.ld_writer,
        cuda_compat=decision.cuda_compat,
    )
