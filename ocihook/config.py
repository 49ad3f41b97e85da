"""The hook's configuration: YAML validated by a JSON Schema, compiled once and cached.

The hot path calls `load_config`: while the YAML files are unchanged (same inode, size
and mtime) it reads one small marshal file and imports neither PyYAML nor jsonschema.
"""

from __future__ import annotations

import marshal
import os
import sys

from ocihook import __version__
from ocihook.errors import OcihookError

DEFAULT_CONFIG = "/etc/ocihook/config.yaml"
DEFAULT_CACHE_DIR = "/run/ocihook/cache"
CACHE_FORMAT = 1
MAX_YAML_BYTES = 1 << 20

DEFAULTS: dict = {
    "profile": "nvidia",
    "profile_dirs": ["/etc/ocihook/profiles", "/usr/share/ocihook/profiles"],
    "source_root": "/",
    "device_root": "/",
    "request": {"annotation": "ocihook.io/devices", "env": False, "allow": []},
    "container": {"lib_dir": "auto", "bin_dir": "/usr/bin"},
    "ldconfig": {"enabled": True, "path": "/sbin/ldconfig"},
    "selinux": {"mode": "auto", "label": None, "source_check": "error"},
    "mount_api": "auto",
    "state_dir": "/run/ocihook",
    "records": {"max_age": 7 * 24 * 3600, "max_count": 1000},
    "log": {"target": "syslog", "debug": False},
}

PROFILE_DEFAULTS: dict = {
    "description": "",
    "env_prefix": None,
    "library_dirs": ["/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib", "/lib64", "/lib"],
    "libraries": [],
    "binary_dirs": ["/usr/bin", "/usr/sbin", "/bin", "/sbin"],
    "binaries": [],
    "driver_version": None,
    "firmware": [],
    "files": [],
    "devices": {"node": None, "control": [], "access": "rw"},
}


def _file_key(path: str) -> list[int]:
    try:
        st = os.stat(path)
    except OSError as error:
        raise OcihookError(f"config {path}: {error.strerror}") from None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def _cache_path(cache_dir: str, config_path: str) -> str:
    return os.path.join(cache_dir, os.path.abspath(config_path).encode().hex()[:240] + ".marshal")


def load_config(path: str = DEFAULT_CONFIG, cache_dir: str | None = DEFAULT_CACHE_DIR) -> dict:
    """The compiled config (defaults filled in, profile resolved and inlined)."""
    # One spelling per file: the cache file is named by the absolute path, so its keys must be too.
    path = os.path.abspath(path)
    key = _file_key(path)
    cache_file = _cache_path(cache_dir, path) if cache_dir else None
    if cache_file:
        cached = _read_cache(cache_file)
        if cached is not None and cached["files"].get(path) == key:
            if all(_file_key(f) == k for f, k in cached["files"].items() if f != path):
                return cached["config"]
    config, files = compile_config(path)
    if cache_file:
        _write_cache(cache_dir, cache_file, {"files": files, "config": config})
    return config


def _read_cache(cache_file: str) -> dict | None:
    try:
        with open(cache_file, "rb") as file:
            cached = marshal.loads(file.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if not isinstance(cached, dict) or cached.get("format") != CACHE_FORMAT:
        return None
    if cached.get("version") != __version__ or cached.get("python") != sys.hexversion:
        return None
    return cached


def _write_cache(cache_dir: str, cache_file: str, content: dict) -> None:
    """Best effort: a cache that cannot be written only costs speed."""
    content = {"format": CACHE_FORMAT, "version": __version__, "python": sys.hexversion, **content}
    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        tmp = f"{cache_file}.{os.getpid()}.tmp"
        with open(tmp, "wb") as file:
            file.write(marshal.dumps(content))
        os.replace(tmp, cache_file)
    except OSError:
        pass


def _read_yaml(path: str, what: str):
    import stat

    import yaml

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as error:
        raise OcihookError(f"{what} {path}: {error.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OcihookError(f"{what} {path}: not a regular file")
        if os.geteuid() == 0 and (st.st_uid != 0 or st.st_mode & 0o022):
            raise OcihookError(
                f"{what} {path}: must be owned by root and not writable by group or others"
            )
        data = file.read(MAX_YAML_BYTES + 1)
    if len(data) > MAX_YAML_BYTES:
        raise OcihookError(f"{what} {path}: larger than 1 MiB")
    try:
        return yaml.safe_load(data)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise OcihookError(f"{what} {path}:{where}: invalid YAML: {problem}") from None


def schema() -> dict:
    import json

    with open(os.path.join(os.path.dirname(__file__), "schema.json")) as file:
        return json.load(file)


def _validate(document: object, schema_part: dict, what: str) -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema_part)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    if errors:
        error = jsonschema.exceptions.best_match(errors)
        key = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise OcihookError(f"{what}: {key}: {_message(error)}")


def _message(error) -> str:
    if error.validator == "additionalProperties":
        return f"unknown key ({error.message.split('(')[-1].rstrip(')')})"
    if error.validator == "oneOf" and error.context:
        return min(error.context, key=lambda e: len(e.message)).message
    return error.message


def _merge(defaults: dict, values: dict) -> dict:
    import copy

    result = copy.deepcopy(defaults)
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merge(result[key], value)
        else:
            result[key] = value
    return result


def compile_config(path: str) -> tuple[dict, dict[str, list[int]]]:
    """Read, validate and resolve the config; returns it and the keys of the files it used."""
    full_schema = schema()
    document = _read_yaml(path, "config")
    if document is None:
        document = {}
    _validate(document, full_schema, f"config {path}")
    config = _merge(DEFAULTS, document)
    files = {path: _file_key(path)}
    profile = config["profile"]
    if isinstance(profile, str):
        profile_path = find_profile(profile, config["profile_dirs"])
        document = _read_yaml(profile_path, "profile")
        profile_schema = {"$defs": full_schema["$defs"], **full_schema["$defs"]["profile"]}
        _validate(document, profile_schema, f"profile {profile_path}")
        files[profile_path] = _file_key(profile_path)
        profile = document
    config["profile"] = _merge(PROFILE_DEFAULTS, profile)
    return config, files


def find_profile(name: str, profile_dirs: list[str]) -> str:
    if name.startswith("/"):
        return name
    for directory in profile_dirs:
        candidate = os.path.join(directory, f"{name}.yaml")
        if os.path.isfile(candidate):
            return candidate
    raise OcihookError(f"profile '{name}' not found in {', '.join(profile_dirs)}")
