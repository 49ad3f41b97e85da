"""The Kubernetes node installer's test bed: an installer image built locally (no registry)
and a scratch host root with a real Python, the synthetic driver and the host's ldconfig."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from tests.support import images

REPO = Path(__file__).resolve().parent.parent.parent
INSTALLER = REPO / "packaging/kubernetes/ocihook-installer"
DIST = Path("/usr/lib/python3/dist-packages")
# The hook's dependencies as Debian packages them for /usr/bin/python3 (the Containerfile
# uses pip install --target instead).
DEPENDENCIES = (
    "click",
    "yaml",
    "_yaml",
    "jsonschema",
    "attr",
    "attrs",
    "pyrsistent",
    "_pyrsistent_version.py",
)
PYTHON = "/usr/bin/python3.11"
PYTHON_LIBS = (
    "/lib/x86_64-linux-gnu/libm.so.6",
    "/lib/x86_64-linux-gnu/libz.so.1",
    "/lib/x86_64-linux-gnu/libexpat.so.1",
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/x86_64-linux-gnu/libffi.so.8",
)


def _copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copy2(os.path.realpath(src), dest)


def payload(root: Path, selinux_module: bool = True) -> Path:
    """/payload as the Containerfile lays it out: lib (ocihook + dependencies), profiles, and
    selinux/ocihook.pp (here a stand-in file: the test's semodule is a stand-in too)."""
    _copy(REPO / "ocihook", root / "lib/ocihook")
    for name in DEPENDENCIES:
        _copy(DIST / name, root / "lib" / name)
    _copy(REPO / "packaging/profiles", root / "profiles")
    if selinux_module:
        (root / "selinux").mkdir(parents=True)
        (root / "selinux/ocihook.pp").write_bytes(b"stand-in policy package\n")
    return root


def installer_image(root: Path, name: str, extra_lib: dict[str, str] | None = None) -> str:
    """FROM scratch: static busybox (every applet), the payload, the installer script;
    `extra_lib`: more files in the payload's lib dir (relative path -> text)."""
    (root / "bin").mkdir(parents=True)
    shutil.copy2(images.BUSYBOX, root / "bin/busybox")
    applets = subprocess.run(
        [images.BUSYBOX, "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        if applet != "busybox":
            os.symlink("busybox", root / "bin" / applet)
    for d in ("tmp", "proc", "sys", "dev", "etc", "host", "config", "usr/local/bin"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    payload(root / "payload")
    for relative, text in (extra_lib or {}).items():
        (root / "payload/lib" / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / "payload/lib" / relative).write_text(text)
    shutil.copy2(INSTALLER, root / "usr/local/bin/ocihook-installer")
    return images.import_image(root, name)


def host_root(root: Path, synth_root: Path) -> Path:
    """A node's root file system in miniature: /usr/bin/python3 with its stdlib and libraries,
    busybox, the host's static ldconfig, the synthetic driver under /srv/synth, and a
    stand-in `semodule` that keeps its module store in /var/lib/selinux-standin; /var/run and
    /opt are symlinks (absolute and relative) as on Debian and RHCOS."""
    _copy(Path(PYTHON), root / "usr/bin/python3")
    for lib in PYTHON_LIBS:
        _copy(Path(lib), root / lib.lstrip("/"))
    _copy(Path("/lib64/ld-linux-x86-64.so.2"), root / "lib64/ld-linux-x86-64.so.2")
    shutil.copytree(
        "/usr/lib/python3.11",
        root / "usr/lib/python3.11",
        symlinks=True,
        ignore=shutil.ignore_patterns("__pycache__", "test", "site-packages", "dist-packages"),
    )
    # Byte code as a distribution's python package ships it (else the first run writes it).
    subprocess.run(
        ["chroot", str(root), "/usr/bin/python3", "-m", "compileall", "-q", "/usr/lib/python3.11"],
        check=True,
        capture_output=True,
    )
    _copy(Path(images.BUSYBOX), root / "bin/busybox")
    os.symlink("busybox", root / "bin/sh")
    _copy(Path("/sbin/ldconfig"), root / "sbin/ldconfig")
    (root / "srv").mkdir()
    subprocess.run(["cp", "-a", str(synth_root), str(root / "srv/synth")], check=True)
    for d in ("etc", "var/opt", "run", "tmp", "proc", "dev", "var/lib/selinux-standin"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.mknod(root / "dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.chmod(root / "dev/null", 0o666)
    # Links as nodes have them: Debian's absolute /var/run -> /run, RHCOS's /opt -> var/opt.
    os.symlink("/run", root / "var/run")
    os.symlink("var/opt", root / "opt")
    (root / "usr/sbin").mkdir(parents=True, exist_ok=True)
    standin = root / "usr/sbin/semodule"
    standin.write_text(
        "#!/bin/sh\n# stand-in semodule: -i FILE loads, -r NAME removes\n"
        "store=/var/lib/selinux-standin\n"
        'case "$1" in\n'
        '  -i) /bin/busybox cp "$2" "$store/$(/bin/busybox basename "$2" .pp)" ;;\n'
        '  -r) /bin/busybox rm "$store/$2" ;;\n'
        "  *) exit 2 ;;\n"
        "esac\n"
    )
    standin.chmod(0o755)
    return root


SELINUX_BINDINGS = (
    "/usr/lib/python3/dist-packages/selinux/__init__.py",
    "/usr/lib/python3/dist-packages/selinux/_selinux.cpython-311-x86_64-linux-gnu.so",
    "/lib/x86_64-linux-gnu/libselinux.so.1",
    "/lib/x86_64-linux-gnu/libpcre2-8.so.0",
)
# PyPI's selinux 0.3.0 in miniature: what its __init__ does on a node whose /usr/bin/python3.X
# site dir has no bindings (Debian's are in /usr/lib/python3/dist-packages): it finds none,
# and answers as if SELinux were off.
SELINUX_SHIM = {
    "selinux/__init__.py": "# stand-in for PyPI's selinux shim\n"
    "def is_selinux_enabled():\n    return 0\n",
    "selinux-0.3.0.dist-info/METADATA": "Name: selinux\nVersion: 0.3.0\n",
}


def add_selinux_bindings(root: Path) -> None:
    """Debian's libselinux Python bindings (python3-selinux) in a host root."""
    for path in SELINUX_BINDINGS:
        _copy(Path(path), root / path.lstrip("/"))


def snapshot(root: Path, skip: tuple[str, ...] = ("proc",)) -> dict[str, tuple]:
    """Every path under `root`: type, mode, owner, and content hash or link target."""
    result = {}
    for directory, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        if rel_dir.split(os.sep)[0] in skip:
            dirs[:] = []
            continue
        for name in dirs + files:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    detail = hashlib.sha256(f.read()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                detail = os.readlink(path)
            else:
                detail = st.st_rdev
            result[os.path.relpath(path, root)] = (st.st_mode, st.st_uid, st.st_gid, detail)
    return result


# The device plugin's libraries for the DaemonSet's image: what `ocihook[deviceplugin]`
# needs, copied from this venv's distributions (the Containerfile pip-installs them).
PLUGIN_REQUIREMENTS = ("grpcio", "protobuf", "prometheus_client", "click", "PyYAML", "jsonschema")
PLUGIN_LIBS = (
    "/lib/x86_64-linux-gnu/libstdc++.so.6",
    "/lib/x86_64-linux-gnu/libgcc_s.so.1",
    "/lib/x86_64-linux-gnu/librt.so.1",
    "/lib/x86_64-linux-gnu/libpthread.so.0",
    # Python's ssl module, which prometheus_client's HTTP server imports
    "/lib/x86_64-linux-gnu/libssl.so.3",
    "/lib/x86_64-linux-gnu/libcrypto.so.3",
)


def _distribution_files(name: str, seen: set[str]) -> list[Path]:
    """Every file of distribution `name` and of what it requires (no extras), once."""
    import importlib.metadata as metadata
    import re

    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return []
    seen.add(key)
    dist = metadata.distribution(name)
    files = [Path(dist.locate_file(f)) for f in dist.files or ()]
    if not files:  # Debian's egg-info lists no files: its top-level packages, whole
        base = Path(dist.locate_file(""))
        for top in (dist.read_text("top_level.txt") or "").split():
            found = [base / top] if (base / top).is_dir() else list(base.glob(f"{top}*.py"))
            found += list(base.glob(f"{top}.*.so"))
            files += [f for d in found for f in ([d] if d.is_file() else d.rglob("*"))]
    for requirement in dist.requires or ():
        if "extra ==" in requirement or "platform_system" in requirement:
            continue
        files += _distribution_files(re.split(r"[ ;<>=~!\[(]", requirement, maxsplit=1)[0], seen)
    return files


def daemonset_image(root: Path, name: str) -> str:
    """The DaemonSet's image as the Containerfile lays it out, FROM scratch: the installer
    (busybox, the payload, the script) and the device plugin: /usr/bin/python3 with its
    stdlib (this host's 3.11, standing in for the nodes' distribution), /plugin/lib (ocihook
    with its generated stubs, gRPC, protobuf, prometheus_client and the rest of
    ocihook[deviceplugin]), /usr/local/bin/ocihook, the profiles in /opt/ocihook/profiles."""
    (root / "bin").mkdir(parents=True)
    shutil.copy2(images.BUSYBOX, root / "bin/busybox")
    applets = subprocess.run(
        [images.BUSYBOX, "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        if applet != "busybox":
            os.symlink("busybox", root / "bin" / applet)
    for d in ("tmp", "proc", "sys", "dev", "etc", "host", "config", "usr/local/bin"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)
    payload(root / "payload")
    shutil.copy2(INSTALLER, root / "usr/local/bin/ocihook-installer")
    _copy(Path(PYTHON), root / "usr/bin/python3")
    for lib in PYTHON_LIBS + PLUGIN_LIBS:
        _copy(Path(lib), root / lib.lstrip("/"))
    _copy(Path("/lib64/ld-linux-x86-64.so.2"), root / "lib64/ld-linux-x86-64.so.2")
    shutil.copytree(
        "/usr/lib/python3.11",
        root / "usr/lib/python3.11",
        symlinks=True,
        ignore=shutil.ignore_patterns("__pycache__", "test", "site-packages", "dist-packages"),
    )
    lib = root / "plugin/lib"
    _copy(REPO / "ocihook", lib / "ocihook")
    seen: set[str] = set()
    for requirement in PLUGIN_REQUIREMENTS:
        for path in _distribution_files(requirement, seen):
            for site in map(Path, sys.path):
                if site.name in ("site-packages", "dist-packages") and path.is_relative_to(site):
                    if path.is_file() and "__pycache__" not in path.parts:
                        _copy(path, lib / path.relative_to(site))
                    break
    (root / "usr/local/bin/ocihook").write_text(
        '#!/usr/bin/python3 -I\nimport sys\nsys.path.insert(0, "/plugin/lib")\n'
        "from ocihook.cli.main import main\nsys.exit(main())\n"
    )
    (root / "usr/local/bin/ocihook").chmod(0o755)
    _copy(REPO / "packaging/profiles", root / "opt/ocihook/profiles")
    return root
