"""Discovery by the profile's sections (issue 32): one discoverer per section
(discover/build.py's DISCOVERERS), and the kind of a file an entry matched chosen by the
kinds table alone (kinds.found_kind: the section, the file's type, the lib dir).

Ordinary tier: the tables, and small trees planned in-process (no device nodes, no root).
"""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
import yaml

from ocihook.config.compiled import compile_config
from ocihook.discover import build
from ocihook.discover.build import DISCOVERERS, build_plan
from ocihook.discover.roots import Roots
from ocihook.errors import OcihookError
from ocihook.plan import kinds
from ocihook.plan.kinds import BY_SOURCE, KINDS, SECTIONS, found_kind, section_kind
from ocihook.request.parse import parse_request
from tests.support import synthetic

MODES = {"file": stat.S_IFREG, "sock": stat.S_IFSOCK, "dir": stat.S_IFDIR}


def test_no_two_kinds_of_one_section_share_a_source_type_and_lib_dir():
    """The choice of a found file's kind is the table's: within one profile list, kinds
    differ by the file type of their source (files: file, socket, directory) or by the lib
    dir they go to (libraries: the 64- and the 32-bit copies)."""
    seen: dict[tuple, str] = {}
    for kind in KINDS.values():
        for section in kind.sections:
            key = (section, kind.source, kind.lib_dir)
            assert key not in seen, f"{kind.name} and {seen[key]} share {key}"
            seen[key] = kind.name
    assert {key: kind.name for key, kind in BY_SOURCE.items()} == seen


def test_every_kind_is_found_by_its_source_type_in_each_of_its_sections():
    for kind in KINDS.values():
        for section in kind.sections:
            assert found_kind(section, MODES[kind.source] | 0o644, kind.lib_dir) is kind


@pytest.mark.parametrize(
    "section, mode, lib_dir, expected",
    [
        ("files", stat.S_IFREG, None, kinds.FILE),
        ("files", stat.S_IFSOCK, None, kinds.SOCKET),
        ("files", stat.S_IFDIR, None, kinds.DIRECTORY),
        ("files", stat.S_IFIFO, None, None),
        ("files", stat.S_IFCHR, None, None),
        ("firmware", stat.S_IFREG, None, kinds.FIRMWARE),
        ("firmware", stat.S_IFSOCK, None, kinds.SOCKET),
        ("firmware", stat.S_IFDIR, None, None),
        ("binaries", stat.S_IFREG, None, kinds.BINARY),
        ("binaries", stat.S_IFDIR, None, None),
        ("libraries", stat.S_IFREG, "lib_dir", kinds.LIBRARY),
        ("libraries", stat.S_IFREG, "lib_dir32", kinds.LIBRARY32),
        ("libraries", stat.S_IFREG, None, None),
    ],
)
def test_found_kind(section, mode, lib_dir, expected):
    kind = found_kind(section, mode | 0o755, lib_dir)
    assert (kind.name if kind else None) == expected


def test_sections_name_their_entries_by_the_kind_of_a_regular_file():
    assert section_kind("firmware").name == kinds.FIRMWARE
    assert section_kind("files").name == kinds.FILE


def test_kind_constants_are_the_table_rows():
    constants = {
        kinds.LIBRARY,
        kinds.LIBRARY32,
        kinds.BINARY,
        kinds.FIRMWARE,
        kinds.FILE,
        kinds.SOCKET,
        kinds.DIRECTORY,
    }
    assert constants == set(KINDS)


def test_every_section_has_its_discoverer_in_its_own_module():
    assert list(DISCOVERERS) == [*SECTIONS, "devices"]
    modules = {discover.__module__ for discover in DISCOVERERS.values()}
    assert len(modules) == len(DISCOVERERS)
    assert all(m.startswith("ocihook.discover.") and m != build.__name__ for m in modules)


def test_every_kinds_section_is_a_profile_list():
    for kind in KINDS.values():
        assert set(kind.sections) <= set(SECTIONS), kind.name


# -- small trees: what the discoverers find --------------------------------------------------


def _plan(root: Path, tmp: Path, **lists):
    document = {"name": "sections", **lists}
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(synthetic.config(root, profile=document)))
    config = compile_config(str(path))[0]
    request = parse_request("all", "test")
    with Roots(str(root), str(root)) as roots:
        return build_plan(config, roots, request)


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "root"
    for d in ("usr/bin", "lib/firmware/x", "run/x/pipe", "etc"):
        (root / d).mkdir(parents=True)
    (root / "usr/bin/tool").write_bytes(b"#!/bin/sh\n")
    (root / "usr/bin/tool").chmod(0o755)
    (root / "usr/bin/tooldir").mkdir()
    (root / "lib/firmware/x/a.bin").write_bytes(b"fw")
    (root / "etc/x.conf").write_text("x\n")
    os.mkfifo(root / "run/x/fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "run/x/socket"))
    sock.close()
    return root


def test_each_match_gets_its_file_types_kind(tree, tmp_path):
    result = _plan(
        tree,
        tmp_path,
        binaries=["tool", "tooldir", "absent"],
        firmware=["/lib/firmware/x/*.bin", "/run/x/socket"],
        files=[
            "/etc/x.conf",
            {"path": "/run/x/fifo", "optional": True},
            {"path": "/run/x/pipe", "writable": True},
            {"path": "/run/x/none", "optional": True},
        ],
    )
    mounts = [(m.target, m.kind, m.writable) for m in result.mounts]
    assert mounts == [
        ("/usr/bin/tool", kinds.BINARY, False),
        ("/lib/firmware/x/a.bin", kinds.FIRMWARE, False),
        ("/run/x/socket", kinds.SOCKET, False),
        ("/etc/x.conf", kinds.FILE, False),
        ("/run/x/pipe", kinds.DIRECTORY, True),
    ]
    assert result.unmatched == ["binaries: tooldir", "binaries: absent", "file: /run/x/none"]


def test_the_first_path_entry_naming_a_target_wins(tree, tmp_path):
    """Firmware and files entries share their targets (the first wins); a binary and a file
    at one target are two mounts, as the plan always had them."""
    result = _plan(
        tree,
        tmp_path,
        binaries=["tool"],
        firmware=["/lib/firmware/x/a.bin"],
        files=["/lib/firmware/x/a.bin", {"path": "/etc/x.conf", "target": "/usr/bin/tool"}],
    )
    mounts = [(m.target, m.kind) for m in result.mounts]
    assert mounts == [
        ("/usr/bin/tool", kinds.BINARY),
        ("/lib/firmware/x/a.bin", kinds.FIRMWARE),
        ("/usr/bin/tool", kinds.FILE),
    ]


def test_missing_entries(tree, tmp_path):
    result = _plan(tree, tmp_path, firmware=["/lib/firmware/x/{version}/*.bin", "/nope/a"])
    assert result.unmatched == [
        "firmware: /lib/firmware/x/{version}/*.bin (no driver version)",
        "firmware: /nope/a",
    ]
    with pytest.raises(OcihookError, match="file /nope/a not found"):
        _plan(tree, tmp_path, files=["/nope/a"])
    with pytest.raises(OcihookError, match="no driver files found"):
        _plan(tree, tmp_path, binaries=["absent"])
