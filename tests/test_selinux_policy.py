"""The ocihook module linked into Debian's refpolicy with refpolicy's container module.

Real tools: the devel Makefile, semodule into a private store (tests/policy_build.py) and
setools queries on the resulting binary policy. Booleans (tunables are booleans in
refpolicy's modular build) are evaluated from each rule's conditional expression.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest

from ocihook.selinux.label import SHARED_READ_TYPES
from tests.policy_build import build_linked_policy, build_module
from tests.support import devstack

setools = devstack.module("setools")
NEEDS_SETOOLS = pytest.mark.devstack("setools")  # the tests that query the policy

TUNABLE = "ocihook_use_vendor_devices"
DEVICE_USE = {"open", "read", "write", "ioctl", "map"}
FILE_USE = {"open", "read", "map", "execute"}
ANY_IO = {"open", "read", "write", "append", "ioctl", "map", "execute"}


@pytest.fixture(scope="session")
def policy() -> setools.SELinuxPolicy:
    return setools.SELinuxPolicy(str(build_linked_policy()))


@functools.cache
def _rules(policy, source: str, target: str, tclass: str) -> list:
    """(rule, conditional or None) for every allow rule that matches (a query is slow)."""
    query = setools.TERuleQuery(
        policy, ruletype=["allow"], source=source, target=target, tclass=[tclass]
    )
    out = []
    for rule in query.results():
        try:
            out.append((rule, rule.conditional))
        except setools.exception.RuleNotConditional:
            out.append((rule, None))
    return out


def allowed(policy, source: str, target: str, tclass: str, bools: dict | None = None) -> set:
    """Permissions `source` has on `target`:`tclass` with booleans at their defaults + `bools`."""
    state = {str(b): b.state for b in policy.bools()}
    state.update(bools or {})
    perms: set = set()
    for rule, cond in _rules(policy, source, target, tclass):
        if cond is not None:
            values = {str(b): state[str(b)] for b in cond.booleans}
            if cond.evaluate(**values) != rule.conditional_block:
                continue
        perms |= set(rule.perms)
    return perms


def _artifacts(source: Path) -> dict[str, float | None]:
    """mtime of the build outputs in the source tree (None: absent); `make install` or
    `make -C selinux` may have left them there, build_module must not touch them."""
    return {
        name: (source / name).stat().st_mtime if (source / name).exists() else None
        for name in ("tmp", "ocihook.pp")
    }


def test_make_builds_module_in_a_copy(tmp_path: Path) -> None:
    source = Path(__file__).resolve().parents[1] / "selinux"
    before = _artifacts(source)
    pp = build_module(tmp_path)
    assert pp.stat().st_size > 0
    subprocess.run(
        ["semodule_unpackage", str(pp), str(tmp_path / "m.mod"), str(tmp_path / "m.fc")],
        check=True,
    )
    assert "ocihook_device_t" in (tmp_path / "m.fc").read_text()
    assert _artifacts(source) == before


@NEEDS_SETOOLS
@pytest.mark.root
def test_container_reads_maps_executes_shared_files(policy) -> None:
    perms = allowed(policy, "container_t", "container_ro_file_t", "file")
    assert FILE_USE <= perms


@NEEDS_SETOOLS
@pytest.mark.root
def test_container_cannot_change_shared_files(policy) -> None:
    everything_on = {str(b): True for b in policy.bools()}
    for bools in ({}, everything_on):
        for tclass in ("file", "dir", "lnk_file"):
            perms = allowed(policy, "container_t", "container_ro_file_t", tclass, bools)
            forbidden = {"write", "append", "setattr", "unlink", "rename", "create"}
            forbidden |= {"relabelfrom", "relabelto", "add_name", "remove_name"}
            assert not perms & forbidden, (tclass, perms & forbidden)


@NEEDS_SETOOLS
@pytest.mark.root
def test_container_uses_ocihook_devices(policy) -> None:
    assert DEVICE_USE <= allowed(policy, "container_t", "ocihook_device_t", "chr_file")
    assert not allowed(policy, "container_t", "ocihook_device_t", "blk_file")


@NEEDS_SETOOLS
@pytest.mark.root
@pytest.mark.parametrize("bools_on", [False, True])
@pytest.mark.parametrize("target", ["fixed_disk_device_t", "memory_device_t"])
@pytest.mark.parametrize("tclass", ["chr_file", "blk_file"])
def test_container_never_touches_disks_or_memory(policy, bools_on, target, tclass) -> None:
    bools = {str(b): True for b in policy.bools()} if bools_on else {}
    assert not allowed(policy, "container_t", target, tclass, bools) & ANY_IO


@NEEDS_SETOOLS
@pytest.mark.root
@pytest.mark.parametrize("target", ["xserver_misc_device_t", "dri_device_t"])
def test_vendor_devices_follow_the_tunable(policy, target) -> None:
    assert not allowed(policy, "container_t", target, "chr_file", {TUNABLE: False}) & DEVICE_USE
    assert DEVICE_USE <= allowed(policy, "container_t", target, "chr_file", {TUNABLE: True})


@NEEDS_SETOOLS
@pytest.mark.root
def test_tunable_is_off_by_default(policy) -> None:
    assert {str(b): b.state for b in policy.bools()}[TUNABLE] is False


@NEEDS_SETOOLS
@pytest.mark.root
def test_hsa_device_type_is_fedora_only(policy) -> None:
    """refpolicy has no hsa_device_t: the module's optional block for it is left out."""
    types = {str(t) for t in policy.types()}
    assert "hsa_device_t" not in types
    assert {"xserver_misc_device_t", "dri_device_t", "ocihook_device_t"} <= types


@NEEDS_SETOOLS
@pytest.mark.root
def test_ocihook_device_is_a_device_node(policy) -> None:
    device = policy.lookup_type("ocihook_device_t")
    assert "device_node" in {str(a) for a in device.attributes()}


# container-selinux's aliases of container_ro_file_t; refpolicy does not declare them.
CONTAINER_SELINUX_ALIASES = {"container_share_t", "docker_share_t"}


@NEEDS_SETOOLS
@pytest.mark.root
@pytest.mark.parametrize("type_", sorted(SHARED_READ_TYPES - CONTAINER_SELINUX_ALIASES))
def test_shared_read_types_are_readable(policy, type_) -> None:
    assert {"open", "read", "map"} <= allowed(policy, "container_t", type_, "file")


@NEEDS_SETOOLS
@pytest.mark.root
@pytest.mark.parametrize("type_", ["user_home_t", "var_t", "tmp_t", "unlabeled_t", "device_t"])
def test_other_types_are_not_readable(policy, type_) -> None:
    assert not {"open", "read"} <= allowed(policy, "container_t", type_, "file")
