"""The one decision site (ocihook/plan/decide.py): what `decide` decides for each kind of target,
what the image probe finds inside an image's root (and never outside it), and that
`finalize` stamps exactly the decision into the plan. Unprivileged: plain directories stand
in for images, the config is the defaults' sections."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from ocihook.config.compiled import DEFAULTS
from ocihook.errors import OcihookError
from ocihook.plan.decide import (
    MOUNT_LABEL,
    NO_LABEL,
    Target,
    carried_decision,
    decide,
    finalize,
    label_choice,
    lib_dir32_for,
    probe_lib_dir,
)
from ocihook.plan.model import DeviceNode, Link, Mount, Plan

MULTIARCH = "/usr/lib/x86_64-linux-gnu"


def _config(**sections) -> dict:
    config = copy.deepcopy(DEFAULTS)
    for name, values in sections.items():
        config[name].update(values)
    return config


def _plan(libraries: bool = True) -> Plan:
    """A plan as discovery leaves it: libraries under the placeholder dir."""
    mounts = [Mount("/usr/bin/x-smi", "/drv/usr/bin/x-smi", "/usr/bin/x-smi", "binary")]
    links = []
    if libraries:
        mounts.insert(
            0, Mount(f"{MULTIARCH}/libx.so.1.0", "/drv/x", "/usr/lib64/libx.so.1.0", "library")
        )
        links.append(Link("/usr/lib64/libx.so.1", "libx.so.1.0"))
    return Plan(
        profile="p",
        source_root="/drv",
        device_root="/drv",
        request="all",
        lib_dir="/usr/lib64",
        lib_dir32="/usr/lib",
        placeholder=True,
        mounts=mounts,
        links=links,
        devices=[DeviceNode("/dev/x0", "/drv/dev/x0", "c", 10, 237, 0o666, 0, "rw")],
        ld_dirs=["/usr/lib64"] if libraries else [],
    )


def _image(root: Path, *dirs: str, files: tuple[str, ...] = ()) -> int:
    for d in dirs:
        (root / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for f in files:
        (root / f.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / f.lstrip("/")).write_bytes(b"")
    return os.open(root, os.O_PATH | os.O_DIRECTORY)


def test_container_target_leaves_lib_dir_and_loader_to_the_image(tmp_path):
    container = Target.container(False, None)
    decision = decide(_config(), container, _plan())
    assert decision.probe == ("lib_dir", "glibc")
    assert (decision.node_strategy, decision.ld_writer, decision.device_cgroup) == (
        "mknod",
        "native",
        True,
    )
    with pytest.raises(ValueError, match="not probed"):
        finalize(_plan(), decision)
    debian = _image(tmp_path / "deb", MULTIARCH, files=("/lib64/ld-linux-x86-64.so.2",))
    try:
        seen = decision.in_image(debian)
    finally:
        os.close(debian)
    assert (seen.lib_dir, seen.lib_dir32, seen.ld_writer, seen.probe) == (
        MULTIARCH,
        "/usr/lib/i386-linux-gnu",
        "native",
        (),
    )
    final = finalize(_plan(), seen)
    assert [m.target for m in final.mounts] == [f"{MULTIARCH}/libx.so.1.0", "/usr/bin/x-smi"]
    assert final.links == [Link(f"{MULTIARCH}/libx.so.1", "libx.so.1.0")]
    assert (final.ld_dirs, final.ldconfig, final.ld_writer, final.placeholder) == (
        [MULTIARCH],
        True,
        "native",
        False,
    )
    busybox = _image(tmp_path / "bb", "/usr/lib64")
    try:
        seen = decision.in_image(busybox)
    finally:
        os.close(busybox)
    assert (seen.lib_dir, seen.ld_writer) == ("/usr/lib64", None)
    assert finalize(_plan(), seen).ldconfig is False


def test_user_namespace_binds_nodes(tmp_path):
    decision = decide(_config(), Target.container(True, None), _plan())
    assert decision.node_strategy == "bind"
    root = _image(tmp_path / "r", "/usr/lib64")
    try:
        final = finalize(_plan(), decision.in_image(root))
    finally:
        os.close(root)
    assert [d.strategy for d in final.devices] == ["bind"]


@pytest.mark.parametrize("userns", [False, True])
def test_rootless_hook_binds_nodes_and_leaves_the_device_cgroup(userns):
    """The hook in a user namespace (rootless podman): no mknod, no cgroup edit, whether
    or not the container's config has a user namespace of its own (keep-id); the rest as
    for root."""
    rootless = decide(_config(), Target.container(userns, None, rootless=True), _plan())
    root = decide(_config(), Target.container(userns, None), _plan())
    assert (rootless.node_strategy, rootless.device_cgroup) == ("bind", False)
    assert root.device_cgroup is True
    assert (rootless.lib_dir, rootless.ld_writer, rootless.probe, rootless.file_label) == (
        root.lib_dir,
        root.ld_writer,
        root.probe,
        root.file_label,
    )


def test_config_lib_dir_wins_over_the_image_and_the_command_line_over_both():
    config = _config(container={"lib_dir": "/opt/lib"})
    decision = decide(config, Target.container(False, None), _plan())
    assert (decision.lib_dir, decision.lib_dir32, decision.probe) == (
        "/opt/lib",
        "/usr/lib",
        ("glibc",),
    )
    decision = decide(config, Target.command_line(lib_dir="/usr/lib", image=True), _plan())
    assert (decision.lib_dir, decision.lib_dir32) == ("/usr/lib", "/usr/lib32")
    with pytest.raises(OcihookError, match="lib_dir lib: must be an absolute path"):
        decide(config, Target.command_line(lib_dir="lib"), _plan())


def test_cli_without_an_image_keeps_the_placeholder():
    decision = decide(_config(), Target.command_line(), _plan())
    assert (decision.lib_dir, decision.probe) == (None, ())
    final = finalize(_plan(), decision)
    assert (final.lib_dir, final.placeholder) == ("/usr/lib64", True)
    decision = decide(
        _config(container={"lib_dir": "/x"}), Target.command_line(lib_dir="auto"), _plan()
    )
    assert decision.lib_dir is None  # --lib-dir auto: the placeholder, whatever the config says


def test_static_target_takes_the_source_layout_and_the_sandboxed_ldconfig():
    decision = decide(_config(), Target.static(), _plan())
    assert (decision.lib_dir, decision.ld_writer, decision.device_cgroup, decision.probe) == (
        MULTIARCH,
        "ldconfig",
        False,
        (),
    )
    assert decide(_config(), Target.static(), _plan(libraries=False)).lib_dir == "/usr/lib64"


def test_ld_cache_only_with_libraries_and_when_enabled():
    assert decide(_config(), Target.command_line(), _plan(libraries=False)).ld_writer is None
    off = _config(ldconfig={"enabled": False})
    assert decide(off, Target.command_line(), _plan()).ld_writer is None
    sandboxed = _config(ldconfig={"writer": "ldconfig"})
    assert decide(sandboxed, Target.command_line(), _plan()).ld_writer == "ldconfig"


def test_file_label_rules():
    """No SELinux LSM runs here (selinux_enabled() is False): `auto` labels nothing for a
    container at hand, `ocihook plan` shows what the config sets."""
    mount_label = "system_u:object_r:container_file_t:s0:c1,c2"
    container = Target.container(False, mount_label)
    label = "system_u:object_r:container_file_t:s0"
    assert decide(_config(), container, _plan()).file_label is None
    enabled = _config(selinux={"mode": "enabled"})
    assert decide(enabled, container, _plan()).file_label == mount_label
    assert (
        decide(_config(selinux={"mode": "enabled", "label": label}), container, _plan()).file_label
        == label
    )
    disabled = _config(selinux={"mode": "disabled", "label": label})
    assert decide(disabled, container, _plan()).file_label is None
    assert (
        decide(_config(selinux={"label": label}), Target.command_line(), _plan()).file_label
        == label
    )


def test_label_choice_is_what_a_cdi_spec_carries(tmp_path):
    """`cdi generate` has no container, hence no mount label: the choice it writes into the
    spec says which label the links get (none, the mount label, a fixed one), and
    carried_decision turns it into the file label for the container at hand, reading no
    config; the ld cache writer goes through as the spec says."""
    label = "system_u:object_r:container_ro_file_t:s0"
    static = Target.static()
    assert label_choice(_config()["selinux"], static) == NO_LABEL  # auto, no SELinux here
    assert label_choice(_config(selinux={"mode": "enabled"})["selinux"], static) == MOUNT_LABEL
    fixed = _config(selinux={"mode": "enabled", "label": label})["selinux"]
    assert label_choice(fixed, static) == label
    off = _config(selinux={"mode": "disabled", "label": label})["selinux"]
    assert label_choice(off, static) == NO_LABEL
    mount_label = "system_u:object_r:container_file_t:s0:c1,c2"
    container = Target.spec_container(False, mount_label)
    assert carried_decision(NO_LABEL, None, container).file_label is None
    assert carried_decision(MOUNT_LABEL, None, container).file_label == mount_label
    assert carried_decision(label, None, container).file_label == label
    assert carried_decision(MOUNT_LABEL, None, Target.static()).file_label is None
    cache = carried_decision(NO_LABEL, "ldconfig", container)
    assert (cache.ld_writer, cache.probe, cache.device_cgroup) == ("ldconfig", ("glibc",), False)
    root_fd = os.open(tmp_path, os.O_PATH)
    try:
        assert cache.in_image(root_fd).ld_writer is None  # no glibc loader in an empty root
    finally:
        os.close(root_fd)
    assert carried_decision(NO_LABEL, None, container).probe == ()


def test_lib_dir32_beside_the_64_bit_dir():
    assert lib_dir32_for(MULTIARCH) == "/usr/lib/i386-linux-gnu"
    assert lib_dir32_for("/usr/lib64") == "/usr/lib"
    assert lib_dir32_for("/usr/lib") == "/usr/lib32"


def test_probe_stays_inside_the_image(tmp_path):
    """/lib64 counts as a library dir only with a libc.so.6 in it, resolved inside the
    image: an absolute link to a file that exists on the host, not in the image, is not one
    (a path string below the image's fd would follow it through the host's root)."""
    host_file = tmp_path / "host-libc.so.6"
    host_file.write_bytes(b"")
    image = tmp_path / "image"
    (image / "lib64").mkdir(parents=True)
    os.symlink(str(host_file), image / "lib64/libc.so.6")
    root = os.open(image, os.O_PATH | os.O_DIRECTORY)
    try:
        assert os.path.exists(f"/proc/self/fd/{root}/lib64/libc.so.6")  # the old escape
        assert probe_lib_dir(root) == "/usr/lib"
        (image / "usr/lib").mkdir(parents=True)
        (image / "usr/lib/libc.so.6").write_bytes(b"")
        os.unlink(image / "lib64/libc.so.6")
        os.symlink("/usr/lib/libc.so.6", image / "lib64/libc.so.6")  # inside the image
        assert probe_lib_dir(root) == "/lib64"
        (image / MULTIARCH.lstrip("/")).mkdir(parents=True)
        assert probe_lib_dir(root) == MULTIARCH
    finally:
        os.close(root)


def test_unknown_target_kind_is_a_bug():
    with pytest.raises(ValueError, match="target kind"):
        decide(_config(), Target("somewhere"), _plan())
