"""What the benchmarks run: an installed-like hook, drivers, and fresh fake containers.

The hook is timed as the runtime runs it: the real executable (packaging/ocihook-hook)
under `python3 -I`, the OCI state JSON on stdin, a real bundle with config.json. For
injection it needs what runc has set up at createRuntime; `Sandbox` makes exactly that,
fresh for every run (mounts would pile up otherwise):

- a process in a private mount namespace in which an overlay of the image (fresh upper
  dir) is mounted at the rootfs path, like runc's rootfs before pivot_root;
- a cgroup v1 devices cgroup with that process in it, with runc's default device rules;
- a bundle dir with a config.json naming that rootfs and cgroup.

The process lives until the sandbox is closed; then the namespace and its mounts vanish.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support import images, podman, synthetic  # noqa: E402
from tests.support.sandbox import (  # noqa: E402
    CGROUP_V1_DEVICES,
    RUNC_DEFAULT_RULES,
    FakeRuntimeProcess,
    overlay,
)

WORK = REPO / "build" / "bench"
PROFILES = REPO / "packaging" / "profiles"
ANNOTATION = podman.ANNOTATION


class Install:
    """A venv like an installed package: ocihook importable through a plain .pth (no editable
    finder, no pip), its .pyc compiled first, and the hook executable with a `python3 -I`
    shebang of that venv's interpreter. `checkout`: the ocihook source tree (default: this
    one; the bench's --baseline installs another the same way)."""

    def __init__(self, work: Path = WORK, checkout: Path = REPO) -> None:
        self.cache_tag = "" if checkout == REPO else work.name
        self.dir = work / "venv"
        self.python = self.dir / "bin" / "python3"
        self.hook = work / "ocihook-hook"
        if not self.python.exists():
            subprocess.run(
                ["/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip"]
                + [str(self.dir)],
                check=True,
            )
        site = subprocess.run(
            [
                str(self.python),
                "-I",
                "-c",
                "import sysconfig; print(sysconfig.get_path('purelib'))",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        Path(site, "ocihook-bench.pth").write_text(f"{checkout}\n")
        # PYTHONDONTWRITEBYTECODE may be set here: compile explicitly, as a package install does.
        subprocess.run(
            [str(self.python), "-I", "-m", "compileall", "-q", str(checkout / "ocihook")],
            check=True,
        )
        podman.write_hook_executable(self.hook, str(self.python), checkout)
        # The `ocihook` command (what the CDI spec's createContainer hooks run), installed alike.
        self.cli = work / "ocihook"
        # A baseline from before the packages by stage has its command line in ocihook/cli.py.
        flat = (checkout / "ocihook" / "cli.py").is_file()
        module = "ocihook.cli" if flat else "ocihook.cli.main"
        self.cli.write_text(
            f"#!{self.python} -I\nfrom {module} import main\n\nraise SystemExit(main())\n"
        )
        self.cli.chmod(0o755)

    def floor_cmd(self) -> list[str]:
        return [str(self.python), "-I", "-c", "pass"]


class Driver:
    """A synthetic driver under WORK/drivers/<name> and a config.yaml that uses it."""

    def __init__(self, name: str, work: Path = WORK, **build) -> None:
        self.name = name
        self.root = work / "drivers" / name
        shutil.rmtree(self.root, ignore_errors=True)
        synthetic.build_driver(self.root, **build)
        self.dir = work / "config" / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_dir = self.dir / "state"
        self.cache_dir = self.dir / "cache"
        shutil.rmtree(self.state_dir, ignore_errors=True)
        shutil.rmtree(self.cache_dir, ignore_errors=True)
        self.config = self.dir / "config.yaml"
        config = synthetic.config(self.root, self.dir, debug=False)
        self.config.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML
        self.libraries = sum(
            1 for p in (self.root / synthetic.MULTIARCH).iterdir() if not p.is_symlink()
        )

    def hook_args(self) -> list[str]:
        return ["--config", str(self.config), "--cache-dir", str(self.cache_dir)]

    def record(self, container_id: str) -> dict:
        return json.loads((self.state_dir / f"{container_id}.json").read_text())


def full_driver(work: Path = WORK) -> Driver:
    """Sized like a real driver: 50 libraries with soname links, 8 binaries, 4 firmware
    files, 8 device nodes and 3 control nodes."""
    return Driver(
        "full",
        work,
        extra_libraries=48,
        extra_binaries=7,
        firmware=4,
        devices={**synthetic.DEVICES, **synthetic.MORE_DEVICES},
        control={**synthetic.CONTROL, **synthetic.MORE_CONTROL},  # all picked: host_devices
    )


def image_rootfs(work: Path = WORK) -> Path:
    """A small glibc image of RHEL layout (busybox + glibc): the hook runs ldconfig in it."""
    root = work / "image"
    shutil.rmtree(root, ignore_errors=True)
    return images.glibc_rootfs(root, "rhel")


def state_json(
    container_id: str,
    pid: int,
    bundle: Path,
    status: str = "creating",
    annotations: dict | None = None,
) -> bytes:
    """The state runc hands a hook: config.json's annotations are copied into it."""
    return json.dumps(
        {
            "ociVersion": "1.0.2",
            "id": container_id,
            "status": status,
            "pid": pid,
            "bundle": str(bundle),
            "annotations": annotations or {},
        }
    ).encode()


def bundle_config(rootfs: Path, annotations: dict, cgroups_path: str | None) -> dict:
    linux_section: dict = {
        "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
    }
    if cgroups_path:
        linux_section["cgroupsPath"] = cgroups_path
    return {
        "ociVersion": "1.0.2",
        "process": {
            "args": ["/bin/true"],
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
            "cwd": "/",
        },
        "root": {"path": str(rootfs)},
        "annotations": annotations,
        "linux": linux_section,
    }


def static_bundle(work: Path = WORK) -> Path:
    """A bundle whose config.json asks for nothing (the no-request case)."""
    bundle = work / "bundle-none"
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "rootfs").mkdir(exist_ok=True)
    config = bundle_config(bundle / "rootfs", {"org.opencontainers.image.os": "linux"}, None)
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


class Sandbox:
    """One fresh fake container at runc's createRuntime point (see the module docstring)."""

    counter = 0

    def __init__(self, image: Path, annotations: dict, work: Path = WORK) -> None:
        if not (CGROUP_V1_DEVICES / "devices.allow").exists():
            raise RuntimeError(
                "the hook benchmarks need a cgroup v1 devices controller at "
                f"{CGROUP_V1_DEVICES} (this host has none)"
            )
        Sandbox.counter += 1
        self.id = f"bench-{os.getpid()}-{Sandbox.counter}"
        self.dir = work / "sandboxes" / self.id
        shutil.rmtree(self.dir, ignore_errors=True)
        for sub in ("upper", "work", "rootfs", "bundle"):
            (self.dir / sub).mkdir(parents=True)
        self.rootfs = self.dir / "rootfs"
        self.bundle = self.dir / "bundle"
        self.cgroups_path = f"/ocihook-bench/{self.id}"
        self.cgroup = CGROUP_V1_DEVICES / self.cgroups_path.lstrip("/")
        self.annotations = annotations
        config = bundle_config(self.rootfs, annotations, self.cgroups_path)
        (self.bundle / "config.json").write_text(json.dumps(config))
        mount = overlay(image, self.dir / "upper", self.dir / "work", self.rootfs)
        try:
            self.process = FakeRuntimeProcess(self.cgroup, RUNC_DEFAULT_RULES, mounts=(mount,))
        except RuntimeError as error:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise RuntimeError(f"sandbox {self.id}: {error}") from None
        self.pid = self.process.pid

    def state(self) -> bytes:
        return state_json(self.id, self.pid, self.bundle, annotations=self.annotations)

    def close(self) -> None:
        self.process.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ScratchFs:
    """A standard ext4 file system (a sparse image file, loop-mounted at WORK/fs) for the
    fake containers' overlay upper dirs and podman's store while the block runs.

    This machine's root file system is an ext4 mounted with a non-standard `resv_strict`
    (and `discard`): there, one file create costs from 10 us to over 0.5 ms, minute by minute,
    where the same 112 creates on a plain ext4 on the same disk take 1.3 ms every time (see
    docs/performance.md). Every container start creates files in its rootfs, so those rows
    would time that mount option; on this file system they time the hook and the runtime.
    Unmounted and deleted on exit; a leftover from a killed run is unmounted first."""

    def __init__(self, work: Path = WORK, size: str = "8G") -> None:
        self.path = work / "fs"
        self.image = work / "fs.img"
        self.size = size

    def __enter__(self) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        self._unmount()
        self.image.unlink(missing_ok=True)
        subprocess.run(["truncate", "-s", self.size, str(self.image)], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(self.image)], check=True)
        subprocess.run(["mount", "-o", "loop", str(self.image), str(self.path)], check=True)
        return self.path

    def __exit__(self, *exc: object) -> None:
        self._unmount()
        self.image.unlink(missing_ok=True)

    def _unmount(self) -> None:
        while os.path.ismount(self.path):
            subprocess.run(["umount", "-l", str(self.path)], check=True)


def run_hook(install: Install, driver: Driver | None, state: bytes, args=None) -> float:
    """Run the hook executable once; seconds of wall time. Raises on a non-zero exit. Each
    install keeps its own compiled-config cache (`cache_tag`): two versions sharing one
    would each find the other's stale and compile again at every run."""
    if args is None:
        args = driver.hook_args()
        if install.cache_tag:
            args[args.index("--cache-dir") + 1] += f"-{install.cache_tag}"
    return timed([str(install.hook), *args], state)


def timed(cmd: list[str], stdin: bytes | None = None, timeout: float = 120) -> float:
    start = time.perf_counter()
    result = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[:4])}... exited {result.returncode}: "
            f"{(result.stderr or result.stdout).decode(errors='replace').strip()[-400:]}"
        )
    return elapsed
