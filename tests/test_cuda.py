"""cuda.py: the driver -> CUDA table, and the forward compatibility probe of an image, by
fd, against hostile images (a compat dir that is a
symlink out of the rootfs, a compat "library" that is a FIFO, a device node, a huge
file, a symlink loop), each handled by fd, bounded, with the host untouched.

The images are trees built here; their libraries are real ELF shared objects with the
DT_SONAME of NVIDIA's (tests/support/elfgen.py), named by driver version as NVIDIA's are.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from ocihook.errors import OcihookError
from ocihook.ld import cachefile, native
from ocihook.linux import securepath
from ocihook.plan import cuda
from tests.support import elfgen, hostile, hosts, synthetic

COMPAT = "/usr/local/cuda/compat"
HOST = "535.104.05"


@pytest.mark.parametrize(
    "driver, expected",
    [
        ("535.104.05", "12.2"),
        ("535.43.02", "12.1"),  # a 535 beta before CUDA 12.2's minimum
        ("550.54.15", "12.4"),
        ("470.57.02", "11.4"),
        ("570.26", "12.8"),
        ("580.82.07", "13.0"),
        ("375.26", "8.0"),
        ("367.48", None),  # older than the table
        ("590.44.01", "13.1"),
        ("600.10.01", None),  # a branch newer than the table's newest: not guessed
        ("abc", None),
        (None, None),
    ],
)
def test_cuda_version_of_a_driver(driver, expected):
    assert cuda.cuda_for_driver(driver) == expected


# -- the forward compatibility probe, by fd ---------------------------------------------------


def _image(root: Path, compat: str | None = "550.54.15", soname: str = "libcuda.so.1") -> Path:
    directory = root / COMPAT.lstrip("/")
    directory.mkdir(parents=True)
    if compat:
        (directory / f"libcuda.so.{compat}").write_bytes(hosts.library(soname, 64, "compat"))
        os.symlink(f"libcuda.so.{compat}", directory / "libcuda.so.1")
    return directory


def _probe(root: Path, host: str = HOST, mode: str = "ldconfig") -> dict:
    root_fd = securepath.open_dir(str(root))
    signal.alarm(10)  # a probe that blocks (a FIFO opened for reading) fails, never hangs
    try:
        return cuda.probe_compat(root_fd, COMPAT, "libcuda.so", mode, host)
    finally:
        signal.alarm(0)
        os.close(root_fd)


def test_a_newer_compat_library_comes_first(tmp_path):
    _image(tmp_path)
    found = _probe(tmp_path)
    assert found == {
        "mode": "ldconfig",
        "dir": COMPAT,
        "use": True,
        "library": "libcuda.so.550.54.15",
        "version": "550.54.15",
        "host_version": HOST,
        "reason": "libcuda.so.550.54.15 newer than driver 535.104.05",
    }


@pytest.mark.parametrize("compat", ["530.30.02", "535.129.03", "535.54.03"])
def test_the_same_or_an_older_branch_leaves_the_hosts(tmp_path, compat):
    """NVIDIA's rule compares the majors: the same branch's compat package is not used."""
    _image(tmp_path, compat)
    found = _probe(tmp_path)
    assert not found["use"] and found["version"] == compat
    assert found["reason"] == f"libcuda.so.{compat} not newer than driver {HOST}"


@pytest.mark.parametrize(
    "build, reason",
    [
        (
            lambda d: os.unlink(d / "libcuda.so.550.54.15"),
            "no libcuda.so.*.* in /usr/local/cuda/compat",
        ),
        (
            lambda d: (d / "libcuda.so.560.28.03").write_bytes(hosts.library("libcuda.so.1")),
            "2 compat libraries",
        ),
        (lambda d: os.unlink(d / "libcuda.so.1"), "libcuda.so.1: does not exist"),
        (
            lambda d: (d / "libcuda.so.550.54.15").write_bytes(b"not an ELF file" * 10),
            "not a little-endian ELF file",
        ),
    ],
)
def test_what_is_not_a_compat_library(tmp_path, build, reason):
    directory = _image(tmp_path)
    build(directory)
    found = _probe(tmp_path)
    assert not found["use"] and reason in found["reason"], found


def test_a_library_of_another_soname_is_not_used(tmp_path):
    _image(tmp_path, soname="libnotcuda.so.1")
    found = _probe(tmp_path)
    assert not found["use"] and "DT_SONAME b'libnotcuda.so.1'" in found["reason"]


def test_unknown_host_version_and_no_dir(tmp_path):
    _image(tmp_path)
    assert "unknown" in _probe(tmp_path, host=None)["reason"]
    assert _probe(tmp_path / "usr")["reason"] == f"{COMPAT}: does not exist"


@pytest.mark.parametrize("style", ["absolute", "relative"])
def test_compat_dir_symlinked_out_of_the_rootfs(tmp_path, style):
    """The dir points at a host dir holding a newer "compat" libcuda: resolved inside the
    image's root it names nothing; the host dir is not read, and not changed."""
    host_dir = hostile.make_canary(tmp_path / "host-compat")
    (host_dir / "libcuda.so.999.1").write_bytes(hosts.library("libcuda.so.1"))
    os.symlink("libcuda.so.999.1", host_dir / "libcuda.so.1")
    before = hostile.snapshot(host_dir)
    root = tmp_path / "image"
    (root / "usr/local/cuda").mkdir(parents=True)
    depth = "../" * 8
    target = str(host_dir) if style == "absolute" else depth + str(host_dir).lstrip("/")
    os.symlink(target, root / COMPAT.lstrip("/"))
    found = _probe(root)
    assert not found["use"] and found["reason"] == f"{COMPAT}: does not exist"
    assert hostile.snapshot(host_dir) == before


def test_soname_link_out_of_the_rootfs(tmp_path):
    host_lib = tmp_path / "host" / "libcuda.so.999.1"
    host_lib.parent.mkdir()
    host_lib.write_bytes(hosts.library("libcuda.so.1"))
    directory = _image(tmp_path / "image")
    os.unlink(directory / "libcuda.so.1")
    os.symlink(str(host_lib), directory / "libcuda.so.1")
    found = _probe(tmp_path / "image")
    assert not found["use"] and found["reason"].endswith("libcuda.so.1: does not exist")


def test_compat_dir_symlink_loop(tmp_path):
    (tmp_path / "usr/local/cuda").mkdir(parents=True)
    os.symlink("compat", tmp_path / COMPAT.lstrip("/"))
    found = _probe(tmp_path)
    assert not found["use"] and "Too many levels of symbolic links" in found["reason"]


def test_compat_library_is_a_fifo(tmp_path):
    """A FIFO named as the compat library (nobody ever writes it: an open for reading
    would block for good); the probe never opens it."""
    directory = _image(tmp_path, None)
    os.mkfifo(directory / "libcuda.so.999.1")
    os.symlink("libcuda.so.999.1", directory / "libcuda.so.1")
    found = _probe(tmp_path)
    assert not found["use"] and found["reason"].endswith("libcuda.so.999.1: not a regular file")


def test_compat_library_is_a_symlink_loop(tmp_path):
    directory = _image(tmp_path, None)
    os.symlink("libcuda.so.999.1", directory / "libcuda.so.999.1")
    found = _probe(tmp_path)
    assert not found["use"] and "not a regular file" in found["reason"]


@pytest.mark.root
def test_compat_library_is_a_device_node(tmp_path):
    """A real char device of this host (host_devices.pick) named as the library: stat,
    never opened."""
    device = next(iter(synthetic.suite_devices().values()))
    directory = _image(tmp_path, None)
    os.mknod(directory / "libcuda.so.999.1", 0o20600, os.makedev(device.major, device.minor))
    os.symlink("libcuda.so.999.1", directory / "libcuda.so.1")
    found = _probe(tmp_path)
    assert not found["use"] and "not a regular file" in found["reason"]


def test_compat_library_is_a_huge_file(tmp_path):
    """A sparse 2 TiB file with a real ELF head: refused by its size before any read."""
    directory = _image(tmp_path)
    with open(directory / "libcuda.so.550.54.15", "r+b") as file:
        file.truncate(2 << 40)
    found = _probe(tmp_path)
    assert not found["use"] and found["reason"].endswith("larger than 1 GiB")


def test_the_listing_is_bounded(tmp_path, monkeypatch):
    directory = _image(tmp_path)
    for i in range(20):
        (directory / f"filler{i}").write_text("")
    monkeypatch.setattr(cuda, "MAX_DIR_ENTRIES", 10)
    found = _probe(tmp_path)
    assert not found["use"] and found["reason"].endswith("more than 10 entries")


# -- the ld cache entries of the compat dir ---------------------------------------------------


def test_compat_entries_come_before_the_hosts(tmp_path):
    """native.build with the compat dir first: ld.so takes the first matching entry of a
    name, and that is the compat one; the dir's FIFO, device-less junk and links are
    skipped (only regular DSO files with their soname link give entries)."""
    root = tmp_path / "image"
    directory = _image(root)
    (directory / "libnvidia-ptxjitcompiler.so.550.54.15").write_bytes(
        hosts.library("libnvidia-ptxjitcompiler.so.1")
    )
    os.symlink("libnvidia-ptxjitcompiler.so.550.54.15", directory / "libnvidia-ptxjitcompiler.so.1")
    (directory / "libnolink.so.1.0").write_bytes(hosts.library("libnolink.so.1"))  # no link
    os.mkfifo(directory / "libfifo.so.1")
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.535.104.05").write_bytes(hosts.library("libcuda.so.1"))
    os.symlink("libcuda.so.535.104.05", lib / "libcuda.so.1")
    (lib / "libc.so.6").write_bytes(elfgen.shared_object("libc.so.6"))
    hosts.write_ld_cache(
        root / "etc/ld.so.cache", [("libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0x0303)]
    )
    root_fd = securepath.open_dir(str(root))
    etc_fd = securepath.resolve(root_fd, "/etc", flags=os.O_PATH | os.O_DIRECTORY)
    try:
        targets = ["/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05"]
        dirs = ["/usr/lib/x86_64-linux-gnu"]
        data = native.build(root_fd, etc_fd, dirs, targets, COMPAT)
        plain = native.build(root_fd, etc_fd, dirs, targets)
    finally:
        os.close(etc_fd)
        os.close(root_fd)
    entries = [(e[0], e[1]) for e in cachefile.parse(data)]
    assert entries == [
        ("libnvidia-ptxjitcompiler.so.1", f"{COMPAT}/libnvidia-ptxjitcompiler.so.1"),
        ("libcuda.so.1", f"{COMPAT}/libcuda.so.1"),
        ("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        ("libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    ]
    assert [(e[0], e[1]) for e in cachefile.parse(plain)] == [
        ("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
        ("libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"),
    ]


# -- the config ------------------------------------------------------------------------------


def _compile(tmp_path: Path, **settings) -> dict:
    import yaml

    from ocihook.config.compiled import compile_config

    path = tmp_path / "config.yaml"
    base = {"profile": "nvidia", "profile_dirs": [str(synthetic.PROFILES)]}
    path.write_text(yaml.safe_dump({**base, **settings}))
    path.chmod(0o644)
    return compile_config(str(path))[0]


def test_config_defaults_and_nvidias_mode_names(tmp_path):
    config = _compile(tmp_path)
    assert config["cuda"] == {"compat": "ldconfig", "require": True, "brand": None}
    assert config["profile"]["cuda"] == {"compat_dir": COMPAT, "library": "libcuda.so"}
    for mode in ("ldconfig", "hook", "disabled"):
        assert _compile(tmp_path, cuda={"compat": mode})["cuda"]["compat"] == mode
    assert _compile(tmp_path, profile="synthetic")["profile"]["cuda"] is None


def test_config_refuses_the_mount_mode_and_bad_values(tmp_path):
    with pytest.raises(OcihookError, match="cuda.compat: mount .* never mounts an image"):
        _compile(tmp_path, cuda={"compat": "mount"})
    with pytest.raises(OcihookError, match="cuda.compat"):
        _compile(tmp_path, cuda={"compat": "sometimes"})
    with pytest.raises(OcihookError, match="cuda.brand"):
        _compile(tmp_path, cuda={"brand": "Tesla V100"})
    with pytest.raises(OcihookError, match="cuda.require"):
        _compile(tmp_path, cuda={"require": "yes"})
