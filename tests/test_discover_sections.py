"""The kind of a file a profile entry matched, chosen by the kinds table alone
(kinds.found_kind: the section, the file's type, the lib dir).

Ordinary tier: the tables.
"""

from __future__ import annotations

import stat

import pytest

from ocihook.plan import kinds
from ocihook.plan.kinds import BY_SOURCE, KINDS, SECTIONS, found_kind, section_kind

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


def test_every_kinds_section_is_a_profile_list():
    for kind in KINDS.values():
        assert set(kind.sections) <= set(SECTIONS), kind.name
