"""The ld.so.cache parser against glibc's own ldconfig output (all three formats), the
host's cache, the test writer, and malformed files; plus the version-suffix glob rule and
the kernel module version files."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from ocihook.discover.build import Roots, read_kernel_version
from ocihook.discover.libfinder import version_suffix_ok
from ocihook.errors import OcihookError
from ocihook.ld import cachefile
from tests.support import hosts, synthetic

REPO = Path(__file__).resolve().parent.parent


def _ldconfig_p(cache: str | None = None) -> list[tuple[str, str]]:
    """(soname, path) pairs as glibc's `ldconfig -p` prints them (reference only)."""
    args = ["ldconfig", "-p"] + (["-C", cache] if cache else [])
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return re.findall(r"^\t(\S+) \(.*\) => (\S+)$", out, re.M)


def test_host_cache_matches_ldconfig_p():
    entries = cachefile.parse(Path("/etc/ld.so.cache").read_bytes())
    assert len(entries) > 10
    assert [(k, v) for k, v, _ in entries] == _ldconfig_p()


def _ldconfig_tree(root: Path, fmt: str) -> Path:
    """A driver tree of real ELF libraries with sonames, cached by the host's `ldconfig -r`
    in the format `fmt` (new, old or compat); the cache's path."""
    synthetic.build_driver(root, layout="rhel")
    (root / "etc").mkdir()
    (root / "etc/ld.so.conf").write_text("/usr/lib64\n")
    subprocess.run(["ldconfig", "-r", str(root), "-c", fmt], check=True)
    return root / "etc/ld.so.cache"


@pytest.mark.root
@pytest.mark.parametrize("fmt", ["new", "old", "compat"])
def test_ldconfig_of_a_driver_tree(fmt, tmp_path):
    """Real ELF libraries with sonames, cached by the host's ldconfig -r in each format."""
    cache = _ldconfig_tree(tmp_path / "root", fmt)
    data = cache.read_bytes()
    assert (cachefile.NEW_MAGIC in data) == (fmt != "old")
    assert data.startswith(cachefile.OLD_MAGIC) == (fmt != "new")
    entries = cachefile.parse(data)
    assert ("libsynth.so.1", "/usr/lib64/libsynth.so.1", hosts.X86_64) in entries
    assert ("libsynth-ml.so.1", "/usr/lib64/libsynth-ml.so.1", hosts.X86_64) in entries
    assert [(k, v) for k, v, _ in entries] == _ldconfig_p(str(cache))


def test_writer_round_trip(tmp_path):
    entries = [("libcuda.so.1", "/usr/lib64/libcuda.so.1", hosts.X86_64), ("a", "/b", 3)]
    hosts.write_ld_cache(tmp_path / "c", entries)
    assert cachefile.parse((tmp_path / "c").read_bytes()) == entries
    assert _ldconfig_p(str(tmp_path / "c")) == [(k, v) for k, v, _ in entries]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not a cache at all",
        cachefile.NEW_MAGIC + b"\xff\xff\xff\x7f" + bytes(24),  # nlibs far beyond the file
        cachefile.OLD_MAGIC + b"\0" + b"\x05\0\0\0",  # old table truncated
    ],
)
def test_malformed_cache_is_one_error(data):
    with pytest.raises(OcihookError):
        cachefile.parse(data, "ld.so.cache")


def test_string_offset_outside_the_file(tmp_path):
    hosts.write_ld_cache(tmp_path / "c", [("libx.so.1", "/x/libx.so.1", hosts.X86_64)])
    data = bytearray((tmp_path / "c").read_bytes())
    data[48 + 4 : 48 + 8] = (1 << 30).to_bytes(4, "little")  # the first entry's key offset
    with pytest.raises(OcihookError, match="outside the file"):
        cachefile.parse(bytes(data))


def _stems_to_ask(entries: list) -> set[str]:
    """Every stem a cache holds, a name of some stem alone, the shipped profiles' stems, and
    stems no entry has (an empty one, a prefix of many, a longer one)."""
    stems = {name.split(".so", 1)[0] for name, _, _ in entries}
    stems |= {name for name, _, _ in entries if ".so" not in name}
    for profile in (REPO / "packaging" / "profiles").glob("*.yaml"):
        stems |= set(re.findall(r"([A-Za-z0-9_+-]+)\.so", profile.read_text()))
    return stems | {"", "lib", "libc", "libcuda.s", "libnvidia-ml-extra", "nosuchlib"}


def _assert_lazy_index_is_the_parsed_one(data: bytes) -> int:
    """Index of a Cache (entries decoded by stem, from the bytes) against Index of the
    parsed entries: the same answer for every stem and arch, in the same order."""
    entries = cachefile.parse(data)
    asked = 0
    for flags in {*cachefile.arch_flags("x86_64"), *cachefile.arch_flags("aarch64")} - {None}:
        eager, lazy = (
            cachefile.Index(entries, flags),
            cachefile.Index(cachefile.Cache(data, "c"), flags),
        )
        for stem in sorted(_stems_to_ask(entries)):
            assert lazy.stem(stem) == eager.stem(stem), (flags, stem)
            assert lazy.candidates(stem + ".so.*") == eager.candidates(stem + ".so.*")
            asked += 1
        assert lazy.candidates("lib*.so.*") == eager.all == lazy.all
    return asked


def test_lazy_index_answers_as_the_parsed_one_on_this_hosts_cache():
    """glibc's ldconfig merges strings (a name is the tail of its path): the lookup by
    bytes must still find every name."""
    assert _assert_lazy_index_is_the_parsed_one(Path("/etc/ld.so.cache").read_bytes()) > 100


@pytest.mark.root  # the layouts have device nodes (mknod)
@pytest.mark.parametrize(
    "layout", ["ubuntu", "rhel", "debian", "nvidia_nnn", "legacy_tls", "biarch_conf", "arch"]
)
def test_lazy_index_answers_as_the_parsed_one_on_hosts_layouts(layout, tmp_path):
    root = getattr(hosts, layout)(tmp_path / "root")
    for cache in sorted(root.rglob("ld.so.cache")):
        if cache.is_file() and not cache.is_symlink():
            _assert_lazy_index_is_the_parsed_one(cache.read_bytes())


@pytest.mark.root
@pytest.mark.parametrize("fmt", ["new", "old", "compat"])
def test_lazy_index_answers_as_the_parsed_one_in_every_format(fmt, tmp_path):
    _assert_lazy_index_is_the_parsed_one(_ldconfig_tree(tmp_path / "root", fmt).read_bytes())


def test_lazy_index_of_a_big_cache_and_a_bad_offset(tmp_path):
    """Thousands of names sharing heads (libfoo1, libfoo12...), names of a stem alone, and
    both arches; then an offset outside the file in a looked-up entry is one error (an
    entry never looked up is not decoded: the dynamic linker checks offsets at lookup too)."""
    entries = [
        (f"libfoo{i}.so.{i % 3}", f"/usr/lib64/libfoo{i}.so.{i % 3}", hosts.X86_64)
        for i in range(1500)
    ]
    entries += [
        (f"libfoo{i}.so.{i % 3}", f"/usr/lib/libfoo{i}.so.{i % 3}", hosts.I386)
        for i in range(0, 1500, 7)
    ]
    entries += [
        ("libfoo1", "/usr/lib64/libfoo1", hosts.X86_64),
        ("libfoo.so", "/x/libfoo.so", hosts.X86_64),
    ]
    hosts.write_ld_cache(tmp_path / "c", entries)
    data = (tmp_path / "c").read_bytes()
    assert _assert_lazy_index_is_the_parsed_one(data) > 3000
    bad = bytearray(data)
    bad[48 + 8 : 48 + 12] = (1 << 30).to_bytes(4, "little")  # the first row's path offset
    first, _, flags = cachefile.parse(data)[0]
    arch = flags & cachefile.FLAG_ARCH_MASK
    lazy = cachefile.Index(cachefile.Cache(bytes(bad), "cache"), arch)
    assert lazy.stem("libfoo7") == cachefile.Index(entries, arch).stem("libfoo7")
    with pytest.raises(OcihookError, match="cache: string offset .* outside the file"):
        lazy.stem(first.split(".so", 1)[0])
    with pytest.raises(OcihookError, match="outside the file"):
        cachefile.Index(cachefile.Cache(bytes(bad), "cache"), arch).candidates("*")


def test_a_cache_made_to_repeat_a_name_is_decoded_once(tmp_path):
    """A driver volume's cache whose strings repeat a profile's name far more often than a
    real cache could (each row holds a name and a path): the lookup stops looking in the
    bytes and decodes the entries, with the same answer as the parsed index."""
    entries = [("libcuda.so.1", "/usr/lib64/libcuda.so.1", hosts.X86_64)]
    entries += [
        (f"libx{i}.so.1", "/usr/lib64/" + "libcuda.so." * 50 + str(i), hosts.X86_64)
        for i in range(40)
    ]
    hosts.write_ld_cache(tmp_path / "c", entries)
    data = (tmp_path / "c").read_bytes()
    assert data.count(b"libcuda.so") > 4 * len(entries) + 64
    lazy = cachefile.Index(cachefile.Cache(data, "c"), cachefile.FLAG_X8664_LIB64)
    eager = cachefile.Index(cachefile.parse(data), cachefile.FLAG_X8664_LIB64)
    assert lazy.stem("libcuda") == eager.stem("libcuda") == [entries[0][:2]]
    assert lazy.stem("libx7") == eager.stem("libx7")


def test_arch_filter(tmp_path):
    entries = [("libcuda.so.1", "/lib64/a", hosts.X86_64), ("libcuda.so.1", "/lib32/a", 3)]
    x64, x32 = cachefile.arch_flags("x86_64")
    assert cachefile.Index(entries, x64).candidates("libcuda.so.*") == [
        ("libcuda.so.1", "/lib64/a")
    ]
    assert cachefile.Index(entries, x32).candidates("libcuda.so.*") == [
        ("libcuda.so.1", "/lib32/a")
    ]


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("libfoo.so.1", True),
        ("libfoo.so.550.54.14", True),
        ("libfoo.so.1.2.3.away", False),
        ("libfoo.so.1~", False),
        ("libfoo.so.1.bak", False),
        ("libfoo.so.", False),
    ],
)
def test_library_globs_match_only_version_suffixes(name, ok):
    assert version_suffix_ok(name, "libfoo.so.*") is ok


@pytest.mark.parametrize(
    ("path", "text", "version"),
    [
        ("/sys/module/nvidia/version", "550.54.14\n", "550.54.14"),
        (
            "/proc/driver/nvidia/version",
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Thu Jan 23 22:50:36 UTC 2025\nGCC version: 12\n",
            "570.86.15",
        ),
        ("/sys/module/nvidia/version", "garbage\n", None),
    ],
)
def test_kernel_version_files(path, text, version, tmp_path):
    (tmp_path / path.lstrip("/")).parent.mkdir(parents=True)
    (tmp_path / path.lstrip("/")).write_text(text)
    with Roots(str(tmp_path), str(tmp_path)) as roots:
        found = read_kernel_version(roots, [path])
    assert (found[0] if found else None) == version


def test_kernel_version_link_stays_in_the_device_root(tmp_path):
    root = tmp_path / "root"
    (root / "sys/module/nvidia").mkdir(parents=True)
    (tmp_path / "host-version").write_text("999.1.1\n")
    os.symlink(str(tmp_path / "host-version"), root / "sys/module/nvidia/version")
    with Roots(str(root), str(root)) as roots:
        assert read_kernel_version(roots, ["/sys/module/nvidia/version"]) is None
