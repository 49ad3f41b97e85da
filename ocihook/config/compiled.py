"""The hook's configuration: YAML validated by a JSON Schema, compiled once and cached.

The hot path calls `load_config`. The compiled config is cached in `<cache_dir>/<hex of the
config path>.marshal` with the keys of every file the compile read (the config, and each
profile candidate in `profile_dirs` up to the one used, absent ones as absent), taken by
`fstat` of the open file that was read (device, inode, size, mtime and ctime in ns). While
a `stat` of each still gives the same key the cache is used, and neither PyYAML nor
jsonschema is imported. Trust, on every run: the config and profile are owned by root and
not writable by group or others (checked from that stat; the hook of a rootless container
applies rootless.py's rule instead, parents included); the cache dir is root's and 0700
(a root-owned dir with a wider mode is tightened and emptied; any other is not used), the
cache file is root's and 0600, carries a format, the ocihook and Python versions and a
CRC-32 of its body, and its config has the compiled shape; anything else is ignored and
rebuilt. A file whose ctime is not safely before the kernel's coarse clock when it was read
(within linux.trusted.RACY_SECONDS) is not cached: file times move by the clock tick, so a
same-size edit in the same tick as the read would keep the key.
"""

from __future__ import annotations

import marshal
import os
import sys
import time

from ocihook import __version__
from ocihook.errors import OcihookError, describe
from ocihook.linux import trusted
from ocihook.linux.userns import hook_namespace
from ocihook.request.state import TRUSTED_ANNOTATIONS

DEFAULT_CONFIG = "/etc/ocihook/config.yaml"
DEFAULT_CACHE_DIR = "/run/ocihook/cache"
CACHE_FORMAT = 10  # 3: profiles with capabilities, ld_cache, library_dirs32, devices.nodes;
# 4: ldconfig.writer; 5: profile ld_conf and variables; 6: devices.nvidia, devices.cdi_kind;
# 7: request.imex_annotation (IMEX channels), capability nodes and by_name (GPUDirect);
# 8: the cuda section (forward compatibility, NVIDIA_REQUIRE_*) and the profile's cuda;
# 9: the kubernetes section (the device plugin, Kubernetes mode)
# 10: a capability's `switch` (NVIDIA_GDS=enabled, ...)
CACHE_MAGIC = b"ocihook-config-cache\n"
MAX_YAML_BYTES = 1 << 20
MAX_CACHE_BYTES = 4 << 20

DEFAULTS: dict = {
    "profile": "nvidia",
    "profile_dirs": ["/etc/ocihook/profiles", "/usr/share/ocihook/profiles"],
    "source_root": "/",
    "device_root": "/",
    "request": {
        "annotation": "ocihook.io/devices",
        "capabilities_annotation": "ocihook.io/capabilities",
        "env": False,
        "imex_annotation": "ocihook.io/imex-channels",
        "allow": [],
        "trusted_annotations": TRUSTED_ANNOTATIONS,
    },
    "container": {"lib_dir": "auto", "bin_dir": "/usr/bin"},
    "ldconfig": {"enabled": True, "path": "/sbin/ldconfig", "writer": "native"},
    # CUDA forward compatibility and the NVIDIA_REQUIRE_* check (profiles with `cuda:`):
    # compat as NVIDIA's cuda-compat-mode (ldconfig, hook: the same here; disabled).
    "cuda": {"compat": "ldconfig", "require": True, "brand": None},
    "selinux": {"mode": "auto", "label": None, "source_check": "error"},
    # Kubernetes mode (`device_plugin: true`): devices only from ocihook's device plugin's
    # allocation (docs/kubernetes.md); `resource`: its extended resource (None:
    # ocihook.io/<profile>); `cdi`: its Allocate answer also names the CDI devices.
    "kubernetes": {"device_plugin": False, "resource": None, "health_interval": 10, "cdi": False},
    "mount_api": "auto",
    "state_dir": "/run/ocihook",
    "records": {"max_age": 7 * 24 * 3600, "max_count": 1000},
    "log": {"target": "syslog", "debug": False},
}

PROFILE_DEFAULTS: dict = {
    "description": "",
    "env_prefix": None,
    "library_dirs": ["/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib", "/lib64", "/lib"],
    "library_dirs32": ["/usr/lib/i386-linux-gnu", "/usr/lib32", "/usr/lib"],
    "library_dirs_first": False,
    "ld_cache": "/etc/ld.so.cache",
    "ld_conf": "/etc/ld.so.conf",
    "variables": {},
    "libraries": [],
    "binary_dirs": ["/usr/bin", "/usr/sbin", "/bin", "/sbin"],
    "binaries": [],
    "driver_version": None,
    "firmware": [],
    "cuda": None,  # {compat_dir, library}: the image's CUDA compat libraries (nvidia)
    "files": [],
    "capabilities": {},
    "default_capabilities": [],
    "devices": {
        "node": None,
        "nodes": [],
        "sysfs": None,
        "control": [],
        "access": "rw",
        "cdi_kind": None,
        "nvidia": None,
    },
}


Key = list  # [st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns]


def _key(st: os.stat_result) -> Key:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def trust_problem(st: os.stat_result, path: str = "") -> str | None:
    """Why a config or profile file with this stat may not be used (root runs only; the hook
    of a rootless container applies rootless.trust_problem, with `path`'s parents)."""
    if os.geteuid() != 0:
        return None
    namespace = hook_namespace()
    if namespace.rootless:
        from ocihook.request import rootless

        return rootless.trust_problem(namespace, path, st)
    if st.st_uid != 0 or st.st_mode & 0o022:
        return "must be owned by root and not writable by group or others"
    return None


def _cache_name(config_path: str) -> str:
    return config_path.encode().hex()[:240] + ".marshal"


def load_config(path: str = DEFAULT_CONFIG, cache_dir: str | None = DEFAULT_CACHE_DIR) -> dict:
    """The compiled config (defaults filled in, profile resolved and inlined)."""
    # One spelling per file: the cache file is named by the absolute path, so its keys must be too.
    path = os.path.abspath(path)
    dir_fd = _cache_dir(cache_dir) if cache_dir else None
    try:
        if dir_fd is not None:
            cached = _read_cache(dir_fd, _cache_name(path))
            if cached is not None and _fresh(cached["files"]):
                return cached["config"]
        config, files, racy = _compile(path)
        if dir_fd is not None and not racy:
            _write_cache(dir_fd, cache_dir, _cache_name(path), files, config)
        return config
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def _fresh(files: list) -> bool:
    """Every file the cached compile read still has its key (absent ones still absent); the
    trust rule is applied to each from the same stat."""
    for name, what, key in files:
        try:
            st = os.stat(name)
        except (FileNotFoundError, NotADirectoryError):
            if key is None:
                continue
            return False
        except OSError:
            return False  # the compile names the cause
        if key is None or _key(st) != key:
            return False
        problem = trust_problem(st, name)
        if problem:
            raise OcihookError(f"{what} {name}: {problem}")
    return True


def _cache_dir(cache_dir: str) -> int | None:
    """The cache dir's fd when it is (or can be made) trusted; None: do without a cache."""
    try:
        trusted.make_dirs(cache_dir, "config cache dir")
        fd = os.open(cache_dir, trusted.DIR_FLAGS)
    except (OSError, OcihookError):
        return None
    st = os.fstat(fd)
    problem = trusted.dir_problem(st)
    if problem and not problem.startswith("mode"):
        os.close(fd)  # not a dir, or not ours: never used
        return None
    if problem:  # ours, but others may have written in it: tighten and empty it
        try:
            os.fchmod(fd, 0o700)
            for name in os.listdir(fd):
                os.unlink(name, dir_fd=fd)
        except OSError:
            os.close(fd)
            return None
    return fd


def _read_cache(dir_fd: int, name: str) -> dict | None:
    """The cached content when it is intact and has the right shape, else None."""
    import zlib

    data = trusted.read_file(dir_fd, name, MAX_CACHE_BYTES)
    if not data or not data.startswith(CACHE_MAGIC):
        return None
    checksum, body = data[len(CACHE_MAGIC) : len(CACHE_MAGIC) + 8], data[len(CACHE_MAGIC) + 8 :]
    if checksum != b"%08x" % zlib.crc32(body):
        return None
    try:
        cached = marshal.loads(body)
    except (ValueError, EOFError, TypeError):
        return None
    if not isinstance(cached, dict) or cached.get("format") != CACHE_FORMAT:
        return None
    if cached.get("version") != __version__ or cached.get("python") != sys.hexversion:
        return None
    if not _files_shape(cached.get("files")) or not config_shape(cached.get("config")):
        return None
    return cached


def _files_shape(files: object) -> bool:
    if not isinstance(files, list) or not files:
        return False
    for entry in files:
        if not (isinstance(entry, list) and len(entry) == 3):
            return False
        name, what, key = entry
        if not (isinstance(name, str) and name.startswith("/") and isinstance(what, str)):
            return False
        if key is not None and not (
            isinstance(key, list) and len(key) == 5 and all(type(k) is int for k in key)
        ):
            return False
    return True


def config_shape(config: object) -> bool:
    """Whether `config` has the shape of a compiled config (the keys the hook reads)."""
    if not isinstance(config, dict) or config.keys() != DEFAULTS.keys():
        return False
    for key, default in DEFAULTS.items():
        value = config[key]
        if isinstance(default, dict):
            if not isinstance(value, dict) or value.keys() != default.keys():
                return False
        elif key != "profile" and type(value) is not type(default):
            return False
    profile = config["profile"]
    if not isinstance(profile, dict) or not PROFILE_DEFAULTS.keys() <= profile.keys():
        return False
    devices = profile["devices"]
    return isinstance(devices, dict) and PROFILE_DEFAULTS["devices"].keys() <= devices.keys()


def _write_cache(dir_fd: int, cache_dir: str, name: str, files: list, config: dict) -> None:
    """Best effort: a cache that cannot be written only costs speed."""
    import zlib

    content = {
        "format": CACHE_FORMAT,
        "version": __version__,
        "python": sys.hexversion,
        "files": files,
        "config": config,
    }
    body = marshal.dumps(content)
    data = CACHE_MAGIC + b"%08x" % zlib.crc32(body) + body
    try:
        trusted.write_file(dir_fd, cache_dir, name, data, "config cache")
    except OcihookError:
        pass


def _read_yaml(path: str, what: str, missing_ok: bool = False):
    """(document, key, racy) of a YAML file read through one fd; key from its fstat.
    With `missing_ok`, None when the file does not exist."""
    import stat

    import yaml

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError) as error:
        if missing_ok:
            return None
        raise OcihookError(f"{what} {path}: {describe(error)}") from None
    except OSError as error:
        raise OcihookError(f"{what} {path}: {describe(error)}") from None
    with os.fdopen(fd, "rb") as file:
        for _attempt in range(3):
            before = os.fstat(file.fileno())
            if not stat.S_ISREG(before.st_mode):
                raise OcihookError(f"{what} {path}: not a regular file")
            problem = trust_problem(before, path)
            if problem:
                raise OcihookError(f"{what} {path}: {problem}")
            data = os.pread(file.fileno(), MAX_YAML_BYTES + 1, 0)
            after = os.fstat(file.fileno())
            if _key(after) == _key(before):
                break
        # Any write after this read gets a ctime >= the coarse clock now: a ctime safely below
        # it can never be taken again by another content.
        now = time.clock_gettime_ns(trusted.CLOCK_REALTIME_COARSE)
        racy = _key(after) != _key(before) or after.st_ctime_ns > now - trusted.RACY_SECONDS * 1e9
    if len(data) > MAX_YAML_BYTES:
        raise OcihookError(f"{what} {path}: larger than 1 MiB")
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise OcihookError(f"{what} {path}:{where}: invalid YAML: {problem}") from None
    return document, _key(after), racy


def schema() -> dict:
    import json

    with open(os.path.join(os.path.dirname(__file__), "schema.json")) as file:
        return json.load(file)


def _validate(document: object, schema_part: dict, what: str) -> None:
    import jsonschema

    from ocihook.config import schemaerrors

    validator = jsonschema.Draft7Validator(schema_part)  # the newest draft jsonschema 3.2 has
    errors = list(validator.iter_errors(document))
    if errors:
        key, message = schemaerrors.one_line(errors)
        raise OcihookError(f"{what}: {key}: {message}")


def _merge(defaults: dict, values: dict) -> dict:
    import copy

    result = copy.deepcopy(defaults)
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merge(result[key], value)
        else:
            result[key] = value
    return result


def compile_config(path: str) -> tuple[dict, list]:
    """Read, validate and resolve the config; returns it and the files it read, each as
    [path, what, key] (key None: a profile candidate that does not exist)."""
    config, files, _racy = _compile(os.path.abspath(path))
    return config, files


def _compile(path: str) -> tuple[dict, list, bool]:
    full_schema = schema()
    document, key, racy = _read_yaml(path, "config")
    if document is None:
        document = {}
    _validate(document, full_schema, f"config {path}")
    variables = document.pop("variables", None) or {}
    config = _merge(DEFAULTS, document)
    _check_cuda(config["cuda"], path)
    _check_kubernetes(config, path)
    _compile_allow(config["request"]["allow"], config["request"]["trusted_annotations"], path)
    files = [[path, "config", key]]
    profile = config["profile"]
    if isinstance(profile, str):
        candidates = (
            [profile]
            if profile.startswith("/")
            else profile_candidates(profile, config["profile_dirs"])
        )
        for candidate in candidates:
            found = _read_yaml(candidate, "profile", missing_ok=not profile.startswith("/"))
            if found is None:
                files.append([candidate, "profile", None])
                continue
            document, key, candidate_racy = found
            files.append([candidate, "profile", key])
            racy = racy or candidate_racy
            defs = full_schema["definitions"]
            profile_schema = {"definitions": defs, **defs["profile"]}
            _validate(document, profile_schema, f"profile {candidate}")
            profile = document
            break
        else:
            raise OcihookError(
                f"profile '{profile}' not found in {', '.join(config['profile_dirs'])}"
            )
    config["profile"] = _merge(PROFILE_DEFAULTS, profile)
    _check_capabilities(config["profile"])
    _set_variables(config["profile"], variables, path)
    return config, files, racy


def _check_cuda(settings: dict, path: str) -> None:
    """NVIDIA's `mount` mode mounts the image's compat libraries over the driver's: not
    done here (an image library is never mounted, the CVE-2025-23359 class)."""
    if settings["compat"] == "mount":
        raise OcihookError(
            f"config {path}: cuda.compat: mount (NVIDIA's mode that mounts the image's compat "
            "libraries) is not supported: ocihook never mounts an image's library; use "
            "ldconfig (the container's ld cache lists the compat dir first)"
        )


def _check_kubernetes(config: dict, path: str) -> None:
    """Kubernetes mode takes devices only from the device plugin's allocation: an image's
    env request would be a second, unallocated channel."""
    if config["kubernetes"]["device_plugin"] and config["request"]["env"]:
        raise OcihookError(
            f"config {path}: request.env: true with kubernetes.device_plugin: true: in "
            "Kubernetes mode devices come only from the device plugin's allocation"
        )


def _set_variables(profile: dict, values: dict[str, str], path: str) -> None:
    """The profile's `variables` with the config's values (only names the profile has),
    substituted into its `files` and `firmware` paths and targets now: the hook reads the
    result ({version} stays for discovery)."""
    declared = profile["variables"]
    for name in values:
        if name not in declared:
            raise OcihookError(
                f"config {path}: variables: {name!r} is not a variable of profile "
                f"{profile['name']} (it has: {', '.join(declared) or 'none'})"
            )
    resolved = {**declared, **values}
    profile["variables"] = resolved

    def fill(text: str) -> str:
        for name, value in resolved.items():
            text = text.replace(f"{{{name}}}", value)
        left = text.replace("{version}", "")
        if "{" in left:
            unknown = left[left.index("{") :].split("}", 1)[0] + "}"
            raise OcihookError(
                f"profile {profile['name']}: {text}: unknown variable {unknown} (variables: "
                f"{', '.join(resolved) or 'none'}, and {{version}})"
            )
        return text

    for part in [profile, *profile["capabilities"].values()]:
        if part.get("firmware"):
            part["firmware"] = [fill(f) for f in part["firmware"]]
        if part.get("files"):
            part["files"] = [
                fill(f)
                if isinstance(f, str)
                else {**f, **{k: fill(f[k]) for k in ("path", "target") if k in f}}
                for f in part["files"]
            ]


def _compile_allow(allow: list[dict], trusted: list[str], path: str) -> None:
    """Compile every request.allow regex now, as the hook will at container start; a key regex
    must match one of the trusted annotations, the only ones the allow-list reads."""
    import re

    from ocihook.request.names import parse_name

    for number, entry in enumerate(allow):
        for item in entry["devices"] if isinstance(entry["devices"], list) else ():
            if isinstance(item, str) and parse_name(item) is None:
                raise OcihookError(
                    f"config {path}: request.allow.{number}.devices: {item!r:.60} is no device "
                    "name (an index, PCI address, node name, GPU-/MIG- UUID or MIG device 0:1)"
                )
        where = f"config {path}: request.allow.{number}.annotations"
        for key_re, value_re in (entry.get("annotations") or {}).items():
            for pattern in (key_re, value_re):
                try:
                    re.compile(pattern)
                except re.error as error:
                    raise OcihookError(f"{where}: invalid regex {pattern!r:.60}: {error}") from None
            if not any(re.search(key_re, key) for key in trusted):
                raise OcihookError(
                    f"{where}: key {key_re!r:.60} matches none of request.trusted_annotations "
                    f"({', '.join(trusted) or 'none'}): the allow-list reads only those, since a "
                    "pod's author can set any other annotation"
                )


def profile_candidates(name: str, profile_dirs: list[str]) -> list[str]:
    """Where a named profile is looked for, in order (the first that exists is used)."""
    return [os.path.join(directory, f"{name}.yaml") for directory in profile_dirs]


def _check_capabilities(profile: dict) -> None:
    for name in profile["default_capabilities"]:
        if name not in profile["capabilities"]:
            raise OcihookError(
                f"profile {profile['name']}: default_capabilities: {name!r} is not one of "
                f"its capabilities ({', '.join(profile['capabilities']) or 'none'})"
            )


def find_profile(name: str, profile_dirs: list[str]) -> str:
    """The profile file a name resolves to (as the compile resolves it)."""
    if name.startswith("/"):
        return name
    for candidate in profile_candidates(name, profile_dirs):
        if os.path.lexists(candidate):
            return candidate
    raise OcihookError(f"profile '{name}' not found in {', '.join(profile_dirs)}")
