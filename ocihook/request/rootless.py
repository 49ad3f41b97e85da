"""Rootless podman: the hook runs as root of the user's user namespace, with that user's rights.

Whether the hook runs so is decided by the hook's own process, never by the container
(linux.userns.hook_namespace: its /proc/self/uid_map is the identity map only in the initial user
namespace, where root podman and CRI-O run hooks), and this module is imported only then.
What differs (docs/rootless.md):

- device nodes are bind-mounted from the host (no mknod in a user namespace);
- the device cgroup is left alone: on cgroup v1 only host root may write devices.allow, on
  v2 attaching a BPF device program needs CAP_SYS_ADMIN in the initial namespace, so device
  access is what the host node's permissions give the user;
- records in /run/user/<uid>/ocihook, the config cache in /run/user/<uid>/ocihook/cache
  (the hook gets the hooks.d file's `env`, not the user's: the uid comes from uid_map);
- the trust rule for the config and the profile (`trust_problem`).
"""

from __future__ import annotations

import errno
import os
import stat

from ocihook.errors import OcihookError, describe
from ocihook.linux.userns import HookNamespace, outside_id

POSIX_ACL = "system.posix_acl_access"
KEEP_GROUPS = "run.oci.keep_original_groups"  # podman --group-add keep-groups (crun)
RUNTIME_ROOT = "/run/user"  # /run/user/<uid>: the user's runtime dir (systemd-logind's)
CDI_ROUTE = (
    "without the hook, as root: ocihook cdi generate --output /etc/cdi, then "
    "podman run --device ocihook.io/PROFILE=all"
)


# ---------------------------------------------------------------------------
# Per-user dirs


def user_dir(ns: HookNamespace) -> str:
    """Where a rootless hook keeps records: /run/user/<host uid>/ocihook."""
    if ns.host_uid is None:
        raise OcihookError(
            f"rootless: the hook's uid {os.geteuid()} has no host uid in /proc/self/uid_map; "
            f"{CDI_ROUTE}"
        )
    return f"{RUNTIME_ROOT}/{ns.host_uid}/ocihook"


def cache_dir(ns: HookNamespace) -> str:
    """Where a rootless hook keeps the compiled config: <user_dir>/cache."""
    return user_dir(ns) + "/cache"


def check_runtime_dir(ns: HookNamespace, root: str = RUNTIME_ROOT) -> None:
    """The user's runtime dir /run/user/<uid> exists, is the user's (uid 0 in the
    namespace) and nobody else may write it; OcihookError (one line, with the CDI route)
    otherwise. The hook creates <it>/ocihook 0700 itself; it cannot create /run/user/<uid>."""
    path = f"{root}/{ns.host_uid}"
    try:
        st = os.lstat(path)
    except OSError as error:
        raise OcihookError(
            f"rootless: records go to {path}/ocihook, but {path} {describe(error)} (systemd-"
            "logind makes it at login; for a user without a session: loginctl enable-linger "
            f"USER); {CDI_ROUTE}"
        ) from None
    problem = None
    if not stat.S_ISDIR(st.st_mode):
        problem = "is not a directory"
    elif st.st_uid != os.geteuid():
        problem = f"is not the user's (owner {_owner(ns, st.st_uid)})"
    elif st.st_mode & 0o022:
        problem = f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    if problem:
        raise OcihookError(f"rootless: the user's runtime dir {path} {problem}; {CDI_ROUTE}")


# ---------------------------------------------------------------------------
# Trust rule


def _owner(ns: HookNamespace, uid: int) -> str:
    if uid == ns.overflow_uid:
        return f"uid {uid}, unmapped or mapped"
    host = outside_id(ns.uid_map, uid)
    return f"uid {uid}, host uid {host}" if host is not None else f"uid {uid}"


def _problem(ns: HookNamespace, path: str, st: os.stat_result) -> str | None:
    if st.st_uid != ns.overflow_uid:
        return (
            f"owned by {_owner(ns, st.st_uid)} of the user namespace, which the user's "
            "containers may act as"
        )
    if st.st_mode & 0o022:
        return f"writable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return _mapped_owner(path)


def _mapped_owner(path: str) -> str | None:
    """An unmapped owner and a mapped uid that happens to be the overflow uid (rootless
    podman maps 65534 to a subordinate uid) look the same in a stat. The kernel tells them
    apart without changing anything: O_NOATIME is refused (EPERM) unless the caller owns
    the file or has CAP_FOWNER over its owner, which the namespace's root has for every uid
    the namespace maps (inode_owner_or_capable)."""
    flags = os.O_RDONLY | os.O_NOATIME | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        os.close(os.open(path, flags))
    except PermissionError as error:
        if error.errno == errno.EPERM:
            return None  # not ours to own: an owner outside the namespace
        return "not readable, so its owner cannot be told from a uid the namespace maps"
    except OSError as error:
        return f"not checkable: {describe(error)}"
    return "owned by a uid the user namespace maps (shown as the overflow uid)"


def trust_problem(ns: HookNamespace, path: str, st: os.stat_result) -> str | None:
    """Why a rootless hook may not use the config or profile `path` (whose stat is `st`),
    or None. Inside the user namespace every uid it does not map shows as the overflow uid
    (65534), host root included: the file and every parent directory must be owned by such
    an unmapped user (never one the namespace maps: the user, whose uid is the containers'
    root, or a subordinate uid, not even one shown as the overflow uid: `_mapped_owner`)
    and not be writable by group or others."""
    problem = _problem(ns, path, st)
    if problem:
        return f"rootless: {problem}; the hook trusts only files of users outside it; {CDI_ROUTE}"
    for directory in _parents(path):
        try:
            dst = os.stat(directory)
        except OSError as error:
            return f"rootless: parent {directory}: {describe(error)}"
        problem = _problem(ns, directory, dst)
        if problem:
            return (
                f"rootless: parent {directory} is {problem}; the hook trusts only files of "
                f"users outside it, in directories only they can write; {CDI_ROUTE}"
            )
    return None


def _parents(path: str) -> list[str]:
    """Every directory whose writer could change what `path` opens: the parents of the path
    as written (each symlink on it lives in one) and of the path it resolves to."""
    result: list[str] = []
    for start in (os.path.abspath(path), os.path.realpath(path)):
        directory = os.path.dirname(start)
        while directory not in result:
            result.append(directory)
            parent = os.path.dirname(directory)
            if parent == directory:
                break
            directory = parent
    return result


# ---------------------------------------------------------------------------
# Device nodes


def device_problem(
    ns: HookNamespace, path: str, st: os.stat_result, access: str, has_acl: bool, keeps_groups: bool
) -> str | None:
    """Why a rootless container cannot open the host node `path` (its stat `st`) for
    `access`, or None when it may. Without a device cgroup rule and without mknod, the
    node's own permissions decide, and a rootless container (runc) holds none of the user's
    host groups: it opens a node through its "other" bits, or as a uid or gid the namespace
    maps (the user's own, e.g.). An ACL may let the user in (logind's uaccess): not judged.

    Unlike the config and runtime dir refusals, this one names no CDI route, because CDI
    cannot help here: a rootless container gets a CDI device node as a bind mount of the
    host's node too (runc cannot mknod in a user namespace, nor set a device cgroup), so
    the same host permissions refuse it (tests/test_rootless.py shows it with real rootless
    podman). Only the host (the node's mode, group or ACL) or root podman can."""
    want = (0o4 if "r" in access else 0) | (0o2 if "w" in access else 0)
    mode = stat.S_IMODE(st.st_mode)
    if mode & want == want or has_acl or keeps_groups:
        return None
    if st.st_uid != ns.overflow_uid or st.st_gid != ns.overflow_gid:
        return None  # a uid or gid of the namespace: the container may be it
    return (
        f"rootless: device {path} ({os.major(st.st_rdev)}:{os.minor(st.st_rdev)}, mode "
        f"{mode:04o}) opens only for its owner and group, both outside the user namespace: a "
        "rootless container holds none of the user's host groups (crun's --group-add "
        "keep-groups excepted), and only host root can allow a device by cgroup or node; "
        'let the user open it on the host (udev: MODE="0666" or TAG+="uaccess"), or use '
        "root podman (CDI cannot help: a rootless container gets its nodes as bind mounts too)"
    )


def check_nodes(ns: HookNamespace, devices: list, device_fd: int, annotations: dict) -> None:
    """OcihookError (one line) for the first planned node (plan.DeviceNode) a rootless
    container could not open; before anything is changed."""
    from ocihook.linux import securepath  # ctypes: not needed at poststop

    keeps_groups = annotations.get(KEEP_GROUPS) in ("1", "true")
    for node in devices:
        try:
            fd = securepath.resolve(device_fd, node.path)
        except OSError:
            continue  # the clone names the cause
        try:
            problem = device_problem(
                ns, node.host_path, os.fstat(fd), node.access, node_acl(fd), keeps_groups
            )
        finally:
            os.close(fd)
        if problem:
            raise OcihookError(problem)


def node_acl(fd: int) -> bool:
    """Whether the node open at `fd` (O_PATH) carries a POSIX ACL."""
    from ocihook.linux import securepath

    try:
        os.getxattr(securepath.fd_path(fd), POSIX_ACL)
    except OSError:
        return False
    return True
