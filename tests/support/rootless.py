"""Real rootless podman for the tests: a dedicated ordinary user with subordinate id ranges, its
own runtime dir and image store, and an installed copy of the hook that it can read.

The user (USER) is created by `ensure_user` when missing (useradd, as root, as CI runs), with
/etc/subuid and /etc/subgid ranges, a home and /run/user/<uid> (0700, the user's: what
systemd-logind makes at login). The user, its ranges and its runtime dir are kept between
runs (another run may be using them at the same moment), and so is the user's podman pause
process (rootless podman's holder of the user namespace); what one run installs (`Install`:
a root-owned dir under /run with the package, the hook executable, the synthetic driver,
config, profiles and hooks dir), the images it imports and its containers' records are
removed when it ends.

podman runs as the user through runuser with an explicit environment (HOME, XDG_RUNTIME_DIR,
PATH), runc, the cgroupfs manager (rootless podman on this cgroup v1 host has no systemd user
session), the vfs storage driver (PODMAN_FLAGS), no network and the ulimits of
tests/support/podman.py, with the hooks dir passed by --hooks-dir. The one test of podman's
own default hooks dir (test_rootless.py) places a registration there for its duration, gated
by an annotation value of its own.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.support import podman, synthetic

USER = "ocihook-rootless-test"
SUBID_COUNT = 65536
SUBID_FILES = ("/etc/subuid", "/etc/subgid")
HOOK_PYTHON = (
    "/usr/bin/python3"  # the system interpreter: the venv may sit where the user cannot read
)
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
REPO = Path(__file__).resolve().parent.parent.parent
# runc; cgroupfs (no systemd user session); vfs: a container's root is a plain directory of
# the user's store that the host sees too (the race test swaps in it), whichever storage
# driver the host would pick (fuse-overlayfs, native rootless overlay).
PODMAN_FLAGS = (*podman.BASE[1:], "--cgroup-manager", "cgroupfs", "--storage-driver", "vfs")


def unmet() -> str | None:
    """Why rootless podman cannot run on this host, or None: a tool missing
    (scripts/install-deps.sh installs uidmap), or a kernel that gives ordinary users no user
    namespaces."""
    missing = [t for t in ("podman", "newuidmap", "newgidmap", "runuser") if not shutil.which(t)]
    if missing:
        return f"needs {' '.join(missing)} for rootless podman (uidmap: scripts/install-deps.sh)"
    for path, least in (
        ("/proc/sys/user/max_user_namespaces", 1),
        ("/proc/sys/kernel/unprivileged_userns_clone", 1),  # Debian's switch, where it exists
    ):
        try:
            with open(path) as file:
                value = int(file.read().strip())
        except (OSError, ValueError):
            continue
        if value < least:
            return f"rootless podman needs user namespaces for ordinary users: {path} is {value}"
    return None


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: str

    @property
    def runtime_dir(self) -> str:
        return f"/run/user/{self.uid}"

    @property
    def state_dir(self) -> Path:
        """Where the hook of this user's rootless containers keeps records."""
        return Path(self.runtime_dir) / "ocihook"

    def command(self, *args: str, env: dict[str, str] | None = None) -> list[str]:
        """`args` run as the user, with the environment a login would give podman (plus
        `env`)."""
        values = {"HOME": self.home, "XDG_RUNTIME_DIR": self.runtime_dir, "PATH": PATH}
        values.update(env or {})
        pairs = [f"{key}={value}" for key, value in values.items()]
        return ["runuser", "-u", self.name, "--", "env", "-i", *pairs, *args]

    def run(self, *args: str, timeout: int = 180, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(*args), capture_output=True, text=True, timeout=timeout, **kwargs
        )

    def podman(self, *args: str, env: dict[str, str] | None = None) -> list[str]:
        return self.command("podman", *PODMAN_FLAGS, *args, env=env)

    def unshare(self, *args: str) -> subprocess.CompletedProcess:
        """`args` run in the user's rootless namespace, where its containers' hooks run."""
        return self.run("podman", *PODMAN_FLAGS, "unshare", *args)


def _ranges(path: str) -> list[tuple[str, int, int]]:
    rows = []
    try:
        with open(path) as file:
            for line in file:
                fields = line.strip().split(":")
                if len(fields) == 3 and fields[1].isdigit() and fields[2].isdigit():
                    rows.append((fields[0], int(fields[1]), int(fields[2])))
    except FileNotFoundError:
        pass
    return rows


def _add_subids(name: str) -> None:
    """Give `name` a subordinate uid and gid range past every range in use, unless it has one."""
    if all(any(row[0] == name for row in _ranges(path)) for path in SUBID_FILES):
        return
    end = max(
        [100000] + [first + count for path in SUBID_FILES for _, first, count in _ranges(path)]
    )
    span = f"{end}-{end + SUBID_COUNT - 1}"
    subprocess.run(
        ["usermod", "--add-subuids", span, "--add-subgids", span, name],
        check=True,
        capture_output=True,
    )


def ensure_user(name: str = USER) -> User:
    """The test user, created (with subordinate ranges and a runtime dir) when missing."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        result = subprocess.run(
            ["useradd", "--create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
            text=True,
        )
        if result.returncode not in (0, 9):  # 9: another run created it meanwhile
            raise RuntimeError(f"useradd {name}: {result.stderr.strip()}") from None
        entry = pwd.getpwnam(name)
    _add_subids(name)
    user = User(name, entry.pw_uid, entry.pw_gid, entry.pw_dir)
    os.makedirs(user.home, exist_ok=True)
    os.chown(user.home, user.uid, user.gid)
    os.makedirs("/run/user", mode=0o755, exist_ok=True)
    try:
        os.mkdir(user.runtime_dir, 0o700)
    except FileExistsError:
        pass
    os.chown(user.runtime_dir, user.uid, user.gid)
    os.chmod(user.runtime_dir, 0o700)
    return user


def ensure_group(user: User, name: str = f"{USER}-dev") -> int:
    """A host group `user` belongs to (a supplementary one, as video or render are), created
    when missing; its gid."""
    import grp

    subprocess.run(["groupadd", "-f", name], check=True, capture_output=True)
    group = grp.getgrnam(name)
    if user.name not in group.gr_mem:
        subprocess.run(["usermod", "-aG", name, user.name], check=True, capture_output=True)
    return group.gr_gid


def import_image(user: User, root: Path, name: str) -> str:
    """`podman import` the tree into the user's store as localhost/NAME:latest."""
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    result = subprocess.run(
        user.podman("import", "-q", "-", f"localhost/{name}:latest"),
        stdin=tar.stdout,
        capture_output=True,
        text=True,
        timeout=300,
    )
    tar.wait()
    if result.returncode != 0:
        raise RuntimeError(f"rootless podman import {name}: {result.stderr.strip()}")
    return f"localhost/{name}:latest"


def remove_image(user: User, image: str) -> None:
    subprocess.run(user.podman("rmi", "-f", image), capture_output=True, timeout=120)


def write_tree(root: Path) -> None:
    """Root's, and writable by nobody else: what the rootless trust rule wants."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        st = path.lstat()
        os.chown(path, 0, 0, follow_symlinks=False)
        if path.is_dir() or path.is_file():
            os.chmod(path, (st.st_mode & 0o7777 | 0o444 | (0o111 if path.is_dir() else 0)) & ~0o022)


@dataclass
class Install:
    """One run's installation for rootless containers: everything root's and readable by the
    user, under a fresh dir in /run (whose parents only root can write)."""

    user: User
    dir: Path
    hook: Path
    config: Path
    hooks_dir: Path
    synth_root: Path
    work: Path  # the user's own scratch dir (cid files, canaries, the log)
    containers: list[str] = field(default_factory=list)  # ids of this run's containers

    @property
    def state_dir(self) -> Path:
        return self.user.state_dir

    @property
    def log(self) -> Path:
        return self.work / "ocihook.log"

    def write_config(self, **settings) -> None:
        self.config.write_text(yaml.safe_dump(settings))
        os.chmod(self.config, 0o644)

    def registration(self, when: dict | None = None) -> dict:
        """The hooks.d document for this install's hook and config (`when`: its gate; by
        default the shipped one, `ocihook.io/devices` set)."""
        return {
            "version": "1.0.0",
            "hook": {
                "path": str(self.hook),
                "args": ["ocihook-hook", "--config", str(self.config)],
                "env": [f"PATH={PATH}"],
                "timeout": 30,
            },
            "when": when or {"annotations": {r"^ocihook\.io/devices$": ".+"}},
            "stages": ["prestart", "poststop"],
        }

    def base_config(self, **overrides) -> dict:
        settings = synthetic.config(
            self.synth_root, None, log={"target": str(self.log), "debug": True}
        )
        settings["profile_dirs"] = [str(self.dir / "profiles")]
        settings.update(overrides)
        return settings

    def run(
        self,
        image: str,
        command: list[str],
        devices: str | None = None,
        extra: list[str] | None = None,
        timeout: int = 180,
        env: dict[str, str] | None = None,
        hooks_dir: bool = True,
    ) -> RootlessRun:
        """A rootless container of the user with this install's hooks dir (`env`: more of
        the user's environment for podman; `hooks_dir=False`: no --hooks-dir, podman reads
        the hooks dirs its configuration names)."""
        cidfile = self.work / f"cid-{uuid.uuid4().hex[:12]}"
        args = ["--hooks-dir", str(self.hooks_dir)] if hooks_dir else []
        args += ["run", *podman.RUN_FLAGS]
        args += ["--cidfile", str(cidfile)]
        if devices is not None:
            args += ["--annotation", f"{podman.ANNOTATION}={devices}"]
        args += [*(extra or []), image, *command]
        result = subprocess.run(
            self.user.podman(*args, env=env), capture_output=True, text=True, timeout=timeout
        )
        cid = cidfile.read_text().strip() if cidfile.exists() else None
        cidfile.unlink(missing_ok=True)
        if cid:
            self.containers.append(cid)
        return RootlessRun(result.returncode, result.stdout, _stderr(result.stderr), cid, self)

    def create(self, image: str, command: list[str], devices: str | None = None) -> str:
        """A created (not started) rootless container; its id."""
        args = ["--hooks-dir", str(self.hooks_dir), "create", *podman.LIMITS]
        if devices is not None:
            args += ["--annotation", f"{podman.ANNOTATION}={devices}"]
        result = subprocess.run(
            self.user.podman(*args, image, *command), capture_output=True, text=True, timeout=180
        )
        if result.returncode != 0:
            raise RuntimeError(f"rootless podman create: {_stderr(result.stderr).strip()}")
        cid = result.stdout.strip().splitlines()[-1]
        self.containers.append(cid)
        return cid

    def rootfs(self, cid: str) -> Path:
        """The container's root directory in the user's (vfs) store, as the host sees it."""
        result = self.user.unshare("podman", *PODMAN_FLAGS, "mount", cid)
        if result.returncode != 0:
            raise RuntimeError(f"rootless podman mount: {_stderr(result.stderr).strip()}")
        return Path(result.stdout.strip().splitlines()[-1])

    def start(self, cid: str, timeout: int = 180) -> RootlessRun:
        result = subprocess.run(
            self.user.podman("--hooks-dir", str(self.hooks_dir), "start", "--attach", cid),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return RootlessRun(result.returncode, result.stdout, _stderr(result.stderr), cid, self)

    def remove(self, cid: str) -> None:
        subprocess.run(self.user.podman("rm", "-f", cid), capture_output=True, timeout=120)

    def import_tree(self, root: Path, name: str) -> str:
        return import_image(self.user, root, name)

    def remove_image(self, image: str) -> None:
        remove_image(self.user, image)


def _stderr(text: str) -> str:
    """podman's stderr without its start-up warning about / not being a shared mount (this
    host's mount propagation: harmless for these containers)."""
    return "".join(
        line for line in text.splitlines(keepends=True) if "is not a shared mount" not in line
    )


@dataclass
class RootlessRun:
    returncode: int
    stdout: str
    stderr: str
    cid: str | None
    install: Install

    def record(self) -> dict | None:
        """The hook's record of this container in the user's state dir, or None."""
        if self.cid is None:
            return None
        path = self.install.state_dir / f"{self.cid}.json"
        return json.loads(path.read_text()) if path.exists() else None


def install(user: User) -> Install:
    """Install the checkout's hook for `user`'s rootless containers (see Install)."""
    base = Path(tempfile.mkdtemp(prefix="ocihook-rootless-", dir="/run"))
    package = base / "pkg"
    shutil.copytree(
        REPO / "ocihook", package / "ocihook", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(REPO / "packaging" / "profiles", base / "profiles")
    hook = base / "ocihook-hook"
    subprocess.run(
        [sys.executable, str(REPO / "packaging/hook_executable.py"), str(hook)]
        + ["--python", HOOK_PYTHON, "--package-dir", str(package)],
        check=True,
    )
    synth = synthetic.build_driver(base / "synth")
    (base / "etc").mkdir()
    config = base / "etc" / "config.yaml"
    hooks_dir = base / "hooks.d"
    hooks_dir.mkdir()
    work = base / "work"
    work.mkdir()
    result = Install(user, base, hook, config, hooks_dir, synth, work)
    result.write_config(**result.base_config())
    (hooks_dir / "ocihook.json").write_text(json.dumps(result.registration(), indent=2))
    write_tree(base)
    for node in (synth / "dev").iterdir():  # world read-write, as the driver's own nodes are
        os.chmod(node, 0o666)
    os.chown(work, user.uid, user.gid)
    os.chmod(work, 0o700)
    return result


def uninstall(item: Install) -> None:
    """Remove the install and the records of this run's containers (the user, its ranges,
    runtime dir and store stay: another run may be using them)."""
    for cid in item.containers:
        (item.state_dir / f"{cid}.json").unlink(missing_ok=True)
    shutil.rmtree(item.dir, ignore_errors=True)
