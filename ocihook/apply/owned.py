"""What the runtime already does for a container, so that the prestart stage does not do
it again: the nodes runc/crun created from `linux.devices`, the devices
`linux.resources.devices` allows, the files bind-mounted from `mounts` (the precreate
stage puts the driver's there: ocihook/stages/precreate.py; a user's `--device` or `-v` can too).

Data, never a marker: a node counts when config.json names that very device at that path
(the runtime made it from there), a rule when config.json's own device rules, evaluated in
order as the runtime applies them, allow the access, a mount when config.json has a bind
mount at the target AND the file at the target in the container, resolved by fd, is the
planned source itself (same device and inode). Anything an annotation or the image says
counts for nothing, and every test here can only make the hook do less of what the
runtime already did: no container gains a device by it.
"""

from __future__ import annotations

import os

from ocihook.linux import securepath

TYPE_CHECKING = False  # typing costs imports at container start: annotations only
if TYPE_CHECKING:
    from ocihook.apply.sources import SourceTree
    from ocihook.plan.devrules import DeviceRule
    from ocihook.plan.model import DeviceNode, Plan
    from ocihook.request.state import RuntimeOwned


def allowed_access(rules: tuple, kind: str, major: int, minor: int) -> set[str]:
    """The access config.json's device rules give the device, applied in order (a deny-all
    then allows, as podman writes them): each matching rule adds or removes its access."""
    access: set[str] = set()
    for allow, rule_kind, rule_major, rule_minor, rule_access in rules:
        if rule_kind not in ("a", kind):
            continue
        if rule_major not in (-1, major) or rule_minor not in (-1, minor):
            continue
        if allow:
            access |= set(rule_access)
        else:
            access -= set(rule_access)
    return access


def rule_allowed(owned: RuntimeOwned | None, rule: DeviceRule) -> bool:
    """Whether the runtime allows `rule` from config.json's rules already."""
    if owned is None:
        return False
    return set(rule.access) <= allowed_access(owned.rules, rule.type, rule.major, rule.minor)


def node_made(owned: RuntimeOwned | None, node: DeviceNode) -> bool:
    """Whether config.json's linux.devices has the runtime make this node (by mknod; in a
    user namespace the prestart stage binds the host's node itself)."""
    if owned is None or node.strategy != "mknod":
        return False
    return (os.path.normpath(node.path), node.type, node.major, node.minor) in owned.nodes


def cgroup_rules(plan: Plan, owned: RuntimeOwned | None) -> list[DeviceRule]:
    """The plan's device rules the runtime does not apply itself."""
    return [d.rule() for d in plan.devices if not rule_allowed(owned, d.rule())]


def left_to_do(
    final: Plan, trees: list[SourceTree], root_fd: int, owned: RuntimeOwned | None
) -> tuple[Plan, list[SourceTree]]:
    """The finalized plan less the nodes and mounts the runtime made, and the sources still
    to mount (the links and the ld cache are always the hook's)."""
    if owned is None or not (owned.nodes or owned.binds):
        return final, trees
    targets = {destination for destination, _source in owned.binds}
    todo = [t for t in trees if not _mounted(t, targets, root_fd)]
    devices = [d for d in final.devices if not node_made(owned, d)]
    return final.replace(mounts=[t.mount for t in todo], devices=devices), todo


def _mounted(tree: SourceTree, targets: set[str], root_fd: int) -> bool:
    """config.json binds something at the target and the target is the source's own file."""
    if os.path.normpath(tree.mount.target) not in targets:
        return False
    try:
        fd = securepath.resolve(root_fd, tree.mount.target, follow_final=False)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    return (st.st_dev, st.st_ino) == (tree.dev, tree.ino)
