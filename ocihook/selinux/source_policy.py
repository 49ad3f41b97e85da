"""Which SELinux labels a bind-mount source may carry for the container that mounts it.

A read-only source is fine when every container may read its type (label.py's
`source_label_problem`), or when the loaded policy lets the container's process label use it
as its kind needs (access.py asks the kernel: a host driver's /usr/bin binary is bin_t); a
read-write one must be writable by every container. Each problem is one line with its fix.
"""

from __future__ import annotations

import os

from ocihook.selinux import label as selinux_label


class SourceLabelPolicy:
    """The label rules for the sources mounted into one container: `process_label` is its
    domain (None: unknown), `source_root` the root the sources come from and `source_real`
    its canonical path (for the fix's wording). The kernel is asked once per label and need,
    the fix worded once."""

    def __init__(
        self, process_label: str | None, source_root: str, source_real: str | None = None
    ) -> None:
        self.process_label = process_label
        self.source_root = source_root
        self.source_real = source_real
        self._asked: dict[tuple[str, str], bool | None] = {}
        self._fix: str | None = None

    def problem(
        self, path: str, context: str | None, writable: bool, source: str, executable: bool
    ) -> str | None:
        """Why the source `path`, labelled `context`, may not be mounted, or None: `writable`
        when it is mounted read-write (or its kind's rule asks so), `source` its kind's file
        type and `executable` whether the kind is mapped executable (kinds.Kind)."""
        if writable:
            return writable_label_problem(path, context)
        if selinux_label.source_label_problem(path, context, "") is None:
            return None
        if policy_allows(self.process_label, context, source, executable, self._asked):
            return None
        if self._fix is None:
            self._fix = relabel_fix(self.source_root, self.source_real)
        return selinux_label.source_label_problem(path, context, self._fix)


def policy_allows(
    process_label: str | None, context: str | None, source: str, executable: bool, asked: dict
) -> bool:
    """Whether the running policy lets the container's domain use a source labelled
    `context` as a kind of file type `source` (mapped executable or not) needs (asked once
    per label and need: `asked`)."""
    if not process_label or not context:
        return False
    from ocihook.selinux import access

    tclass, perms = access.use(source, executable)
    key = (context, f"{tclass} {' '.join(perms)}")
    if key not in asked:
        asked[key] = access.allowed(process_label, context, tclass, perms)
    return asked[key] is True


def writable_label_problem(path: str, context: str | None) -> str | None:
    """A directory the profile mounts read-write (the MPS pipe dir) must be writable by every
    container: container_file_t at s0, no categories (container_ro_file_t would not do)."""
    try:
        _user, _role, type_, level = selinux_label.split_context(context or "")
    except ValueError:
        type_, level = None, None
    if type_ in selinux_label.CONTAINER_FILE_TYPES and level in ("", "s0"):
        return None
    return (
        f"{path} is mounted read-write but labelled {context or 'nothing'}, which containers "
        f"cannot write; run: chcon -R -t container_file_t -l s0 {path} (and make it "
        "persistent with semanage fcontext)"
    )


def relabel_fix(source_root: str, real: str | None = None) -> str:
    """What to tell the user: relabel the driver's root, unless it is a host system dir.
    `real` is the root's canonical path (Roots.source_real: what its fd names)."""
    from ocihook.selinux.relabel import refusal

    if refusal(real or os.path.realpath(source_root)) is None:
        return f"run: ocihook selinux relabel {source_root}"
    return (
        f"the source root {source_root} is host system content that ocihook does not relabel: "
        "serve the driver from its own root (a driver container's volume) and relabel that, "
        "or set selinux.source_check: warn"
    )
