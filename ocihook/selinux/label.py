"""Reading and writing SELinux labels through the `security.selinux` xattr.

Kept import-light: the hook's hot path uses it, so no libselinux import here.
"""

from __future__ import annotations

import os

XATTR = "security.selinux"
SELINUXFS = "/sys/fs/selinux"


def selinux_enabled() -> bool:
    """True when the SELinux LSM is active on this host (selinuxfs mounted with an enforce file)."""
    return os.path.exists(os.path.join(SELINUXFS, "enforce"))


def set_label_at(dirfd: int, name: str, context: str) -> None:
    """Label `name` in the directory `dirfd` without following a symlink at `name`."""
    os.setxattr(
        f"/proc/self/fd/{dirfd}/{name}",
        XATTR,
        context.encode() + b"\0",
        follow_symlinks=False,
    )


def set_label_fd(fd: int, context: str) -> None:
    """Label the file that the open (not O_PATH) descriptor `fd` refers to."""
    os.setxattr(fd, XATTR, context.encode() + b"\0")


def get_label(path: str, follow_symlinks: bool = False) -> str | None:
    """The label of `path`, or None when it has none."""
    try:
        raw = os.getxattr(path, XATTR, follow_symlinks=follow_symlinks)
    except OSError:
        return None
    return raw.rstrip(b"\0").decode(errors="replace")
