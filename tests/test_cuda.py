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
from ocihook.ld import cachefile, elf, native
from ocihook.linux import securepath
from ocihook.plan import cuda
from tests.support import cuda_images, elfgen, hostile, hosts, synthetic

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


def _image(
    root: Path,
    compat: str | None = "550.54.15",
    soname: str = "libcuda.so.1",
    note: bytes | None = None,
) -> Path:
    """An image's compat dir with the library of `compat` (`note`: its fwd_compatibility
    note's contents, tests/support/cuda_images.fwd_note)."""
    directory = root / COMPAT.lstrip("/")
    directory.mkdir(parents=True)
    if compat:
        sections = ((cuda_images.NOTE_SECTION, elfgen.SHT_NOTE, note, 4),) if note else ()
        library = elfgen.shared_object(soname, 64, note="compat", sections=sections)
        (directory / f"libcuda.so.{compat}").write_bytes(library)
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
        "rule": "branch",
        "note": None,
        "reason": (
            "libcuda.so.550.54.15 of a newer branch than driver 535.104.05 (no forward "
            "compatibility note)"
        ),
    }


@pytest.mark.parametrize("compat", ["530.30.02", "535.129.03", "535.54.03"])
def test_without_a_note_the_same_or_an_older_branch_leaves_the_hosts(tmp_path, compat):
    """Without a note NVIDIA's hook compares the majors (and libnvidia-container's legacy
    filter always does): the same branch's compat package is not used."""
    _image(tmp_path, compat)
    found = _probe(tmp_path)
    assert not found["use"] and found["version"] == compat and found["rule"] == "branch"
    assert found["reason"] == (
        f"libcuda.so.{compat} not of a newer branch than driver {HOST} (no forward "
        "compatibility note)"
    )


# The note of a cuda-compat 12.9 libcuda (575.57.08): the branches it serves.
R575_BRANCHES = [535, 550, 560, 565, 570, 575]


@pytest.mark.parametrize(
    "host, use, words",
    [
        ("575.51.03", True, "newer than driver 575.51.03, whose branch its note lists"),
        ("575.10.10", True, "whose branch its note lists"),
        ("570.211.01", True, "whose branch its note lists"),
        ("535.104.05", True, "whose branch its note lists"),
        ("470.256.02", False, "its note lists driver branches 535, 550, 560, 565, 570, 575, "),
        ("590.44.01", False, "not the host's 590 (driver 590.44.01)"),
        ("575.57.08", False, "not newer than driver 575.57.08 (its note lists 575)"),
        ("575.99.99", False, "not newer than driver 575.99.99"),
    ],
)
def test_the_libraries_note_decides(tmp_path, host, use, words):
    """NVIDIA's current rule: the host driver's branch must be one the note lists, and the
    library newer than the host driver (the whole version: 575.57.08 on 575.51.03 is used,
    where comparing branches would not; on a 470 host it is not, where it would)."""
    _image(tmp_path, "575.57.08", note=cuda_images.fwd_note(R575_BRANCHES))
    found = _probe(tmp_path, host=host)
    assert found["use"] is use and found["rule"] == "note", found
    assert found["note"] == {"cuda": "12.9", "drivers": R575_BRANCHES}
    assert words in found["reason"], found["reason"]


@pytest.mark.parametrize(
    "note, rule, words",
    [
        # not NVIDIA's, or empty: as no note (the hook's fallback: the branches)
        (cuda_images.fwd_note(R575_BRANCHES, owner=b"GNU"), "branch", "(no forward compat"),
        (b"\0" * 12, "branch", "(no forward compatibility note)"),
        # unreadable: the same fallback, and the plan says why
        (cuda_images.fwd_note(None, desc=b'{"format":1,"CUDA version":"13.2",}\0'), "branch",
         "(its note: invalid JSON)"),
        (cuda_images.fwd_note(None, desc=b'{"driver":"575"}'), "branch",
         "its driver list is no list of whole numbers"),
        (cuda_images.fwd_note(None, desc=b'{"driver":[575.0]}'), "branch", "whole numbers"),
        (cuda_images.fwd_note(None, desc=b"[575]"), "branch", "not a JSON object"),
        (b"\x13\0\0", "branch", "(its note: truncated)"),
        # Jetson's: no driver list, so no host branch is listed
        (cuda_images.fwd_note(None, cuda="13.2"), "note", "lists driver branches none"),
        # Go's JSON matches keys without case; a description cut short by descsz still reads
        (cuda_images.fwd_note(None, desc=b'{"DRIVER":[535],"cuda VERSION":"12.9"}'), "note",
         "whose branch its note lists"),
    ],
)  # fmt: skip
def test_an_unusual_note(tmp_path, note, rule, words):
    _image(tmp_path, "575.57.08", note=note)
    found = _probe(tmp_path)
    assert found["rule"] == rule and words in found["reason"], found
    assert found["use"] is (rule == "branch" or "whose branch" in words)


def test_a_note_past_the_bound_is_not_read(tmp_path):
    _image(tmp_path, "575.57.08", note=cuda_images.fwd_note(R575_BRANCHES, cuda="1" * 5000))
    found = _probe(tmp_path)
    assert found["rule"] == "branch" and "larger than 4096 bytes" in found["reason"], found


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
    monkeypatch.setattr(elf, "MAX_DIR_ENTRIES", 10)
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


# -- against NVIDIA's own enable-cuda-compat hook ---------------------------------------------

COMPARED = [
    # (compat library version, its note, host driver versions)
    ("575.57.08", cuda_images.fwd_note(R575_BRANCHES), ["575.51.03", "575.57.08", "575.99.99",
     "570.211.01", "535.104.05", "470.256.02", "590.44.01", "580.65.06"]),
    ("590.44.01", cuda_images.fwd_note([535, 550, 570, 575, 580, 590], cuda="13.1"),
     ["580.95.05", "590.10.01", "590.44.01", "560.35.03", "470.256.02"]),
    ("550.54.15", None, ["535.104.05", "550.40.07", "545.23.08", "560.28.03"]),
    ("575.57.08", cuda_images.fwd_note(None, desc=b'{"format":1,"CUDA version":"13.2",}\0'),
     ["535.104.05", "575.51.03", "580.65.06"]),
    ("575.57.08", cuda_images.fwd_note(None, cuda="13.2"), ["535.104.05", "570.124.06"]),
    ("575.57.08", cuda_images.fwd_note(R575_BRANCHES, owner=b"Someone Else"),
     ["570.211.01", "575.51.03", "580.65.06"]),
    ("575.57.08", cuda_images.fwd_note(None, desc=b'{"driver":["575"]}'), ["570.211.01"]),
]  # fmt: skip


@pytest.mark.nvidia_toolkit
@pytest.mark.parametrize("compat, note, hosts_", COMPARED)
def test_the_decision_is_nvidias_own(tmp_path, compat, note, hosts_):
    """NVIDIA's nvidia-cdi-hook 1.20 (enable-cuda-compat, built from NVIDIA's source) and the
    probe, on the same image trees: the compat dir is taken exactly where NVIDIA's hook
    adds it to the image's ld.so.conf.d."""
    from tests.support import nvidia_toolkit

    root = tmp_path / "rootfs"
    _image(root, compat, note=note)
    (root / "etc").mkdir()
    for host in hosts_:
        theirs = nvidia_toolkit.enable_cuda_compat(root, host, tmp_path / "ref")
        found = _probe(root, host=host)
        assert found["use"] is (theirs == COMPAT), (host, theirs, found)
