"""Fake NVIDIA driver installs laid out like real hosts, each with its own ld.so.cache.

The library files are stand-ins: ELF shared objects with the class, machine and DT_SONAME
of the real ones and no code (tests/support/elfgen.py; nothing loads them); the
ld.so.cache is written by `write_ld_cache` in glibc's binary format (checked against the
host's own ldconfig in tests/test_ld_cachefile.py). Device nodes are char nodes
with NVIDIA's numbers (majors 195 and 510, which no driver of a test machine registers:
checked where a container opens them, so that open() fails with ENXIO, or EPERM where the
cgroup denies it); the kernel module version is a file under the device root, where the
real host has /sys/module/nvidia/version.
"""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

from tests.support import elfgen

VERSION = "550.54.14"
OLD = "535.104.05"
LEGACY = "340.108"
TLS_HWCAP = 1 << 63  # ldconfig's hwcap bit of a tls/ subdir (glibc before 2.37)
MPS_PIPE_DIR = "/run/nvidia-mps"
X86_64 = 0x0303  # FLAG_ELF_LIBC6 | FLAG_X8664_LIB64
I386 = 0x0003  # FLAG_ELF_LIBC6
NODES = {
    "nvidia0": (195, 0),
    "nvidia1": (195, 1),
    "nvidiactl": (195, 255),
    "nvidia-uvm": (510, 0),
    "nvidia-uvm-tools": (510, 1),
    "nvidia-modeset": (195, 254),
}
# library base name -> soname suffix ("" for a library without a soname link)
UTILITY = {"libnvidia-ml.so": "1", "libnvidia-cfg.so": "1", "libnvidia-nscq.so": "2"}
COMPUTE = {
    "libcuda.so": "1",
    "libcudadebugger.so": "1",
    "libnvidia-opencl.so": "1",
    "libnvidia-ptxjitcompiler.so": "1",
    "libnvidia-allocator.so": "1",
    "libnvidia-nvvm.so": "4",
    "libnvidia-gpucomp.so": "",
    "libnvidia-pkcs11-openssl3.so": "",
    "libnvidia-tileiras.so": "1",
}
VIDEO = {"libnvcuvid.so": "1", "libnvidia-encode.so": "1", "libnvidia-opticalflow.so": "1"}
GRAPHICS = {
    "libGLX_nvidia.so": "0",
    "libEGL_nvidia.so": "0",
    "libGLESv2_nvidia.so": "2",
    "libnvidia-glcore.so": "",
    "libnvidia-eglcore.so": "",
    "libnvidia-glsi.so": "",
    "libnvidia-tls.so": "",
    "libnvidia-glvkspirv.so": "",
}
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nv-fabricmanager",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)


def library(soname: str, bits: int = 64, note: str = "") -> bytes:
    """A stand-in driver library: an ELF shared object of `bits` with DT_SONAME `soname`
    (32-bit ones need libc.so.6, as the driver's do: ldconfig flags them libc6)."""
    needed = ("libc.so.6",) if bits == 32 else ()
    return elfgen.shared_object(soname, bits, needed, note)


def write_ld_cache(path: Path, entries: list[tuple]) -> None:
    """An ld.so.cache in glibc's "glibc-ld.so.cache1.1" format (what `ldconfig` writes), of
    (soname, path, flags) entries, or (soname, path, flags, hwcap)."""
    strings = bytearray()
    offsets: dict[str, int] = {}
    header = struct.Struct("=20sIIB3xI12x")
    entry = struct.Struct("=iIIIQ")
    base = header.size + len(entries) * entry.size

    def offset(text: str) -> int:
        if text not in offsets:
            offsets[text] = base + len(strings)
            strings.extend(text.encode() + b"\0")
        return offsets[text]

    table = b"".join(
        entry.pack(e[2], offset(e[0]), offset(e[1]), 0, e[3] if len(e) > 3 else 0) for e in entries
    )
    data = header.pack(b"glibc-ld.so.cache1.1", len(entries), len(strings), 2, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data + table + bytes(strings))


class Tree:
    """A host root under construction; `cache` collects the ld.so.cache entries."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cache: list[tuple[str, str, int]] = []
        root.mkdir(parents=True, exist_ok=True)

    def path(self, inner: str) -> Path:
        return self.root / inner.lstrip("/")

    def file(self, inner: str, content: bytes = b"", mode: int = 0o644) -> None:
        target = self.path(inner)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(mode)

    def link(self, inner: str, points_to: str) -> None:
        target = self.path(inner)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(points_to, target)

    def libraries(
        self,
        directory: str,
        libs: dict[str, str],
        version: str = VERSION,
        bits: int = 64,
        cache: bool = True,
        link_dir: str | None = None,
        soname_links: bool = True,
        hwcap: int = 0,
    ) -> None:
        """`<base>.<version>` files in `directory` with soname links; the soname links (or,
        with `link_dir`, links there to them) are what ldconfig lists. Without
        `soname_links` the files alone (what an unpacked .run payload has); `hwcap`: the
        cache entries' (1 << 63 for a tls/ subdir, as glibc before 2.37 wrote them)."""
        for base, soname in libs.items():
            real = f"{base}.{version}"
            name = f"{base}.{soname}" if soname else real
            self.file(f"{directory}/{real}", library(name, bits, real), 0o755)
            if soname and soname_links:
                self.link(f"{directory}/{name}", real)
            listed = directory
            if link_dir:
                self.link(f"{link_dir}/{name}", f"{directory}/{name}")
                listed = link_dir
            if cache:
                flags = X86_64 if bits == 64 else I386
                self.cache.append((name, f"{listed}/{name}", flags, hwcap))

    def binaries(self, directory: str, names=BINARIES) -> None:
        for name in names:
            self.file(f"{directory}/{name}", b"\x7fELF\x02\x01\x01 " + name.encode(), 0o755)

    def firmware(self, directory: str, version: str = VERSION) -> None:
        for name in ("gsp_ga10x.bin", "gsp_tu10x.bin"):
            self.file(f"{directory}/nvidia/{version}/{name}", b"firmware")

    def kernel(self, version: str, where: str = "sys") -> None:
        if where == "sys":
            self.file("/sys/module/nvidia/version", f"{version}\n".encode())
        else:
            self.file(
                "/proc/driver/nvidia/version",
                f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Thu Feb 22 "
                "01:44:30 UTC 2024\nGCC version:  gcc version 12.2.0\n".encode(),
            )

    def devices(self, names=NODES, mode: int = 0o666) -> None:
        self.path("/dev").mkdir(parents=True, exist_ok=True)
        for name, (major, minor) in names.items():
            node = self.path(f"/dev/{name}")
            os.mknod(node, mode | 0o020000, os.makedev(major, minor))
            node.chmod(mode)

    def socket(self, inner: str) -> None:
        self.path(inner).parent.mkdir(parents=True, exist_ok=True)
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(self.path(inner)))
        sock.close()

    def system_libraries(self, directory: str) -> None:
        """Libraries that are not the driver's, in the cache like on a real host."""
        for name in ("libc.so.6", "libm.so.6", "libGL.so.1", "libEGL.so.1"):
            self.file(f"{directory}/{name}", library(name, 64, "system"))
            self.cache.append((name, f"{directory}/{name}", X86_64))

    def finish(self, cache: str | None = "/etc/ld.so.cache") -> Path:
        if cache:
            write_ld_cache(self.path(cache), self.cache)
        return self.root


def ubuntu(root: Path) -> Path:
    """Ubuntu 22.04, NVIDIA's packages: merged /usr (/lib -> usr/lib), multiarch dirs for
    x86_64 and i386, VDPAU in its subdir, GSP firmware, Vulkan/EGL JSON files."""
    t = Tree(root)
    for top in ("lib", "bin", "sbin", "lib64"):
        t.path(f"/usr/{top}").mkdir(parents=True, exist_ok=True)
        t.link(f"/{top}", f"usr/{top}")
    multi, i386 = "/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu"
    t.system_libraries(multi)
    t.libraries(multi, {**UTILITY, **COMPUTE, **VIDEO, **GRAPHICS})
    t.libraries(i386, {"libcuda.so": "1", "libnvidia-ml.so": "1", "libGLX_nvidia.so": "0"}, bits=32)
    t.libraries(f"{multi}/vdpau", {"libvdpau_nvidia.so": "1"}, cache=False)
    t.libraries(multi, {"libnvidia-egl-gbm.so": "1"}, version="1.1.1")
    t.binaries("/usr/bin")
    t.firmware("/usr/lib/firmware")
    t.file("/usr/share/vulkan/icd.d/nvidia_icd.json", b'{"ICD": {}}')
    t.file("/usr/share/glvnd/egl_vendor.d/10_nvidia.json", b'{"ICD": {}}')
    t.socket("/run/nvidia-persistenced/socket")
    t.path("/tmp/nvidia-mps").mkdir(parents=True)
    t.kernel(VERSION)
    t.devices()
    return t.finish()


def rhel(root: Path) -> Path:
    """RHEL with NVIDIA's CUDA repo packages: /usr/lib64 and 32-bit /usr/lib, /lib a real
    directory; the kernel version only in /proc/driver/nvidia/version."""
    t = Tree(root)
    t.system_libraries("/usr/lib64")
    t.libraries("/usr/lib64", {**UTILITY, **COMPUTE})
    t.libraries("/usr/lib", {"libcuda.so": "1", "libnvidia-ml.so": "1"}, bits=32)
    t.binaries("/usr/bin")
    t.firmware("/lib/firmware")
    t.kernel(VERSION, "proc")
    t.devices()
    return t.finish()


def debian(root: Path) -> Path:
    """Debian 12's nvidia-driver packages: libcuda in the multiarch dir, NVML and others in
    nvidia/current behind absolute /etc/alternatives links (what ldconfig lists)."""
    t = Tree(root)
    multi = "/usr/lib/x86_64-linux-gnu"
    current = f"{multi}/nvidia/current"
    t.system_libraries(multi)
    t.libraries(multi, {"libcuda.so": "1", "libnvidia-ptxjitcompiler.so": "1"})
    for base, soname in {"libnvidia-ml.so": "1", "libGLX_nvidia.so": "0"}.items():
        t.libraries(current, {base: soname}, cache=False)
        alternative = f"/etc/alternatives/nvidia--{base}.{soname}-x86_64-linux-gnu"
        t.link(alternative, f"{current}/{base}.{soname}")
        t.link(f"{multi}/{base}.{soname}", alternative)
        t.cache.append((f"{base}.{soname}", f"{multi}/{base}.{soname}", X86_64))
    t.binaries("/usr/lib/nvidia/current", ("nvidia-smi",))
    t.link("/usr/bin/nvidia-smi", "/etc/alternatives/nvidia--nvidia-smi")
    t.link("/etc/alternatives/nvidia--nvidia-smi", "/usr/lib/nvidia/current/nvidia-smi")
    t.firmware("/lib/firmware")
    t.kernel(VERSION)
    t.devices()
    return t.finish()


def nvidia_nnn(root: Path) -> Path:
    """Old Ubuntu driver packages: /usr/lib/nvidia-550 (in ld.so.conf.d), with the PTX JIT
    compiler in the multiarch dir: fixed dirs missed one or the other."""
    t = Tree(root)
    t.system_libraries("/usr/lib/x86_64-linux-gnu")
    t.libraries("/usr/lib/nvidia-550", {**UTILITY, "libcuda.so": "1", "libnvidia-opencl.so": "1"})
    t.libraries("/usr/lib/x86_64-linux-gnu", {"libnvidia-ptxjitcompiler.so": "1"})
    t.binaries("/usr/lib/nvidia-550/bin", ("nvidia-smi", "nvidia-persistenced"))
    t.link("/usr/bin/nvidia-smi", "../lib/nvidia-550/bin/nvidia-smi")
    t.kernel(VERSION)
    t.devices()
    return t.finish()


def gcp(root: Path) -> Path:
    """GCP Container-Optimized OS: the driver installer's /var/lib/nvidia/{lib64,bin}, not
    in the host's ld cache (the profile's library_dirs find it)."""
    t = Tree(root)
    t.system_libraries("/lib64")
    t.libraries("/var/lib/nvidia/lib64", {**UTILITY, **COMPUTE}, cache=False)
    t.binaries("/var/lib/nvidia/bin", ("nvidia-smi", "nvidia-cuda-mps-control"))
    t.firmware("/var/lib/nvidia/firmware")
    t.kernel(VERSION)
    t.devices({k: v for k, v in NODES.items() if k != "nvidia-modeset"})
    return t.finish()


def stale(root: Path, kernel: str | None = VERSION) -> Path:
    """An upgrade that left the old driver's libraries (and firmware) beside the new ones;
    the ld cache lists the old driver's dir first."""
    t = Tree(root)
    multi = "/usr/lib/x86_64-linux-gnu"
    t.system_libraries(multi)
    t.libraries("/opt/nvidia-old/lib", {"libcuda.so": "1", "libnvidia-ml.so": "1"}, version=OLD)
    t.libraries(multi, {"libcuda.so": "1", "libnvidia-ml.so": "1", "libnvidia-cfg.so": "1"})
    t.file(f"{multi}/libcuda.so.{OLD}", library("libcuda.so.1", 64, "old copy"))
    t.file(f"{multi}/libcuda.so.{VERSION}.away", library("libcuda.so.1", 64, "backup"))
    t.binaries("/usr/bin", ("nvidia-smi",))
    t.firmware("/lib/firmware")
    t.firmware("/lib/firmware", OLD)
    if kernel:
        t.kernel(kernel)
    t.devices()
    return t.finish()


def mps(root: Path) -> Path:
    """RHEL with an MPS control daemon that a systemd unit starts with its own pipe and log
    dirs (CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps, CUDA_MPS_LOG_DIRECTORY=
    /var/log/nvidia-mps): the config names the pipe dir (`variables`); the log dir is the
    daemon's, not the clients'. Nothing at the default /tmp/nvidia-mps."""
    t = Tree(root)
    t.system_libraries("/usr/lib64")
    t.libraries("/usr/lib64", {**UTILITY, **COMPUTE})
    t.binaries("/usr/bin")
    t.firmware("/lib/firmware")
    t.socket(f"{MPS_PIPE_DIR}/control")
    t.file(f"{MPS_PIPE_DIR}/control_lock")
    t.file(f"{MPS_PIPE_DIR}/nvidia-cuda-mps-control.pid", b"2101\n")
    t.file("/var/log/nvidia-mps/control.log", b"[2024-03-01 10:00:00.000 Control  2101] Start\n")
    t.file(
        "/etc/systemd/system/nvidia-mps.service",
        f"[Service]\nEnvironment=CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_DIR}\n"
        "Environment=CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps\n"
        "ExecStart=/usr/bin/nvidia-cuda-mps-control -d\n".encode(),
    )
    t.kernel(VERSION, "proc")
    t.devices()
    return t.finish()


def legacy_tls(root: Path) -> Path:
    """Ubuntu 16.04's nvidia-340 packages (glibc 2.23): the driver in versioned dirs
    /usr/lib/nvidia-340 and /usr/lib32/nvidia-340 named by an ld.so.conf.d entry (through
    /etc/alternatives), libnvidia-tls twice in each: the classic one and tls/'s for the new
    TLS ABI, which the ld cache lists first (a tls hwcap entry); libcuda (libcuda1-340) and
    OpenCL in the multiarch dirs; no GSP firmware (340 has none)."""
    t = Tree(root)
    multi, i386 = "/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu"
    v = LEGACY
    lib, lib32 = f"/usr/lib/nvidia-{v.split('.')[0]}", f"/usr/lib32/nvidia-{v.split('.')[0]}"
    t.system_libraries(multi)
    tls = {"libnvidia-tls.so": ""}
    for directory, bits in ((lib, 64), (lib32, 32)):
        t.libraries(f"{directory}/tls", tls, version=v, bits=bits, hwcap=TLS_HWCAP)
        t.libraries(directory, tls, version=v, bits=bits)
    t.libraries(
        lib, {"libnvidia-ml.so": "1", "libnvidia-cfg.so": "1", "libnvidia-compiler.so": ""}, v
    )
    t.libraries(lib, {"libnvidia-encode.so": "1", "libnvcuvid.so": "1", "libnvidia-fbc.so": "1"}, v)
    t.libraries(lib, {"libnvidia-glcore.so": "", "libnvidia-ifr.so": "1"}, v)
    t.libraries(f"{lib}/vdpau", {"libvdpau_nvidia.so": "1"}, version=v, cache=False)
    t.libraries(lib32, {"libnvidia-ml.so": "1", "libnvidia-glcore.so": ""}, version=v, bits=32)
    t.libraries(multi, {"libcuda.so": "1", "libnvidia-opencl.so": "1"}, version=v)
    t.libraries(i386, {"libcuda.so": "1"}, version=v, bits=32)
    t.file(f"{lib}/ld.so.conf", f"{lib}\n{lib32}\n".encode())
    t.link("/etc/alternatives/x86_64-linux-gnu_gl_conf", f"{lib}/ld.so.conf")
    t.link(
        "/etc/ld.so.conf.d/x86_64-linux-gnu_GL.conf", "/etc/alternatives/x86_64-linux-gnu_gl_conf"
    )
    t.file("/etc/ld.so.conf", b"include /etc/ld.so.conf.d/*.conf\n")
    t.binaries("/usr/bin", ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced"))
    t.binaries("/usr/bin", ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"))
    t.kernel(v, "proc")
    t.devices({k: v for k, v in NODES.items() if k != "nvidia-uvm-tools"})
    return t.finish()


def biarch_conf(root: Path) -> Path:
    """A driver volume (the root a driver container shares) that never ran ldconfig: no
    /etc/ld.so.cache; the driver in /usr/lib/nvidia-550 and its 32-bit copies, of the
    same names, in /usr/lib32/nvidia-550, both named in ld.so.conf.d, the 32-bit one first
    (i386-linux-gnu_GL.conf sorts before x86_64-linux-gnu_GL.conf). Only the ELF class
    tells the copies apart."""
    t = Tree(root)
    lib, lib32 = "/usr/lib/nvidia-550", "/usr/lib32/nvidia-550"
    t.libraries(lib32, {"libcuda.so": "1", "libnvidia-ml.so": "1"}, bits=32, cache=False)
    t.libraries(
        lib, {**UTILITY, "libcuda.so": "1", "libnvidia-ptxjitcompiler.so": "1"}, cache=False
    )
    t.file("/etc/ld.so.conf", b"# libc default configuration\ninclude /etc/ld.so.conf.d/*.conf\n")
    t.file("/etc/ld.so.conf.d/i386-linux-gnu_GL.conf", f"# 32-bit GL\n{lib32}\n".encode())
    t.file("/etc/ld.so.conf.d/x86_64-linux-gnu_GL.conf", f"{lib}\n".encode())
    t.file("/etc/ld.so.conf.d/libc.conf", b"/usr/local/lib\n")
    t.binaries("/usr/bin", ("nvidia-smi",))
    t.firmware("/lib/firmware")
    t.kernel(VERSION)
    t.devices()
    return t.finish(cache=None)


def runfile(root: Path) -> Path:
    """A driver volume made of the files NVIDIA's .run package carries (`--extract-only`,
    copied into /usr/lib64 without running the installer, which makes the soname links and
    runs ldconfig): versioned libraries only, no soname links, no ld cache."""
    t = Tree(root)
    t.libraries("/usr/lib64", {**UTILITY, **COMPUTE}, cache=False, soname_links=False)
    t.binaries("/usr/bin", ("nvidia-smi",))
    t.firmware("/lib/firmware")
    t.kernel(VERSION)
    t.devices()
    return t.finish(cache=None)


def arch(root: Path, cache: bool = False) -> Path:
    """Arch Linux's merged layout (the filesystem package: /usr/lib64 -> lib, /lib and
    /lib64 -> usr/lib, /usr/sbin -> bin) with nvidia-utils in /usr/lib and
    lib32-nvidia-utils in /usr/lib32. Without `cache` a driver volume that never ran
    ldconfig: the profile's library_dirs find the driver, /usr/lib64 first, so every file
    is reached through the symlinked folder, beside soname links that name it plainly."""
    t = Tree(root)
    for directory in ("/usr/lib", "/usr/lib32", "/usr/bin"):
        t.path(directory).mkdir(parents=True, exist_ok=True)
    t.link("/usr/lib64", "lib")
    t.link("/usr/sbin", "bin")
    for top in ("lib", "lib64"):
        t.link(f"/{top}", "usr/lib")
    t.link("/bin", "usr/bin")
    t.system_libraries("/usr/lib")
    t.libraries("/usr/lib", {**UTILITY, **COMPUTE}, cache=cache)
    t.libraries("/usr/lib32", {"libcuda.so": "1", "libnvidia-ml.so": "1"}, bits=32, cache=cache)
    t.binaries("/usr/bin", ("nvidia-smi", "nvidia-persistenced"))
    t.firmware("/usr/lib/firmware")
    t.kernel(VERSION)
    t.devices()
    return t.finish(cache="/etc/ld.so.cache" if cache else None)


LAYOUTS = {
    "ubuntu": ubuntu,
    "rhel": rhel,
    "debian": debian,
    "nvidia-nnn": nvidia_nnn,
    "gcp": gcp,
    "stale": stale,
    "mps": mps,
    "legacy-tls": legacy_tls,
    "biarch-conf": biarch_conf,
    "runfile": runfile,
    "arch": arch,
}
