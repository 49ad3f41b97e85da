"""The plan: plain data saying what one container gets. Built by discover, applied by apply."""

from __future__ import annotations

from ocihook.slots import Struct

# Mount kinds; libraries and binaries must stay executable (ld.so maps libraries PROT_EXEC).
EXECUTABLE_KINDS = ("library", "library32", "binary")
LIBRARY_KINDS = ("library", "library32")


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


class Link(Struct):
    __slots__ = ("target", "points_to")
    target: str  # the link's path inside the container
    points_to: str  # its content (relative to the link's directory)


class DeviceNode(Struct):
    __slots__ = ("path", "host_path", "type", "major", "minor", "mode", "index", "access")
    path: str  # path inside the container
    host_path: str  # the node on the host
    type: str  # "c" or "b"
    major: int
    minor: int
    mode: int  # permission bits
    index: int | None  # None for shared control nodes
    access: str  # device cgroup access, e.g. "rw"


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
    )
    _defaults = {
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


def cgroup_rules(plan: Plan) -> list[str]:
    """The device cgroup rules the plan adds, in cgroup v1 syntax ("c 195:0 rw")."""
    return [f"{d.type} {d.major}:{d.minor} {d.access}" for d in plan.devices]
