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
import os
import re
import signal
import subprocess
import sys
import time

import click

from ocihook.commands import config_option
from ocihook.errors import OcihookError

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


def check_passes(config_path: str, hooks_dirs: tuple[str, ...]) -> bool:
    """Whether `ocihook check` (the same command a person runs) exits 0."""
    args = [sys.executable, "-m", "ocihook.cli", "check", "--config", config_path]
    for directory in hooks_dirs:
        args += ["--hooks-dir", directory]
    # The same ocihook as this one, wherever it was imported from (an installer's lib dir).
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    result = subprocess.run(args, capture_output=True, timeout=120, env=env)
    return result.returncode == 0


def collect(config_path: str, hooks_dirs: tuple[str, ...], selinuxfs: str) -> dict[str, str]:
    """The node's labels (names without the prefix): profile, devices, driver-version,
    selinux, ready."""
    from ocihook.selinux.status import selinux_mode

    labels: dict[str, str] = {}
    try:
        from ocihook.config import compile_config
        from ocihook.devices import available_devices
        from ocihook.discover import build_plan
        from ocihook.request import parse_request
        from ocihook.roots import Roots

        config, _ = compile_config(config_path)
        profile = config["profile"]
        labels["profile"] = label_value(profile["name"])
        with Roots(config["source_root"], config["device_root"]) as roots:
            labels["devices"] = str(len(available_devices(roots, profile["devices"])))
            plan = build_plan(config, roots, parse_request("all", "features"))
        if plan.driver_version:
            labels["driver-version"] = label_value(plan.driver_version)
    except OcihookError:
        pass  # `ready` says it; `ocihook check` on the node says why
    labels["selinux"] = selinux_mode(selinuxfs)
    labels["ready"] = "true" if check_passes(config_path, hooks_dirs) else "false"
    return labels


def render(labels: dict[str, str], prefix: str, expiry_seconds: int, now: float) -> str:
    if not PREFIX_RE.match(prefix) or len(prefix) > 253:
        raise OcihookError(f"--prefix {prefix!r}: must be a DNS subdomain such as ocihook.io")
    expires = datetime.datetime.fromtimestamp(now + expiry_seconds, datetime.timezone.utc)
    lines = [
        "# Written by `ocihook features`; rewritten on a timer by the ocihook DaemonSet.",
        f"# +expiry-time={expires.strftime('%Y-%m-%dT%H:%M:%SZ')}",
    ]
    for name, value in labels.items():
        if not NAME_RE.match(name) or not VALUE_RE.match(value):
            raise OcihookError(f"label {name}={value!r} is not a valid Kubernetes label")
        lines.append(f"{prefix}/{name}={value}")
    return "\n".join(lines) + "\n"


@click.command()
@config_option
@click.option(
    "--output",
    "-o",
    default=DEFAULT_OUTPUT,
    show_default=True,
    help="The features.d file to write atomically; '-' prints it.",
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
@click.option("--selinuxfs", default="/sys/fs/selinux", hidden=True)
def features(
    config_path: str,
    output: str,
    prefix: str,
    hooks_dirs: tuple[str, ...],
    interval: int,
    expiry: int | None,
    selinuxfs: str,
) -> None:
    """Write the node's labels for Node Feature Discovery (local source, features.d).

    Labels, under PREFIX (ocihook.io): profile, devices (how many the device root has),
    driver-version, selinux (enforcing, permissive, disabled) and ready (true when
    `ocihook check` passes). Example: ocihook.io/profile=nvidia, ocihook.io/devices=4,
    ocihook.io/ready=true. The `# +expiry-time=` line makes NFD drop the labels when the
    file is no longer refreshed.
    """
    expiry = expiry or (3 * interval if interval else 3600)
    stop = []
    if interval:
        signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while True:
        text = render(collect(config_path, hooks_dirs, selinuxfs), prefix, expiry, time.time())
        if output == "-":
            click.echo(text, nl=False)
        else:
            from ocihook.atomic import write_atomic

            write_atomic(output, text)
        if not interval:
            return
        deadline = time.monotonic() + interval
        while not stop and time.monotonic() < deadline:
            time.sleep(min(1.0, interval))
        if stop:
            return
