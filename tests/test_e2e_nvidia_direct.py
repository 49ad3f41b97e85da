"""NVIDIA IMEX channels and the GPUDirect capabilities (gdrcopy, gds, rdma) in real podman +
runc containers, on the hook path (annotations, image env with request.env, allow-list).

Stand-ins: no NVLink domain, GDRCopy, GPUDirect Storage or RDMA hardware here. The host is
tests/support/nvidia_direct.py's: hosts.ubuntu's fake driver, and real char devices of the
running kernel standing in for the IMEX channel nodes, /dev/gdrdrv, /dev/nvidia-fs0,
/dev/infiniband/uverbs0 and rdma_cm, with the fake device root's proc/devices and proc/misc
naming their numbers as those drivers'. A container opens what it asked for read-write and
gets EPERM from the device cgroup on a sibling node it did not ask for (bind-mounted into
it by podman `-v`, so only the cgroup can refuse it).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import base_config
from tests.support import cuda_images, images, nvidia_direct, nvidia_mig

EPERM = "Operation not permitted"
IMEX = "ocihook.io/imex-channels"
CAPS = "ocihook.io/capabilities"

pytestmark = pytest.mark.root


@pytest.fixture
def direct_host(hook_setup, tmp_path_factory, synth_root):
    """The stand-in host as the hook's source and device root."""
    nvidia_mig.check_majors_unused()
    host = nvidia_direct.standins(tmp_path_factory.mktemp("direct") / "root")
    host.root.chmod(0o755)

    def configure(**overrides) -> nvidia_direct.DirectHost:
        settings = base_config(hook_setup.dir, synth_root, profile="nvidia", **overrides)
        settings["source_root"] = settings["device_root"] = str(host.root)
        settings["ldconfig"] = {"enabled": False}
        hook_setup.write_config(**settings)
        return host

    return configure


def _script(paths: list[str]) -> str:
    """Open each path read-write ('OPEN <path> ok' or the shell's error)."""
    return "; ".join([f"(exec 3<>{p}) 2>&1 && echo 'OPEN {p} ok'" for p in paths] + ["true"])


def _outcome(output: str, path: str) -> str:
    for line in output.splitlines():
        if f" {path}: " in line or f"OPEN {path} " in line:
            return line
    raise AssertionError(f"no outcome for {path} in:\n{output}")


def _bind(host: nvidia_direct.DirectHost, paths: list[str]) -> list[str]:
    return [arg for p in paths for arg in ("-v", f"{host.root}{p}:{p}")]


def _check(result, host, opened: list[str], refused: list[str]) -> None:
    assert result.returncode == 0, result.stderr
    for path in opened:
        assert _outcome(result.stdout, path) == f"OPEN {path} ok", result.stdout
    for path in refused:
        assert _outcome(result.stdout, path).endswith(EPERM), result.stdout


def _rules(hook_setup) -> set[tuple[int, int]]:
    (record,) = hook_setup.records()
    return {(d["major"], d["minor"]) for d in json.loads(record.read_text())["devices"]}


def _channels(host) -> tuple[str, str]:
    return tuple(sorted(p for p in host.devices if p.startswith(nvidia_direct.IMEX_DIR)))


def test_imex_channel_by_annotation(direct_host, hook_setup, image_busybox):
    host = direct_host()
    own, sibling = _channels(host)
    number = own.rsplit("channel", 1)[1]
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _script([own, sibling])],
        devices="0",
        extra=["--annotation", f"{IMEX}={number}", *_bind(host, [sibling])],
    )
    _check(result, host, [own], [sibling])
    rules = _rules(hook_setup)
    assert host.devices[own].numbers in rules
    assert host.devices[sibling].numbers not in rules


def test_imex_channels_all_from_the_image_env(direct_host, hook_setup, image_busybox):
    """NVIDIA_IMEX_CHANNELS=all (with request.env, as NVIDIA's toolkit reads it)."""
    host = direct_host(request={"env": True})
    hook_setup.gate_always()
    channels = list(_channels(host))
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _script([*channels, "/dev/gdrdrv"])],
        extra=[
            "-e",
            "NVIDIA_VISIBLE_DEVICES=0",
            "-e",
            "NVIDIA_IMEX_CHANNELS=all",
            *_bind(host, ["/dev/gdrdrv"]),
        ],
    )
    _check(result, host, channels, ["/dev/gdrdrv"])


def test_an_unknown_imex_channel_refuses_the_container(direct_host, hook_setup, image_busybox):
    host = direct_host()
    have = ",".join(p.rsplit("channel", 1)[1] for p in sorted(_channels(host), key=len))
    result = hook_setup.run(
        image_busybox, ["true"], devices="0", extra=["--annotation", f"{IMEX}=2047"]
    )
    assert result.returncode != 0
    line = f"ocihook: annotation {IMEX}: IMEX channel 2047 does not exist (the host has: "
    assert line in result.stderr, result.stderr
    assert all(n in result.stderr for n in have.split(","))
    assert hook_setup.records() == []


def test_gdrcopy_by_name(direct_host, hook_setup, image_busybox):
    host = direct_host()
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _script(["/dev/gdrdrv", "/dev/nvidia-fs0"])],
        devices="0",
        # a list in one annotation: quoted for podman before 4.4, which splits at commas
        extra=["--annotation", f'"{CAPS}=utility,gdrcopy"', *_bind(host, ["/dev/nvidia-fs0"])],
    )
    _check(result, host, ["/dev/gdrdrv"], ["/dev/nvidia-fs0"])


def test_gds_and_rdma_by_name_from_the_image_env(direct_host, hook_setup, image_busybox):
    """NVIDIA_DRIVER_CAPABILITIES naming them (with request.env; podman's --annotation
    splits a value at commas, so lists come by env here)."""
    host = direct_host(request={"env": True})
    hook_setup.gate_always()
    wanted = ["/dev/nvidia-fs0", "/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"]
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _script([*wanted, "/dev/gdrdrv"])],
        extra=[
            "-e",
            "NVIDIA_VISIBLE_DEVICES=0",
            "-e",
            "NVIDIA_DRIVER_CAPABILITIES=compute,gds,rdma",
            *_bind(host, ["/dev/gdrdrv"]),
        ],
    )
    _check(result, host, wanted, ["/dev/gdrdrv"])
    assert host.devices["/dev/gdrdrv"].numbers not in _rules(hook_setup)


@pytest.fixture(scope="module")
def cufile_image(tmp_path_factory):
    """A CUDA-layout glibc image with its own libcufile (the cuda-libraries package's: in
    /usr/local/cuda/targets/x86_64-linux/lib, /usr/local/cuda reached through
    /etc/alternatives as NVIDIA's images have it, listed in ld.so.conf.d and the image's ld
    cache) and /usr/bin/loaded-library. Stand-in: a gcc-built libcufile.so.0 answering
    "image libcufile"."""
    work = tmp_path_factory.mktemp("cufile-work")
    root = images.glibc_rootfs(tmp_path_factory.mktemp("cufile") / "root", "debian")
    cuda_images.library_probe(root, work)
    lib = root / "usr/local/cuda-12.6/targets/x86_64-linux/lib"
    cuda_images.standin_library(lib / "libcufile.so.1.11.1", "libcufile.so.0", "image", work)
    os.symlink("libcufile.so.1.11.1", lib / "libcufile.so.0")
    (root / "etc/alternatives").mkdir()
    os.symlink("/usr/local/cuda-12.6", root / "etc/alternatives/cuda")
    os.symlink("/etc/alternatives/cuda", root / "usr/local/cuda")
    (root / "etc/ld.so.conf.d/000_cuda.conf").write_text(
        "/usr/local/cuda/targets/x86_64-linux/lib\n"
    )
    subprocess.run(["/sbin/ldconfig", "-r", str(root)], check=True)
    return images.import_image(root, "ocihook-test-cufile")


@pytest.mark.parametrize("how", ["by name", "NVIDIA_GDS=enabled"])
def test_gds_gets_run_udev_and_keeps_the_images_libcufile(
    hook_setup, tmp_path_factory, synth_root, cufile_image, how
):
    """GPUDirect Storage as NVIDIA's runtime gives it: /dev/nvidia-fs*, the host's udev
    database at /run/udev (read-only) and its /etc/cufile.json; no libcufile: the image's
    own (its CUDA's) is the one a program loads, though the host has one too. By name
    (NVIDIA_DRIVER_CAPABILITIES, request.env) or by NVIDIA's switch NVIDIA_GDS=enabled."""
    nvidia_mig.check_majors_unused()
    host = nvidia_direct.standins(tmp_path_factory.mktemp("gds") / "root", cufile=True)
    host.root.chmod(0o755)
    settings = base_config(hook_setup.dir, synth_root, profile="nvidia", request={"env": True})
    settings["source_root"] = settings["device_root"] = str(host.root)
    hook_setup.write_config(**settings)
    hook_setup.gate_always()
    env = {"NVIDIA_VISIBLE_DEVICES": "0"}
    if how == "by name":
        env["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility,gds"
    else:
        env["NVIDIA_GDS"] = "enabled"
    script = (
        "/usr/bin/loaded-library libcufile.so.0; cat /run/udev/data/c195:0; "
        "touch /run/udev/x 2>&1; grep -c cufile /proc/self/mountinfo; "
        + _script(["/dev/nvidia-fs0"])
    )
    result = hook_setup.run(
        cufile_image,
        ["/bin/sh", "-c", script],
        extra=[arg for k, v in env.items() for arg in ("-e", f"{k}={v}")],
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "LOADED /usr/local/cuda/targets/x86_64-linux/lib/libcufile.so.0" in lines, lines
    assert "STANDIN image" in lines, result.stdout
    assert "E:ID_PATH=pci-0000:3b:00.0" in lines  # the host's udev database
    assert any("Read-only file system" in line for line in lines), result.stdout
    assert "1" in lines  # one cufile mount: /etc/cufile.json, no library
    assert "OPEN /dev/nvidia-fs0 ok" in lines
    (record,) = hook_setup.records()
    targets = [m["target"] for m in json.loads(record.read_text())["mounts"]]
    assert "/run/udev" in targets and "/etc/cufile.json" in targets
    assert not any("libcufile" in t for t in targets), targets


def test_all_capabilities_leave_gpudirect_out(direct_host, hook_setup, image_busybox):
    """NVIDIA_DRIVER_CAPABILITIES=all's usual meaning: every driver part, no GPUDirect node."""
    host = direct_host()
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _script(["/dev/gdrdrv"])],
        devices="0",
        extra=["--annotation", f"{CAPS}=all", *_bind(host, ["/dev/gdrdrv"])],
    )
    _check(result, host, [], ["/dev/gdrdrv"])


def test_gdrcopy_absent_on_the_host_refuses_the_container(direct_host, hook_setup, image_busybox):
    host = direct_host()
    (host.root / "dev/gdrdrv").unlink()
    devices = (host.root / "proc/devices").read_text()
    (host.root / "proc/devices").write_text(
        "".join(line for line in devices.splitlines(True) if not line.endswith(" gdrdrv\n"))
    )
    result = hook_setup.run(
        image_busybox, ["true"], devices="0", extra=["--annotation", f"{CAPS}=gdrcopy"]
    )
    assert result.returncode != 0
    assert (
        f"ocihook: capability gdrcopy: {host.root}/dev/gdrdrv: not found, and "
        f"{host.root}/proc/devices has no char major 'gdrdrv' (its kernel module is not loaded)"
    ) in result.stderr, result.stderr
    assert hook_setup.records() == []


@pytest.mark.parametrize(
    ("tenant", "channels", "allowed"),
    [("a", "first", True), ("a", "all", False), ("b", "first", False)],
)
def test_allow_list_governs_imex_channels(
    tenant, channels, allowed, direct_host, hook_setup, image_busybox
):
    """An entry covers the channels it names; `all` only an entry with `all` covers."""
    host = direct_host()
    first = int(_channels(host)[0].rsplit("channel", 1)[1])  # the stand-in's minor
    entry = {"annotations": {"^tenant$": "^a$"}, "devices": [0], "imex_channels": [first]}
    direct_host(request={"allow": [entry], "trusted_annotations": ["tenant"]})
    value = str(first) if channels == "first" else "all"
    result = hook_setup.run(
        image_busybox,
        ["true"],
        devices="0",
        extra=["--annotation", f"tenant={tenant}", "--annotation", f"{IMEX}={value}"],
    )
    if allowed:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0
        assert f"with IMEX channels '{value}'" in result.stderr, result.stderr
        assert "is not allowed by the config's request.allow" in result.stderr


def test_nodes_carry_the_containers_mount_label(direct_host, hook_setup, image_busybox):
    """The IMEX channel and GPUDirect nodes the hook makes carry the container's mount label
    (real security.selinux xattrs; the label an SELinux host's podman sets, handed in by
    tests/support/hook_with_label.py: no SELinux LSM here)."""
    from ocihook.selinux.label import get_label
    from ocihook.selinux.relabel import relabel
    from tests.support import podman
    from tests.test_selinux_runtime_labels import MOUNT_LABEL, _label_hooks_dir

    host = direct_host(selinux={"mode": "enabled"})
    relabel([str(host.root)])
    channel = _channels(host)[0]
    name = podman.unique_name("ocihook-direct-label")
    result = podman.run(
        image_busybox,
        ["/bin/sleep", "60"],
        hooks_dir=_label_hooks_dir(hook_setup),
        devices="0",
        extra=[
            "-d",
            "--name",
            name,
            "--annotation",
            f"{IMEX}={channel.rsplit('channel', 1)[1]}",
            "--annotation",
            f"{CAPS}=rdma",
        ],
    )
    try:
        assert result.returncode == 0, result.stderr
        pid = subprocess.run(
            ["podman", "inspect", "-f", "{{.State.Pid}}", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        root = f"/proc/{pid}/root"
        for path in (channel, "/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"):
            assert get_label(root + path) == MOUNT_LABEL, path
        assert not os.path.exists(root + "/dev/gdrdrv")
    finally:
        podman.remove(name)
