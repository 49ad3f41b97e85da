"""`ocihook features`: node labels for Node Feature Discovery (NFD), as a features.d file.

NFD's `local` feature source reads /etc/kubernetes/node-feature-discovery/features.d/*:
`<namespace>/<name>=<value>` lines, `#` comments, a `# +expiry-time=RFC3339` directive after
which the lines expire, dot files ignored. Names and values follow Kubernetes label rules
(name <= 63 of [A-Za-z0-9_.-], alphanumeric at both ends; value the same or empty; the
namespace a DNS subdomain). The file is written through a dot file and a rename, so NFD
reads the old labels or the new ones; with `--interval` it is rewritten on a timer and the
expiry makes the labels vanish when the writer (the DaemonSet) is gone.
"""

from __future__ import annotations

import datetime
import re
import signal
import time

import click

from ocihook.cli.commands import config_option
from ocihook.cli.output import PREFIX, emit_json, exit_after_report, json_option, usage_error
from ocihook.config.compiled import DEFAULT_CACHE_DIR
from ocihook.errors import EXIT_FAILURE, OcihookError, exit_line

DEFAULT_OUTPUT = "/etc/kubernetes/node-feature-discovery/features.d/ocihook"
DEFAULT_PREFIX = "ocihook.io"
NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
VALUE_RE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")
PREFIX_RE = re.compile(
    r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
)


def label_value(text: str) -> str:
    """`text` as a valid label value: other characters become '_', at most 63, alphanumeric
    at both ends (empty when nothing is left)."""
    value = re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def check_problem(config_path: str, hooks_dirs: tuple[str, ...]) -> str | None:
    """None when `ocihook check`'s checks (check.installation.run_checks, as a person runs
    them) pass, else why not: the first FAILED line, or the line `ocihook check` would exit
    with."""
    from ocihook.check.findings import FAILED
    from ocihook.check.installation import run_checks

    try:
        findings = run_checks(config_path, list(hooks_dirs), DEFAULT_CACHE_DIR)
    except Exception as error:  # as `ocihook check` reports it: one line and its status
        status, line = exit_line(error)
        return f"ocihook check exited {status}: {line[len(PREFIX) :]}"
    failed = [f.message for f in findings if f.status == FAILED]
    if not failed:
        return None
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"ocihook check: {failed[0]}{more}"


def collect(
    config_path: str, hooks_dirs: tuple[str, ...], selinuxfs: str
) -> tuple[dict[str, str], str | None, dict | None]:
    """The node's labels (names without the prefix): profile, devices, driver-version,
    the devices' facts (advanced_labels), selinux, ready; why the node is not ready (None
    when it is); and the facts they were made of (discover.facts.Facts as a dict; None when
    the driver could not be read)."""
    from ocihook.selinux.status import selinux_mode

    labels: dict[str, str] = {}
    problem = None
    facts = None
    try:
        from ocihook.config.compiled import compile_config
        from ocihook.discover.devices import available_devices
        from ocihook.discover.facts import gather
        from ocihook.pipeline import open_roots, plan_container
        from ocihook.plan.decide import Target
        from ocihook.request.parse import parse_request

        config, _ = compile_config(config_path)
        profile = config["profile"]
        labels["profile"] = label_value(profile["name"])
        with open_roots(config) as roots:
            labels["devices"] = str(len(available_devices(roots, profile["devices"])))
            request = parse_request("all", "features")
            plan = plan_container(config, roots, request, Target.command_line()).plan
            found = gather(config, roots, plan)
        if plan.driver_version:
            labels["driver-version"] = label_value(plan.driver_version)
        labels.update(advanced_labels(found.to_dict()))
        facts = found.to_dict()
    except OcihookError as error:
        problem = str(error)  # the first thing that went wrong, if `check` fails too
    labels["selinux"] = selinux_mode(selinuxfs)
    check = check_problem(config_path, hooks_dirs)
    labels["ready"] = "false" if check else "true"
    return labels, (problem or check) if check else None, facts


def _common(values: list) -> object:
    """The one value every device has, or None (some differ, or none tells)."""
    known = [v for v in values if v is not None]
    if known and len(known) == len(values) and all(v == known[0] for v in known):
        return known[0]
    return None


def _least(values: list) -> int | None:
    """The smallest of the devices' numbers (what each of them has at least), None when
    a device does not tell."""
    if not values or any(v is None for v in values):
        return None
    return min(values)


def advanced_labels(facts: dict) -> dict[str, str]:
    """Node labels of what the driver tells (discover.facts), names without the prefix:
    gpu.product, gpu.device-id, gpu.family, gpu.firmware (each only when every device has
    the same), gpu.memory (MiB), gpu.compute-units, gpu.tiles (the least of the devices),
    gpu.compute.major/.minor (the lowest compute capability), cuda.driver.major/.minor,
    mig.capable (any GPU), mig-<PROFILE>.count (MIG devices of each profile on the node)."""
    devices = facts["devices"]
    if not devices:
        return {}
    labels: dict[str, str] = {}
    for name, key in (
        ("gpu.product", "product"),
        ("gpu.device-id", "device_id"),
        ("gpu.family", "family"),
        ("gpu.firmware", "firmware"),
    ):
        value = _common([d[key] for d in devices])
        if value is not None and label_value(str(value).replace(" ", "-")):
            labels[name] = label_value(str(value).replace(" ", "-"))
    memory = _least([d["memory"] for d in devices])
    if memory is not None:
        labels["gpu.memory"] = str(memory >> 20)
    for name, key in (("gpu.compute-units", "compute_units"), ("gpu.tiles", "tiles")):
        value = _least([d[key] for d in devices])
        if value is not None:
            labels[name] = str(value)
    capabilities = [d["compute_capability"] for d in devices]
    if capabilities and None not in capabilities:
        major, minor = min(tuple(int(p) for p in c.split(".")) for c in capabilities)
        labels["gpu.compute.major"], labels["gpu.compute.minor"] = str(major), str(minor)
    if facts["cuda_driver"]:
        major, _, minor = facts["cuda_driver"].partition(".")
        labels["cuda.driver.major"], labels["cuda.driver.minor"] = major, minor or "0"
    capable = [d["mig_capable"] for d in devices if d["mig_capable"] is not None]
    if capable:
        labels["mig.capable"] = "true" if any(capable) else "false"
    profiles: dict[str, int] = {}
    for device in devices:
        for profile, count in device["mig_profiles"].items():
            profiles[profile] = profiles.get(profile, 0) + count
    for profile, count in sorted(profiles.items()):
        name = f"mig-{profile}.count"
        if NAME_RE.match(name):
            labels[name] = str(count)
    return labels


def prefixed(labels: dict[str, str], prefix: str) -> dict[str, str]:
    """The labels as NFD names them (`<prefix>/<name>`), each checked against Kubernetes'
    label rules."""
    if not PREFIX_RE.match(prefix) or len(prefix) > 253:
        raise OcihookError(f"--prefix {prefix!r}: must be a DNS subdomain such as ocihook.io")
    for name, value in labels.items():
        if not NAME_RE.match(name) or not VALUE_RE.match(value):
            raise OcihookError(f"label {name}={value!r} is not a valid Kubernetes label")
    return {f"{prefix}/{name}": value for name, value in labels.items()}


def render(labels: dict[str, str], prefix: str, expiry_seconds: int, now: float) -> str:
    """The features.d file: the expiry directive, then one `<prefix>/<name>=<value>` a line."""
    named = prefixed(labels, prefix)
    expires = datetime.datetime.fromtimestamp(now + expiry_seconds, datetime.timezone.utc)
    lines = [
        "# Written by `ocihook features`; rewritten on a timer by the ocihook DaemonSet.",
        f"# +expiry-time={expires.strftime('%Y-%m-%dT%H:%M:%SZ')}",
    ]
    lines += [f"{name}={value}" for name, value in named.items()]
    return "\n".join(lines) + "\n"


@click.command()
@config_option
@click.option(
    "--output",
    "-o",
    default=None,
    help=f"The features.d file to write atomically; '-' prints it.  [default: {DEFAULT_OUTPUT}]",
)
@click.option("--prefix", default=DEFAULT_PREFIX, show_default=True, help="Label namespace.")
@click.option(
    "--hooks-dir",
    "hooks_dirs",
    multiple=True,
    help="hooks.d dir that `ocihook check` inspects (repeatable; default: its own).",
)
@click.option(
    "--interval",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Rewrite the file every SECONDS until stopped (SIGTERM); 0: once.",
)
@click.option(
    "--expiry",
    type=click.IntRange(min=1),
    default=None,
    help="Seconds until NFD ignores the labels [3 x interval, or 3600 when run once].",
)
@json_option(
    help='Print the labels as JSON ({"labels": {NAME: VALUE}, "ready": BOOL, "reason": WHY or '
    'null, "facts": each device\'s facts}) instead of writing the features.d file (not with '
    "--output or --interval)."
)
@click.option("--selinuxfs", default="/sys/fs/selinux", hidden=True)
def features(
    config_path: str,
    output: str | None,
    prefix: str,
    hooks_dirs: tuple[str, ...],
    interval: int,
    expiry: int | None,
    as_json: bool,
    selinuxfs: str,
) -> None:
    """Write the node's labels for Node Feature Discovery (local source, features.d).

    Labels, under PREFIX (ocihook.io): profile, devices (how many the device root has),
    driver-version, selinux (enforcing, permissive, disabled) and ready (true when
    `ocihook check` passes); and what the driver tells of the devices: gpu.product,
    gpu.device-id, gpu.family, gpu.firmware, gpu.memory (MiB), gpu.compute-units,
    gpu.tiles, gpu.compute.major/minor, cuda.driver.major/minor, mig.capable and
    mig-<PROFILE>.count (NVIDIA's from NVML, in its child with the profile's time limit;
    AMD's and Intel's from sysfs). Example: ocihook.io/profile=nvidia, ocihook.io/devices=4,
    ocihook.io/gpu.product=NVIDIA-H100-80GB-HBM3, ocihook.io/ready=true. The
    `# +expiry-time=` line makes NFD drop the labels when the file is no longer refreshed.
    A node that is not ready gets ready=false all the same, one line on stderr saying why,
    and exit status 1.
    """
    if as_json and (output is not None or interval):
        given = "--output" if output is not None else "--interval"
        raise usage_error(f"--json prints the labels: not with {given}")
    prefixed({}, prefix)  # a bad --prefix fails before anything is looked at
    if as_json:
        labels, reason, facts = collect(config_path, hooks_dirs, selinuxfs)
        ready = labels["ready"] == "true"
        emit_json(
            {"labels": prefixed(labels, prefix), "ready": ready, "reason": reason, "facts": facts}
        )
        if reason:
            exit_after_report(EXIT_FAILURE, f"not ready: {reason}")
        return
    output = output or DEFAULT_OUTPUT
    expiry = expiry or (3 * interval if interval else 3600)
    stop = []
    said = None
    if interval:
        signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while True:
        labels, reason, _facts = collect(config_path, hooks_dirs, selinuxfs)
        text = render(labels, prefix, expiry, time.time())
        if output == "-":
            click.echo(text, nl=False)
        else:
            from ocihook.linux.atomic import write_atomic

            write_atomic(output, text)
        if not interval:
            if reason:
                exit_after_report(EXIT_FAILURE, f"not ready: {reason}")
            return
        if reason and reason != said:  # on a timer: say it when it changes, go on
            click.echo(f"ocihook: not ready: {reason}", err=True)
        said = reason
        deadline = time.monotonic() + interval
        while not stop and time.monotonic() < deadline:
            time.sleep(min(1.0, interval))
        if stop:
            return
