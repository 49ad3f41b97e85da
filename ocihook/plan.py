"""The plan: plain data saying everything one container gets and how. Built by discover,
finalized for one container (`finalize`: library dir, device node strategy, file label),
executed by apply. `executor_view` is what `ocihook plan --json` prints."""

from __future__ import annotations

from ocihook.slots import Struct

# Mount kinds; libraries and binaries must stay executable (ld.so maps libraries PROT_EXEC).
EXECUTABLE_KINDS = ("library", "library32", "binary")
LIBRARY_KINDS = ("library", "library32")
# Mount.flags in words, for the plan text (tests/test_linux_facts.py checks they agree).
FLAGS_LEGEND = "read-only unless [rw]; nosuid, nodev; noexec except libraries and binaries"
# How a device node gets into the container: mknod (the container's /dev allows nodes), or a
# bind mount of the host's node (a user namespace cannot mknod).
NODE_STRATEGIES = ("mknod", "bind")
# Flags of the bind mount of a device node (the node's own mode and the cgroup guard it).
NODE_BIND_FLAGS = ("nosuid",)


class Mount(Struct):
    __slots__ = ("source", "host_path", "target", "kind", "writable")
    _defaults = {"writable": False}
    source: str  # path inside the source root
    host_path: str  # the same file as a host path, for people and records
    target: str  # path inside the container
    kind: str  # library | library32 | binary | firmware | file | socket | directory
    writable: bool  # a directory the profile mounts read-write (e.g. the MPS pipe dir)

    @property
    def noexec(self) -> bool:
        return self.kind not in EXECUTABLE_KINDS

    @property
    def flags(self) -> tuple[str, ...]:
        """The mount's flags by name, the one place they are decided: read-only unless the
        profile mounts it writable, always nosuid and nodev, noexec unless executable."""
        return (
            ("rw" if self.writable else "ro"),
            "nosuid",
            "nodev",
            *(("noexec",) if self.noexec else ()),
        )


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
    )
    _defaults = {"strategy": "mknod"}
    path: str  # path inside the container
    host_path: str  # the node on the host
    type: str  # "c" or "b"
    major: int
    minor: int
    mode: int  # permission bits
    index: int | None  # None for shared control nodes
    access: str  # device cgroup access, e.g. "rw"
    strategy: str  # NODE_STRATEGIES: mknod, or bind (user namespaces)

    def rule(self) -> DeviceRule:
        return DeviceRule(self.type, self.major, self.minor, self.access)


class DeviceRule(Struct):
    """One device the container may use: type "c"/"b", numbers (-1: any), access in "rwm".
    The one device-rule type from the plan to the kernel (cgroups takes it as it is)."""

    __slots__ = ("type", "major", "minor", "access")

    type: str
    major: int
    minor: int
    access: str

    def as_tuple(self) -> tuple[str, int, int, str]:
        """The plain tuple the BPF assembler takes."""
        return (self.type, self.major, self.minor, self.access)

    def line(self) -> str:
        """The cgroup v1 syntax, e.g. 'c 10:237 rw' (-1 is '*')."""
        num = lambda v: "*" if v == -1 else str(v)  # noqa: E731
        return f"{self.type} {num(self.major)}:{num(self.minor)} {self.access}"


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
        "device_list",
        "capabilities",
        "version_source",
        "lib_dir32",
        "placeholder",
        "ld_cache",
        "unmatched",
        "warnings",
        "file_label",
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
        "capabilities": [],
        "version_source": None,
        "lib_dir32": "/usr/lib",
        "placeholder": False,
        "ld_cache": None,
        "unmatched": [],
        "warnings": [],
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
    ldconfig: bool
    device_list: list  # devices.Device of each selected index: address, driver, nodes
    capabilities: list[str]  # the driver capabilities selected (compute, utility, ...)
    version_source: str | None  # where driver_version came from
    lib_dir32: str  # where 32-bit (compat32) libraries go
    placeholder: bool  # lib_dir/lib_dir32 are placeholders (no image at hand)
    ld_cache: str | None  # the source root's ld.so.cache that was read, or why not
    unmatched: list[str]  # profile entries that matched nothing
    warnings: list[str]
    file_label: str | None  # the SELinux label of what the hook creates; None: labels untouched

    def with_lib_dir(self, lib_dir: str, lib_dir32: str | None = None) -> Plan:
        """The same plan with libraries (and their links) placed in `lib_dir` (64-bit) and
        `lib_dir32` (32-bit)."""
        moves = [(self.lib_dir, lib_dir, "library")]
        if lib_dir32 is not None:
            moves.append((self.lib_dir32, lib_dir32, "library32"))

        def move(path: str, kind: str) -> str:
            for old, new, which in moves:
                old, new = old.rstrip("/") + "/", new.rstrip("/") + "/"
                if kind == which and path.startswith(old):
                    return new + path[len(old) :]
            return path

        kinds = {m.target: m.kind for m in self.mounts}
        mounts = [
            Mount(m.source, m.host_path, move(m.target, m.kind), m.kind, m.writable)
            if m.kind in LIBRARY_KINDS
            else m
            for m in self.mounts
        ]
        links = []
        for link in self.links:
            parent = link.target.rsplit("/", 1)[0]
            kind = kinds.get(f"{parent}/{link.points_to}", "library")
            links.append(Link(move(link.target, kind), link.points_to))
        new32 = lib_dir32 if lib_dir32 is not None else self.lib_dir32
        values = {name: getattr(self, name) for name in self.__slots__}
        values.update(
            lib_dir=lib_dir,
            lib_dir32=new32,
            mounts=mounts,
            links=links,
            devices=list(self.devices),
            device_list=list(self.device_list),
            ld_dirs=ld_dirs_for(mounts, lib_dir, new32),
            placeholder=False,
        )
        return Plan(**values)


def ld_dirs_for(mounts: list[Mount], lib_dir: str, lib_dir32: str) -> list[str]:
    """The container dirs the ld cache must cover: the lib dirs that got libraries."""
    kinds = {m.kind for m in mounts}
    return [d for d, kind in ((lib_dir, "library"), (lib_dir32, "library32")) if kind in kinds]


def device_rules(plan: Plan) -> list[DeviceRule]:
    """The device cgroup rules the plan adds: one per device node, in plan order."""
    return [d.rule() for d in plan.devices]


def finalize(
    plan: Plan,
    lib_dir: str | None,
    lib_dir32: str | None,
    node_strategy: str = "mknod",
    file_label: str | None = None,
) -> Plan:
    """The plan for one container, pure: libraries placed in the image's `lib_dir` (and
    `lib_dir32`; None keeps the plan's), device nodes made by `node_strategy`, and what the
    hook creates labelled `file_label`. Nothing is patched later: apply executes this."""
    if node_strategy not in NODE_STRATEGIES:
        raise ValueError(f"node strategy {node_strategy!r}")
    final = plan.with_lib_dir(lib_dir, lib_dir32) if lib_dir is not None else plan
    values = {name: getattr(final, name) for name in final.__slots__}
    values["devices"] = [
        DeviceNode(*(getattr(d, n) for n in DeviceNode.__slots__[:-1]), node_strategy)
        for d in final.devices
    ]
    values["file_label"] = file_label
    return Plan(**values)


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
