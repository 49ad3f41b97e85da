"""The container's systemd unit learns our device rules (the systemd cgroup manager).

systemd recomputes a unit's device cgroup (the v2 BPF program, the v1 devices.allow list)
from its DeviceAllow= properties on every `systemctl daemon-reload`, and so drops rules that
only the hook's cgroup edit holds. The hook therefore also adds them to the unit, as
`systemctl set-property --runtime UNIT DeviceAllow=...` does: SetUnitProperties(unit,
runtime=true, [("DeviceAllow", a(ss))]) over the system bus, else systemd's private socket
(no dbus-daemon needed). Imported only when cgroupsPath names a systemd unit.

The bus comes first: under crun in the enforcing guests systemd answered the private socket
not at all within 10 s (every time, runc: at once), the bus at once (docs/cgroups.md).

Each rule is named `/dev/char/M:N` (`/dev/block/M:N`): systemd 240 and later parse that path
without looking at the file system, so the grant is exactly the node and the hook creates no
file on the host. Older systemd stat()s the path and silently skips a missing one; there
the hook refuses the container when a link is missing instead of creating it (docs/security.md).
"""

from __future__ import annotations

import os

from ocihook.errors import OcihookError
from ocihook.plan.devrules import DeviceRule

PRIVATE_SOCKET = "/run/systemd/private"
SYSTEM_BUS_SOCKET = "/run/dbus/system_bus_socket"
BOOTED_DIR = "/run/systemd/system"  # sd_booted(): systemd is PID 1
SYSTEMD = "org.freedesktop.systemd1"
MANAGER_PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
PROPERTIES = "org.freedesktop.DBus.Properties"
PARSES_DEVNUM_PATHS = 240  # systemd parses /dev/char/M:N itself from this version on
TIMEOUT = 10.0  # per attempt and call: systemd answers in ms, but not while it reloads; two
# attempts (system bus, private socket) stay within hooks.d's 30 s
# The bus daemon's answers that say systemd is not on the bus (then the private socket)
NOT_ON_THE_BUS = (
    "org.freedesktop.DBus.Error.NameHasNoOwner",
    "org.freedesktop.DBus.Error.ServiceUnknown",
)
DEV = "/dev"
_UNIT_INTERFACE = {".scope": "Scope", ".service": "Service", ".slice": "Slice"}


def booted() -> bool:
    """Whether systemd is the init system (sd_booted: BOOTED_DIR exists)."""
    return os.path.isdir(BOOTED_DIR)


def device_path(rule: DeviceRule) -> str:
    """The DeviceAllow= name of one exact node: /dev/char/M:N or /dev/block/M:N."""
    if rule.type not in ("c", "b") or rule.major < 0 or rule.minor < 0:
        raise OcihookError(
            f"device rule {rule.line()}: a systemd DeviceAllow= entry names one node, "
            "not a wildcard"
        )
    kind = "char" if rule.type == "c" else "block"
    return f"/dev/{kind}/{rule.major}:{rule.minor}"


def device_allow(rules: list[DeviceRule]) -> list[tuple[str, str]]:
    """The DeviceAllow= entries (path, access) for the rules, duplicates dropped."""
    out: list[tuple[str, str]] = []
    for rule in rules:
        entry = (device_path(rule), rule.access)
        if entry not in out:
            out.append(entry)
    return out


def parse_version(text: str) -> int | None:
    """systemd's Version property ('252.22-1~deb12u1', '239 (239-58.el8)') to 252, 239."""
    digits = ""
    for ch in text.strip():
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else None


def missing_links(entries: list[tuple[str, str]], dev: str | None = None) -> list[str]:
    """The /dev/char/M:N paths that do not resolve to a node of that number on the host
    (`dev`: the host's /dev, DEV by default)."""
    dev = dev or DEV
    out = []
    for path, _ in entries:
        kind, _, numbers = path[len("/dev/") :].partition("/")
        major, _, minor = numbers.partition(":")
        try:
            st = os.stat(os.path.join(dev, kind, numbers))
        except OSError:
            out.append(path)
            continue
        want = os.makedev(int(major), int(minor))
        node = (st.st_mode & 0o170000) == (0o020000 if kind == "char" else 0o060000)
        if not node or st.st_rdev != want:
            out.append(path)
    return out


UNKNOWN_PROPERTY = (
    "org.freedesktop.DBus.Error.UnknownProperty",  # systemd before 249: no BPFProgram=
    "org.freedesktop.DBus.Error.InvalidArgs",
)


class UnitDevices:
    """What the unit holds: its DevicePolicy, its DeviceAllow= entries, systemd's version
    and its BPFProgram= entries (attach type, bpffs path; crun 1.23 and later name the
    container's device program there, pinned under /sys/fs/bpf/crun/)."""

    def __init__(
        self,
        policy: str,
        allow: list[tuple[str, str]],
        version: int | None,
        programs: list[tuple[str, str]] | None = None,
    ) -> None:
        self.policy, self.allow, self.version = policy, allow, version
        self.programs = list(programs or [])

    def device_programs(self) -> list[str]:
        """The bpffs paths of the unit's BPFProgram=device: entries."""
        return [path for kind, path in self.programs if kind == "device"]

    def restricts(self) -> bool:
        """Whether systemd itself restricts the unit's devices (then it owns a program or
        list that a reload recomputes): policy strict/closed, or auto with entries."""
        return self.policy != "auto" or bool(self.allow)


def read_unit(conn, unit: str) -> UnitDevices:
    """DevicePolicy, DeviceAllow and BPFProgram of a loaded unit, and systemd's version."""
    from ocihook.cgroups import dbuswire

    interface = _interface(unit)
    (path,) = conn.call(SYSTEMD, MANAGER_PATH, MANAGER, "GetUnit", "s", (unit,))

    def get(obj: str, iface: str, name: str):
        (value,) = conn.call(SYSTEMD, obj, PROPERTIES, "Get", "ss", (iface, name))
        return value[1]

    version = parse_version(str(get(MANAGER_PATH, MANAGER, "Version")))
    policy = str(get(path, interface, "DevicePolicy"))
    allow = [(str(p), str(a)) for p, a in get(path, interface, "DeviceAllow")]
    try:
        programs = [(str(k), str(p)) for k, p in get(path, interface, "BPFProgram")]
    except dbuswire.BusError as error:
        if error.name not in UNKNOWN_PROPERTY:
            raise
        programs = []
    return UnitDevices(policy, allow, version, programs)


def _interface(unit: str) -> str:
    for suffix, name in _UNIT_INTERFACE.items():
        if unit.endswith(suffix):
            return f"org.freedesktop.systemd1.{name}"
    raise OcihookError(f"systemd unit {unit!r} is not a scope, service or slice")


def add_device_allow(conn, unit: str, entries: list[tuple[str, str]]) -> None:
    """SetUnitProperties(unit, runtime=true, DeviceAllow=entries): systemd appends them."""
    prop = ("DeviceAllow", ("a(ss)", entries))
    conn.call(SYSTEMD, MANAGER_PATH, MANAGER, "SetUnitProperties", "sba(sv)", (unit, True, [prop]))


def allow_unit_devices(unit: str, rules: list[DeviceRule], log=None) -> UnitGrant:
    """Add the rules to the unit's DeviceAllow= (runtime) where systemd restricts the unit's
    devices by it (a reload recomputes the unit's program from that list); returns the
    entries added and what the unit holds, whose BPFProgram=device: entries (crun 1.23 and
    later) the caller extends (pinned.py). A unit that systemd restricts neither way is left
    alone (logged): a reload has nothing of it to recompute. The system bus first (what the
    runtimes use), systemd's private socket where the bus cannot be reached, does not answer
    or has no systemd on it (logged; the exchange is idempotent: entries already there are
    not added again). OcihookError (one line) when systemd cannot be told."""
    from ocihook.cgroups import dbuswire

    entries = device_allow(rules)
    if not entries:
        return UnitGrant([], UnitDevices("auto", [], None))
    failed = []
    for path, bus in ((SYSTEM_BUS_SOCKET, True), (PRIVATE_SOCKET, False)):
        if bus and not os.path.exists(path):  # no dbus-daemon: the private socket, unlogged
            failed.append(f"D-Bus {path}: does not exist")
            continue
        try:
            with dbuswire.Connection(path, TIMEOUT, bus=bus) as conn:
                return _exchange(conn, unit, entries, log)
        except dbuswire.BusError as error:
            if error.name is not None and error.name not in NOT_ON_THE_BUS:
                raise OcihookError(
                    f"systemd unit {unit}: DeviceAllow= not added: {error}"
                ) from None
            failed.append(str(error))
            if log is not None and bus:
                log(f"systemd unit {unit}: {error}; trying systemd's private socket")
    reasons = "; ".join(failed)
    raise OcihookError(
        f"systemd unit {unit}: DeviceAllow= not added: cannot reach systemd: {reasons}"
    )


class UnitGrant:
    """What allow_unit_devices did: the DeviceAllow= entries it added, and the unit as read."""

    def __init__(self, added: list[tuple[str, str]], unit: UnitDevices) -> None:
        self.added, self.unit = added, unit


def _exchange(conn, unit: str, entries: list[tuple[str, str]], log) -> UnitGrant:
    """Read the unit, then add the entries it lacks (allow_unit_devices)."""
    unit_devices = read_unit(conn, unit)
    if not unit_devices.restricts():
        if log is not None and not unit_devices.device_programs():
            log(
                f"systemd unit {unit}: DevicePolicy=auto, no DeviceAllow= and no "
                "BPFProgram=device: systemd does not restrict its devices, no unit property "
                "added"
            )
        return UnitGrant([], unit_devices)
    version = unit_devices.version
    if version is None or version < PARSES_DEVNUM_PATHS:
        missing = missing_links(entries)
        if missing:
            raise OcihookError(
                f"systemd unit {unit}: systemd {version or '(unknown version)'} "
                f"needs the host links {', '.join(missing)} (udev makes them; systemd "
                f"{PARSES_DEVNUM_PATHS} and later do not need them)"
            )
    wanted = [e for e in entries if e not in unit_devices.allow]
    if wanted:
        add_device_allow(conn, unit, wanted)
    return UnitGrant(wanted, unit_devices)
