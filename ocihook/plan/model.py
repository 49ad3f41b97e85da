"""The plan: plain data saying everything one container gets and how. Built by discover
(`build_plan`), finalized for one target (`finalize`, with what `plan.decide` decided:
library dirs, device node strategy, file label, ld cache writer), executed by apply.
`executor_view` is what `ocihook plan --json` prints and what the CDI spec is made of."""

from __future__ import annotations

from ocihook.plan.devrules import DeviceRule
from ocihook.plan.kinds import KINDS, LIBRARY, MOUNT_FLAGS
from ocihook.structs import Struct

# Where libraries go until the plan is finalized for a target (and for good when no image
# is at hand: `ocihook plan` without --rootfs or --lib-dir shows them marked as such).
PLACEHOLDER_LIB_DIR = "/usr/lib64"
PLACEHOLDER_LIB_DIR32 = "/usr/lib"
# Mount.flags in words, for the plan text (tests/test_linux_facts.py checks they agree).
FLAGS_LEGEND = "read-only unless [rw]; nosuid, nodev; noexec except libraries and binaries"
# How a device node gets into the container: mknod (the container's /dev allows nodes), or a
# bind mount of the host's node (a user namespace cannot mknod).
NODE_STRATEGIES = ("mknod", "bind")
# Flags of the bind mount of a device node (the node's own mode and the cgroup guard it).
NODE_BIND_FLAGS = ("nosuid",)
# How the container's ld cache is written: natively (ld/native.py; the sandboxed ldconfig
# when that cannot be exact) or by the sandboxed ldconfig; None in a plan: not at all.
LD_WRITERS = ("native", "ldconfig")


class Mount(Struct):
    __slots__ = ("source", "host_path", "target", "kind", "writable")
    _defaults = {"writable": False}
    source: str  # path inside the source root
    host_path: str  # the same file as a host path, for people and records
    target: str  # path inside the container
    kind: str  # a kind of injected file (kinds.KINDS): library, binary, firmware, ...
    writable: bool  # a directory the profile mounts read-write (e.g. the MPS pipe dir)

    @property
    def noexec(self) -> bool:
        return not KINDS[self.kind].executable

    @property
    def flags(self) -> tuple[str, ...]:
        """The mount's flags by name, the one place they are decided: its kind's flags
        (kinds.Kind.flags), read-write when the profile mounts it writable."""
        return MOUNT_FLAGS[self.kind, self.writable]


class Link(Struct):
    __slots__ = ("target", "points_to")
    target: str  # the link's path inside the container
    points_to: str  # its content (relative to the link's directory)


class DeviceNode(Struct):
    __slots__ = (
        "path",
        "host_path",
        "type",
        "major",
        "minor",
        "mode",
        "index",
        "access",
        "strategy",
        "gid",
    )
    _defaults = {"strategy": "mknod", "gid": 0}
    path: str  # path inside the container
    host_path: str  # the node on the host
    type: str  # "c" or "b"
    major: int
    minor: int
    mode: int  # permission bits
    index: int | None  # None for shared control nodes
    access: str  # device cgroup access, e.g. "rw"
    strategy: str  # NODE_STRATEGIES: mknod, or bind (user namespaces)
    gid: int  # the host node's group (the container's node gets it: additional_gids)

    def rule(self) -> DeviceRule:
        return DeviceRule(self.type, self.major, self.minor, self.access)


def bind_options(flags) -> list[str]:
    """A plan mount's flags as the options of an OCI or CDI bind mount: the ones every
    mount has (read-only or read-write, nosuid, nodev), "bind", then noexec where the plan
    has it (the CDI spec and the precreate stage's config write the same)."""
    return [f for f in flags if f != "noexec"] + ["bind"] + [f for f in flags if f == "noexec"]


def additional_gids(nodes: list) -> list[int]:
    """The groups a container's processes need to open `nodes` (DeviceNode, or their
    executor view's dicts) as a non-root user, as NVIDIA's toolkit 1.19 gives them (CDI
    `additionalGids`): each node's group, but root's and where the node is readable and
    writable by everyone; sorted, each once."""
    gids = set()
    for node in nodes:
        gid, mode = (node["gid"], node["mode"]) if isinstance(node, dict) else (node.gid, node.mode)
        if gid and mode & 0o006 != 0o006:
            gids.add(gid)
    return sorted(gids)


class MigDevice(Struct):
    """One MIG device (NVIDIA), a type of its own beside the whole devices of a plan's
    `device_list`: `name` "G:M" (its GPU's index, NVIDIA's numbering as for a plain index;
    the MIG device's index on it in NVML's order), its UUID (MIG-...), `index` (the GPU's),
    the GI and CI ids, `nodes` (in-root paths: the GPU's nodes, then the GI's and the CI's
    cap node) and `caps` (those two cap nodes, described)."""

    __slots__ = ("name", "uuid", "index", "gi", "ci", "nodes", "caps")
    name: str
    uuid: str | None
    index: int
    gi: int
    ci: int
    nodes: list[str]
    caps: list[DeviceNode]


class Plan(Struct):
    __slots__ = (
        "profile",
        "source_root",
        "device_root",
        "request",
        "lib_dir",
        "driver_version",
        "mounts",
        "links",
        "devices",
        "ld_dirs",
        "ldconfig",
        "ld_writer",
        "device_list",
        "capabilities",
        "version_source",
        "lib_dir32",
        "placeholder",
        "ld_cache",
        "unmatched",
        "warnings",
        "file_label",
        "mig_devices",
        "cuda_compat",
    )
    _defaults = {
        "file_label": None,
        "device_list": [],
        "driver_version": None,
        "mounts": [],
        "links": [],
        "devices": [],
        "ld_dirs": [],
        "ldconfig": False,
        "ld_writer": None,
        "capabilities": [],
        "version_source": None,
        "lib_dir32": "/usr/lib",
        "placeholder": False,
        "ld_cache": None,
        "unmatched": [],
        "warnings": [],
        "mig_devices": [],
        "cuda_compat": None,
    }
    profile: str
    source_root: str
    device_root: str
    request: str
    lib_dir: str  # where 64-bit libraries go in the container
    driver_version: str | None
    mounts: list[Mount]
    links: list[Link]
    devices: list[DeviceNode]
    ld_dirs: list[str]
    ldconfig: bool  # whether the container's ld cache is updated (ld_writer is not None)
    ld_writer: str | None  # LD_WRITERS: how; None: not updated
    device_list: list  # devices.Device of each selected index (address, driver, nodes,
    # uuid), then each selected MigDevice (name, uuid, gi, ci, nodes, caps)
    capabilities: list[str]  # the driver capabilities selected (compute, utility, ...)
    version_source: str | None  # where driver_version came from
    lib_dir32: str  # where 32-bit (compat32) libraries go
    placeholder: bool  # lib_dir/lib_dir32 are placeholders (no image at hand)
    ld_cache: str | None  # the source root's ld.so.cache that was read, or why not
    unmatched: list[str]  # profile entries that matched nothing
    warnings: list[str]
    file_label: str | None  # the SELinux label of what the hook creates; None: labels untouched
    mig_devices: list  # every MigDevice of the host, when read (plan, cdi generate)
    # CUDA forward compatibility (cuda.py): {mode, dir, use, library, version, host_version,
    # rule, note, reason}; use: the ld cache lists dir first; rule: note or branch (which of
    # NVIDIA's rules decided). None: the profile has no `cuda`.
    cuda_compat: dict | None

    def with_lib_dir(self, lib_dir: str, lib_dir32: str | None = None) -> Plan:
        """The same plan with libraries (and their links) placed in `lib_dir` (64-bit) and
        `lib_dir32` (32-bit; None keeps the plan's): each kind moves with its lib dir."""
        dirs = {"lib_dir": (self.lib_dir, lib_dir)}
        if lib_dir32 is not None:
            dirs["lib_dir32"] = (self.lib_dir32, lib_dir32)

        def move(path: str, kind: str) -> str:
            field = KINDS[kind].lib_dir
            if field in dirs:
                old, new = (d.rstrip("/") + "/" for d in dirs[field])
                if path.startswith(old):
                    return new + path[len(old) :]
            return path

        kinds = {m.target: m.kind for m in self.mounts}
        mounts = [
            m.replace(target=move(m.target, m.kind)) if KINDS[m.kind].lib_dir else m
            for m in self.mounts
        ]
        links = []
        for link in self.links:
            parent = link.target.rsplit("/", 1)[0]
            kind = kinds.get(f"{parent}/{link.points_to}", LIBRARY)
            links.append(link.replace(target=move(link.target, kind)))
        new32 = lib_dir32 if lib_dir32 is not None else self.lib_dir32
        return self.replace(
            lib_dir=lib_dir,
            lib_dir32=new32,
            mounts=mounts,
            links=links,
            devices=list(self.devices),
            device_list=list(self.device_list),
            mig_devices=list(self.mig_devices),
            ld_dirs=ld_dirs_for(mounts, lib_dir, new32),
            placeholder=False,
        )


def ld_dirs_for(mounts: list[Mount], lib_dir: str, lib_dir32: str) -> list[str]:
    """The container dirs the ld cache must cover: the lib dirs that got libraries."""
    fields = {KINDS[m.kind].lib_dir for m in mounts}
    return [d for d, field in ((lib_dir, "lib_dir"), (lib_dir32, "lib_dir32")) if field in fields]


def device_rules(plan: Plan) -> list[DeviceRule]:
    """The device cgroup rules the plan adds: one per device node, in plan order."""
    return [d.rule() for d in plan.devices]


def executor_view(plan: Plan) -> dict:
    """Everything the executor consumes, as JSON-able data (`ocihook plan --json`): the plan,
    each mount's flags, each node's strategy and mode, and the typed cgroup rules."""
    view = plan.to_dict()
    for mount, data in zip(plan.mounts, view["mounts"]):
        data["flags"] = list(mount.flags)
    for node, data in zip(plan.devices, view["devices"]):
        data["bind_flags"] = list(NODE_BIND_FLAGS) if node.strategy == "bind" else []
    view["cgroup_rules"] = [rule.to_dict() for rule in device_rules(plan)]
    return view
