"""The `binaries` section: each name's file in the first of the profile's `binary_dirs`
that has it (a symlink resolved inside the source root), mounted in the container's
`bin_dir` under that name."""

from __future__ import annotations

from ocihook.discover.found import Found, add_mount
from ocihook.discover.roots import in_root, resolve_final
from ocihook.plan.kinds import found_kind
from ocihook.plan.model import Mount


def discover(found: Found) -> None:
    roots = found.roots
    bin_dir = found.config["container"]["bin_dir"]
    mounts: dict[str, Mount] = {}
    for name in found.parts["binaries"]:
        for directory in found.profile["binary_dirs"]:
            final = resolve_final(roots.source_fd, f"{directory}/{name}")
            kind = found_kind("binaries", final[1].st_mode) if final is not None else None
            if kind is not None:  # a regular file (kinds.KINDS)
                inner = in_root(roots.source_real, final[0])
                add_mount(mounts, roots, inner, f"{bin_dir}/{name}", kind.name)
                break
        else:
            found.unmatched.append(f"binaries: {name}")
    found.mounts += mounts.values()
