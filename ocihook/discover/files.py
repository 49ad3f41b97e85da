"""The `files` section: paths in the source root (a glob in the last component; `{version}`
the driver version), each match mounted at the same path in the container or at the entry's
`target`. A match's kind is its file type's (kinds.found_kind): a regular file, a socket or
a directory, which an entry may mount `writable`. A missing entry is an error unless it is
`optional`. `place` serves the `firmware` section too (firmware.py)."""

from __future__ import annotations

import os

from ocihook.discover.found import Found, add_mount
from ocihook.discover.roots import Roots, in_root, resolve_final
from ocihook.errors import OcihookError
from ocihook.globmatch import is_glob
from ocihook.plan.kinds import found_kind, section_kind


def discover(found: Found) -> None:
    entries = [{"path": f} if isinstance(f, str) else f for f in found.parts["files"]]
    place(found, "files", entries, required=True)


def place(found: Found, section: str, entries: list[dict], required: bool) -> None:
    """Mount what each entry of the path-named list `section` matched. The lists share
    `found.placed`: the first entry naming a target wins. `required`: an entry that matches
    nothing is an error unless `optional` (else it is listed as unmatched)."""
    roots = found.roots
    named_as = section_kind(section).name  # "firmware: ...", "file: ..." in messages
    for entry in entries:
        pattern = entry["path"]
        if "{version}" in pattern:
            if found.version is None:
                found.unmatched.append(f"{named_as}: {pattern} (no driver version)")
                continue
            pattern = pattern.replace("{version}", found.version)
        matches = glob_files(roots, pattern)
        if not matches and required and not entry.get("optional", False):
            raise OcihookError(
                f"profile: file {pattern} not found in source root {roots.source_root}"
            )
        if not matches:
            found.unmatched.append(f"{named_as}: {pattern}")
        for named, inner, st in matches:
            kind = found_kind(section, st.st_mode)
            if kind is None:
                continue
            writable = kind.may_write and entry.get("writable", False)
            # The path as the profile names it, not where the source root's links lead
            # (/lib/firmware stays /lib/firmware on a merged-/usr host).
            target = entry.get("target") or named
            mount = add_mount(found.placed, roots, inner, target, kind.name, writable)
            if mount is not None:
                found.mounts.append(mount)


def glob_files(roots: Roots, pattern: str) -> list[tuple[str, str, os.stat_result]]:
    """(path as the profile names it, resolved in-root path, stat) of the files matching
    `pattern` (glob characters in its last component only)."""
    parent, name = os.path.split(pattern)
    if is_glob(parent):
        raise OcihookError(f"profile: glob characters only in the last component: {pattern}")
    found = []
    for match in roots.listing(roots.source_fd, parent).match(name):
        final = resolve_final(roots.source_fd, f"{parent}/{match}")
        if final is not None:
            found.append((f"{parent}/{match}", in_root(roots.source_real, final[0]), final[1]))
    return found
