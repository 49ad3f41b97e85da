"""Resolve a driver profile against the source root into a Plan (reads, never writes).

All lookups go through file descriptors of the source and device roots with in-root
resolution: a driver volume's symlinks can only point inside that volume.
"""

from __future__ import annotations

import os
import stat

from ocihook import securepath
from ocihook.errors import OcihookError
from ocihook.plan import DeviceNode, Link, Mount, Plan

PLACEHOLDER_LIB_DIR = "/usr/lib64"


def _is_glob(pattern: str) -> bool:
    return "*" in pattern or "?" in pattern or "[" in pattern


def glob_match(name: str, pattern: str) -> bool:
    """fnmatch without `re` (its import costs ms at every container start): `*` and `?`;
    patterns with `[...]` classes go to fnmatch."""
    if "[" in pattern:
        import fnmatch

        return fnmatch.fnmatchcase(name, pattern)
    if pattern.count("*") == 1 and "?" not in pattern:  # the common "libfoo.so.*"
        prefix, suffix = pattern.split("*")
        return (
            len(name) >= len(prefix) + len(suffix)
            and name.startswith(prefix)
            and name.endswith(suffix)
        )
    n = p = 0
    star, mark = -1, 0
    while n < len(name):
        if p < len(pattern) and pattern[p] in ("?", name[n]):
            n += 1
            p += 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark = p, n
            p += 1
        elif star >= 0:
            p = star + 1
            mark += 1
            n = mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


class Roots:
    """O_PATH fds of the source and device roots, opened once (a context manager)."""

    def __init__(self, source_root: str, device_root: str) -> None:
        self.source_root = source_root
        self.device_root = device_root
        self.source_fd = _open_root(source_root, "source root")
        try:
            self.device_fd = (
                self.source_fd
                if device_root == source_root
                else _open_root(device_root, "device root")
            )
        except OcihookError:
            os.close(self.source_fd)
            raise
        # Canonical host paths of the roots, to turn kernel-resolved paths back into in-root ones.
        self.source_real = os.readlink(securepath.fd_path(self.source_fd))
        self.device_real = os.readlink(securepath.fd_path(self.device_fd))
        self._listings: dict[tuple[int, str], _Dir] = {}

    def listing(self, root_fd: int, path: str) -> _Dir:
        """The directory `path` of the root `root_fd`, listed once per plan."""
        key = (root_fd, path)
        if key not in self._listings:
            self._listings[key] = _Dir(root_fd, path)
        return self._listings[key]

    def close(self) -> None:
        if self.device_fd != self.source_fd:
            os.close(self.device_fd)
        os.close(self.source_fd)

    def __enter__(self) -> Roots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_root(path: str, what: str) -> int:
    try:
        return securepath.open_dir(path)
    except OSError as error:
        raise OcihookError(f"{what} {path}: {error.strerror}") from None


def host_path(root: str, inner: str) -> str:
    return inner if root == "/" else root.rstrip("/") + inner


class _Dir:
    """One directory of the source root, listed once: name -> lstat result."""

    def __init__(self, root_fd: int, path: str) -> None:
        self.path = path
        self.entries: dict[str, os.stat_result] = {}
        try:
            fd = securepath.resolve(root_fd, path, flags=os.O_RDONLY | os.O_DIRECTORY)
        except (FileNotFoundError, NotADirectoryError):
            return
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    self.entries[entry.name] = entry.stat(follow_symlinks=False)
        finally:
            os.close(fd)

    def match(self, pattern: str) -> list[str]:
        if not _is_glob(pattern):
            return [pattern] if pattern in self.entries else []
        return sorted(name for name in self.entries if glob_match(name, pattern))


def _final(root_fd: int, path: str) -> tuple[str, os.stat_result] | None:
    """Resolve `path` in the root; (resolved in-root path, stat) or None if missing."""
    try:
        fd = securepath.resolve(root_fd, path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise OcihookError(f"source {path}: {error.strerror}") from None
    try:
        st = os.fstat(fd)
        resolved = os.readlink(securepath.fd_path(fd))
    finally:
        os.close(fd)
    return resolved, st


def _in_root(root: str, resolved_host_path: str) -> str:
    """The in-root path of a host path that the kernel resolved inside `root`."""
    if root == "/":
        return resolved_host_path
    prefix = root.rstrip("/")
    if resolved_host_path == prefix:
        return "/"
    if not resolved_host_path.startswith(prefix + "/"):
        raise OcihookError(f"source {resolved_host_path}: resolved outside the source root")
    return resolved_host_path[len(prefix) :]


def _first_match(dirs: list[_Dir], pattern: str) -> tuple[_Dir | None, list[str]]:
    """The first directory with entries matching `pattern`, and those entries."""
    for directory in dirs:
        names = directory.match(pattern)
        if names:
            return directory, names
    return None, []


def _libraries(roots: Roots, profile: dict, lib_dir: str) -> tuple[list[Mount], list[Link]]:
    dirs = [roots.listing(roots.source_fd, d) for d in profile["library_dirs"]]
    mounts: dict[str, Mount] = {}
    links: list[Link] = []
    for pattern in profile["libraries"]:
        directory, names = _first_match(dirs, pattern)
        if directory is None:
            continue
        for name in names:
            if stat.S_ISREG(directory.entries[name].st_mode):
                _add_mount(
                    mounts, roots, f"{directory.path}/{name}", f"{lib_dir}/{name}", "library"
                )
        for name in names:
            if not stat.S_ISLNK(directory.entries[name].st_mode):
                continue
            final = _final(roots.source_fd, f"{directory.path}/{name}")
            if final is None:  # a broken driver: the container would fail to load it
                raise OcihookError(
                    f"source {host_path(roots.source_root, directory.path + '/' + name)}: "
                    "soname link to a library that does not exist; the driver is incomplete"
                )
            if not stat.S_ISREG(final[1].st_mode):
                continue
            inner = _in_root(roots.source_real, final[0])
            target_name = os.path.basename(inner)
            if f"{lib_dir}/{target_name}" not in mounts:
                _add_mount(mounts, roots, inner, f"{lib_dir}/{target_name}", "library")
            links.append(Link(f"{lib_dir}/{name}", target_name))
    return list(mounts.values()), links


def _add_mount(mounts: dict[str, Mount], roots: Roots, inner: str, target: str, kind: str) -> None:
    if target not in mounts:
        mounts[target] = Mount(inner, host_path(roots.source_root, inner), target, kind)


def _binaries(roots: Roots, profile: dict, bin_dir: str) -> list[Mount]:
    mounts: dict[str, Mount] = {}
    for name in profile["binaries"]:
        for directory in profile["binary_dirs"]:
            final = _final(roots.source_fd, f"{directory}/{name}")
            if final is not None and stat.S_ISREG(final[1].st_mode):
                inner = _in_root(roots.source_real, final[0])
                _add_mount(mounts, roots, inner, f"{bin_dir}/{name}", "binary")
                break
    return list(mounts.values())


def _glob_files(roots: Roots, pattern: str) -> list[tuple[str, os.stat_result]]:
    """Files matching `pattern` (glob characters in its last component only)."""
    parent, name = os.path.split(pattern)
    if _is_glob(parent):
        raise OcihookError(f"profile: glob characters only in the last component: {pattern}")
    found = []
    for match in roots.listing(roots.source_fd, parent).match(name):
        final = _final(roots.source_fd, f"{parent}/{match}")
        if final is not None:
            found.append((_in_root(roots.source_real, final[0]), final[1]))
    return found


def _driver_version(roots: Roots, profile: dict) -> str | None:
    spec = profile.get("driver_version")
    if not spec:
        return None
    for directory in profile["library_dirs"]:
        d = roots.listing(roots.source_fd, directory)
        for name in d.match(spec["library"]):
            if stat.S_ISREG(d.entries[name].st_mode) and ".so." in name:
                return name.split(".so.", 1)[1]
    return None


def _files(roots: Roots, profile: dict, version: str | None) -> list[Mount]:
    mounts: dict[str, Mount] = {}
    entries = [{"path": f, "kind": "firmware"} for f in profile["firmware"]]
    entries += [
        {"path": f, "kind": "file"} if isinstance(f, str) else {**f, "kind": "file"}
        for f in profile["files"]
    ]
    for entry in entries:
        pattern = entry["path"]
        if "{version}" in pattern:
            if version is None:
                continue
            pattern = pattern.replace("{version}", version)
        found = _glob_files(roots, pattern)
        if not found and entry["kind"] == "file" and not entry.get("optional", False):
            raise OcihookError(
                f"profile: file {pattern} not found in source root {roots.source_root}"
            )
        for inner, st in found:
            if stat.S_ISSOCK(st.st_mode):
                kind = "socket"
            elif stat.S_ISREG(st.st_mode):
                kind = entry["kind"]
            else:
                continue
            target = entry.get("target") or inner
            _add_mount(mounts, roots, inner, target, kind)
    return list(mounts.values())


def device_indices(roots: Roots, node_pattern: str | None) -> dict[int, str]:
    """index -> in-root path of each per-device node that exists under the device root."""
    if not node_pattern:
        return {}
    parent, name = os.path.split(node_pattern)
    prefix, _, suffix = name.partition("{index}")
    result = {}
    for entry in roots.listing(roots.device_fd, parent).entries:
        digits = entry[len(prefix) : len(entry) - len(suffix)]
        if (
            entry.startswith(prefix)
            and entry.endswith(suffix)
            and 0 < len(digits) <= 4
            and digits.isascii()
            and digits.isdigit()
        ):
            result[int(digits)] = f"{parent}/{entry}"
    return result


def _device_node(roots: Roots, inner: str, index: int | None, access: str) -> DeviceNode | None:
    final = _final(roots.device_fd, inner)
    if final is None:
        return None
    st = final[1]
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        raise OcihookError(f"device {host_path(roots.device_root, inner)}: not a device node")
    return DeviceNode(
        path=inner,
        host_path=host_path(roots.device_root, _in_root(roots.device_real, final[0])),
        type=kind,
        major=os.major(st.st_rdev),
        minor=os.minor(st.st_rdev),
        mode=stat.S_IMODE(st.st_mode),
        index=index,
        access=access,
    )


def _devices(roots: Roots, profile: dict, indices: list[int], available: dict[int, str]):
    spec = profile["devices"]
    nodes = []
    for index in indices:
        node = _device_node(roots, available[index], index, spec["access"])
        if node is None:
            raise OcihookError(f"device {available[index]} disappeared")
        nodes.append(node)
    for control in spec["control"]:
        entry = {"path": control} if isinstance(control, str) else control
        node = _device_node(roots, entry["path"], None, spec["access"])
        if node is None:
            if entry.get("optional", False):
                continue
            raise OcihookError(
                f"control device {host_path(roots.device_root, entry['path'])} not found"
            )
        nodes.append(node)
    return nodes


def build_plan(
    config: dict,
    roots: Roots,
    indices: list[int],
    available: dict[int, str],
    request: str,
    lib_dir: str = PLACEHOLDER_LIB_DIR,
) -> Plan:
    """Everything the container gets for the device `indices`, checked against `available`
    (from `device_indices`)."""
    profile = config["profile"]
    version = _driver_version(roots, profile)
    library_mounts, links = _libraries(roots, profile, lib_dir)
    mounts = library_mounts
    mounts += _binaries(roots, profile, config["container"]["bin_dir"])
    mounts += _files(roots, profile, version)
    if not mounts:
        raise OcihookError(
            f"profile {profile['name']}: no driver files found in source root {roots.source_root}"
        )
    ldconfig = bool(library_mounts) and config["ldconfig"]["enabled"]
    return Plan(
        profile=profile["name"],
        source_root=roots.source_root,
        device_root=roots.device_root,
        request=request,
        lib_dir=lib_dir,
        driver_version=version,
        mounts=mounts,
        links=links,
        devices=_devices(roots, profile, indices, available),
        ld_dirs=[lib_dir] if library_mounts else [],
        ldconfig=ldconfig,
    )
