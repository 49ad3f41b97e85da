"""The SELinux labels of the opened bind-mount sources, read from the fds that are mounted
(not from their host paths) and checked against selinux/source_policy.py's rules as the
config's `selinux.source_check` says (error, warn, off)."""

from __future__ import annotations

from ocihook.errors import OcihookError
from ocihook.linux import securepath
from ocihook.plan.kinds import KINDS, LABEL_WRITABLE
from ocihook.selinux import label as selinux_label
from ocihook.selinux.source_policy import SourceLabelPolicy

TYPE_CHECKING = False  # typing costs imports at container start: annotations only
if TYPE_CHECKING:
    from ocihook.apply.sources import SourceTree
    from ocihook.records import Log


def check_source_labels(
    sources: list[SourceTree],
    config: dict,
    log: Log,
    source_real: str | None = None,
    process_label: str | None = None,
) -> list[str | None]:
    """The SELinux labels of the bind-mount sources, in order; a label no container can
    read (or, for a read-write mount, write) fails the start, or is logged with
    `selinux.source_check: warn`. `source_real` is the source root's canonical path (for
    the fix's wording); `process_label` the container's domain, whose use of a read-only
    source the loaded policy may allow (SourceLabelPolicy)."""
    labels = [
        selinux_label.get_label(securepath.fd_path(s.fd), follow_symlinks=True) for s in sources
    ]
    mode = config["selinux"]["source_check"]
    if mode == "off":
        return labels
    policy = SourceLabelPolicy(process_label, config["source_root"], source_real)
    seen = set()
    for source, context in zip(sources, labels):
        mount = source.mount
        if mount.host_path in seen:
            continue  # one file mounted at two targets: one line about it
        seen.add(mount.host_path)
        kind = KINDS[mount.kind]
        writable = mount.writable or kind.label == LABEL_WRITABLE
        problem = policy.problem(mount.host_path, context, writable, kind.source, kind.executable)
        if problem is None:
            continue
        if mode == "error":
            raise OcihookError(problem)
        log.info(f"warning: {problem}")
    return labels
