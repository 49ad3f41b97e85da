"""Reading and writing SELinux labels through the `security.selinux` xattr.

Kept import-light: the hook's hot path uses it, so no libselinux import here.
"""

from __future__ import annotations

import errno
import os

from ocihook.linux import securepath
from ocihook.selinux import names

XATTR = "security.selinux"
SELINUXFS = "/sys/fs/selinux"


def selinux_enabled() -> bool:
    """True when the SELinux LSM is active on this host (selinuxfs mounted with an enforce file)."""
    return os.path.exists(os.path.join(SELINUXFS, "enforce"))


def set_label_at(dirfd: int, name: str, context: str) -> None:
    """Label `name` in the directory `dirfd` without following a symlink at `name`."""
    os.setxattr(
        securepath.fd_path(dirfd, name),
        XATTR,
        context.encode() + b"\0",
        follow_symlinks=False,
    )


def label_at(dirfd: int, name: str, context: str) -> str | None:
    """Give `name` in `dirfd` the label `context`, as set_label_at does, or say why it has another.

    On a file system mounted with `context=` (podman's rootfs overlay, runc's /dev tmpfs)
    every file carries the mount's one label and setxattr fails with EOPNOTSUPP. That is
    fine when the file already has `context`: None is returned. Otherwise the returned line
    names the label the file has; the caller fails with it.
    """
    try:
        set_label_at(dirfd, name, context)
        return None
    except OSError as error:
        if error.errno not in (errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
    have = get_label(securepath.fd_path(dirfd, name))
    if have is not None and have.strip() == context.strip():
        return None
    return (
        f"its file system (a context= mount) labels it {have or 'nothing'} and cannot be "
        f"relabelled to {context}"
    )


def exec_in_current_domain() -> None:
    """Make this process's next execve stay in its current SELinux domain (no transition).

    The kernel takes /proc/thread-self/attr/exec over any type_transition rule, so an
    executable with its own domain (ldconfig: ldconfig_exec_t -> ldconfig_t) runs in the
    caller's domain: no domain transition under no_new_privs, hence no nnp_transition
    denial. A no-op where SELinux is not enabled.
    """
    if not selinux_enabled():
        return
    with open("/proc/thread-self/attr/current", "rb") as current:
        context = current.read().rstrip(b"\0\n")
    fd = os.open("/proc/thread-self/attr/exec", os.O_WRONLY | os.O_CLOEXEC)  # no O_CREAT
    try:
        os.write(fd, context)
    finally:
        os.close(fd)


def get_label(path: str, follow_symlinks: bool = False) -> str | None:
    """The label of `path`, or None when it has none."""
    try:
        raw = os.getxattr(path, XATTR, follow_symlinks=follow_symlinks)
    except OSError:
        return None
    return raw.rstrip(b"\0").decode(errors="replace")


# ---------------------------------------------------------------------------
# Labels the module and the hook use, and checks on bind-mount sources.

# The names live in ocihook/selinux/names.py; re-exported here for the label helpers' users.
SHARED_FILE_TYPE = names.SHARED_FILE_TYPE
DEVICE_TYPE = names.DEVICE_TYPE
SHARED_FILE_CONTEXT = names.SHARED_FILE_CONTEXT
DEVICE_CONTEXT = names.DEVICE_CONTEXT
SHARED_READ_TYPES = names.SHARED_READ_TYPES
CONTAINER_FILE_TYPES = names.CONTAINER_FILE_TYPES


def split_context(context: str) -> tuple[str, str, str, str]:
    """(user, role, type, level) of a context; level is "" when the policy has no MLS/MCS."""
    parts = context.strip().rstrip("\0").split(":", 3)
    if len(parts) < 3 or not all(parts[:3]):
        raise ValueError(f"not an SELinux context: {context!r}")
    return parts[0], parts[1], parts[2], parts[3] if len(parts) == 4 else ""


def _no_categories(level: str) -> bool:
    return all(":" not in part for part in level.split("-"))


def source_label_problem(path: str, context: str | None, fix: str | None = None) -> str | None:
    """One line saying why no container domain can read bind-mount source `path`, or None.

    `context` is the source's label (None: unlabeled). Fine are the types in
    SHARED_READ_TYPES at any level without categories, and container_file_t at s0 without
    categories. Anything else gets the file, its label and the fix (`fix`, or by default a
    relabel of the file's directory).
    """
    if fix is None:
        directory = path if os.path.isdir(path) else os.path.dirname(path) or "."
        fix = f"run: ocihook selinux relabel {directory}"
    if not context:
        return f"{path} has no SELinux label, containers cannot read it; {fix}"
    try:
        _user, _role, type_, level = split_context(context)
    except ValueError:
        return f"{path} has an invalid SELinux label {context!r}; {fix}"
    if type_ in SHARED_READ_TYPES and _no_categories(level):
        return None
    if type_ in CONTAINER_FILE_TYPES:
        if level in ("", "s0"):
            return None
        return (
            f"{path} is labelled {context}: only the container with categories {level} "
            f"can read it; {fix}"
        )
    return f"{path} is labelled {context}, which containers cannot read; {fix}"
