"""A listed directory of the source root (ocihook/discover/roots.py, Listing): its pattern
matches, looked up by name prefix, are exactly fnmatch's over every name of the directory.

A host's lib dir holds thousands of files and a profile dozens of patterns; the listing
buckets its names by their first PREFIX characters at the first match that can use them.
These tests compare it with a plain scan (fnmatch.fnmatchcase over os.listdir) on a lib dir
shaped like a real host's and on fuzzed names and patterns."""

from __future__ import annotations

import fnmatch
import os
import random
import re
from pathlib import Path

import pytest
import yaml

from ocihook.discover import roots

REPO = Path(__file__).resolve().parent.parent


def _profile_patterns() -> list[str]:
    """Every file-name pattern of the shipped profiles (the last part of each path)."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str) and " " not in node and any(c in node for c in "*?["):
            found.add(node.rsplit("/", 1)[-1])

    for path in sorted((REPO / "packaging" / "profiles").glob("*.yaml")):
        walk(yaml.safe_load(path.read_text()))
    return sorted(found)


def _scan(directory: Path, pattern: str) -> list[str]:
    return sorted(name for name in os.listdir(directory) if fnmatch.fnmatchcase(name, pattern))


def _listing(directory: Path) -> roots.Listing:
    root = os.open("/", os.O_PATH | os.O_DIRECTORY)
    try:
        return roots.Listing(root, str(directory))
    finally:
        os.close(root)


HOST_NAMES = [
    # a host lib dir: the driver's files among thousands of others
    "libcuda.so",
    "libcuda.so.1",
    "libcuda.so.550.54.14",
    "libcudadebugger.so.1",
    "libcudart.so.12",
    "libnvidia-ml.so.1",
    "libnvidia-ml.so.550.54.14",
    "libnvidia-cfg.so.1",
    "libnvidia-ptxjitcompiler.so.550.54.14",
    "libnvidia-glcore.so.550.54.14",
    "libGLX_nvidia.so.0",
    "libEGL_nvidia.so.0",
    "libnvidia",  # exactly a bucket key's length and shorter
    "libnvidi",
    "libnv",
    "lib",
    "l",
    "libc[a].so.1",  # a bracket in a name
    "libcuda.so.1.bak",
    "vdpau",
    "gsp_ga10x.bin",
    "gsp_tu10x.bin",
] + [f"lib{word}{i}.so.{i % 5}" for i in range(600) for word in ("x", "gtk-3-", "cudnn")]

EDGE_PATTERNS = [
    "*",
    "l*",
    "lib*",
    "libnvidi*",
    "libnvidia*",
    "libnvidia-*.so.*",
    "libcuda.so.*",
    "libcuda*",
    "libcu?a.so.*",
    "libc[a-z]da.so.*",
    "libc[[]a].so.*",
    "libcuda.so.1",
    "libnvidi",
    "nothing*",
    "*.so.1",
    "gsp*.bin",
    "libcudnn1*.so.?",
]


@pytest.fixture(scope="module")
def host_lib_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("lib64")
    for name in HOST_NAMES:
        (directory / name).write_bytes(b"")
    (directory / "libcuda.so.1").unlink()
    os.symlink("libcuda.so.550.54.14", directory / "libcuda.so.1")
    return directory


def test_every_profile_pattern_matches_what_a_scan_matches(host_lib_dir):
    listing = _listing(host_lib_dir)
    try:
        patterns = _profile_patterns() + EDGE_PATTERNS
        assert len(patterns) > 40  # the profiles' patterns are read: an empty list proves nothing
        for pattern in patterns:
            assert listing.match(pattern) == _scan(host_lib_dir, pattern), pattern
        assert listing.match("libcuda.so.*") == [
            "libcuda.so.1",
            "libcuda.so.1.bak",
            "libcuda.so.550.54.14",
        ]
    finally:
        listing.close()


def test_fuzzed_names_and_patterns_match_as_a_scan(tmp_path):
    """Names sharing the profiles' heads, and patterns made from a name's first characters
    (shorter and longer than a bucket key) followed by wildcards and more characters."""
    rng = random.Random(40)
    alphabet = "lib.so-_cud1[]"
    stems = ("", "l", "lib", "libc", "libcuda", "libcuda.so.", "libnvidia-", "libnvidia-ml")
    names = {
        rng.choice(stems) + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8)))
        for _ in range(600)
    } - {"", ".", ".."}
    for name in names:
        (tmp_path / name).write_bytes(b"")
    listing = _listing(tmp_path)
    try:
        ordered = sorted(names)
        for _ in range(4000):
            name = rng.choice(ordered)
            pattern = name[: rng.randint(0, len(name))] + "".join(
                rng.choice(alphabet + "**??[") for _ in range(rng.randint(1, 6))
            )
            assert _outcome(listing.match, pattern) == _outcome(
                lambda p: _scan(tmp_path, p), pattern
            ), pattern
    finally:
        listing.close()


def _outcome(match, pattern: str) -> object:
    """The names matched, or "error" where fnmatch refuses the pattern (Python 3.9's does
    for a range such as `[--*`): the listing hands `[...]` patterns to fnmatch too."""
    try:
        return match(pattern)
    except re.error:
        return "error"
