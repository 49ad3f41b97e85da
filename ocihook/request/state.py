"""The container as the runtime describes it: state JSON on stdin and the bundle's config.json.

Both come from the runtime, but config.json carries what the image author wrote
(env, annotations): everything is type-checked and size-limited here, and only the
fields the hook uses are kept.
"""

from __future__ import annotations

import os
import stat

from ocihook import fastjson
from ocihook.errors import OcihookError
from ocihook.structs import Struct

MAX_STATE_BYTES = 1 << 20
# CRI-O records a container's own CRI annotations (kubelet's, a device plugin's answer) as
# JSON under this annotation of the OCI config (request.parse.container_annotations).
CRIO_CONTAINER_ANNOTATIONS = "io.kubernetes.cri-o.Annotations"
MAX_CONFIG_BYTES = 16 << 20

# The annotations request.allow reads unless request.trusted_annotations says otherwise: the
# container labels kubelet sets on every container, which CRI-O writes into the OCI config after,
# and so over, the pod's own annotations (seen with CRI-O 1.37: tests/test_e2e_crio.py). A pod's
# author can set any other key, and these ones too as pod annotations, but theirs lose.
TRUSTED_ANNOTATIONS = [
    "io.kubernetes.pod.namespace",
    "io.kubernetes.pod.name",
    "io.kubernetes.pod.uid",
    "io.kubernetes.container.name",
]

_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def valid_container_id(value: str) -> bool:
    """1-128 of [A-Za-z0-9_.-], not starting with '.', '_' or '-' (never a path)."""
    return (
        0 < len(value) <= 128
        and value[0].isascii()
        and value[0].isalnum()
        and _ID_CHARS.issuperset(value)
    )


PRESTART_STATUSES = ("creating", "created")


class IdMapping(Struct):
    __slots__ = ("container_id", "host_id", "size")
    container_id: int
    host_id: int
    size: int


class RuntimeOwned(Struct):
    """What an OCI config has the runtime create, allow and mount itself (plain data read
    from it; ocihook/apply/owned.py compares a plan with it)."""

    __slots__ = ("nodes", "rules", "binds")
    nodes: frozenset  # (path, type, major, minor) of linux.devices
    rules: tuple  # (allow, type, major, minor, access) of linux.resources.devices, in order
    binds: frozenset  # (destination, source) of the bind mounts


class Container(Struct):
    """What the hook needs to know about one container."""

    __slots__ = (
        "id",
        "status",
        "pid",
        "bundle",
        "rootfs",
        "annotations",
        "env",
        "mount_label",
        "process_label",
        "userns",
        "uid_mappings",
        "gid_mappings",
        "cgroups_path",
        "readonly_root",
        "runtime",
    )
    _defaults = {
        "env": {},
        "mount_label": None,
        "process_label": None,
        "userns": False,
        "uid_mappings": (),
        "gid_mappings": (),
        "cgroups_path": None,
        "readonly_root": False,
        "runtime": None,
    }

    id: str
    status: str
    pid: int
    bundle: str
    rootfs: str
    annotations: dict[str, str]
    env: dict[str, str]
    mount_label: str | None
    process_label: str | None
    userns: bool
    uid_mappings: tuple[IdMapping, ...]
    gid_mappings: tuple[IdMapping, ...]
    cgroups_path: str | None
    readonly_root: bool
    # What config.json has the runtime do itself (linux.devices, linux.resources.devices,
    # bind mounts), as the precreate stage or the user put it there; None: not read.
    runtime: RuntimeOwned | None

    def host_uid(self, uid: int = 0) -> int:
        return _map_id(self.uid_mappings, uid)

    def host_gid(self, gid: int = 0) -> int:
        return _map_id(self.gid_mappings, gid)


def _map_id(mappings: tuple[IdMapping, ...], value: int) -> int:
    if not mappings:
        return value
    for mapping in mappings:
        if mapping.container_id <= value < mapping.container_id + mapping.size:
            return mapping.host_id + value - mapping.container_id
    raise OcihookError(f"config.json: id {value} is not mapped by linux.uidMappings/gidMappings")


def _require(obj: dict, key: str, kind: type, where: str):
    if key not in obj:
        raise OcihookError(f"{where}: missing field '{key}'")
    value = obj[key]
    if kind is int and isinstance(value, bool):
        raise OcihookError(f"{where}: field '{key}' must be an integer")
    if not isinstance(value, kind):
        raise OcihookError(f"{where}: field '{key}' must be {_kind_name(kind)}")
    return value


def _optional(obj: dict, key: str, kind: type, where: str, default=None):
    if obj.get(key) is None:
        return default
    return _require(obj, key, kind, where)


def _kind_name(kind: type) -> str:
    return {str: "a string", int: "an integer", dict: "an object", list: "an array"}.get(
        kind, kind.__name__
    )


def _string_map(value: object, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise OcihookError(f"{where}: must be an object of strings")
    return value


def parse_json(data: bytes, where: str) -> dict:
    try:
        obj = fastjson.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise OcihookError(f"{where}: not valid JSON ({error})") from None
    if not isinstance(obj, dict):
        raise OcihookError(f"{where}: must be a JSON object")
    return obj


def read_state(data: bytes) -> dict:
    """Validate the runtime's state JSON; returns it as a dict with checked fields."""
    if len(data) > MAX_STATE_BYTES:
        raise OcihookError("state on stdin: larger than 1 MiB")
    if not data.strip():
        raise OcihookError("state on stdin: empty (the runtime passes the container state)")
    state = parse_json(data, "state on stdin")
    where = "state on stdin"
    _require(state, "ociVersion", str, where)
    container_id = _require(state, "id", str, where)
    if not valid_container_id(container_id):
        raise OcihookError(f"{where}: field 'id' is not a valid container id: {container_id!r:.80}")
    _require(state, "status", str, where)
    bundle = _require(state, "bundle", str, where)
    if not os.path.isabs(bundle) or "\0" in bundle:
        raise OcihookError(f"{where}: field 'bundle' must be an absolute path")
    pid = _optional(state, "pid", int, where, 0)
    if pid < 0:
        raise OcihookError(f"{where}: field 'pid' must not be negative")
    _string_map(state.get("annotations"), f"{where}: field 'annotations'")
    return state


def _read_bundle_config(bundle: str) -> dict:
    """<bundle>/config.json, opened without following a symlink at the bundle or the file."""
    try:
        bundle_fd = os.open(bundle, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        if os.path.islink(bundle):
            raise OcihookError(f"bundle {bundle}: is a symlink; not following it") from None
        raise OcihookError(f"bundle {bundle}: {error.strerror}") from None
    try:
        fd = os.open("config.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=bundle_fd)
    except OSError as error:
        raise OcihookError(f"bundle {bundle}: config.json: {error.strerror}") from None
    finally:
        os.close(bundle_fd)
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OcihookError(f"bundle {bundle}: config.json is not a regular file")
        data = file.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise OcihookError(f"bundle {bundle}: config.json is larger than 16 MiB")
    return parse_json(data, f"bundle {bundle}: config.json")


# Host directories (and file systems shared with the host) that are never a container's root:
# a wrong root.path with the pid of a process in a private mount namespace would otherwise
# have the hook create files and device nodes on the host's /dev, /dev/shm, /run, ...
HOST_DIRS = frozenset(
    "/ /bin /boot /dev /etc /home /lib /lib32 /lib64 /libx32 /media /mnt /opt /proc /root "
    "/run /sbin /srv /sys /tmp /usr /var /var/lib /var/run /var/tmp".split()
)
HOST_TREES = ("/dev/", "/proc/", "/sys/", "/run/user/", "/dev/shm/")


def _check_rootfs(path: str, where: str) -> str:
    if path in HOST_DIRS or path.startswith(HOST_TREES):
        raise OcihookError(f"{where}: rootfs {path} is a host directory, not a container's root")
    return path


def _rootfs_path(bundle: str, root: dict) -> str:
    where = "config.json: root"
    path = _require(root, "path", str, where)
    if not path or "\0" in path:
        raise OcihookError(f"{where}: field 'path' is empty")
    if os.path.isabs(path):
        return _check_rootfs(os.path.normpath(path), where)
    if ".." in path.split("/"):
        raise OcihookError(f"{where}: relative 'path' must stay inside the bundle: {path!r:.80}")
    return _check_rootfs(os.path.normpath(os.path.join(bundle, path)), where)


def _env_map(process: dict) -> dict[str, str]:
    env = _optional(process, "env", list, "config.json: process", [])
    result = {}
    for entry in env:
        if not isinstance(entry, str):
            raise OcihookError("config.json: process.env entries must be strings")
        key, sep, value = entry.partition("=")
        if sep:
            result[key] = value
    return result


def _mappings(linux: dict, key: str) -> tuple[IdMapping, ...]:
    raw = _optional(linux, key, list, "config.json: linux", [])
    result = []
    for item in raw:
        where = f"config.json: linux.{key}"
        if not isinstance(item, dict):
            raise OcihookError(f"{where}: entries must be objects")
        ids = [_require(item, k, int, where) for k in ("containerID", "hostID", "size")]
        if min(ids) < 0:
            raise OcihookError(f"{where}: ids must not be negative")
        result.append(IdMapping(*ids))
    return tuple(result)


def load_container(state: dict) -> Container:
    """Combine the validated state with the fields of <bundle>/config.json the hook uses."""
    bundle = state["bundle"]
    config = _read_bundle_config(bundle)
    container = spec_container(config, bundle)
    annotations = dict(container.annotations)
    annotations.update(_string_map(state.get("annotations"), "state on stdin: annotations"))
    return container.replace(
        id=state["id"],
        status=state["status"],
        pid=state.get("pid") or 0,
        annotations=annotations,
        runtime=runtime_owned(config),
    )


def spec_container(config: dict, bundle: str = "") -> Container:
    """The fields of an OCI config the hook uses: config.json in `bundle`, or (`bundle`
    empty) the proposed config on stdin at precreate, which has no id and no pid yet and
    whose root.path must be absolute."""
    root = _require(config, "root", dict, "config.json")
    process = _optional(config, "process", dict, "config.json", {})
    linux = _optional(config, "linux", dict, "config.json", {})
    namespaces = _optional(linux, "namespaces", list, "config.json: linux", [])
    userns = any(isinstance(ns, dict) and ns.get("type") == "user" for ns in namespaces)
    annotations = dict(_string_map(config.get("annotations"), "config.json: annotations"))
    path = _require(root, "path", str, "config.json: root")
    if not bundle and not os.path.isabs(path):
        raise OcihookError("config.json: root: 'path' must be absolute at precreate")
    return Container(
        id="precreate",
        status="precreate",
        pid=0,
        bundle=bundle,
        rootfs=_rootfs_path(bundle, root),
        annotations=annotations,
        env=_env_map(process),
        mount_label=_optional(linux, "mountLabel", str, "config.json: linux") or None,
        process_label=_optional(process, "selinuxLabel", str, "config.json: process") or None,
        userns=userns,
        uid_mappings=_mappings(linux, "uidMappings"),
        gid_mappings=_mappings(linux, "gidMappings"),
        cgroups_path=_optional(linux, "cgroupsPath", str, "config.json: linux"),
        readonly_root=bool(root.get("readonly", False)),
    )


def runtime_owned(config: dict) -> RuntimeOwned:
    """linux.devices, linux.resources.devices and the bind mounts of an OCI config as plain
    tuples. A malformed entry is left out: it can only make the hook do more itself."""
    linux = config.get("linux") if isinstance(config.get("linux"), dict) else {}
    nodes = set()
    for d in linux.get("devices") or ():
        if isinstance(d, dict) and _ints(d, "major", "minor") and _strs(d, "path", "type"):
            nodes.add((os.path.normpath(d["path"]), d["type"], d["major"], d["minor"]))
    resources = linux.get("resources") if isinstance(linux.get("resources"), dict) else {}
    rules = []
    for r in resources.get("devices") or ():
        if not isinstance(r, dict) or not isinstance(r.get("allow"), bool):
            continue
        numbers = [-1 if r.get(k) is None else r.get(k) for k in ("major", "minor")]
        kind, access = r.get("type") or "a", r.get("access") or "rwm"
        if all(isinstance(n, int) for n in numbers) and _all_str(kind, access):
            rules.append((r["allow"], kind, numbers[0], numbers[1], access))
    binds = set()
    for m in config.get("mounts") or ():
        if not isinstance(m, dict) or not _strs(m, "destination", "source"):
            continue
        options = m.get("options") if isinstance(m.get("options"), list) else []
        if m.get("type") == "bind" or "bind" in options or "rbind" in options:
            binds.add((os.path.normpath(m["destination"]), m["source"]))
    return RuntimeOwned(frozenset(nodes), tuple(rules), frozenset(binds))


def _ints(obj: dict, *keys: str) -> bool:
    return all(isinstance(obj.get(k), int) and not isinstance(obj.get(k), bool) for k in keys)


def _strs(obj: dict, *keys: str) -> bool:
    return all(isinstance(obj.get(k), str) for k in keys)


def _all_str(*values: object) -> bool:
    return all(isinstance(v, str) for v in values)


def may_ask(state: dict, config: dict) -> bool:
    """False when the state alone shows the container asks for nothing: the runtime copies
    config.json's annotations into the state, so without the env channel there is no
    need to read config.json at all (the common case, kept cheapest: the stages ask this
    before they import the request's assembly, request/assemble.py)."""
    annotations = state.get("annotations")
    if config["kubernetes"]["device_plugin"]:  # Kubernetes mode: the allocation, CRI-O's key
        text = None if annotations is None else annotations.get(CRIO_CONTAINER_ANNOTATIONS)
        return annotations is None or (
            text is not None and f'"{config["request"]["annotation"]}":' in text
        )
    if config["request"]["env"]:
        return True
    return annotations is None or config["request"]["annotation"] in annotations
