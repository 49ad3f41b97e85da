"""Execute a finalized Plan in a container: bind mounts, links, device nodes.

The plan decides everything (targets, mount flags, node strategy, label); this module only
carries it out, in the container's mount namespace (linux/namespaces.py entered it), with the
sources opened for it (apply/sources.py) and a ContainerWriter (apply/writer.py) that makes
each change and keeps how to undo it.
"""

from __future__ import annotations

from ocihook.plan.kinds import KINDS
from ocihook.plan.model import NODE_BIND_FLAGS, Mount, Plan

TYPE_CHECKING = False  # typing costs ~10 ms of imports at container start: annotations only
if TYPE_CHECKING:
    from ocihook.apply.sources import ClassicMountApi, NewMountApi, SourceTree
    from ocihook.apply.writer import ContainerWriter


def bind_sources(trees: list[SourceTree], plan: Plan) -> list[SourceTree]:
    """The sources opened for `trees`' plan bound to the mounts of the finalized `plan`: the
    same files in the same order (finalize moves targets only). A mismatch is a bug."""
    if len(trees) != len(plan.mounts):
        raise RuntimeError(f"{len(trees)} sources opened for {len(plan.mounts)} planned mounts")
    bound = []
    for tree, mount in zip(trees, plan.mounts):
        if (tree.mount.source, tree.mount.kind) != (mount.source, mount.kind):
            raise RuntimeError(f"source {tree.mount.source} opened for {mount.source}")
        bound.append(tree.replace(mount=mount))
    return bound


def execute(
    writer: ContainerWriter,
    plan: Plan,
    trees: list[SourceTree],
    node_trees: dict[str, int],
    api: NewMountApi | ClassicMountApi,
) -> None:
    """Carry out a finalized plan in the container: every mount (its source in `trees`, bound
    to the plan's mounts by `bind_sources`), link and device node (by its strategy)."""
    for tree in trees:
        m = tree.mount
        writer.attach(
            tree.fd,
            m.target,
            (tree.dev, tree.ino),
            m.host_path,
            mount_kinds(m),
            api.remount_flags(m.flags),
        )
    for link in plan.links:
        writer.link(link)
    for node in plan.devices:
        if node.strategy == "bind":
            writer.attach(
                node_trees[node.path],
                node.path,
                None,
                node.host_path,
                ("file",),
                api.remount_flags(NODE_BIND_FLAGS),
            )
        else:
            writer.device_node(node)
    writer.verify_dirs()


def mount_kinds(mount: Mount) -> tuple[str, ...]:
    """File types (linux.filetypes.FILE_TYPES short names) an existing mountpoint in the image may
    have for this mount."""
    return KINDS[mount.kind].mount_points
