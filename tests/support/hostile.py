"""Hostile inputs: canary host dirs, snapshots of host trees, crafted bundles, hostile images.

A canary is a host directory with a marker file that an attack aims at; the tests
snapshot it (and /dev, and the driver's source root) before and after, and demand
that nothing changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support import images, podman

MARKER = "canary: the host's, must stay untouched\n"


def make_canary(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "marker").write_text(MARKER)
    (path / "libsynth.so.1.2.3").write_text("host canary library\n")
    (path / "sub").mkdir(exist_ok=True)
    return path


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Every entry under `roots` (not following links): type, mode, size, mtime, rdev, hash."""
    result: dict[str, tuple] = {}
    for root in roots:
        if not os.path.lexists(root):
            result[str(root)] = ("missing",)
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [*dirnames, *filenames, ""]:
                path = os.path.join(dirpath, name) if name else dirpath
                st = os.lstat(path)
                digest = ""
                if stat.S_ISREG(st.st_mode) and st.st_size < (1 << 20):
                    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                elif stat.S_ISLNK(st.st_mode):
                    digest = os.readlink(path)
                result[path] = (
                    stat.S_IFMT(st.st_mode),
                    stat.S_IMODE(st.st_mode),
                    st.st_size,
                    st.st_mtime_ns,
                    st.st_rdev,
                    digest,
                )
    return result


def host_dev_entries() -> set[str]:
    return set(os.listdir("/dev"))


# -- crafted bundles for running the hook executable directly -------------------------------


@dataclass
class HookResult:
    returncode: int
    stdout: str
    stderr: str


def write_bundle(bundle: Path, config: dict) -> Path:
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


def state(bundle: str, pid: int | None, devices: str | None = "all", **extra) -> dict:
    body = {"ociVersion": "1.0.2", "id": "attack0", "status": "creating", "bundle": bundle}
    if pid is not None:
        body["pid"] = pid
    if devices is not None:
        body["annotations"] = {podman.ANNOTATION: devices}
    body.update(extra)
    return body


def run_hook(
    hook: Path,
    config: Path,
    cache_dir: Path,
    data: bytes | dict,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> HookResult:
    """Run the installed hook executable as the runtime would (explicit env, state on stdin)."""
    if isinstance(data, dict):
        data = json.dumps(data).encode()
    result = subprocess.run(
        [str(hook), "--config", str(config), "--cache-dir", str(cache_dir)],
        input=data,
        capture_output=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"} if env is None else env,
        cwd=cwd,
        timeout=60,
    )
    return HookResult(
        result.returncode,
        result.stdout.decode(errors="replace"),
        result.stderr.decode(errors="replace"),
    )


def python_trap(directory: Path, marker: Path) -> Path:
    """Modules that create `marker` if Python ever imports them from `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    trap = f"open({str(marker)!r}, 'w').write('imported')\n"
    for module in ("json", "os", "re", "stat", "ctypes", "sitecustomize", "usercustomize"):
        (directory / f"{module}.py").write_text(trap)
    package = directory / "ocihook"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text(trap)
    (package / "hook.py").write_text(trap + "def main():\n    return 0\n")
    return directory


def preload_trap(directory: Path, marker: Path) -> Path:
    """A shared library whose constructor creates `marker` (for LD_PRELOAD in an env)."""
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "trap.c"
    source.write_text(
        "#include <fcntl.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void trap(void) {\n"
        f'  int fd = open("{marker}", O_CREAT | O_WRONLY, 0644);\n'
        "  if (fd >= 0) close(fd);\n}\n"
    )
    library = directory / "libtrap.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(library), str(source)],
        check=True,
        capture_output=True,
    )
    return library


# -- hostile images --------------------------------------------------------------------------


def rhel_tree(root: Path) -> Path:
    """A glibc image laid out like RHEL (/usr/lib64), as a directory to make hostile."""
    return images.glibc_rootfs(root, "rhel")


def replace(path: Path, kind: str, target: str = "") -> None:
    """Replace `path` (file or dir) with a symlink to `target`, a fifo, a socket or a device."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        import shutil

        shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        os.symlink(target, path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "chardev":
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null
    elif kind == "blockdev":
        os.mknod(path, 0o666 | stat.S_IFBLK, os.makedev(7, 0))  # loop0
    elif kind == "file":
        path.write_text("image file\n")
    else:
        raise ValueError(kind)


def import_tree(root: Path, name: str) -> str:
    return images.import_image(root, name)


def python() -> str:
    return sys.executable
