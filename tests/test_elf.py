"""The one ELF reader (ocihook/ld/elf.py) against binutils and glibc, and the fake hosts' stand-in
libraries (tests/support/elfgen.py) against glibc's own ldconfig: what the hook reads of a
library is what readelf and ldconfig read of it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ocihook.discover.build import build_plan
from ocihook.discover.roots import Roots
from ocihook.ld import cachefile, elf
from ocihook.linux import securepath
from ocihook.request.parse import parse_request
from tests.support import elfgen, hosts, synthetic
from tests.test_driver_files import compiled, legacy, sources

CODE = "int f(void) { return 1; }\n"


def _readelf(path: Path) -> tuple[str | None, list[str]]:
    """(DT_SONAME, DT_NEEDED names) as binutils' readelf prints them."""
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout
    soname, needed = None, []
    for line in out.splitlines():
        if "(SONAME)" in line:
            soname = line.split("[", 1)[1].rstrip("]")
        elif "(NEEDED)" in line:
            needed.append(line.split("[", 1)[1].rstrip("]"))
    return soname, needed


def _read(path: Path) -> elf.Library | str:
    fd = os.open(path, os.O_RDONLY)
    try:
        return elf.read_fd(fd, needed_for=(elfgen.EM_386, elfgen.EM_X86_64))
    finally:
        os.close(fd)


@pytest.mark.parametrize("soname", ["libx.so.1", None])
def test_gcc_library_read_as_readelf_reads_it(soname, tmp_path):
    (tmp_path / "f.c").write_text(CODE)
    lib = tmp_path / "libx.so.1.2"
    args = ["gcc", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "f.c"), "-lm"]
    subprocess.run(args + ([f"-Wl,-soname,{soname}"] if soname else []), check=True)
    found = _read(lib)
    want_soname, want_needed = _readelf(lib)
    assert found.soname == (want_soname.encode() if want_soname else None)
    assert [n.decode() for n in found.needed] == want_needed
    assert (found.elfclass, found.machine, found.interp) == (2, elfgen.EM_X86_64, False)


def test_i386_library_read_as_readelf_reads_it(tmp_path):
    lib = tmp_path / "lib32.so.1.0"
    synthetic.i386_library(lib, "lib32.so.1", tmp_path, needs_libc=True)
    found = _read(lib)
    assert (found.elfclass, found.machine) == (1, elfgen.EM_386)
    assert (found.soname.decode(), [n.decode() for n in found.needed]) == _readelf(lib)


@pytest.mark.parametrize("bits", [64, 32])
@pytest.mark.parametrize("soname", ["libnvidia-ml.so.1", None])
def test_stand_ins_read_as_readelf_reads_them(bits, soname, tmp_path):
    lib = tmp_path / "libnvidia-ml.so.550.54.14"
    needed = ("libc.so.6",) if bits == 32 else ()
    lib.write_bytes(elfgen.shared_object(soname, bits, needed, "note"))
    found = _read(lib)
    assert found.elfclass == (2 if bits == 64 else 1)
    assert (found.soname.decode() if found.soname else None, found.needed) == (
        soname,
        [n.encode() for n in needed],
    )
    assert _readelf(lib) == (soname, list(needed))
    fd = os.open(lib, os.O_RDONLY)
    try:
        assert elf.elf_class(fd) == found.elfclass
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("soname", "ok"),
    [(b"libx.so.1", True), (b"", False), (b"a/b", False), (b"..", False), (b"x\x01", False),
     (b"\xc3\xa9", False), (b"x" * 256, False)],
)  # fmt: skip
def test_a_soname_that_is_a_file_name(soname, ok):
    assert elf.is_file_name(soname) is ok


@pytest.mark.root
def test_stand_ins_are_libraries_to_glibcs_ldconfig(tmp_path):
    """glibc's ldconfig (in a chroot: root) reads the stand-ins' class and DT_SONAME, makes
    their soname links, and lists a tls/ copy with the tls hwcap bit ahead of the other,
    as tests/support/hosts.py writes the fake hosts' caches (TLS_HWCAP)."""
    root = tmp_path / "root"
    lib = root / "usr/lib/nvidia-340"
    (lib / "tls").mkdir(parents=True)
    (root / "usr/lib32").mkdir(parents=True)
    (lib / "libnvidia-ml.so.340.108").write_bytes(hosts.library("libnvidia-ml.so.1"))
    (root / "usr/lib32/libnvidia-ml.so.340.108").write_bytes(hosts.library("libnvidia-ml.so.1", 32))
    for where in (lib, lib / "tls"):
        (where / "libnvidia-tls.so.340.108").write_bytes(hosts.library("libnvidia-tls.so.340.108"))
    (root / "etc").mkdir()
    (root / "etc/ld.so.conf").write_text("/usr/lib/nvidia-340\n/usr/lib32\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True)
    assert os.readlink(lib / "libnvidia-ml.so.1") == "libnvidia-ml.so.340.108"
    fd = securepath.open_dir(str(root))
    try:
        entries = cachefile.read(fd, "/etc/ld.so.cache", "cache")
    finally:
        os.close(fd)
    assert entries == [
        ("libnvidia-tls.so.340.108", "/usr/lib/nvidia-340/tls/libnvidia-tls.so.340.108", 0x303),
        ("libnvidia-tls.so.340.108", "/usr/lib/nvidia-340/libnvidia-tls.so.340.108", 0x303),
        ("libnvidia-ml.so.1", "/usr/lib/nvidia-340/libnvidia-ml.so.1", hosts.X86_64),
        ("libnvidia-ml.so.1", "/usr/lib32/libnvidia-ml.so.1", hosts.I386),
    ]
    raw = (root / "etc/ld.so.cache").read_bytes()
    assert hosts.TLS_HWCAP.to_bytes(8, "little") in raw


@pytest.mark.root
def test_old_driver_with_the_cache_glibcs_ldconfig_writes(tmp_path):
    """The nvidia-340 tree with its ld cache rebuilt by this machine's ldconfig from its own
    ld.so.conf (not the fake writer): the tls/ copy, both classes in their dirs."""
    root = legacy(tmp_path / "host", "none")
    subprocess.run(["ldconfig", "-r", str(root)], check=True)
    config = compiled(root, tmp_path)
    request = parse_request("all", "test")
    request.capabilities = ["utility", "graphics", "compat32"]
    with Roots(str(root), str(root)) as roots:
        got = sources(build_plan(config, roots, request, verify=True))
    tls = f"libnvidia-tls.so.{hosts.LEGACY}"
    assert got[f"/usr/lib64/{tls}"] == f"/usr/lib/nvidia-340/tls/{tls}"
    assert got[f"/usr/lib/{tls}"] == f"/usr/lib32/nvidia-340/tls/{tls}"


def test_static_executable_check_as_readelf_tells_it(tmp_path):
    """The host's ldconfig must be a static executable: glibc's is (static-pie), a dynamic
    program (PT_INTERP, readelf's "Requesting program interpreter") is refused, and so is
    what is no 64-bit ELF at all."""

    def problem(path) -> str | None:
        fd = os.open(path, os.O_RDONLY)
        try:
            return elf.static_executable_problem(fd)
        finally:
            os.close(fd)

    def interpreter(path) -> bool:
        out = subprocess.run(["readelf", "-l", str(path)], capture_output=True, text=True)
        return "Requesting program interpreter" in out.stdout

    assert not interpreter("/sbin/ldconfig") and problem("/sbin/ldconfig") is None
    dynamic = os.path.realpath("/bin/sh")
    assert interpreter(dynamic)
    assert problem(dynamic) == "dynamically linked (it would load the container's ld.so)"
    script = tmp_path / "ldconfig"
    script.write_text("#!/bin/sh\n")
    assert problem(script) == "not an ELF file"
    assert problem(tmp_path) == "not a regular file"
    with pytest.raises(Exception) as error:
        elf.open_static_executable(str(script), "ldconfig")
    assert str(error.value) == (
        f"ldconfig {script}: not an ELF file; it must be a static executable"
    )
    with pytest.raises(Exception) as error:
        elf.open_static_executable(str(tmp_path / "none"), "ldconfig")
    assert str(error.value) == f"ldconfig {tmp_path / 'none'}: does not exist"


# -- note sections (the CUDA compat library's fwd_compatibility note) --------------------------

NOTE = b".note.cuda.fwd_compatibility"


def _note(path: Path, name: bytes = NOTE):
    fd = os.open(path, os.O_RDONLY)
    try:
        return elf.note_section(fd, name)
    finally:
        os.close(fd)


def test_a_note_read_as_readelf_reads_it(tmp_path):
    """A gcc-built library with a note section (as cuda_images builds the stand-in compat
    libcuda): the bytes elf.py reads are those readelf -x dumps of it."""
    from tests.support import cuda_images

    note = cuda_images.fwd_note([535, 550, 575])
    path = cuda_images.standin_libcuda(tmp_path / "libcuda.so.575.57.08", "x", tmp_path, note)
    data, align = _note(path)
    assert data == note and align == 4
    dump = subprocess.run(
        ["readelf", "-x", NOTE.decode(), str(path)], capture_output=True, text=True
    ).stdout
    words = [w for line in dump.splitlines() if line.startswith("  0x") for w in line.split()[1:5]]
    assert bytes.fromhex("".join(w for w in words if len(w) <= 8)).startswith(note[:16])
    assert _note(path, b".note.none") is None
    bits32 = tmp_path / "lib32.so"
    bits32.write_bytes(
        elfgen.shared_object("lib32.so.1", 32, sections=((NOTE.decode(), 7, note, 4),))
    )
    assert _note(bits32) == (note, 4)


def test_a_section_of_another_type_is_no_note(tmp_path):
    path = tmp_path / "lib.so"
    path.write_bytes(elfgen.shared_object("lib.so.1", sections=((NOTE.decode(), 1, b"x" * 16, 4),)))
    assert _note(path) is None


def _set(offset: int, size: int, value: int):
    """A patch of the ELF header: `size` bytes at `offset` set to `value`."""
    return lambda b: b[:offset] + value.to_bytes(size, "little") + b[offset + size :]


@pytest.mark.parametrize(
    "patch, reason",
    [
        (_set(0x3C, 2, 5000), "malformed section headers"),  # e_shnum past the bound
        (_set(0x3E, 2, 99), "malformed section headers"),  # e_shstrndx past e_shnum
        (_set(0x28, 8, 1 << 40), "truncated section headers"),  # e_shoff past the end
        (_set(0x28, 8, 1 << 63), "an offset outside the file"),  # past what pread takes
    ],
)
def test_hostile_section_headers_are_reasons(tmp_path, patch, reason):
    path = tmp_path / "lib.so"
    good = elfgen.shared_object("lib.so.1", sections=((NOTE.decode(), 7, b"\0" * 16, 4),))
    path.write_bytes(patch(good))
    assert _note(path) == reason


def test_a_note_past_the_bound_is_a_reason(tmp_path):
    path = tmp_path / "lib.so"
    path.write_bytes(
        elfgen.shared_object("lib.so.1", sections=((NOTE.decode(), 7, b"\0" * 5000, 4),))
    )
    assert _note(path) == f"section {NOTE.decode()}: larger than 4096 bytes"
