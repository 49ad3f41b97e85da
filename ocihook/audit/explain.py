"""Why a denial happened and how to fix it, in terms of ocihook's containers and files."""

from __future__ import annotations

from dataclasses import dataclass, field

from ocihook.audit import names
from ocihook.audit.parse import Avc, Event
from ocihook.audit.policy import Policy, Verdict
from ocihook.audit.records import Match, categories, context_type, requested_char_device
from ocihook.plan.kinds import audit_name

# cause -> the heading the report shows
CAUSES = {
    "source-unlabelled": "source not labelled for containers",
    "device-type": "device type not allowed for containers",
    "mcs-mismatch": "MCS categories do not match",
    "driver-not-loaded": "the device's driver is not loaded on the host",
    "boolean": "a boolean would allow it",
    "missing-rule": "no allow rule",
    "constraint": "a policy constraint forbids it",
    "rbac": "role not allowed (RBAC)",
    "bounds": "type bounds forbid it",
    "dontaudit": "dontaudit rule (normally silent)",
    "allowed-now": "the policy allows it now",
    "granted": "granted (auditallow), not a denial",
    "hook": "denied to ocihook's hook itself",
    "not-ocihook": "not related to ocihook",
}

HOOK_NAMES = ("ocihook-hook",)


_BAD = {
    "BADSCON": " (the policy does not know the source context)",
    "BADTCON": " (the policy does not know the target context)",
    "BADTCLASS": " (the policy does not know the class)",
    "BADPERM": " (the policy does not know a permission)",
}


@dataclass
class Finding:
    """One AVC with what it touched, its cause, an explanation and the fixes."""

    event: Event
    avc: Avc
    match: Match
    cause: str
    explanation: str
    fixes: list[str] = field(default_factory=list)
    verdict: Verdict | None = None

    @property
    def related(self) -> bool:
        return (
            self.match.container is not None
            or self.match.injected is not None
            or self.cause == "hook"
        )

    @property
    def target(self) -> str:
        """The path or name the denial is about, as the log shows it."""
        fields = self.avc.fields
        for key in ("path", "name"):
            if fields.get(key):
                return fields[key]
        for record in self.event.paths:
            if record.get("name"):
                return record["name"]
        return fields.get("kmod", "").strip('"')  # a module request: the module alias


AUDIT2ALLOW_HINT = (
    "audit2allow -M local < these records, review local.te, then semodule -i local.pp"
)


def _generic_rule(avc: Avc) -> list[str]:
    perms = " ".join(avc.perms)
    source, target = context_type(avc.scontext), context_type(avc.tcontext)
    return [f"allow {source} {target}:{avc.tclass} {{ {perms} }};", AUDIT2ALLOW_HINT]


def _said(verdict: Verdict | None) -> str:
    if verdict is None:
        return ""
    detail = _BAD.get(verdict.verdict, "")
    if verdict.booleans:
        detail = ": " + ", ".join(f"{n}={'on' if v else 'off'}" for n, v in verdict.booleans)
        detail += " would allow it"
    elif verdict.constraint:
        detail = f": {verdict.constraint.splitlines()[0]}"
    return f" audit2why says {verdict.verdict}{detail}."


def _setsebool(booleans: list[tuple[str, int]]) -> list[str]:
    return [f"setsebool -P {name} {'on' if value else 'off'}" for name, value in booleans]


def explain(event: Event, avc: Avc, match: Match, verdict: Verdict | None = None) -> Finding:
    """Classify one AVC (see CAUSES) and give the fix."""
    finding = Finding(event, avc, match, "missing-rule", "", verdict=verdict)
    stype, ttype = context_type(avc.scontext), context_type(avc.tcontext)
    scats, tcats = categories(avc.scontext), categories(avc.tcontext)
    said = _said(verdict)
    if not avc.denied:
        finding.cause = "granted"
        finding.explanation = "An auditallow rule logged an access that was granted."
        return finding
    if is_hook(event, avc):
        _from_hook(finding, stype, ttype)
        return finding
    if not finding.related:
        finding.cause = "not-ocihook"
        finding.explanation = (
            "No ocihook record names this container or file; the hook did not inject it." + said
        )
        if verdict and verdict.booleans:
            finding.fixes = _setsebool(verdict.booleans)
        finding.fixes.extend(_generic_rule(avc))
        return finding
    requested = requested_char_device(avc)
    if requested is not None:
        _driver_not_loaded(finding, requested)
        return finding
    if verdict is not None and not _source_label_is_the_cause(avc, match, ttype):
        decided = _from_verdict(finding, verdict, scats, tcats)
        if decided:
            return finding
    _from_labels(finding, stype, ttype, scats, tcats)
    if verdict is not None:
        finding.explanation += said
        if verdict.booleans and finding.cause == "source-unlabelled":
            finding.explanation += (
                " That boolean is host-wide (every domain it covers, every file of the type), "
                "not a fix for one driver; the driver's label is the cause."
            )
    return finding


def _driver_not_loaded(finding: Finding, requested: tuple[int, int | None]) -> None:
    """A container opened a char device node that no driver of the host serves: the kernel
    asked to load one for it, which SELinux refuses to a container (rightly: a container
    must never load kernel modules). The fix is on the host, never an allow rule."""
    major, minor = requested
    numbers = f"{major}:{minor}" if minor is not None else f"{major}:*"
    alias = f"char-major-{major}" + (f"-{minor}" if minor is not None else "")
    injected = finding.match.injected
    node = (
        f"the {audit_name(injected.kind)} {injected.target} ocihook injected ({numbers})"
        if injected
        else f"a char device node {numbers}"
    )
    finding.cause = "driver-not-loaded"
    finding.explanation = (
        f"The container opened {node}, but no driver of the host serves {numbers}: the "
        f"kernel asked to load one ({alias}), and a container may not load kernel modules. "
        f"The open failed with ENXIO or ENODEV whatever SELinux said."
    )
    finding.fixes = [
        f"load the device's driver on the host (`modprobe -R {alias}` names its module), "
        f"then start the container again"
    ]


def _source_label_is_the_cause(avc: Avc, match: Match, ttype: str) -> bool:
    """A file ocihook injected whose type no container may read: the source tree is not
    labelled for containers, whatever audit2why offers (Fedora's policy answers BOOLEAN
    domain_can_mmap_files for a `map` of a user_home_t driver: a host-wide switch)."""
    return (
        match.injected is not None
        and avc.tclass in names.FILE_CLASSES
        and ttype not in names.CONTAINER_READABLE_TYPES
    )


def is_hook(event: Event, avc: Avc) -> bool:
    """The denied process is ocihook's hook (or its ldconfig child before or after exec):
    its comm, exe or command line names the hook executable."""
    names_seen = [
        avc.fields.get("comm") or "",
        event.syscall.get("comm") or "",
        avc.fields.get("exe") or "",
        event.syscall.get("exe") or "",
    ]
    if any(n.strip('"').rsplit("/", 1)[-1] in HOOK_NAMES for n in names_seen):
        return True
    title = event.proctitle or ""
    return any(f"/{n} " in f"{title} " or title.startswith(f"{n} ") for n in HOOK_NAMES)


def _from_hook(finding: Finding, stype: str, ttype: str) -> None:
    """A denial of the hook itself: what it was doing, and the fix in ocihook's terms."""
    avc = finding.avc
    finding.cause = "hook"
    perms = set(avc.perms)
    if avc.tclass == "process2" and perms & {"nnp_transition", "nosuid_transition"}:
        finding.explanation = (
            f"The hook's sandboxed ldconfig (no_new_privs) was started with a domain "
            f"transition {stype} -> {ttype}, which SELinux refuses under no_new_privs; the "
            f"kernel then runs ldconfig in {stype} anyway, so containers are not affected, only "
            f"the log. An older ocihook did this; current ocihook runs ldconfig in the hook's "
            f"own domain explicitly (its exec context), which logs nothing."
        )
        finding.fixes = ["upgrade ocihook (its ldconfig sandbox no longer asks for a transition)"]
        return
    if avc.tclass == "process" and "transition" in perms:
        finding.explanation = (
            f"The hook ({stype}) may not start a process in {ttype}: a domain transition the "
            f"hook does not need. Report it to ocihook with these records."
        )
        finding.fixes = ["report it to ocihook (the hook should not change domain)"]
        return
    finding.explanation = (
        f"The hook ({stype}) was denied {' '.join(avc.perms)} on {ttype} {avc.tclass}; the "
        f"runtime's domain lacks a rule the hook needs. Report it to ocihook with these records."
    )
    finding.fixes = _generic_rule(avc)


def _from_verdict(
    finding: Finding, verdict: Verdict, scats: frozenset[str], tcats: frozenset[str]
) -> bool:
    """Set the cause from audit2why where it decides one; False to fall back to the labels."""
    name = verdict.verdict
    if name == "ALLOW":
        finding.cause = "allowed-now"
        finding.explanation = (
            "audit2why says ALLOW: the policy given allows this now (the policy changed "
            "since, or the host runs a different one)."
        )
    elif name == "DONTAUDIT":
        finding.cause = "dontaudit"
        finding.explanation = (
            "audit2why says DONTAUDIT: a dontaudit rule hides this normally; it shows because "
            "dontaudit rules are disabled (semodule -DB). Usually harmless."
        )
        finding.fixes = ["semodule -B  (re-enable dontaudit rules)"]
    elif name == "BOOLEAN":
        finding.cause = "boolean"
        wanted = ", ".join(f"{n}={'on' if v else 'off'}" for n, v in verdict.booleans)
        finding.explanation = f"audit2why says BOOLEAN: {wanted} would allow it."
        finding.fixes = _setsebool(verdict.booleans)
    elif name == "CONSTRAINT":
        if tcats and not tcats <= scats:
            return False  # the labels say which categories: explained below
        finding.cause = "constraint"
        finding.explanation = f"audit2why says CONSTRAINT: {verdict.constraint or ''}".strip()
    elif name == "RBAC":
        finding.cause = "rbac"
        finding.explanation = "audit2why says RBAC: the role may not have this type."
    elif name == "BOUNDS":
        finding.cause = "bounds"
        finding.explanation = "audit2why says BOUNDS: the type's bounds forbid this access."
    else:
        return False
    return True


def _from_labels(
    finding: Finding, stype: str, ttype: str, scats: frozenset[str], tcats: frozenset[str]
) -> None:
    avc, match = finding.avc, finding.match
    injected = match.injected
    container = match.container
    host_path = (injected.source if injected else None) or finding.target
    source_root = (container.source_root if container else None) or host_path
    what = (
        f"{audit_name(injected.kind)} {injected.target}"
        if injected
        else finding.target or avc.tclass
    )
    if avc.tclass in names.FILE_CLASSES | names.DEVICE_CLASSES and tcats and not tcats <= scats:
        finding.cause = "mcs-mismatch"
        foreign = ",".join(sorted(tcats - scats, key=_cat_key))
        mine = ",".join(sorted(scats, key=_cat_key)) or "none"
        finding.explanation = (
            f"{what} is labelled with categories {foreign} that the container "
            f"(categories {mine}) does not have: it still carries another container's level. "
            f"Shared driver files need {names.SHARED_FILE_LABEL}."
        )
        finding.fixes = [f"{names.RELABEL_COMMAND} {source_root}"]
        return
    if avc.tclass in names.DEVICE_CLASSES:
        finding.cause = "device-type"
        device = host_path or "/dev/..."
        if ttype == names.DEVICE_TYPE:
            finding.explanation = (
                f"{what} has type {ttype} but the policy does not allow it: the "
                f"{names.MODULE_NAME} module is not loaded or lacks this permission."
            )
            finding.fixes = [f"semodule -i {names.MODULE_PACKAGE}"]
            return
        finding.explanation = (
            f"{what} keeps the host type {ttype}, which container domains may not use."
        )
        finding.fixes = [
            f"semodule -i {names.MODULE_PACKAGE}",
            f"chcon -t {names.DEVICE_TYPE} {device}  (or {names.RELABEL_COMMAND} {device})",
        ]
        if ttype in names.VENDOR_DEVICE_TYPES:
            finding.fixes.append(f"or keep {ttype}: setsebool -P {names.VENDOR_DEVICES_TUNABLE} on")
        return
    if injected is None and avc.tclass in names.FILE_CLASSES | names.DEVICE_CLASSES:
        finding.cause = "not-ocihook"
        finding.explanation = (
            f"In a container ocihook set up, but {finding.target or 'the target'} is not a file "
            f"or device that ocihook injected."
        )
        finding.fixes = _generic_rule(avc)
        return
    if avc.tclass in names.FILE_CLASSES and ttype not in names.CONTAINER_READABLE_TYPES:
        finding.cause = "source-unlabelled"
        finding.explanation = (
            f"{what} has type {ttype}, {_denied_why(ttype, avc.perms)}: the driver source "
            f"{source_root} is not labelled {names.SHARED_FILE_LABEL}."
        )
        finding.fixes = [f"{names.RELABEL_COMMAND} {source_root}"]
        return
    finding.cause = "missing-rule"
    finding.explanation = (
        f"{stype} may not {' '.join(avc.perms)} {ttype} {avc.tclass} and no boolean or label "
        f"change is known to allow it: the policy lacks a rule (report it to ocihook if the "
        f"{names.MODULE_NAME} module is loaded)."
    )
    finding.fixes = _generic_rule(avc)


def _cat_key(category: str) -> int:
    return int(category[1:]) if category[1:].isdigit() else 0


def explain_all(events: list[Event], matcher, policy: Policy | None = None) -> list[Finding]:
    """Explain every AVC of `events`; `matcher(event, avc)` gives its Match."""
    findings = []
    for event in events:
        for avc in event.avcs:
            verdict = None
            if policy is not None and avc.denied:
                verdict = policy.analyze(avc.scontext, avc.tcontext, avc.tclass, avc.perms)
            findings.append(explain(event, avc, matcher(event, avc), verdict))
    return findings


def _denied_why(ttype: str, perms: list[str]) -> str:
    """Why a container was denied `perms` on a file of type `ttype`, no container type."""
    if ttype in names.HOST_LIBRARY_TYPES:
        return "which the base policies let containers read but this host's policy did not"
    return f"on which this host's policy denies containers {{ {' '.join(perms)} }}"
