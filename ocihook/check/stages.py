"""At which OCI hook stage ocihook runs on this host: `ocihook check`'s stage lines.

The OCI runtime spec deprecates `prestart` in favour of `createRuntime`, which runs at the
same point: after the container's namespaces exist, before pivot_root, in the runtime's
namespaces. runc runs a config's createRuntime hooks right after its prestart ones
(libcontainer/process_linux.go, procHooks) since 1.0.0-rc91; crun likewise
(src/libcrun/container.c) since 0.12. podman and CRI-O put a hooks.d file's stages into the
OCI config (containers/common pkg/hooks): createRuntime as createRuntime; prestart as
prestart before containers/common 0.58 (podman 4, CRI-O 1.29 and older) and as createRuntime
from it (podman 5, CRI-O 1.30). So the shipped registrations say createRuntime, and a runtime
older than those versions (which would never run it) keeps prestart: the line says which.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Mapping

# OCI runtime -> the first version that runs createRuntime hooks (runc's as a release
# candidate: 1.0.0-rc91).
CREATE_RUNTIME_SINCE = {"runc": ((1, 0, 0), 91), "crun": ((0, 12, 0), None)}
SEARCH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def parse_version(text: str) -> tuple[tuple[int, int, int], int | None] | None:
    """((major, minor, patch), release candidate or None) of `runc version 1.1.5+ds1`,
    `runc version 1.0.0-rc10`, `crun version 1.8`; None when the text says none."""
    words = text.split("\n", 1)[0].split()
    if len(words) < 3 or words[1] != "version":
        return None
    core, _, rest = words[2].partition("-")
    core = core.split("+", 1)[0]
    parts = core.split(".")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    numbers = tuple(int(p) for p in parts) + (0,) * (3 - len(parts))
    rc = None
    if rest.startswith("rc") and rest[2:].split("+", 1)[0].isdigit():
        rc = int(rest[2:].split("+", 1)[0])
    return numbers, rc  # type: ignore[return-value]


def runs_create_runtime(name: str, version: tuple[tuple[int, int, int], int | None]) -> bool:
    """Whether that runtime's version runs createRuntime hooks."""
    minimum, minimum_rc = CREATE_RUNTIME_SINCE[name]
    numbers, rc = version
    if numbers != minimum:
        return numbers > minimum
    if rc is None:
        return True  # the release itself
    return minimum_rc is not None and rc >= minimum_rc


def installed_runtimes(env: Mapping[str, str]) -> list[tuple[str, str, str | None]]:
    """(name, path, its --version's first line or None) of runc and crun where installed
    (env's PATH, then the usual dirs)."""
    found = []
    search = os.pathsep.join([env.get("PATH", os.defpath), *SEARCH])
    for name in CREATE_RUNTIME_SINCE:
        path = shutil.which(name, path=search)
        if path is None:
            continue
        try:
            result = subprocess.run(
                [path, "--version"], capture_output=True, text=True, timeout=30,
                env={"PATH": env.get("PATH", os.defpath)},
            )  # fmt: skip
            line = result.stdout.split("\n", 1)[0].strip() if result.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            line = None
        found.append((name, path, line))
    return found


def describe_runtimes(runtimes: list[tuple[str, str, str | None]]) -> tuple[list[str], list[str]]:
    """(runtimes that run createRuntime hooks, those that do not), each as "runc 1.1.5
    (/usr/sbin/runc)"; one whose version cannot be read counts as neither."""
    running, not_running = [], []
    for name, path, line in runtimes:
        version = parse_version(line or "")
        if version is None:
            continue
        shown = f"{name} {line.split()[2]} ({path})"  # type: ignore[union-attr]
        (running if runs_create_runtime(name, version) else not_running).append(shown)
    return running, not_running
