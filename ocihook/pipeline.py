"""The one pipeline: a request, the config and what is known of the container -> a finalized
plan. Every user of a plan goes through here: the prestart stage (apply/inject.py), the
precreate stage (stages/precreate.py), `ocihook plan`, `check`, `features` and `cdi
generate` (cli/, check/), the device plugin's inventory and the metrics' device facts;
`cdi-hook` (stages/cdihook.py) carries out what a generated spec recorded
(plan.decide.carried_decision), or for a spec of an earlier release asks
`legacy_step_decision`.

    roots = open_roots(config)                      # the source and device roots, by fd
    planned = plan_container(config, roots, request, target)   # discover, then decide
    final = planned.finalize(image_fd)              # the image's facts stamped in, pure

The hook finalizes inside the container's mount namespace, after it entered it; the
read-only commands call `finalized_plan`, which does all three at once."""

from __future__ import annotations

import os

from ocihook.discover.build import build_plan
from ocihook.discover.roots import Roots
from ocihook.errors import OcihookError
from ocihook.plan.decide import Decision, Target, decide, finalize
from ocihook.structs import Struct

TYPE_CHECKING = False  # typing costs imports at container start: annotations only
if TYPE_CHECKING:
    from ocihook.plan.model import Link, Plan
    from ocihook.request.parse import DeviceRequest


class Planned(Struct):
    """A plan and what was decided for its target, before the image is looked at."""

    __slots__ = ("plan", "decision")
    plan: Plan  # what discovery found for the request (placeholders for the image's dirs)
    decision: Decision  # plan.decide's, for the target

    @property
    def needs_image(self) -> bool:
        """Whether the decision leaves something to the image (its lib dir, its loader)."""
        return bool(self.decision.probe)

    def finalize(self, image_fd: int | None = None) -> Plan:
        """The plan for the target: the decision completed from the image's root `image_fd`
        (None: no image at hand) and stamped in (plan.decide.finalize)."""
        decision = self.decision if image_fd is None else self.decision.in_image(image_fd)
        return finalize(self.plan, decision)


def open_roots(config: dict) -> Roots:
    """The config's source and device roots, held by fd (a context manager)."""
    return Roots(config["source_root"], config["device_root"])


def plan_container(
    config: dict,
    roots: Roots,
    request: DeviceRequest,
    target: Target,
    *,
    verify: bool = False,
    describe: str | None = None,
) -> Planned:
    """Discover what `request` gets from the roots (discover.build.build_plan: `verify` and
    `describe` as there) and decide everything for `target` (plan.decide)."""
    plan = build_plan(config, roots, request, verify=verify, describe=describe)
    return Planned(plan, decide(config, target, plan))


def finalized_plan(
    config: dict,
    request: DeviceRequest,
    target: Target,
    *,
    rootfs: str | None = None,
    verify: bool = False,
    describe: str | None = None,
) -> Plan:
    """The whole pipeline for a command that has no container: roots opened and closed,
    the plan decided for `target`, the image at `rootfs` (a directory on this host) probed
    when the decision needs it."""
    with open_roots(config) as roots:
        planned = plan_container(config, roots, request, target, verify=verify, describe=describe)
    if not (planned.needs_image and rootfs):
        return planned.finalize()
    from ocihook.linux import securepath

    try:
        root_fd = securepath.open_dir(os.path.abspath(rootfs))
    except OSError as error:
        raise OcihookError(f"--rootfs {rootfs}: {error.strerror}") from None
    try:
        return planned.finalize(root_fd)
    finally:
        os.close(root_fd)


def legacy_step_decision(target: Target, links: list[Link], folders: list[str]) -> Decision:
    """The decision for a `cdi-hook` step of a CDI spec from an earlier release, which
    carries none in its arguments: the defaults' `selinux` and `ldconfig` sections decide
    over the step's part of the plan (its links, its ld cache dirs), as that release did.
    (A current spec carries its decision: plan.decide.carried_decision.)"""
    from ocihook.config.compiled import DEFAULTS
    from ocihook.plan.model import PLACEHOLDER_LIB_DIR, Plan

    plan = Plan(
        profile="cdi",
        source_root="/",
        device_root="/",
        request="cdi-hook",
        lib_dir=PLACEHOLDER_LIB_DIR,
        links=links,
        ld_dirs=folders,
    )
    return decide(DEFAULTS, target, plan)
