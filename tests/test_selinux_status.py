"""`ocihook selinux status` on this machine (no SELinux LSM running)."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from ocihook.cli.selinux import selinux as selinux_cli
from ocihook.selinux.label import SHARED_FILE_CONTEXT, XATTR, selinux_enabled
from ocihook.selinux.relabel import relabel
from ocihook.selinux.status import BOOLEANS, collect, selinux_mode
from tests.support import synthetic

_ACCEL = synthetic.suite_devices()["synth0"]  # any char device of this host will do
ACCEL_RDEV = os.makedev(_ACCEL.major, _ACCEL.minor)


def test_mode_matches_the_kernel() -> None:
    assert (selinux_mode() == "disabled") is (not selinux_enabled())
    assert selinux_mode() == "disabled"  # this machine and CI: no SELinux LSM


@pytest.mark.root
def test_status_text_says_selinux_is_off() -> None:
    result = CliRunner().invoke(selinux_cli, ["status"])
    assert result.exit_code == 0, result.output
    assert "SELinux: disabled" in result.output
    assert "SELinux is disabled" in result.output
    for name in BOOLEANS:
        assert f"{name} = unknown" in result.output


@pytest.mark.root
def test_status_json_reports_mislabelled_source(tmp_path) -> None:
    tree = tmp_path / "driver"
    (tree / "lib").mkdir(parents=True)
    for i in range(5):
        (tree / "lib" / f"lib{i}.so").write_text("")
    os.setxattr(tree / "lib" / "lib0.so", XATTR, b"system_u:object_r:user_home_t:s0\0")
    result = CliRunner().invoke(
        selinux_cli, ["status", "--source", str(tree), "--json", "--limit", "2"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["selinux"] == "disabled"
    assert set(data["booleans"]) == set(BOOLEANS)
    assert all(value is None for value in data["booleans"].values())
    assert data["mislabelled_total"] == 7  # 2 dirs + 5 files
    assert len(data["mislabelled"]) == 2
    assert any(f"ocihook selinux relabel {tree}" in note for note in data["notes"])

    relabel([str(tree)])
    after = collect(source=str(tree))
    assert after.mislabelled_total == 0 and after.checked == 7
    assert os.getxattr(tree / "lib" / "lib0.so", XATTR).rstrip(b"\0").decode() == (
        SHARED_FILE_CONTEXT
    )


@pytest.mark.root
def test_status_finds_device_nodes(tmp_path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    os.mknod(dev / "synth0", 0o600 | 0o020000, ACCEL_RDEV)
    (dev / "null-ish").write_text("")
    status = collect(dev=str(dev))
    assert status.devices == [str(dev / "synth0")]
    assert status.mislabelled_total == 1
    assert status.mislabelled[0].expected.endswith(":ocihook_device_t:s0")


@pytest.mark.root
def test_status_finds_gaudi_nodes(tmp_path) -> None:
    """/dev/accel/* and /dev/hl* are the module's too (ocihook.fc); /dev/dri is not."""
    dev = tmp_path / "dev"
    for sub in ("accel", "dri"):
        (dev / sub).mkdir(parents=True)
    for path in ("accel/accel0", "accel/accel_controlD0", "hl1", "hl_controlD1", "dri/card0"):
        os.mknod(dev / path, 0o600 | 0o020000, ACCEL_RDEV)
    status = collect(dev=str(dev))
    assert status.devices == [
        str(dev / p) for p in ("accel/accel0", "accel/accel_controlD0", "hl1", "hl_controlD1")
    ]
