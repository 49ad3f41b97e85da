"""CUDA images and an NVIDIA host for forward compatibility and NVIDIA_REQUIRE_* tests.

Stand-ins: no GPU and no NVIDIA driver here. The host's "libcuda" and the image's compat
"libcuda" are real shared objects built with gcc (DT_SONAME libcuda.so.1, named by the
driver version as NVIDIA names them) whose one function, `standin_which`, says which one
it is; a compat one may carry NVIDIA's `.note.cuda.fwd_compatibility` note (`fwd_note`: an
ELF note of "NVIDIA Corporation" whose JSON lists the driver branches the package serves,
as cuda-compat's libcuda carries it since R575). A test program in the image dlopens
libcuda.so.1 as CUDA programs do and prints the path the dynamic loader mapped
(/proc/self/maps) and that answer. The host's device nodes are char nodes with NVIDIA's
numbers (195:0, 195:255; no driver registers 195 here).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
from pathlib import Path

from tests.support import images

HOST_DRIVER = "535.104.05"  # CUDA 12.2 (cuda.CUDA_BY_DRIVER)
NEWER = "550.54.15"  # CUDA 12.4's compat package: a newer branch than the host's
OLDER = "530.30.02"  # CUDA 12.1's: an older one
COMPAT_DIR = "/usr/local/cuda/compat"
MULTIARCH = "/usr/lib/x86_64-linux-gnu"

_LIBCUDA = r"""
const char *standin_which(void) { return WHICH; }
"""
_PROGRAM = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    void *handle = dlopen("libcuda.so.1", RTLD_NOW);
    if (!handle) {
        printf("DLOPEN-FAILED %s\n", dlerror());
        return 1;
    }
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[4096];
    while (maps && fgets(line, sizeof line, maps)) {
        char *path = strchr(line, '/');
        if (path && strstr(path, "libcuda")) {
            printf("LOADED %s", path);
            break;
        }
    }
    const char *(*which)(void) = (const char *(*)(void))dlsym(handle, "standin_which");
    printf("STANDIN %s\n", which ? which() : "none");
    return 0;
}
"""


NOTE_SECTION = ".note.cuda.fwd_compatibility"


def fwd_note(
    drivers: list[int] | None,
    cuda: str = "12.9",
    owner: bytes = b"NVIDIA Corporation",
    desc: bytes | None = None,
) -> bytes:
    """The contents of a `.note.cuda.fwd_compatibility` section: Elf_Nhdr (namesz, descsz,
    type 0), the owner's name and the JSON description, each padded to 4 bytes. `desc`
    replaces the JSON (malformed ones); `drivers` None leaves the key out."""
    if desc is None:
        fields: dict = {"format": 1, "CUDA version": cuda}
        if drivers is not None:
            fields["driver"] = drivers
        fields["device"] = [1, 2, 7, 8, 9, 10, 11, 12, 13, 14]
        desc = json.dumps(fields, separators=(",", ":")).encode() + b"\0"
    name = owner + b"\0"

    def padded(data: bytes) -> bytes:
        return data + bytes(-len(data) % 4)

    return struct.pack("<III", len(name), len(desc), 0) + padded(name) + padded(desc)


_PROBE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    void *handle = dlopen(argc > 1 ? argv[1] : "", RTLD_NOW);
    if (!handle) {
        printf("DLOPEN-FAILED %s\n", dlerror());
        return 1;
    }
    void *which = dlsym(handle, "standin_which");
    Dl_info info;
    if (which && dladdr(which, &info))
        printf("LOADED %s\nSTANDIN %s\n", info.dli_fname, ((const char *(*)(void))which)());
    else
        printf("LOADED unknown\nSTANDIN none\n");
    return 0;
}
"""


def library_probe(root: Path, work: Path) -> Path:
    """/usr/bin/loaded-library NAME in the image: dlopens NAME as a program would and prints
    the file the loader mapped and its stand-in's answer (LOADED, STANDIN lines)."""
    source = work / "loaded-library.c"
    source.write_text(_PROBE)
    target = root / "usr/bin/loaded-library"
    subprocess.run(["gcc", "-O1", "-o", str(target), str(source), "-ldl"], check=True)
    return target


def standin_library(path: Path, soname: str, which: str, work: Path) -> Path:
    """A gcc-built stand-in shared library with DT_SONAME `soname` answering `which`."""
    source = work / f"{path.name}-{which.replace(' ', '-')}.c"
    source.write_text(_LIBCUDA)
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", f'-DWHICH="{which}"', f"-Wl,-soname,{soname}"]
        + ["-o", str(path), str(source)],
        check=True,
    )
    return path


def standin_libcuda(path: Path, which: str, work: Path, note: bytes | None = None) -> Path:
    """A stand-in libcuda (gcc-built, DT_SONAME libcuda.so.1) answering `which`; `note`
    (fwd_note's bytes) goes into its `.note.cuda.fwd_compatibility` section."""
    source = work / f"libcuda-{which.replace(' ', '-')}.c"
    text = _LIBCUDA
    if note is not None:
        data = ",".join(str(b) for b in note)
        section = f'.section {NOTE_SECTION},\\"a\\",@note'
        text += f'__asm__("{section}\\n.balign 4\\n.byte {data}\\n.previous");\n'
    source.write_text(text)
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", f'-DWHICH="{which}"', "-Wl,-soname,libcuda.so.1"]
        + ["-o", str(path), str(source)],
        check=True,
    )
    return path


def host_tree(root: Path, work: Path, version: str = HOST_DRIVER) -> Path:
    """An NVIDIA host: the kernel module's version file, the stand-in libcuda of that
    version with its soname link (no ld.so.cache: the profile's library_dirs find it),
    /dev/nvidia0 and /dev/nvidiactl."""
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text(version + "\n")
    lib = root / MULTIARCH.lstrip("/")
    standin_libcuda(lib / f"libcuda.so.{version}", f"host {version}", work)
    os.symlink(f"libcuda.so.{version}", lib / "libcuda.so.1")
    (root / "dev").mkdir()
    for name, minor in (("nvidia0", 0), ("nvidiactl", 255)):
        os.mknod(root / "dev" / name, 0o20666, os.makedev(195, minor))
        os.chmod(root / "dev" / name, 0o666)  # whatever the umask
    root.chmod(0o755)
    return root


def cuda_image_tree(
    root: Path,
    work: Path,
    compat: str | None,
    note: bytes | None = None,
    alternatives: bool = False,
) -> Path:
    """A Debian-layout glibc image with the test program /usr/bin/loaded-driver and, with
    `compat`, the cuda-compat package's layout: /usr/local/cuda/compat/libcuda.so.<compat>
    (a stand-in answering "compat <compat>", with `note` as its fwd_compatibility note) with
    its libcuda.so.1 and libcuda.so links. `alternatives`: as NVIDIA's images lay it out,
    /usr/local/cuda a link to /etc/alternatives/cuda, a link to /usr/local/cuda-12.9 (absolute
    links, resolved inside the image)."""
    images.glibc_rootfs(root, "debian")
    source = work / "loaded-driver.c"
    source.write_text(_PROGRAM)
    subprocess.run(
        ["gcc", "-O1", "-o", str(root / "usr/bin/loaded-driver"), str(source)], check=True
    )
    if alternatives:
        (root / "usr/local/cuda-12.9").mkdir(parents=True)
        (root / "etc/alternatives").mkdir(parents=True, exist_ok=True)
        os.symlink("/usr/local/cuda-12.9", root / "etc/alternatives/cuda")
        os.symlink("/etc/alternatives/cuda", root / "usr/local/cuda")
    if compat:  # (through the links' target: they are absolute, for inside the image)
        directory = root / ("usr/local/cuda-12.9/compat" if alternatives else COMPAT_DIR[1:])
        standin_libcuda(directory / f"libcuda.so.{compat}", f"compat {compat}", work, note)
        os.symlink(f"libcuda.so.{compat}", directory / "libcuda.so.1")
        os.symlink("libcuda.so.1", directory / "libcuda.so")
    return root
