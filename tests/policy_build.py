"""Build, offline and once per source change, a real policy with our module for tests.

The policy is what a Debian host with the module installed has: Debian's refpolicy
(selinux-policy-default: base and every module it ships), refpolicy's `container` module
compiled from selinux-policy-src (Debian does not ship it built), and `ocihook` from
selinux/, all installed with the real `semodule` into a private store (`semodule -p ROOT`).
libsemanage links, expands and writes `policy.33` and the sorted `file_contexts` exactly
as on a host. The result is cached under build/selinux-test-policy/<hash of the sources>/.
"""

from __future__ import annotations

import bz2
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODULE_DIR = REPO / "selinux"
CACHE_ROOT = REPO / "build" / "selinux-test-policy"
POLICY_SRC = Path("/usr/src/selinux-policy-src.tar.zst")
DEBIAN_MODULES = Path("/usr/share/selinux/default")
DEVEL_MAKEFILE = Path("/usr/share/selinux/devel/Makefile")
STORE = "ocitest"
MODULE_FILES = ("ocihook.te", "ocihook.if", "ocihook.fc", "Makefile")


def source_key() -> str:
    """A hash of everything the built policy depends on."""
    digest = hashlib.sha256()
    for name in MODULE_FILES:
        digest.update(name.encode() + b"\0" + (MODULE_DIR / name).read_bytes())
    digest.update(Path(__file__).read_bytes())
    for path in [POLICY_SRC, DEVEL_MAKEFILE, *sorted(DEBIAN_MODULES.glob("*.pp.bz2"))]:
        stat = path.stat()
        digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def _run(argv: list[str], cwd: Path) -> None:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{result.stdout}\n{result.stderr}")


def build_module(workdir: Path) -> Path:
    """Build ocihook.pp with selinux/Makefile in a copy of selinux/ under `workdir`."""
    target = workdir / "ocihook"
    target.mkdir(parents=True)
    for name in MODULE_FILES:
        shutil.copy2(MODULE_DIR / name, target / name)
    _run(["make", "-C", str(target)], cwd=target)
    return target / "ocihook.pp"


def build_container_module(workdir: Path) -> Path:
    """Compile refpolicy's container module from selinux-policy-src with the devel Makefile."""
    src = workdir / "src"
    src.mkdir()
    _run(
        ["tar", "--zstd", "-xf", str(POLICY_SRC), "-C", str(src), "--wildcards",
         "*/policy/modules/services/container.*"],
        cwd=workdir,
    )  # fmt: skip
    target = workdir / "container"
    target.mkdir()
    for path in src.glob("*/policy/modules/services/container.*"):
        shutil.copy2(path, target / path.name)
    _run(["make", "-f", str(DEVEL_MAKEFILE), "container.pp"], cwd=target)
    return target / "container.pp"


def _debian_modules(workdir: Path) -> list[Path]:
    """Decompress Debian's base.pp and module packages (base first)."""
    target = workdir / "debian"
    target.mkdir()
    packages = sorted(DEBIAN_MODULES.glob("*.pp.bz2"), key=lambda p: p.name != "base.pp.bz2")
    out = []
    for package in packages:
        pp = target / package.name[: -len(".bz2")]
        pp.write_bytes(bz2.decompress(package.read_bytes()))
        out.append(pp)
    return out


def _build(workdir: Path) -> None:
    root = workdir / "root"
    (root / "var/lib/selinux").mkdir(parents=True)
    (root / "etc/selinux" / STORE).mkdir(parents=True)
    packages = [*_debian_modules(workdir), build_container_module(workdir), build_module(workdir)]
    _run(
        ["semodule", "--noreload", "-p", str(root), "-s", STORE, "-X", "100", "-i",
         *map(str, packages)],
        cwd=workdir,
    )  # fmt: skip
    shutil.copy2(root / "etc/selinux" / STORE / "policy/policy.33", workdir / "policy.33")
    shutil.copy2(
        root / "etc/selinux" / STORE / "contexts/files/file_contexts", workdir / "file_contexts"
    )
    shutil.copy2(workdir / "ocihook/ocihook.pp", workdir / "ocihook.pp")
    for name in ("root", "debian", "src"):
        shutil.rmtree(workdir / name)


def build_dir(workdir: Path | None = None) -> Path:
    """The directory with policy.33, file_contexts and ocihook.pp, built when missing."""
    cache_root = Path(workdir) if workdir is not None else CACHE_ROOT
    cache_root.mkdir(parents=True, exist_ok=True)
    final = cache_root / source_key()
    with open(cache_root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / "policy.33").exists():
            return final
        tmp = Path(tempfile.mkdtemp(prefix="build-", dir=cache_root))
        os.chmod(tmp, 0o755)
        try:
            _build(tmp)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def build_linked_policy(workdir: Path | None = None) -> Path:
    """Path of the binary policy (Debian refpolicy + container + ocihook), built once."""
    return build_dir(workdir) / "policy.33"


def linked_file_contexts(workdir: Path | None = None) -> Path:
    """Path of the file_contexts that semodule wrote for that same policy."""
    return build_dir(workdir) / "file_contexts"


if __name__ == "__main__":
    print(build_linked_policy())
