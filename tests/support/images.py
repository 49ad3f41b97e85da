"""Small container images built locally (no registry): busybox, and glibc images of two layouts."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

BUSYBOX = "/bin/busybox"
APPLETS = (
    "sh",
    "ls",
    "cat",
    "echo",
    "grep",
    "stat",
    "test",
    "touch",
    "mkdir",
    "readlink",
    "id",
    "wc",
    "sleep",
    "ln",
    "rm",
    "head",
    "mount",
    "true",
)
HOST_LIBC = "/lib/x86_64-linux-gnu/libc.so.6"
HOST_LOADER = "/lib64/ld-linux-x86-64.so.2"


def _busybox(root: Path) -> None:
    (root / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, root / "bin/busybox")
    for applet in APPLETS:
        os.symlink("busybox", root / "bin" / applet)
    for d in ("dev", "proc", "sys", "tmp", "etc", "run", "usr/bin"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")


def busybox_rootfs(root: Path) -> Path:
    """A static busybox image: no dynamic loader, so no ld cache."""
    _busybox(root)
    return root


def glibc_rootfs(root: Path, layout: str) -> Path:
    """busybox plus the host's glibc, laid out like Debian (multiarch) or RHEL (/usr/lib64).

    The RHEL layout lists /usr/lib64 in ld.so.conf: the Debian-built loader used here does
    not search /usr/lib64 by default, so a library there is found only through the cache.
    """
    _busybox(root)
    if layout == "debian":
        libdir = root / "usr/lib/x86_64-linux-gnu"
        libdir.mkdir(parents=True)
        os.symlink("usr/lib", root / "lib")
        (root / "usr/lib64").mkdir(parents=True)
        os.symlink("usr/lib64", root / "lib64")
        shutil.copy2(HOST_LIBC, libdir / "libc.so.6")
        shutil.copy2(os.path.realpath(HOST_LOADER), libdir / "ld-linux-x86-64.so.2")
        os.symlink(
            "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", root / "usr/lib64/ld-linux-x86-64.so.2"
        )
        (root / "etc/ld.so.conf.d").mkdir()
        (root / "etc/ld.so.conf.d/x86_64-linux-gnu.conf").write_text("/usr/lib/x86_64-linux-gnu\n")
    elif layout == "rhel":
        libdir = root / "usr/lib64"
        libdir.mkdir(parents=True)
        os.symlink("usr/lib64", root / "lib64")
        (root / "usr/lib").mkdir(exist_ok=True)
        os.symlink("usr/lib", root / "lib")
        shutil.copy2(HOST_LIBC, libdir / "libc.so.6")
        shutil.copy2(os.path.realpath(HOST_LOADER), libdir / "ld-linux-x86-64.so.2")
        (root / "etc/ld.so.conf.d").mkdir()
        (root / "etc/ld.so.conf.d/lib64.conf").write_text("/usr/lib64\n")
    else:
        raise ValueError(layout)
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    subprocess.run(["/sbin/ldconfig", "-r", str(root)], check=True)
    return root


def import_image(root: Path, name: str) -> str:
    """`podman import` the tree as localhost/NAME:latest (replacing an older one)."""
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(
        ["podman", "import", "-q", "-", f"localhost/{name}:latest"],
        stdin=tar.stdout,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    tar.wait()
    return f"localhost/{name}:latest"
