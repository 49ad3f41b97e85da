"""`ocihook selinux relabel` on a real tree in tmp: labels read back from security.selinux."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ocihook.cli.selinux import selinux as selinux_cli
from ocihook.errors import OcihookError
from ocihook.selinux.label import DEVICE_CONTEXT, SHARED_FILE_CONTEXT, XATTR, get_label
from ocihook.selinux.relabel import relabel
from tests.support import synthetic

ACCEL = synthetic.suite_devices()["synth0"]  # a host device stands in for an accelerator
ACCEL_RDEV = os.makedev(ACCEL.major, ACCEL.minor)
OLD = "system_u:object_r:tmp_t:s0"


def _set(path: Path, context: str) -> None:
    os.setxattr(path, XATTR, context.encode() + b"\0", follow_symlinks=False)


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """A driver tree, plus a file outside it that a symlink points to."""
    outside = tmp_path / "outside.conf"
    outside.write_text("host secret\n")
    _set(outside, OLD)
    root = tmp_path / "driver"
    (root / "lib64").mkdir(parents=True)
    (root / "lib64" / "libsynth.so.1").write_bytes(b"\x7fELF")
    (root / "lib64" / "libsynth.so").symlink_to("libsynth.so.1")
    (root / "dev").mkdir()
    os.mknod(root / "dev" / "synth0", 0o600 | 0o020000, ACCEL_RDEV)
    (root / "escape").symlink_to(outside)
    (root / "escape-dir").symlink_to(tmp_path)
    _set(root / "lib64" / "libsynth.so.1", OLD)
    return {
        "root": root,
        "outside": outside,
        "dirs": [root, root / "lib64", root / "dev"],
        "files": [root / "lib64" / "libsynth.so.1"],
        "links": [root / "lib64" / "libsynth.so", root / "escape", root / "escape-dir"],
        "devices": [root / "dev" / "synth0"],
    }


@pytest.mark.root
def test_relabel_sets_exact_contexts(tree) -> None:
    changes = relabel([str(tree["root"])])
    for path in tree["dirs"] + tree["files"] + tree["links"]:
        assert get_label(str(path)) == SHARED_FILE_CONTEXT, path
    for path in tree["devices"]:
        assert get_label(str(path)) == DEVICE_CONTEXT, path
    assert get_label(str(tree["outside"])) == OLD  # the symlink's target is untouched
    assert get_label(str(tree["root"].parent)) is None
    by_path = {c.path: c for c in changes}
    assert by_path[str(tree["files"][0])].old == OLD
    assert by_path[str(tree["root"] / "escape")].kind == "link"
    assert len(changes) == len(tree["dirs"] + tree["files"] + tree["links"] + tree["devices"])
    assert relabel([str(tree["root"])]) == []  # idempotent


@pytest.mark.root
def test_dry_run_changes_nothing(tree) -> None:
    before = {p: get_label(str(p)) for p in tree["root"].rglob("*")}
    changes = relabel([str(tree["root"])], dry_run=True)
    assert {p: get_label(str(p)) for p in tree["root"].rglob("*")} == before
    assert {(c.path, c.old, c.new) for c in changes} >= {
        (str(tree["files"][0]), OLD, SHARED_FILE_CONTEXT),
        (str(tree["devices"][0]), None, DEVICE_CONTEXT),
    }


@pytest.mark.root
def test_device_type_option(tree) -> None:
    relabel([str(tree["root"])], device_type="xserver_misc_device_t")
    assert get_label(str(tree["devices"][0])) == "system_u:object_r:xserver_misc_device_t:s0"
    with pytest.raises(OcihookError):
        relabel([str(tree["root"])], device_type="bad:type")


@pytest.mark.root
def test_symlinked_root_is_resolved_and_checked(tmp_path: Path, tree) -> None:
    link = tmp_path / "to-usr"
    link.symlink_to("/usr")
    with pytest.raises(OcihookError, match="refusing"):
        relabel([str(link)], dry_run=True)
    alias = tmp_path / "alias"
    alias.symlink_to(tree["root"])
    relabel([str(alias)])
    assert get_label(str(tree["files"][0])) == SHARED_FILE_CONTEXT


SYSTEM = ["/", "/usr", "/etc", "/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/libexec"]
SYSTEM += ["/bin", "/sbin", "/home", "/var", "/boot", "/proc", "/sys", "/dev"]
SYSTEM += ["/usr/lib/x86_64-linux-gnu", "/etc/ssl", "/proc/self", "/sys/class"]


@pytest.mark.parametrize("path", SYSTEM)
def test_refuses_system_dirs(path: str) -> None:
    result = CliRunner().invoke(selinux_cli, ["relabel", "--dry-run", path])
    assert result.exit_code != 0
    assert isinstance(result.exception, OcihookError)
    message = str(result.exception)
    assert "refusing" in message and "\n" not in message


def test_single_device_node_under_dev() -> None:
    changes = relabel([ACCEL.path], dry_run=True)
    expected = [] if get_label(ACCEL.path) == DEVICE_CONTEXT else [DEVICE_CONTEXT]
    assert [c.new for c in changes if c.path == ACCEL.path] == expected
    assert all(c.path == ACCEL.path for c in changes)


@pytest.mark.root
def test_cli_dry_run_lists_changes(tree) -> None:
    result = CliRunner().invoke(selinux_cli, ["relabel", "--dry-run", str(tree["root"])])
    assert result.exit_code == 0, result.output
    line = f"would relabel {tree['files'][0]} (file): {OLD} -> {SHARED_FILE_CONTEXT}"
    assert line in result.output
    assert get_label(str(tree["files"][0])) == OLD


@pytest.mark.root
def test_cli_json_lists_the_same_changes(tree) -> None:
    from tests.support.cli import invoke

    code, out, err = invoke(["selinux", "relabel", "--dry-run", "--json", str(tree["root"])])
    assert code == 0, err
    document = json.loads(out)
    assert document["dry_run"] is True and document["count"] == len(document["changes"])
    change = {"path": str(tree["files"][0]), "kind": "file", "old": OLD}
    assert {**change, "new": SHARED_FILE_CONTEXT} in document["changes"]
    assert get_label(str(tree["files"][0])) == OLD
