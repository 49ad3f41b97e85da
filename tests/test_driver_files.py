"""Driver libraries as the loader finds them: the tls/ copy of an old driver, the ELF class
deciding between a 32-bit and a 64-bit copy of one name, the source root's ld.so.conf when
it has no ld cache, the MPS pipe dir, and the soname links a container needs (issue 25).

Ordinary tier: trees of stand-in libraries (ELF shared objects with their class and
DT_SONAME, tests/support/elfgen.py, nothing loads them) planned in-process with the nvidia
profile, its devices section left out (no device nodes, no root). The goldens of the same
layouts with device nodes are in tests/test_layouts.py; a real loader and a real container
in tests/test_e2e_sonames.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from ocihook.config.compiled import compile_config
from ocihook.discover.build import build_plan
from ocihook.discover.roots import Roots
from ocihook.errors import OcihookError
from ocihook.ld import conf, native
from ocihook.linux import securepath
from ocihook.request.parse import parse_request
from tests.support import elfgen, hosts, synthetic
from tests.support.hosts import LEGACY, OLD, VERSION, Tree

REPO = Path(__file__).resolve().parent.parent
MULTI = "/usr/lib/x86_64-linux-gnu"


def profile(**changes) -> dict:
    """The shipped nvidia profile without its devices (no nodes to make), with `changes`."""
    document = yaml.safe_load((REPO / "packaging/profiles/nvidia.yaml").read_text())
    document.pop("devices")
    document.update(changes)
    return document


def compiled(root: Path, tmp: Path, prof: dict | None = None, **settings) -> dict:
    path = tmp / "config.yaml"
    document = synthetic.config(root, profile=prof or profile(), **settings)
    path.write_text(yaml.safe_dump(document))
    return compile_config(str(path))[0]


def plan(root: Path, tmp: Path, caps: str = "compute,utility", verify=True, **kwargs):
    config = compiled(root, tmp, **kwargs)
    request = parse_request("all", "test")
    request.capabilities = caps.split(",")
    with Roots(str(root), str(root)) as roots:
        return build_plan(config, roots, request, verify=verify)


def sources(result) -> dict[str, str]:
    """container path -> path inside the source root"""
    return {m.target: m.source for m in result.mounts}


def links(result) -> dict[str, str]:
    return {link.target: link.points_to for link in result.links}


def refusal(root: Path, tmp: Path, **kwargs) -> str:
    with pytest.raises(OcihookError) as error:
        plan(root, tmp, **kwargs)
    message = str(error.value)
    assert "\n" not in message
    return message


# -- an old driver: versioned dirs, tls/ subdirs -----------------------------------------------


def legacy(root: Path, cache: str) -> Path:
    """nvidia-340's layout (hosts.legacy_tls, without nodes); `cache`: "tls-first" as
    glibc 2.23's ldconfig wrote it, "flat-first", "no-tls" (glibc >= 2.37 lists no tls/
    subdir) or "none" (no ld cache: the ld.so.conf.d entry names the dirs)."""
    t = Tree(root)
    lib, lib32 = "/usr/lib/nvidia-340", "/usr/lib32/nvidia-340"
    tls = {"libnvidia-tls.so": ""}
    for directory, bits in ((lib, 64), (lib32, 32)):
        t.libraries(f"{directory}/tls", tls, LEGACY, bits, cache=cache in ("tls-first",),
                    hwcap=hosts.TLS_HWCAP)  # fmt: skip
        t.libraries(directory, tls, LEGACY, bits)
        if cache == "flat-first":
            t.libraries(f"{directory}/tls", tls, LEGACY, bits, hwcap=hosts.TLS_HWCAP)
    t.libraries(lib, {"libnvidia-ml.so": "1", "libnvidia-glcore.so": ""}, LEGACY)
    t.libraries(lib32, {"libnvidia-ml.so": "1"}, LEGACY, 32)
    t.file("/etc/ld.so.conf", b"include /etc/ld.so.conf.d/*.conf\n")
    t.file("/etc/ld.so.conf.d/x86_64-linux-gnu_GL.conf", f"{lib}\n{lib32}\n".encode())
    t.kernel(LEGACY, "proc")
    if cache == "none":
        t.cache.clear()
    return t.finish(None if cache == "none" else "/etc/ld.so.cache")


@pytest.mark.parametrize("cache", ["tls-first", "flat-first", "no-tls", "none"])
def test_old_driver_gets_the_tls_copy_in_the_lib_dir(cache, tmp_path):
    """Whatever the ld cache says of tls/, the container's lib dir gets tls/'s copy (new TLS
    ABI) under its own name, the 32-bit one its own, and the rest of the versioned dir."""
    root = legacy(tmp_path / "host", cache)
    result = plan(root, tmp_path, "utility,graphics,compat32")
    got = sources(result)
    name = f"libnvidia-tls.so.{LEGACY}"
    assert got[f"/usr/lib64/{name}"] == f"/usr/lib/nvidia-340/tls/{name}"
    assert got[f"/usr/lib/{name}"] == f"/usr/lib32/nvidia-340/tls/{name}"
    assert (
        got[f"/usr/lib64/libnvidia-ml.so.{LEGACY}"]
        == f"/usr/lib/nvidia-340/libnvidia-ml.so.{LEGACY}"
    )
    assert (
        got[f"/usr/lib/libnvidia-ml.so.{LEGACY}"]
        == f"/usr/lib32/nvidia-340/libnvidia-ml.so.{LEGACY}"
    )
    assert f"/usr/lib64/libnvidia-glcore.so.{LEGACY}" in got
    assert not any("/tls/" in target for target in got)  # where every loader looks
    assert result.driver_version == LEGACY


# -- a 32-bit copy of the same name never hides the 64-bit one --------------------------------


def biarch(root: Path, cache: bool) -> Path:
    """/usr/lib32/nvidia-550 (32-bit) named before /usr/lib/nvidia-550 (64-bit) in
    ld.so.conf.d; with `cache`, an ld cache that lists both with their flags."""
    t = Tree(root)
    lib, lib32 = "/usr/lib/nvidia-550", "/usr/lib32/nvidia-550"
    t.libraries(lib32, {"libcuda.so": "1", "libnvidia-ml.so": "1"}, bits=32, cache=cache)
    t.libraries(lib, {"libcuda.so": "1", "libnvidia-ml.so": "1"}, cache=cache)
    t.file("/etc/ld.so.conf", b"include /etc/ld.so.conf.d/*.conf\n")
    t.file("/etc/ld.so.conf.d/i386-linux-gnu_GL.conf", f"{lib32}\n".encode())
    t.file("/etc/ld.so.conf.d/x86_64-linux-gnu_GL.conf", f"{lib}\n".encode())
    t.kernel(VERSION)
    return t.finish("/etc/ld.so.cache" if cache else None)


@pytest.mark.parametrize("cache", [False, True])
@pytest.mark.parametrize("dirs_first", [False, True])
def test_elf_class_decides_between_copies_of_one_name(cache, dirs_first, tmp_path):
    """ld.so.conf (no cache), or the profile's dir list put first, names the 32-bit dir
    before the 64-bit one: each lib dir still gets its own class."""
    root = biarch(tmp_path / "host", cache)
    dirs = {"library_dirs": ["/usr/lib32/nvidia-550", "/usr/lib/nvidia-550"]}
    dirs["library_dirs32"] = ["/usr/lib/nvidia-550", "/usr/lib32/nvidia-550"]
    prof = profile(library_dirs_first=dirs_first, **(dirs if dirs_first else {}))
    got = sources(plan(root, tmp_path, "compute,utility,compat32", prof=prof))
    for name in ("libcuda", "libnvidia-ml"):
        real = f"{name}.so.{VERSION}"
        assert got[f"/usr/lib64/{real}"] == f"/usr/lib/nvidia-550/{real}"
        assert got[f"/usr/lib/{real}"] == f"/usr/lib32/nvidia-550/{real}"


def test_only_a_32_bit_copy_is_no_64_bit_library(tmp_path):
    """Arch Linux keeps 64-bit libraries in /usr/lib, which RHEL's 32-bit dir list names:
    without a cache entry the class is read, and a copy of the other class is not taken."""
    t = Tree(tmp_path / "host")
    t.libraries("/usr/lib", {"libcuda.so": "1", "libnvidia-ml.so": "1"}, cache=False)
    t.libraries("/usr/lib32", {"libcuda.so": "1"}, bits=32, cache=False)
    t.kernel(VERSION)
    root = t.finish(None)
    prof = profile(library_dirs=["/usr/lib"], library_dirs32=["/usr/lib32", "/usr/lib"])
    result = plan(root, tmp_path, "compute,utility,compat32", prof=prof)
    got = sources(result)
    assert got[f"/usr/lib/libcuda.so.{VERSION}"] == f"/usr/lib32/libcuda.so.{VERSION}"
    assert f"/usr/lib/libnvidia-ml.so.{VERSION}" not in got  # /usr/lib's is 64-bit
    assert got[f"/usr/lib64/libnvidia-ml.so.{VERSION}"] == f"/usr/lib/libnvidia-ml.so.{VERSION}"
    assert "32-bit libraries: libnvidia-ml.so.*" in result.unmatched


def test_ld_so_conf_is_read_only_without_a_cache(tmp_path):
    """With an ld cache, a dir that only ld.so.conf names holds nothing the host's loader
    finds either: not searched (and not read: it costs at every start)."""
    t = Tree(tmp_path / "host")
    t.libraries("/opt/nvidia/lib", {"libcuda.so": "1", "libnvidia-ml.so": "1"}, cache=False)
    t.system_libraries("/usr/lib64")
    t.file("/etc/ld.so.conf", b"/opt/nvidia/lib\n")
    t.kernel(VERSION)
    root = t.finish()
    assert "no driver files found" in refusal(root, tmp_path)
    (root / "etc/ld.so.cache").unlink()
    got = sources(plan(root, tmp_path))
    assert got[f"/usr/lib64/libcuda.so.{VERSION}"] == f"/opt/nvidia/lib/libcuda.so.{VERSION}"


def test_ld_so_conf_syntax(tmp_path):
    """glibc's parse_conf: comments, `dir=TYPE`, trailing slashes, relative includes with a
    glob (sorted), hwcap lines, relative dirs ignored, an include loop bounded."""
    root = tmp_path / "root"
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text(
        "# comment\n/usr/local/lib/ # trailing\ninclude ld.so.conf.d/*.conf\n"
        "hwcap 0 nosegneg\n/opt/old=libc6\nrelative/dir\ninclude /etc/ld.so.conf\n"
    )
    (root / "etc/ld.so.conf.d/b.conf").write_text("/usr/lib/nvidia-340\n/usr/local/lib\n")
    (root / "etc/ld.so.conf.d/a.conf").write_text("\t/usr/lib32/nvidia-340\n")
    (root / "etc/ld.so.conf.d/c.txt").write_text("/not/included\n")
    os.mkfifo(root / "etc/ld.so.conf.d/fifo.conf")  # a planted FIFO must not hang the hook
    fd = securepath.open_dir(str(root))
    try:
        assert conf.read_dirs(fd, "/etc/ld.so.conf") == [
            "/usr/local/lib",
            "/usr/lib32/nvidia-340",
            "/usr/lib/nvidia-340",
            "/opt/old",
        ]
        assert conf.read_dirs(fd, "/etc/none.conf") == []
    finally:
        os.close(fd)


def test_ld_so_conf_include_stays_inside_the_source_root(tmp_path):
    outside = tmp_path / "outside.conf"
    outside.write_text("/outside\n")
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/ld.so.conf").write_text(f"include {outside}\ninclude ../../../{outside}\n")
    fd = securepath.open_dir(str(root))
    try:
        assert conf.read_dirs(fd, "/etc/ld.so.conf") == []
    finally:
        os.close(fd)


# -- the MPS pipe dir ---------------------------------------------------------------------------


def mps_host(root: Path, pipe_dir: str) -> Path:
    t = Tree(root)
    t.libraries("/usr/lib64", {"libcuda.so": "1", "libnvidia-ml.so": "1"})
    t.socket(f"{pipe_dir}/control")
    t.file("/var/log/nvidia-mps/control.log", b"log\n")
    t.kernel(VERSION)
    return t.finish()


def test_mps_pipe_dir_default(tmp_path):
    root = mps_host(tmp_path / "host", "/tmp/nvidia-mps")
    mounts = {m.target: m for m in plan(root, tmp_path).mounts}
    assert mounts["/tmp/nvidia-mps"].kind == "directory" and mounts["/tmp/nvidia-mps"].writable
    assert mounts["/tmp/nvidia-mps"].flags == ("rw", "nosuid", "nodev", "noexec")
    assert not any("nvidia-mps" in t for t in mounts if t != "/tmp/nvidia-mps")  # no log dir


def test_mps_pipe_dir_from_the_config(tmp_path):
    """The config's CUDA_MPS_PIPE_DIRECTORY (the daemon's): mounted at the same path."""
    root = mps_host(tmp_path / "host", "/run/mps")
    variables = {"CUDA_MPS_PIPE_DIRECTORY": "/run/mps"}
    result = plan(root, tmp_path, variables=variables)
    got = sources(result)
    assert got["/run/mps"] == "/run/mps"
    assert "/tmp/nvidia-mps" not in got and "/var/log/nvidia-mps" not in got
    assert plan(root, tmp_path, "utility", variables=variables).mounts  # compute's only
    assert "/run/mps" not in sources(plan(root, tmp_path, "utility", variables=variables))


def test_mps_pipe_dir_absent_is_skipped(tmp_path):
    root = mps_host(tmp_path / "host", "/tmp/elsewhere")
    result = plan(root, tmp_path)
    assert "file: /tmp/nvidia-mps" in result.unmatched


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"variables": {"MPS_DIR": "/x"}}, "variables: 'MPS_DIR' is not a variable of profile "
         "nvidia (it has: CUDA_MPS_PIPE_DIRECTORY)"),
        ({"variables": {"CUDA_MPS_PIPE_DIRECTORY": "relative"}}, "does not match"),
        ({"prof": profile(files=[{"path": "{NOPE}/x"}])}, "unknown variable {NOPE}"),
    ],
)  # fmt: skip
def test_bad_variables_are_one_line(settings, message, tmp_path):
    root = mps_host(tmp_path / "host", "/tmp/nvidia-mps")
    with pytest.raises(OcihookError) as error:
        compiled(root, tmp_path, **settings)
    assert message in str(error.value) and "\n" not in str(error.value)


# -- soname links -------------------------------------------------------------------------------


def unpacked(root: Path) -> Path:
    """Versioned files only (an unpacked .run payload), no ld cache."""
    t = Tree(root)
    libs = {"libcuda.so": "1", "libnvidia-ml.so": "1", "libnvidia-gpucomp.so": ""}
    t.libraries("/usr/lib64", libs, cache=False, soname_links=False)
    t.kernel(VERSION)
    return t.finish(None)


@pytest.mark.parametrize("verify", [False, True])
def test_missing_soname_link_is_made_from_dt_soname(verify, tmp_path):
    """The hook (verify False) reads the ELF of a library without a soname link: the link
    and the ld cache entry are the DT_SONAME's; a library named by its soname needs none."""
    root = unpacked(tmp_path / "host")
    result = plan(root, tmp_path, verify=verify)
    assert links(result) == {
        "/usr/lib64/libcuda.so.1": f"libcuda.so.{VERSION}",
        "/usr/lib64/libnvidia-ml.so.1": f"libnvidia-ml.so.{VERSION}",
    }
    assert result.warnings == [
        f"{root}/usr/lib64: 2 libraries lack a soname link; the container gets them (DT_SONAME)"
    ]


def test_soname_link_to_another_version(tmp_path):
    root = unpacked(tmp_path / "host")
    (root / f"usr/lib64/libcuda.so.{OLD}").write_bytes(hosts.library("libcuda.so.1"))
    os.symlink(f"libcuda.so.{OLD}", root / "usr/lib64/libcuda.so.1")
    result = plan(root, tmp_path)
    assert links(result)["/usr/lib64/libcuda.so.1"] == f"libcuda.so.{VERSION}"
    assert f"/usr/lib64/libcuda.so.{OLD}" not in sources(result)
    assert result.warnings == [
        f"{root}/usr/lib64/libcuda.so.1 points to libcuda.so.{OLD}: the container's to "
        f"libcuda.so.{VERSION}",
        f"{root}/usr/lib64: 1 library lacks its soname link; the container gets it (DT_SONAME)",
    ]


def test_dt_soname_other_than_a_link_elsewhere(tmp_path):
    """A soname link into another dir (not one the cache vouches for): its target's
    DT_SONAME is read, and the container gets that name as well."""
    t = Tree(tmp_path / "host")
    real = f"/opt/nvidia/libnvidia-ml.so.{VERSION}"
    t.file(real, hosts.library("libnvidia-ml.so.2"))
    t.link("/usr/lib64/libnvidia-ml.so.1", real)
    t.kernel(VERSION)
    root = t.finish(None)
    result = plan(root, tmp_path, "utility")
    assert sources(result)[f"/usr/lib64/libnvidia-ml.so.{VERSION}"] == real
    assert links(result) == {
        "/usr/lib64/libnvidia-ml.so.1": f"libnvidia-ml.so.{VERSION}",
        "/usr/lib64/libnvidia-ml.so.2": f"libnvidia-ml.so.{VERSION}",
    }
    assert result.warnings == [
        f"{root}{real}: DT_SONAME libnvidia-ml.so.2, not libnvidia-ml.so.1: the container gets both"
    ]


def test_soname_link_outside_the_library_dir_works(tmp_path):
    """An absolute soname link to another dir of the source root (as Debian's alternatives)."""
    t = Tree(tmp_path / "host")
    real = f"/opt/nvidia-{VERSION}/libcuda.so.{VERSION}"
    t.file(real, hosts.library("libcuda.so.1"))
    t.link("/usr/lib64/libcuda.so.1", real)
    t.kernel(VERSION)
    root = t.finish(None)
    result = plan(root, tmp_path, "compute")
    assert sources(result)[f"/usr/lib64/libcuda.so.{VERSION}"] == real
    assert links(result) == {"/usr/lib64/libcuda.so.1": f"libcuda.so.{VERSION}"}
    assert result.warnings == []


def test_soname_link_outside_the_source_root_is_refused(tmp_path):
    """A driver volume's link that climbs out of it resolves inside it, to nothing."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"libcuda.so.{VERSION}").write_bytes(hosts.library("libcuda.so.1"))
    t = Tree(tmp_path / "host")
    t.link("/usr/lib64/libcuda.so.1", f"../../../../../../../..{outside}/libcuda.so.{VERSION}")
    t.kernel(VERSION)
    root = t.finish(None)
    assert refusal(root, tmp_path, caps="compute") == (
        f"source {root}/usr/lib64/libcuda.so.1: soname link to a library that does not exist; "
        "the driver is incomplete"
    )


def trusted_mismatch(root: Path) -> Path:
    """A plain soname link libcuda.so.1 beside a libcuda whose DT_SONAME is libcuda.so.2."""
    t = Tree(root)
    t.file(f"/usr/lib64/libcuda.so.{VERSION}", hosts.library("libcuda.so.2"))
    t.link("/usr/lib64/libcuda.so.1", f"libcuda.so.{VERSION}")
    t.kernel(VERSION)
    return t.finish(None)


def test_dt_soname_other_than_its_soname_link_is_refused(tmp_path):
    """The hook takes a plain soname link as the soname without reading the ELF (the
    native ld cache writer reads it in the container and refuses: tests below); plan and
    check read every library and refuse the same container in one line."""
    root = trusted_mismatch(tmp_path / "host")
    assert links(plan(root, tmp_path, "compute", verify=False)) == {
        "/usr/lib64/libcuda.so.1": f"libcuda.so.{VERSION}"
    }
    assert refusal(root, tmp_path, caps="compute") == (
        f"source {root}/usr/lib64/libcuda.so.{VERSION}: DT_SONAME libcuda.so.2 differs from "
        "its soname link libcuda.so.1: programs would not load it"
    )


def test_native_ld_cache_writer_refuses_a_soname_that_names_nothing(tmp_path):
    """In the container: the library the plan injected with libcuda.so.1, DT_SONAME
    libcuda.so.2: its cache entry would name a file that is not there."""
    lib = tmp_path / "rootfs/usr/lib64"
    lib.mkdir(parents=True)
    (lib / f"libcuda.so.{VERSION}").write_bytes(hosts.library("libcuda.so.2"))
    os.symlink(f"libcuda.so.{VERSION}", lib / "libcuda.so.1")
    fd = securepath.open_dir(str(tmp_path / "rootfs"))
    try:
        with pytest.raises(OcihookError) as error:
            native.library_entries(fd, ["/usr/lib64"], [f"/usr/lib64/libcuda.so.{VERSION}"])
        assert str(error.value) == (
            f"container /usr/lib64/libcuda.so.{VERSION}: DT_SONAME libcuda.so.2 names nothing "
            "in /usr/lib64 (the driver's soname link has another name): programs would not "
            "load it"
        )
        os.symlink(f"libcuda.so.{VERSION}", lib / "libcuda.so.2")
        entries = native.library_entries(fd, ["/usr/lib64"], [f"/usr/lib64/libcuda.so.{VERSION}"])
        assert [e[:2] for e in entries] == [(b"libcuda.so.2", b"/usr/lib64/libcuda.so.2")]
    finally:
        os.close(fd)


def test_the_hook_reads_no_elf_the_ld_cache_vouches_for(tmp_path):
    """Lean: with the host's links and cache entries (ldconfig read those ELF files) the
    hook does not read the libraries; shown by files that are not ELF at all, which the
    hook takes as they are and plan/check refuse."""
    t = Tree(tmp_path / "host")
    t.libraries("/usr/lib64", {"libcuda.so": "1", "libnvidia-gpucomp.so": ""})
    t.kernel(VERSION)
    root = t.finish()
    for name in (f"libcuda.so.{VERSION}", f"libnvidia-gpucomp.so.{VERSION}"):
        (root / "usr/lib64" / name).write_bytes(b"not ELF")
    assert len(plan(root, tmp_path, "compute", verify=False).mounts) == 2
    assert refusal(root, tmp_path, caps="compute").endswith(
        ": not a little-endian ELF file: not a library the loader can use"
    )


@pytest.mark.parametrize(
    ("patch", "why"),
    [
        (lambda d: d[:40], "not a little-endian ELF file"),
        (lambda d: d[:0x20] + b"\xff" * 8 + d[0x28:], "an offset outside the file"),
        (lambda d: d[:0x36] + b"\xff\x00" + d[0x38:], "malformed program headers"),
        (lambda d: d[:16] + b"\x02\x00" + d[18:], "not a shared object"),
        (lambda d: d[:0x20] + (1 << 40).to_bytes(8, "little") + d[0x28:],
         "truncated program headers"),
    ],
)  # fmt: skip
def test_hostile_elf_is_one_line(patch, why, tmp_path):
    """A driver volume's library whose ELF lies, when its soname must be read: the reason
    in one line, not an exception."""
    root = unpacked(tmp_path / "host")
    lib = root / f"usr/lib64/libcuda.so.{VERSION}"
    lib.write_bytes(patch(lib.read_bytes()))
    assert refusal(root, tmp_path, caps="compute") == (
        f"source {lib}: {why}: not a library the loader can use"
    )


@pytest.mark.parametrize(
    ("soname", "message"),
    [
        ("libnvidia-ml.so.1", "DT_SONAME libnvidia-ml.so.1 is another library's name"),
        ("../libcuda.so.1", "DT_SONAME b'../libcuda.so.1' is not a file name"),
        ("libcuda.so.\x01", "is not a file name"),
    ],
)
def test_dt_soname_that_names_no_link_is_refused(soname, message, tmp_path):
    root = unpacked(tmp_path / "host")
    lib = root / f"usr/lib64/libcuda.so.{VERSION}"
    lib.write_bytes(elfgen.shared_object(soname))
    assert message in refusal(root, tmp_path, caps="compute")


def test_dt_soname_of_another_file_is_refused(tmp_path):
    """Two files of one library (own_version): the first's DT_SONAME is the second's name."""
    t = Tree(tmp_path / "host")
    t.file("/usr/lib64/libnvidia-egl-gbm.so.1.1.0", hosts.library("libnvidia-egl-gbm.so.1.1.1"))
    t.file("/usr/lib64/libnvidia-egl-gbm.so.1.1.1", hosts.library("libnvidia-egl-gbm.so.1.1.1"))
    t.kernel(VERSION)
    root = t.finish(None)
    assert refusal(root, tmp_path, caps="graphics") == (
        f"source {root}/usr/lib64/libnvidia-egl-gbm.so.1.1.0: its DT_SONAME names "
        f"{root}/usr/lib64/libnvidia-egl-gbm.so.1.1.1, another file of the driver; the "
        "driver's files are mixed up"
    )
