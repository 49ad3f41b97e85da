"""The plan: plain data saying what one container gets. Built by discover, applied by apply."""

from __future__ import annotations

from ocihook.struct import Struct

# Mount kinds; libraries and binaries must stay executable (ld.so maps libraries PROT_EXEC).
EXECUTABLE_KINDS = ("library", "binary")


class Mount(Struct):
    __slots__ = ("source", "host_path", "target", "kind")
    source: str  # path inside the source root
    host_path: str  # the same file as a host path, for people and records
    target: str  # path inside the container
    kind: str  # library | binary | firmware | file | socket

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
    )
    _defaults = {
        "device_list": [],
        "driver_version": None,
        "mounts": [],
        "links": [],
        "devices": [],
        "ld_dirs": [],
        "ldconfig": False,
    }
    profile: str
    source_root: str
    device_root: str
    request: str
    lib_dir: str
    driver_version: str | None
    mounts: list[Mount]
    links: list[Link]
    devices: list[DeviceNode]
    ld_dirs: list[str]
    ldconfig: bool
    device_list: list  # devices.Device of each selected index: address, driver, nodes

    def with_lib_dir(self, lib_dir: str) -> Plan:
        """The same plan with libraries (and their links) placed in `lib_dir`."""
        old = self.lib_dir.rstrip("/") + "/"
        new = lib_dir.rstrip("/") + "/"

        def move(path: str) -> str:
            return new + path[len(old) :] if path.startswith(old) else path

        mounts = [
            Mount(m.source, m.host_path, move(m.target), m.kind) if m.kind == "library" else m
            for m in self.mounts
        ]
        links = [Link(move(link.target), link.points_to) for link in self.links]
        ld_dirs = [move(d + "/").rstrip("/") for d in self.ld_dirs]
        return Plan(
            profile=self.profile,
            source_root=self.source_root,
            device_root=self.device_root,
            request=self.request,
            lib_dir=lib_dir,
            driver_version=self.driver_version,
            mounts=mounts,
            links=links,
            devices=list(self.devices),
            ld_dirs=ld_dirs,
            ldconfig=self.ldconfig,
            device_list=list(self.device_list),
        )


def cgroup_rules(plan: Plan) -> list[str]:
    """The device cgroup rules the plan adds, in cgroup v1 syntax ("c 195:0 rw")."""
    return [f"{d.type} {d.major}:{d.minor} {d.access}" for d in plan.devices]


def format_plan(plan: Plan) -> str:
    """The plan as a readable listing (what `ocihook plan` prints)."""
    lines = [
        f"profile:      {plan.profile}",
        f"source root:  {plan.source_root}",
        f"device root:  {plan.device_root}",
        f"request:      {plan.request}",
        f"library dir:  {plan.lib_dir}",
    ]
    if plan.driver_version:
        lines.append(f"driver:       {plan.driver_version}")
    lines.append(f"mounts ({len(plan.mounts)}, read-only, nosuid, nodev):")
    for m in plan.mounts:
        flags = "noexec" if m.noexec else "exec"
        lines.append(f"  {m.kind:<8} {m.target}  <-  {m.host_path}  [{flags}]")
    lines.append(f"links ({len(plan.links)}):")
    lines.extend(f"  {link.target} -> {link.points_to}" for link in plan.links)
    if plan.device_list:
        lines.append(f"device indices ({len(plan.device_list)}): index, address, driver, nodes")
        lines.extend(
            f"  {d.index:<3} {d.address or '-':<14} {d.driver or '-':<12} {' '.join(d.nodes)}"
            for d in plan.device_list
        )
    lines.append(f"devices ({len(plan.devices)}):")
    for d in plan.devices:
        which = f"index {d.index}" if d.index is not None else "control"
        lines.append(
            f"  {d.path}  {d.type} {d.major}:{d.minor}  mode {d.mode:04o}  "
            f"cgroup {d.access}  ({which})"
        )
    if plan.devices:
        lines.append("device cgroup (v1 devices.allow, or prepended to the v2 eBPF program):")
        lines.extend(f"  allow {rule}" for rule in cgroup_rules(plan))
    lines.append(
        f"ld cache:     {'update for ' + ', '.join(plan.ld_dirs) if plan.ldconfig else 'no'}"
    )
    return "\n".join(lines)
