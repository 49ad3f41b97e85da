"""TEMPORARY v1-only device cgroup support, replaced by the cgroup branch."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ocihook.errors import OcihookError


@dataclass(frozen=True)
class DeviceRule:
    type: str
    major: int
    minor: int
    access: str


@dataclass(frozen=True)
class CgroupTarget:
    version: str
    path: str


def find_container_cgroup(
    pid: int, cgroups_path: str | None = None, proc: str = "/proc"
) -> CgroupTarget:
    with open(f"{proc}/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "devices" in controllers.split(","):
                return CgroupTarget("v1", "/sys/fs/cgroup/devices" + path)
    raise OcihookError("no devices cgroup")


def plan_device_edits(target: CgroupTarget, rules: list[DeviceRule]) -> list[dict]:
    return [
        {
            "file": os.path.join(target.path, "devices.allow"),
            "line": f"{r.type} {r.major}:{r.minor} {r.access}",
        }
        for r in rules
    ]


def allow_devices(target: CgroupTarget, rules: list[DeviceRule]) -> list[dict]:
    edits = plan_device_edits(target, rules)
    for edit in edits:
        with open(edit["file"], "w") as f:
            f.write(edit["line"])
    return edits


def revert_device_edits(target: CgroupTarget, edits: list[dict]) -> None:
    pass
