"""Which hooks.d directories podman and CRI-O read, worked out from their configuration files
the way they work it out (containers/common pkg/config for podman, CRI-O's pkg/config).

podman (root and rootless) reads `hooks_dir` in the `[engine]` table of containers.conf,
default `["/usr/share/containers/oci/hooks.d"]` (not /etc/containers/oci/hooks.d), from these
files, each later one replacing the list (podman 4.8 and later: `{append = true}` as the last
item appends instead):

  CONTAINERS_CONF, if set: that file and no other; otherwise
  /usr/share/containers/containers.conf, /etc/containers/containers.conf,
  /etc/containers/containers.conf.d/*.conf,
  rootless, podman 5.7 and later: /etc/containers/containers.rootless.conf,
    containers.rootless.conf.d/*.conf and containers.rootless.conf.d/UID/*.conf,
  rootless (root too from podman 5.0): $XDG_CONFIG_HOME/containers/containers.conf
    (default ~/.config/containers/containers.conf) and its containers.conf.d/*.conf,
  CONTAINERS_CONF_OVERRIDE last (podman 4.5 and later);

and `podman --hooks-dir DIR` replaces all of it. An empty list reads no directory (podman
4.8 and later, as root: the deprecated implicit pair /usr/share/... and /etc/...).

CRI-O reads `hooks_dir` in `[crio.runtime]`, default `["/usr/share/containers/oci/hooks.d"]`,
from /etc/crio/crio.conf (CONTAINER_CONFIG) and then every file under /etc/crio/crio.conf.d
(CONTAINER_CONFIG_DIR), walked in lexical order, each later one replacing the list;
CONTAINER_HOOKS_DIR or `crio --hooks-dir` replace it.

A config file the runtime cannot parse stops it: podman runs no container, CRI-O does not
start. Such files are reported as problems, in one line that names the file and the line.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from dataclasses import dataclass, field
from typing import Mapping

from ocihook.check import tomlfile

DEFAULT_DIR = "/usr/share/containers/oci/hooks.d"
OVERRIDE_DIR = "/etc/containers/oci/hooks.d"
CONTAINERS_CONF = "/etc/containers/containers.conf"
CONTAINERS_CONF_USR = "/usr/share/containers/containers.conf"
CRIO_CONF = "/etc/crio/crio.conf"
CRIO_CONF_DIR = "/etc/crio/crio.conf.d"


@dataclass
class Reader:
    """One runtime's hooks directories, in the order it reads them (a file in a later one
    masks the same-named file in an earlier one)."""

    runtime: str
    directories: list[str]
    origin: str  # where the list comes from: "default", "hooks_dir in FILE", ...
    files: list[str] = field(default_factory=list)  # config files read, in order
    problems: list[str] = field(default_factory=list)  # why the runtime would not start
    notes: list[str] = field(default_factory=list)
    version: tuple | None = None  # the engine's (major, minor), where known


class _ConfigError(Exception):
    pass


def podman_version(env: Mapping[str, str]) -> tuple[int, int] | None:
    """(major, minor) of `podman --version` on env's PATH, or None without podman."""
    podman = shutil.which("podman", path=env.get("PATH", os.defpath))
    if podman is None:
        return None
    # podman reads its config files even for --version: an empty one, so that a broken
    # containers.conf (which check reports) does not hide the version.
    probe = {k: v for k, v in env.items() if not k.startswith("CONTAINERS_CONF")}
    probe["CONTAINERS_CONF"] = os.devnull
    try:
        result = subprocess.run(
            [podman, "--version"], capture_output=True, text=True, timeout=30, env=probe
        )
    except (OSError, subprocess.SubprocessError):
        return None
    words = result.stdout.split()
    if len(words) < 3 or words[:2] != ["podman", "version"]:
        return None
    parts = words[2].split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def _conf_d(directory: str) -> list[str]:
    """The *.conf files directly in a containers.conf.d directory, by name."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(directory, name)
        if name.endswith(".conf") and not os.path.isdir(path):
            out.append(path)
    return out


def _home(env: Mapping[str, str], uid: int) -> str | None:
    if env.get("HOME"):
        return env["HOME"]
    try:
        import pwd

        return pwd.getpwuid(uid).pw_dir
    except (KeyError, ImportError):
        return None


def _under(root: str, path: str) -> str:
    return path if root == "/" else os.path.join(root, path.lstrip("/"))


def podman_config_files(
    env: Mapping[str, str], uid: int, version: tuple[int, int] | None, root: str = "/"
) -> tuple[list[str], list[str]]:
    """(files podman reads in order, files that must exist: a missing one is an error).
    System paths are taken under `root` (tests)."""
    explicit = env.get("CONTAINERS_CONF")
    if explicit:
        return [explicit], [explicit]
    current = version is None or version >= (5, 7)
    etc = _under(root, CONTAINERS_CONF)
    files = [_under(root, CONTAINERS_CONF_USR), etc, *_conf_d(etc + ".d")]
    if uid != 0 and current:
        rootless = _under(root, "/etc/containers/containers.rootless.conf")
        files += [rootless, *_conf_d(rootless + ".d"), *_conf_d(f"{rootless}.d/{uid}")]
    if uid != 0 or version is None or version >= (5, 0):
        base = env.get("XDG_CONFIG_HOME") or os.path.join(_home(env, uid) or "/", ".config")
        user = os.path.join(base, "containers", "containers.conf")
        files += [user, *_conf_d(user + ".d")]
    required = []
    override = env.get("CONTAINERS_CONF_OVERRIDE")
    if override and (version is None or version >= (4, 5)):
        files.append(override)
        required.append(override)
    return files, required


def _podman_list(value: object, current: list[str], version: tuple[int, int] | None) -> list[str]:
    """hooks_dir as podman decodes it onto the list so far."""
    if not isinstance(value, list):
        raise _ConfigError(f"hooks_dir must be an array of strings, not {_kind(value)}")
    attributed = version is None or version >= (4, 8)
    strings: list[str] = []
    append = False
    for item in value:
        if isinstance(item, str):
            strings.append(item)
        elif isinstance(item, dict) and attributed:
            for key, flag in item.items():
                if key != "append" or not isinstance(flag, bool):
                    raise _ConfigError(f"hooks_dir: unsupported {{{key} = ...}} (only append)")
                append = flag
        else:
            where = " before podman 4.8" if isinstance(item, dict) else ""
            raise _ConfigError(f"hooks_dir must hold strings{where}, not {_kind(item)}")
    return current + strings if append else strings


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return f"a {type(value).__name__}"


def _read(path: str, required: bool, reader: Reader, stops: str) -> dict | None:
    """A config file's TOML, or None (missing, or a problem recorded)."""
    try:
        document = tomlfile.load(path)
    except FileNotFoundError:
        if required:
            reader.problems.append(f"{path}: does not exist: {stops}")
        return None
    except (IsADirectoryError, PermissionError, OSError) as error:
        if isinstance(error, PermissionError) and not required:
            reader.notes.append(f"{path}: cannot read it ({error.strerror})")
            return None
        reader.problems.append(f"{path}: {error.strerror}: {stops}")
        return None
    except tomlfile.TomlError as error:
        reader.problems.append(f"{error}: {stops}")
        return None
    reader.files.append(path)
    return document


def podman_reader(
    env: Mapping[str, str], uid: int, version: tuple[int, int] | None, root: str = "/"
) -> Reader:
    """The directories podman run by `uid` reads (rootless when uid is not 0)."""
    name = "podman" if uid == 0 else f"rootless podman (uid {uid})"
    reader = Reader(name, [DEFAULT_DIR], "default", version=version)
    stops = "podman runs no container until it is fixed"
    files, required = podman_config_files(env, uid, version, root)
    for path in files:
        document = _read(path, path in required, reader, stops)
        if document is None:
            continue
        present, engine = tomlfile.lookup(document, ("engine",))
        if not present:
            continue
        if not isinstance(engine, dict):
            reader.problems.append(f"{path}: engine must be a table, not {_kind(engine)}: {stops}")
            continue
        if "hooks_dir" not in engine:
            continue
        try:
            reader.directories = _podman_list(engine["hooks_dir"], reader.directories, version)
        except _ConfigError as error:
            reader.problems.append(f"{path}: {error}: {stops}")
            continue
        reader.origin = f"hooks_dir in {path}"
    if not reader.directories:
        if uid == 0 and (version is None or version >= (4, 8)):
            reader.directories = [DEFAULT_DIR, OVERRIDE_DIR]
            reader.notes.append(
                f"{reader.origin} is empty: podman 4.8 and later then read the deprecated "
                f"implicit {DEFAULT_DIR} and {OVERRIDE_DIR} as root"
            )
        else:
            reader.notes.append(f"{reader.origin} is empty: {name} reads no hooks directory")
    if version is None:
        reader.notes.append("podman's version is unknown: the rules of podman 5.8 are assumed")
    return reader


def _walk(directory: str) -> list[str]:
    """Every file under directory, depth first in lexical order (Go's filepath.Walk)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    out = []
    for name in names:
        path = os.path.join(directory, name)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        out += _walk(path) if stat.S_ISDIR(mode) else [path]
    return out


def crio_installed(env: Mapping[str, str], root: str = "/") -> bool:
    return bool(
        env.get("CONTAINER_CONFIG")
        or env.get("CONTAINER_CONFIG_DIR")
        or os.path.exists(_under(root, CRIO_CONF))
        or os.path.isdir(_under(root, CRIO_CONF_DIR))
        or shutil.which("crio", path=env.get("PATH", os.defpath))
    )


def crio_reader(env: Mapping[str, str], root: str = "/") -> Reader:
    """The directories CRI-O reads, from crio.conf and crio.conf.d (CONTAINER_CONFIG and
    CONTAINER_CONFIG_DIR, as crio takes them from its environment)."""
    reader = Reader("CRI-O", [DEFAULT_DIR], "default")
    stops = "CRI-O does not start until it is fixed"
    config = env.get("CONTAINER_CONFIG") or _under(root, CRIO_CONF)
    config_dir = env.get("CONTAINER_CONFIG_DIR") or _under(root, CRIO_CONF_DIR)
    required = [config] if env.get("CONTAINER_CONFIG") else []
    for path in [config, *_walk(config_dir)]:
        document = _read(path, path in required, reader, stops)
        if document is None:
            continue
        present, value = tomlfile.lookup(document, ("crio", "runtime", "hooks_dir"))
        if not present:
            continue
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            reader.problems.append(
                f"{path}: hooks_dir must be an array of strings, not {_kind(value)}: {stops}"
            )
            continue
        reader.directories = list(value)
        reader.origin = f"hooks_dir in {path}"
    if env.get("CONTAINER_HOOKS_DIR"):
        reader.directories = [d for d in env["CONTAINER_HOOKS_DIR"].split(",") if d]
        reader.origin = "CONTAINER_HOOKS_DIR"
    if not reader.directories:
        reader.notes.append(f"{reader.origin} is empty: CRI-O reads no hooks directory")
    return reader


def readers(env: Mapping[str, str] | None = None, uid: int | None = None) -> list[Reader]:
    """The runtimes of this host as the caller would run them: podman as root (rootless
    podman for a user) where podman is installed, and CRI-O where it is; podman's defaults
    when neither is."""
    env = os.environ if env is None else env
    uid = os.geteuid() if uid is None else uid
    out = []
    if shutil.which("podman", path=env.get("PATH", os.defpath)):
        out.append(podman_reader(env, uid, podman_version(env)))
    if crio_installed(env):
        out.append(crio_reader(env))
    if not out:
        reader = podman_reader(env, uid, None)
        reader.notes.append("neither podman nor CRI-O is installed: podman's defaults shown")
        out.append(reader)
    return out
