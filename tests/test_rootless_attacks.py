"""Hostile images in rootless containers: the attacks of test_attacks_rootfs.py,
test_attacks_ldconfig.py, test_attacks_request.py and test_attacks_race.py, run by an
ordinary user's rootless podman with the rootless hook.

The canary sits in a directory of the user's own (the hook acts with the user's rights, so
a canary only root could write would prove nothing): every symlink, special file and volume
trick of the root tests, and a symlink swapped in while the hook runs, must leave it, the
driver's source root and the host's /dev as they were, and the container must fail with one
`ocihook:` line or run without the attack's effect. Device nodes cannot be attack material
here: a rootless image import drops them (only host root may create them) and tar drops
sockets, so the `chardev`/`blockdev` kinds of the root tests have no rootless counterpart;
fifos do.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.support import hostile
from tests.test_attacks_race import Racer
from tests.test_attacks_rootfs import RUNC_DEV_LINKS, STYLES, _symlink_targets


@pytest.fixture(scope="session")
def rhel_base(tmp_path_factory) -> Path:
    return hostile.rhel_tree(tmp_path_factory.mktemp("rl-hostile") / "base")


@pytest.fixture
def canary(rootless_setup) -> Path:
    path = rootless_setup.work / f"canary-{uuid.uuid4().hex[:8]}"
    hostile.make_canary(path)
    user = rootless_setup.user
    for item in [path, *path.rglob("*")]:
        os.chown(item, user.uid, user.gid, follow_symlinks=False)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def watch(canary, rootless_setup):
    places = (canary, rootless_setup.synth_root)
    before = hostile.snapshot(*places)
    dev_before = hostile.host_dev_entries()
    yield
    assert hostile.snapshot(*places) == before
    assert hostile.host_dev_entries() == dev_before


def build(setup, rhel_base: Path, tmp_path: Path, edits: dict, writes: dict | None = None) -> str:
    """A copy of the RHEL-like tree with `edits` and `writes` applied (as in
    test_attacks_rootfs.build), imported into the user's store."""
    root = tmp_path / "image"
    subprocess.run(["cp", "-a", str(rhel_base), str(root)], check=True)
    for path, (kind, target) in edits.items():
        hostile.replace(root / path.lstrip("/"), kind, target)
    for path, text in (writes or {}).items():
        (root / path.lstrip("/")).write_text(text)
    name = f"ocihook-rl-hostile-{uuid.uuid4().hex[:12]}"
    image = setup.import_tree(root, name)
    shutil.rmtree(root)
    return image


def run_attack(setup, image: str, command=None, runtime_may_fail=False, **kwargs):
    try:
        result = setup.run(
            image, command or ["/bin/sh", "-c", "ls -la /usr/lib64 /usr/bin /dev"], "all", **kwargs
        )
    finally:
        setup.remove_image(image)
    if result.returncode != 0 and not (runtime_may_fail and "runc create failed" in result.stderr):
        ocihook_lines = [line for line in result.stderr.splitlines() if "ocihook: " in line]
        assert ocihook_lines, result.stderr
        assert "internal error" not in result.stderr, result.stderr
    return result


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(
    "path", ["/usr/lib64", "/usr", "/usr/bin", "/usr/lib64/libsynth.so.1.2.3", "/usr/bin/synth-smi"]
)
def test_symlink_to_the_host(rootless_setup, rhel_base, tmp_path, canary, watch, path, style):
    target = _symlink_targets(canary)[style]
    if path.endswith((".so.1.2.3", "synth-smi")):
        target += "/" + ("libsynth.so.1.2.3" if path.endswith(".so.1.2.3") else "marker")
    image = build(rootless_setup, rhel_base, tmp_path, {path: ("symlink", target)})
    result = run_attack(rootless_setup, image)
    assert "host canary" not in result.stdout


@pytest.mark.parametrize("kind", ["fifo"])
@pytest.mark.parametrize(
    "path", ["/usr/lib64/libsynth.so.1.2.3", "/usr/bin/synth-smi", "/usr/lib64/libsynth.so.1"]
)
def test_target_is_not_a_file(rootless_setup, rhel_base, tmp_path, watch, path, kind):
    image = build(rootless_setup, rhel_base, tmp_path, {path: (kind, "")})
    result = run_attack(rootless_setup, image, ["/bin/true"])
    if not path.endswith(".so.1"):
        assert result.returncode != 0
        assert "not mounting over it" in result.stderr, result.stderr


@pytest.mark.parametrize("kind", ["fifo", "file"])
def test_library_dir_is_not_a_directory(rootless_setup, rhel_base, tmp_path, watch, kind):
    image = build(rootless_setup, rhel_base, tmp_path, {"/usr/lib64": (kind, "")})
    run_attack(rootless_setup, image, ["/bin/true"])


@pytest.mark.parametrize("style", STYLES)
def test_dev_is_a_symlink_to_the_host(rootless_setup, rhel_base, tmp_path, canary, style):
    before = hostile.snapshot(canary)
    dev_before = hostile.host_dev_entries()
    image = build(
        rootless_setup, rhel_base, tmp_path, {"/dev": ("symlink", _symlink_targets(canary)[style])}
    )
    run_attack(rootless_setup, image, ["/bin/true"], runtime_may_fail=True)
    for name in RUNC_DEV_LINKS:  # runc's own links, made by path (test_attacks_rootfs)
        if (canary / name).is_symlink():
            (canary / name).unlink()
    after = hostile.snapshot(canary)
    after[str(canary)] = before[str(canary)]
    assert after == before
    assert hostile.host_dev_entries() == dev_before


def test_library_dir_aimed_at_a_host_volume(rootless_setup, rhel_base, tmp_path, canary, watch):
    image = build(rootless_setup, rhel_base, tmp_path, {"/usr/lib64": ("symlink", "/data")})
    result = run_attack(rootless_setup, image, ["/bin/true"], extra=["-v", f"{canary}:/data"])
    assert result.returncode != 0
    assert "shared with the host" in result.stderr, result.stderr


def test_hostile_ld_so_conf(rootless_setup, rhel_base, tmp_path, canary):
    """ld.so.conf and the image's cache aimed at the user's canary and the host's cache."""
    before = hostile.snapshot(canary)
    host_cache = Path("/etc/ld.so.cache").read_bytes()
    targets = [str(canary), f"/proc/1/root{canary}", f"/proc/self/root{canary}"]
    conf = "\n".join(targets + [f"include /proc/1/root{canary}/*.conf"]) + "\n"
    image = build(
        rootless_setup,
        rhel_base,
        tmp_path,
        {
            "/etc/ld.so.conf.d/evil.conf": ("file", ""),
            "/etc/ld.so.cache": ("symlink", "/proc/1/root/etc/ld.so.cache"),
        },
        writes={
            "/etc/ld.so.conf": "include /etc/ld.so.conf.d/*.conf\n" + conf,
            "/etc/ld.so.conf.d/evil.conf": conf,
        },
    )
    for writer in ("native", "ldconfig"):
        rootless_setup.write_config(**rootless_setup.base_config(ldconfig={"writer": writer}))
        result = rootless_setup.run(
            image, ["/bin/sh", "-c", "/usr/bin/synth-smi && ls -l /etc/ld.so.cache"], "all"
        )
        assert result.returncode == 0, result.stderr
        assert "libsynth 1.2.3 loaded" in result.stdout
        assert "->" not in result.stdout.splitlines()[-1]
    rootless_setup.remove_image(image)
    assert hostile.snapshot(canary) == before
    assert Path("/etc/ld.so.cache").read_bytes() == host_cache


def test_container_and_user_env_never_reach_the_hook(rootless_setup, tmp_path):
    """Neither the image's env nor the user's own (podman's) env steers the hook: it gets the
    hooks.d file's env and runs python -I."""
    work = rootless_setup.work / f"env-{uuid.uuid4().hex[:8]}"
    marker = work / "marker"
    library = hostile.preload_trap(work / "preload", marker)
    trap = hostile.python_trap(work / "py", marker)
    user = rootless_setup.user
    for item in [work, *work.rglob("*")]:
        os.chown(item, user.uid, user.gid, follow_symlinks=False)
    image = rootless_setup.import_tree(
        hostile.rhel_tree(tmp_path / "rhel"), f"ocihook-rl-env-{uuid.uuid4().hex[:8]}"
    )
    try:
        container_env = {
            "LD_PRELOAD": str(library),
            "LD_LIBRARY_PATH": str(library.parent),
            "PYTHONPATH": str(trap),
            "PYTHONHOME": str(trap),
            "PATH": f"{trap}:/usr/bin:/bin",
        }
        extra = [arg for key, value in container_env.items() for arg in ("-e", f"{key}={value}")]
        user_env = {"PYTHONPATH": str(trap), "PYTHONHOME": str(trap), "PYTHONSTARTUP": str(trap)}
        result = rootless_setup.run(image, ["/usr/bin/synth-smi"], "all", extra=extra, env=user_env)
        trapped = marker.exists()
    finally:
        rootless_setup.remove_image(image)
        shutil.rmtree(work, ignore_errors=True)
    assert result.returncode == 0, result.stderr
    assert "libsynth 1.2.3 loaded" in result.stdout
    assert not trapped


RACE_ROUNDS = 8


@pytest.mark.parametrize("mount_api", ["auto", "classic"])
@pytest.mark.parametrize("style", ["absolute", "relative"])
def test_swapped_symlink_never_leads_out_of_the_rootfs(
    rootless_setup, rootless_image_busybox, canary, style, mount_api
):
    """test_attacks_race.py in real rootless containers: while each container starts, a racer
    on the host keeps exchanging its root's usr/lib64 with a symlink to the user's canary
    (renameat2 RENAME_EXCHANGE). Every round injects inside the root or fails in one line;
    the canary never changes."""
    rootless_setup.write_config(
        **rootless_setup.base_config(
            ldconfig={"enabled": False}, container={"lib_dir": "/usr/lib64"}, mount_api=mount_api
        )
    )
    before = hostile.snapshot(canary)
    user = rootless_setup.user
    target = str(canary) if style == "absolute" else "../" * 12 + str(canary).lstrip("/")
    outcomes = {"injected": 0, "refused": 0}
    for round_ in range(RACE_ROUNDS):
        cid = rootless_setup.create(
            rootless_image_busybox, ["/bin/cat", "/proc/self/mountinfo"], "0"
        )
        try:
            rootfs = rootless_setup.rootfs(cid)
            (rootfs / "usr/lib64").mkdir(exist_ok=True)
            os.chown(rootfs / "usr/lib64", user.uid, user.gid)
            racer = Racer(rootfs, target)
            racer.start()
            try:
                result = rootless_setup.start(cid)
            finally:
                racer.stop.set()
                racer.join()
            assert racer.flips > 0
        finally:
            rootless_setup.remove(cid)
        if result.returncode == 0:
            # Mount points as the container sees them: in its root, in the real directory
            # (under whichever name the racer left it), never gone with the host's tree.
            points = [line.split()[4] for line in result.stdout.splitlines() if line.strip()]
            injected = [p for p in points if p.endswith("/libsynth.so.1.2.3")]
            assert injected, result.stdout
            assert all(
                p.split("/")[1:3] in (["usr", "lib64"], ["usr", "lib64.evil"]) for p in injected
            )
            outcomes["injected"] += 1
        else:
            lines = [line for line in result.stderr.splitlines() if "ocihook: " in line]
            assert len(lines) == 1 and "internal error" not in lines[0], result.stderr
            outcomes["refused"] += 1
        assert hostile.snapshot(canary) == before, f"round {round_}: canary changed"
    assert sum(outcomes.values()) == RACE_ROUNDS
    print(outcomes)
