"""The native ld.so.cache writer (ld/native.py, with ld/cachefile.py's writer) against glibc itself.

Caches it writes are read back by glibc's own `ldconfig -p` and compared, entry for entry
and in order, with the cache the real `ldconfig -X` builds for the same libraries (real ELF
files built with gcc and binutils); the dynamic loader finds an injected library through
the merged cache in a chroot and in a real podman + runc container; hostile caches make
the hook fall back to the sandboxed ldconfig (or fail with one line), leaving nothing."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from ocihook.apply import ldcache
from ocihook.apply.writer import ContainerWriter
from ocihook.errors import OcihookError
from ocihook.ld import cachefile, native
from ocihook.ld.elf import open_static_executable
from ocihook.plan.model import Mount, Plan
from tests.conftest import base_config
from tests.support import hosts, images, sandbox, synthetic

SETTINGS = {"path": "/sbin/ldconfig", "writer": "native"}
CODE = "int f(void) { return 1; }\n"


def _gcc_lib(path: Path, soname: str | None, work: Path) -> None:
    source = work / "f.c"
    source.write_text(CODE)
    path.parent.mkdir(parents=True, exist_ok=True)
    args = ["gcc", "-shared", "-fPIC", "-o", str(path), str(source)]
    subprocess.run(args + ([f"-Wl,-soname,{soname}"] if soname else []), check=True)


def _i386_lib(path: Path, soname: str, work: Path, needs_libc: bool) -> None:
    synthetic.i386_library(path, soname, work, needs_libc)


def _inject(root: Path, directory: str, real: Path, soname: str | None = None) -> str:
    """Put a library file into the image as the hook does (file + soname link)."""
    target = root / directory.lstrip("/") / real.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(real, target)
    if soname and soname != real.name:
        os.symlink(real.name, target.parent / soname)
    return f"{directory}/{real.name}"


def _entries(cache: Path) -> list[str]:
    """glibc's own listing of a cache: `ldconfig -p` lines, without the generator line."""
    out = subprocess.run(
        ["ldconfig", "-p", "-C", str(cache)], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in out.splitlines() if line.startswith("\t")]


def _update(root: Path, ld_dirs, targets, shared=frozenset(), settings=SETTINGS, label=None):
    """ldcache.update on a plain directory as the rootfs, for a plan whose libraries are
    `targets` in `ld_dirs`, written the `settings` way; (how, debug lines)."""
    lines: list[str] = []
    mounts = [Mount(t, t, t, "library") for t in targets]
    plan = Plan(
        profile="t",
        source_root="/",
        device_root="/",
        request="all",
        lib_dir=ld_dirs[0] if ld_dirs else "/usr/lib64",
        mounts=mounts,
        ld_dirs=list(ld_dirs),
        ldconfig=True,
        ld_writer=settings["writer"],
    )
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    writer = ContainerWriter(root_fd, label, 0, 0, shared)
    ldconfig_fd = open_static_executable("/sbin/ldconfig", "ldconfig")
    try:
        how = ldcache.update(
            writer, ldconfig_fd, root_fd, str(root), plan, settings["path"], 0, 0, lines.append
        )
    finally:
        writer.close()
        os.close(ldconfig_fd)
        os.close(root_fd)
    return how, lines


@pytest.fixture
def image(tmp_path) -> Path:
    """An image tree with its own libraries in /usr/lib64 (listed in ld.so.conf) and its
    cache built by glibc's ldconfig."""
    root = tmp_path / "root"
    work = tmp_path / "work"
    work.mkdir()
    for soname in ("libimage.so.1", "libdup.so.1", "libfoo.so.9", "libfoo.so.11"):
        _gcc_lib(root / "usr/lib64" / soname, soname, work)
    (root / "etc").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text("/usr/lib64\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True)
    return root


def _driver(tmp_path: Path, root: Path) -> tuple[list[str], list[str]]:
    """Inject real libraries into two dirs: digit runs, digits against letters, no soname,
    no libc, the same soname in both dirs and in the image, 32-bit ones with and without
    libc. Returns (ld_dirs, injected paths)."""
    work = tmp_path / "work"
    built = tmp_path / "built"
    targets = []
    for soname in ("libfoo.so.10", "libfoo.so.9", "lib1.so.1", "libA.so.1", "libdup.so.1"):
        _gcc_lib(built / "a" / f"{soname}.0", soname, work)
        targets.append(_inject(root, "/opt/a", built / "a" / f"{soname}.0", soname))
    _gcc_lib(built / "a" / "libplain.so.2", None, work)  # no DT_SONAME: the file name
    targets.append(_inject(root, "/opt/a", built / "a" / "libplain.so.2"))
    _gcc_lib(built / "a" / "notalib.so.1", "libnot.so.1", work)  # ldconfig skips the name
    targets.append(_inject(root, "/opt/a", built / "a" / "notalib.so.1"))
    _gcc_lib(built / "b" / "libdup.so.1.0", "libdup.so.1", work)
    targets.append(_inject(root, "/opt/b", built / "b" / "libdup.so.1.0", "libdup.so.1"))
    _i386_lib(built / "b" / "lib32c.so.1.0", "lib32c.so.1", work, needs_libc=True)
    targets.append(_inject(root, "/opt/b", built / "b" / "lib32c.so.1.0", "lib32c.so.1"))
    _i386_lib(built / "b" / "lib32e.so.1.0", "lib32e.so.1", work, needs_libc=False)
    targets.append(_inject(root, "/opt/b", built / "b" / "lib32e.so.1.0", "lib32e.so.1"))
    return ["/opt/a", "/opt/b"], targets


@pytest.mark.root
@pytest.mark.parametrize("fmt", ["new", "compat"])
def test_merged_cache_lists_what_ldconfig_lists(fmt, image, tmp_path):
    """The merged cache, read by glibc's ldconfig -p, equals the cache glibc's ldconfig -X
    builds for the same image and libraries: same entries, same order, same flags."""
    subprocess.run(["ldconfig", "-r", str(image), "-c", fmt], check=True)
    ld_dirs, targets = _driver(tmp_path, image)
    reference = image / "ref.cache"
    subprocess.run(["ldconfig", "-X", "-r", str(image), "-C", "/ref.cache", *ld_dirs], check=True)
    how, lines = _update(image, ld_dirs, targets)
    assert how == "native", lines
    ours = _entries(image / "etc/ld.so.cache")
    assert ours == _entries(reference)
    # the cases the driver was built for, as glibc reads them back
    listed = [line.split(" => ")[1] for line in ours]
    assert listed.index("/opt/a/lib1.so.1") < listed.index("/opt/a/libA.so.1")
    assert listed.index("/opt/a/libfoo.so.10") < listed.index("/opt/a/libfoo.so.9")
    assert listed.index("/opt/a/libdup.so.1") < listed.index("/opt/b/libdup.so.1")
    assert listed.index("/opt/b/libdup.so.1") < listed.index("/usr/lib64/libdup.so.1")
    assert "\tlib32c.so.1 (libc6) => /opt/b/lib32c.so.1" in ours
    assert "\tlib32e.so.1 (ELF) => /opt/b/lib32e.so.1" in ours
    assert "\tlibplain.so.2 (libc6,x86-64) => /opt/a/libplain.so.2" in ours
    assert not any("libnot" in line for line in ours)
    data = (image / "etc/ld.so.cache").read_bytes()
    assert data.startswith(cachefile.NEW_MAGIC)  # new format only, whatever the image had
    st = os.stat(image / "etc/ld.so.cache")
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o644, 0, 0)
    assert sorted(os.listdir(image / "etc")) == ["ld.so.cache", "ld.so.conf"]
    out = subprocess.run(
        ["ldconfig", "-p", "-C", str(image / "etc/ld.so.cache")], capture_output=True, text=True
    ).stdout
    assert out.splitlines()[-1] == "Cache generated by: " + native.GENERATOR.decode()
    # the next start of the same container merges into our own cache: the same result
    assert _update(image, ld_dirs, targets)[0] == "native"
    assert _entries(image / "etc/ld.so.cache") == ours


@pytest.mark.parametrize(
    "patch, why",
    [
        ({4: 3}, "not a little-endian ELF file"),  # EI_CLASS 3
        ({16: 2}, "not a shared object"),  # ET_EXEC
        ({0x36: 0xFF}, "malformed program headers"),  # e_phentsize
        ({0x38: 0, 0x39: 0}, "malformed program headers"),  # no program headers
        ({0x20: 0xFF, 0x21: 0xFF, 0x22: 0xFF}, "truncated program headers"),  # e_phoff far
        ({18: 40}, "ELF machine 40"),  # EM_ARM
        ({0x27: 0xFF}, "an offset outside the file"),  # e_phoff past 2**63
    ],
)
def test_hostile_library_elf_is_a_reason(patch, why, tmp_path):
    """A library whose ELF header lies: the reason, not an exception or a wild read."""
    lib = tmp_path / "lib" / "libx.so.1"
    _gcc_lib(lib, "libx.so.1", tmp_path)
    data = bytearray(lib.read_bytes())
    for offset, value in patch.items():
        data[offset] = value
    lib.write_bytes(bytes(data))
    fd = os.open(lib.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        assert native._entry_at(fd, lib.name) == why
    finally:
        os.close(fd)


def test_sort_is_glibcs_order():
    names = [b"libA.so.1", b"lib1.so.1", b"libfoo.so.9", b"libfoo.so.10", b"libfoo.so", b"libb"]
    entries = [(n, b"/x/" + n, 0x0303, 0) for n in names]
    ordered = [e[0] for e in cachefile.sort_entries(entries)]
    assert ordered == [
        b"lib1.so.1",
        b"libfoo.so.10",
        b"libfoo.so.9",
        b"libfoo.so",
        b"libb",
        b"libA.so.1",
    ]
    # equal name: flags descending, then the earlier entry first
    same = [(b"l", b"/1", 0x0003, 0), (b"l", b"/2", 0x0303, 0), (b"l", b"/3", 0x0303, 0)]
    assert [e[1] for e in cachefile.sort_entries(same)] == [b"/2", b"/3", b"/1"]


def _libcmp(a: bytes, b: bytes) -> int:
    """glibc's _dl_cache_libcmp, character by character as the C code walks (ASCII)."""
    i = j = 0
    while i < len(a):
        if a[i : i + 1].isdigit():
            if j < len(b) and b[j : j + 1].isdigit():
                start = i
                while i < len(a) and a[i : i + 1].isdigit():
                    i += 1
                va = int(a[start:i])
                start = j
                while j < len(b) and b[j : j + 1].isdigit():
                    j += 1
                vb = int(b[start:j])
                if va != vb:
                    return va - vb
            else:
                return 1
        elif j < len(b) and b[j : j + 1].isdigit():
            return -1
        elif j >= len(b) or a[i] != b[j]:
            return a[i] - (b[j] if j < len(b) else 0)
        else:
            i += 1
            j += 1
    return 0 - (b[j] if j < len(b) else 0)


def test_sort_key_agrees_with_libcmp_on_random_names():
    import functools
    import random

    rng = random.Random(15)
    alphabet = b"ab.-_A0123456789"
    names = {bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) for _ in range(3000)}
    names = sorted(names)
    by_key = sorted(names, key=cachefile.libcmp_key)
    by_cmp = sorted(names, key=functools.cmp_to_key(_libcmp))
    assert by_key == by_cmp
    for a, b in zip(by_key, by_key[1:]):
        sign = (_libcmp(a, b) > 0) - (_libcmp(a, b) < 0)
        assert sign == (cachefile.libcmp_key(a) > cachefile.libcmp_key(b)) - (
            cachefile.libcmp_key(a) < cachefile.libcmp_key(b)
        )


def test_an_image_entry_with_our_path_is_replaced():
    image = [(b"libq.so.1", b"/opt/a/libq.so.1", 0x0003, 0), (b"libz.so.1", b"/z", 0x0303, 0)]
    ours = [(b"libq.so.1", b"/opt/a/libq.so.1", 0x0303, 0)]
    assert native.merge(image, ours) == [image[1], ours[0]]  # libz before libq


@pytest.mark.root
def test_loader_finds_the_injected_library_through_the_merged_cache(tmp_path):
    """In a chroot of a glibc image: synth-smi links libsynth.so.1, injected into a dir the
    loader does not search and ld.so.conf does not list; it runs only after the write."""
    root = images.glibc_rootfs(tmp_path / "root", "rhel")
    driver = synthetic.build_driver(tmp_path / "drv", layout="rhel")
    real = driver / f"usr/lib64/libsynth.so.{synthetic.VERSION}"
    target = _inject(root, "/opt/drv/lib", real, "libsynth.so.1")
    shutil.copy2(driver / "usr/bin/synth-smi", root / "usr/bin/synth-smi")

    def smi() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["chroot", str(root), "/usr/bin/synth-smi"], capture_output=True, text=True
        )

    before = smi()
    assert before.returncode != 0
    assert "libsynth.so.1: cannot open shared object file" in before.stderr
    how, lines = _update(root, ["/opt/drv/lib"], [target])
    assert (how, lines) == ("native", ["ld cache: written natively for /opt/drv/lib"])
    after = smi()
    assert "loaded from /opt/drv/lib/libsynth.so.1" in after.stdout, after.stderr
    assert (after.returncode, after.stdout.splitlines()[-1]) == (2, "synth-smi: no synth devices")


def _cache_bytes(entries, **header) -> bytes:
    """A well-formed new-format cache of `entries` (key, value, flags, osversion, hwcap)."""
    body = cachefile.write_new([(k, v, f, o) for k, v, f, o, _ in entries])
    data = bytearray(body)
    for i, entry in enumerate(entries):
        struct.pack_into("<Q", data, 48 + 24 * i + 16, entry[4])
    for field, (offset, fmt) in {
        "nlibs": (20, "<I"),
        "flags": (28, "<B"),
        "ext": (32, "<I"),
    }.items():
        if field in header:
            struct.pack_into(fmt, data, offset, header[field])
    return bytes(data)


GOOD = [(b"libimage.so.1", b"/usr/lib64/libimage.so.1", 0x0303, 0, 0)]
HOSTILE = {
    "truncated": _cache_bytes(GOOD)[:60],
    "nlibs past the file": _cache_bytes(GOOD, nlibs=0xFFFFFFFF),
    "string offset outside": _cache_bytes(GOOD)[:48]
    + struct.pack("<iIIIQ", 0x0303, 1 << 30, 1 << 30, 0, 0),
    "glibc-hwcaps entry": _cache_bytes([GOOD[0][:4] + (1 << 62,)]),
    "legacy hwcap entry": _cache_bytes([GOOD[0][:4] + (1 << 3,)]),
    "big-endian flag": _cache_bytes(GOOD, flags=3),
    "extension offset outside": _cache_bytes(GOOD, ext=1 << 20),
    "extension with a wrong magic": _cache_bytes(GOOD, ext=48),
    "unknown magic": b"garbage" * 10,
    "non-ASCII name": _cache_bytes([(b"lib\xe9.so.1", b"/x/lib\xe9.so.1", 0x0303, 0, 0)]),
    "digit run past a C int": _cache_bytes([(b"libx.so.99999999999", b"/x", 0x0303, 0, 0)]),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_cache_is_not_exact(name):
    with pytest.raises(cachefile.NotExact):
        cachefile.sort_entries(cachefile.parse_for_merge(HOSTILE[name]))


def test_old_format_only_is_not_exact(tmp_path):
    root = tmp_path / "r"
    (root / "etc").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text("")
    subprocess.run(["ldconfig", "-r", str(root), "-c", "old"], check=True)
    with pytest.raises(cachefile.NotExact, match="old format only"):
        cachefile.parse_for_merge((root / "etc/ld.so.cache").read_bytes())


def _glibc_image(tmp_path: Path) -> tuple[Path, list[str]]:
    """A glibc image with the synthetic driver injected into /usr/lib64 (as the hook does)."""
    root = images.glibc_rootfs(tmp_path / "root", "rhel")
    driver = synthetic.build_driver(tmp_path / "drv", layout="rhel")
    real = driver / f"usr/lib64/libsynth.so.{synthetic.VERSION}"
    return root, [_inject(root, "/usr/lib64", real, "libsynth.so.1")]


def _fallback_cases() -> dict:
    def write(data: bytes):
        return lambda cache: cache.write_bytes(data)

    cases = {name: write(data) for name, data in HOSTILE.items()}
    cases["missing"] = lambda cache: cache.unlink()
    cases["too big (sparse)"] = lambda cache: os.truncate(cache, cachefile.MAX_BYTES + 1)
    cases["fifo"] = lambda cache: (cache.unlink(), os.mkfifo(cache))
    cases["symlink to the host's"] = lambda cache: (
        cache.unlink(),
        os.symlink("/proc/1/root/etc/ld.so.cache", cache),
    )
    return cases


FALLBACKS = _fallback_cases()
REASONS = {
    "missing": "the image has no /etc/ld.so.cache",
    "too big (sparse)": "/etc/ld.so.cache is larger than 64 MiB",
    "fifo": "/etc/ld.so.cache is not a regular file",
    "symlink to the host's": "/etc/ld.so.cache is a symlink",
    "unknown magic": "the image's /etc/ld.so.cache: not an ld.so.cache (unknown magic)",
    "glibc-hwcaps entry": "the image's /etc/ld.so.cache: glibc-hwcaps entries",
}


@pytest.mark.root
@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_hostile_or_unusable_cache_falls_back_to_ldconfig(name, tmp_path):
    """Each case takes the sandboxed ldconfig path (the debug line says which and why), the
    host's cache is untouched, no temporary file is left, and the library is in the
    resulting cache (ldconfig's)."""
    host_cache = Path("/etc/ld.so.cache").read_bytes()
    root, targets = _glibc_image(tmp_path)
    FALLBACKS[name](root / "etc/ld.so.cache")
    how, lines = _update(root, ["/usr/lib64"], targets)
    assert how == "ldconfig"
    assert lines[0].startswith("ld cache: sandboxed ldconfig (")
    if name in REASONS:
        assert lines[0] == f"ld cache: sandboxed ldconfig ({REASONS[name]})"
    assert Path("/etc/ld.so.cache").read_bytes() == host_cache
    assert not [n for n in os.listdir(root / "etc") if "ocihook" in n or n.endswith("~")]
    entries = cachefile.parse((root / "etc/ld.so.cache").read_bytes())
    assert ("libsynth.so.1", "/usr/lib64/libsynth.so.1", hosts.X86_64) in entries


@pytest.mark.root
def test_unreadable_injected_library_falls_back(tmp_path):
    """A library whose ELF header cannot be read (here: a truncated file) -> ldconfig."""
    root, targets = _glibc_image(tmp_path)
    (root / "usr/lib64/libbroken.so.1").write_bytes(b"\x7fELF\x02\x01\x01")
    how, lines = _update(root, ["/usr/lib64"], targets + ["/usr/lib64/libbroken.so.1"])
    assert how == "ldconfig"
    assert lines == [
        "ld cache: sandboxed ldconfig (/usr/lib64/libbroken.so.1: not a little-endian ELF file)"
    ]


@pytest.mark.root
def test_config_switch_forces_ldconfig(tmp_path):
    root, targets = _glibc_image(tmp_path)
    how, lines = _update(root, ["/usr/lib64"], targets, settings={**SETTINGS, "writer": "ldconfig"})
    assert (how, lines) == (
        "ldconfig",
        ["ld cache: sandboxed ldconfig (ldconfig.writer is ldconfig)"],
    )


@pytest.mark.root
def test_etc_on_a_host_shared_file_system_is_one_error(tmp_path):
    """/etc of the image is a file system the host mounts (a volume): the native writer
    creates nothing there and says so; the volume is unchanged (no cache, no temp file)."""
    root, targets = _glibc_image(tmp_path)
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "ld.so.cache").write_bytes((root / "etc/ld.so.cache").read_bytes())
    before = sorted(os.listdir(volume)), (volume / "ld.so.cache").read_bytes()

    def child() -> None:
        subprocess.run(["mount", "--bind", str(volume), str(root / "etc")], check=True)
        shared = frozenset({os.stat(volume).st_dev})
        with pytest.raises(OcihookError, match="shared with the host"):
            _update(root, ["/usr/lib64"], targets, shared=shared)

    sandbox.in_private_mount_ns(child)
    assert (sorted(os.listdir(volume)), (volume / "ld.so.cache").read_bytes()) == before


def test_label_is_set_on_the_written_cache(tmp_path):
    """The cache gets the file label like everything the hook creates (xattr stand-in: no
    SELinux LSM here; the enforcing guest checks the real label)."""
    label = "system_u:object_r:container_file_t:s0:c1,c2"
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    hosts.write_ld_cache(root / "etc/ld.so.cache", [("libx.so.1", "/x/libx.so.1", hosts.X86_64)])
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    etc_fd = os.open(root / "etc", os.O_PATH | os.O_DIRECTORY)
    try:
        writer = ContainerWriter(root_fd, label, os.getuid(), os.getgid())
        writer.replace_file(etc_fd, "/etc/ld.so.cache", b"data")
    finally:
        os.close(etc_fd)
        os.close(root_fd)
    got = os.getxattr(root / "etc/ld.so.cache", "security.selinux").rstrip(b"\0").decode()
    assert got == label
    assert (root / "etc/ld.so.cache").read_bytes() == b"data"
    assert os.listdir(root / "etc") == ["ld.so.cache"]


def test_rhel_image_in_podman_uses_the_native_writer(hook_setup, image_rhel):
    """Real podman + runc: the default config writes the cache natively (record and debug
    log say so) and synth-smi finds libsynth.so.1 in /usr/lib64 only through that cache."""
    result = hook_setup.run(image_rhel, ["/usr/bin/synth-smi"], devices="0")
    assert result.returncode == 0, result.stderr
    assert "loaded from /usr/lib64/libsynth.so.1" in result.stdout
    (record,) = hook_setup.records()
    assert json.loads(record.read_text())["ld_cache"] == "native"
    assert re.search(
        r"ld cache: written natively for /usr/lib64$", hook_setup.log.read_text(), re.M
    )


def test_podman_image_without_a_cache_falls_back(hook_setup, synth_root, tmp_path):
    """An image without /etc/ld.so.cache: the record says ldconfig ran, and it worked."""
    root = images.glibc_rootfs(tmp_path / "nocache", "rhel")
    (root / "etc/ld.so.cache").unlink()
    image = images.import_image(root, "ocihook-test-ldnative-nocache")
    result = hook_setup.run(image, ["/usr/bin/synth-smi"], devices="0")
    assert result.returncode == 0, result.stderr
    (record,) = hook_setup.records()
    assert json.loads(record.read_text())["ld_cache"] == "ldconfig"
    assert "ld cache: sandboxed ldconfig (the image has no /etc/ld.so.cache)" in (
        hook_setup.log.read_text()
    )


def test_podman_config_switch(hook_setup, synth_root, image_rhel):
    hook_setup.write_config(
        **base_config(hook_setup.dir, synth_root, ldconfig={"writer": "ldconfig"})
    )
    result = hook_setup.run(image_rhel, ["/usr/bin/synth-smi"], devices="0")
    assert result.returncode == 0, result.stderr
    (record,) = hook_setup.records()
    assert json.loads(record.read_text())["ld_cache"] == "ldconfig"


def test_podman_etc_volume_is_one_error_and_the_volume_is_unchanged(
    hook_setup, image_rhel, tmp_path
):
    """`-v DIR:/etc`: the container's /etc is a host directory. The hook creates nothing
    there (no cache, no temporary file), fails the start with one line, and rolls back."""
    volume = tmp_path / "etc-volume"
    volume.mkdir()
    hosts.write_ld_cache(volume / "ld.so.cache", [("libx.so.1", "/x/libx.so.1", hosts.X86_64)])
    for name in ("hosts", "resolv.conf", "hostname", "passwd", "group"):
        (volume / name).write_text("")  # runc's mount points: present, so nobody creates them
    before = {p.name: p.read_bytes() for p in volume.iterdir()}
    result = hook_setup.run(image_rhel, ["/bin/true"], devices="0", extra=["-v", f"{volume}:/etc"])
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "ocihook:" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].endswith(
        "ocihook: container /etc/ld.so.cache: its directory is on a file system shared with the "
        "host (a volume or host bind mount); not creating anything there"
    ), lines[0]
    assert {p.name: p.read_bytes() for p in volume.iterdir()} == before
