"""Each vendor profile in real podman + runc containers: the right nodes per device, and a
device cgroup that allows exactly them.

Stand-in: this machine has no AMD, Intel, Gaudi or RDMA hardware. The device roots are the
fake hosts of tests/support/fake_hosts.py: sysfs laid out as the kernel lays it out and
real char nodes with the vendors' majors (drm 226, infiniband 231, accel 261) or typical
dynamic ones (kfd 511, habanalabs 508), none of which a driver registered here. Opening
a node in the container therefore tells the device cgroup's answer apart from the
driver's: EPERM ("Operation not permitted") means the cgroup denied it; ENXIO ("No such
device or address") means the cgroup allowed it and no driver has that major here; the
misc node rdma_cm (10:58, no misc driver on that minor here) gives ENODEV ("No such
device") when allowed. A node of a device that was not requested, bind-mounted by
podman itself, must give EPERM: the check can fail both ways.
"""

from __future__ import annotations

import pytest

from tests.conftest import base_config
from tests.support import fake_hosts, hosts

ENXIO = "No such device or address"
ENODEV = "No such device"
EPERM = "Operation not permitted"

# tree, request, nodes the container must get (with the expected open error), a node of
# another device (not requested) for the control case
CASES = {
    "amd-server": (
        "renderD129",
        {"/dev/dri/card2": ENXIO, "/dev/dri/renderD129": ENXIO, "/dev/kfd": ENXIO},
        "/dev/dri/renderD128",
    ),
    "intel": (
        "0000:03:00.0",
        {"/dev/dri/card1": ENXIO, "/dev/dri/renderD129": ENXIO},
        "/dev/dri/card0",
    ),
    "gaudi-accel": (
        "0-1",  # (podman 4's --annotation splits values at commas: a range, not a list)
        {
            "/dev/accel/accel0": ENXIO,  # index 0 is accel0 (0000:43:00.0), Habana's numbering
            "/dev/accel/accel_controlD0": ENXIO,
            "/dev/accel/accel1": ENXIO,  # index 1 is accel1 (0000:19:00.0, first in PCI order)
            "/dev/accel/accel_controlD1": ENXIO,
        },
        "/dev/accel/accel2",
    ),
    "gaudi-legacy": (
        "0000:19:00.0",
        {"/dev/hl1": ENXIO, "/dev/hl_controlD1": ENXIO},
        "/dev/hl_controlD0",
    ),
    "rdma": (
        "1",
        {
            "/dev/infiniband/uverbs1": ENXIO,
            "/dev/infiniband/umad1": ENXIO,
            "/dev/infiniband/rdma_cm": ENODEV,
        },
        "/dev/infiniband/uverbs0",
    ),
}


def _open_script(paths: list[str]) -> str:
    """For each path: 'OPEN <path> ok' or the shell's error line, then the nodes listed."""
    opens = "; ".join(f"(exec 3<>{p}) 2>&1 && echo 'OPEN {p} ok'" for p in paths)
    return f"{opens}; find /dev -type c | sort"


def _outcome(output: str, path: str) -> str:
    for line in output.splitlines():
        if f" {path}: " in line or f"OPEN {path} " in line:
            return line
    raise AssertionError(f"no outcome for {path} in:\n{output}")


@pytest.fixture
def vendor_host(hook_setup, tmp_path_factory, synth_root):
    """Configure the hook for one fake host; returns (tree root, run)."""

    def setup(tree: str, **overrides):
        profile, build = fake_hosts.TREES[tree]
        root = build(tmp_path_factory.mktemp("host") / tree)
        root.chmod(0o755)
        settings = base_config(hook_setup.dir, synth_root, profile=profile, **overrides)
        settings["source_root"] = settings["device_root"] = str(root)
        hook_setup.write_config(**settings)
        return root

    assert fake_hosts.unregistered_majors() == set(fake_hosts.FAKE_MAJORS), (
        "a driver of this machine registered one of the fake hosts' majors: "
        "open() would reach it instead of failing with ENXIO"
    )
    assert not fake_hosts.misc_minor_registered(fake_hosts.RDMA_CM[1]), (
        f"a misc driver of this machine has minor {fake_hosts.RDMA_CM[1]} (the fake rdma_cm): "
        "open() would reach it instead of failing with ENODEV"
    )
    return setup


@pytest.mark.parametrize("tree", sorted(CASES))
def test_profile_injects_requested_nodes_and_cgroup_allows_only_them(
    tree, vendor_host, hook_setup, image_busybox
):
    request, expected, other = CASES[tree]
    root = vendor_host(tree)
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _open_script([*expected, other])],
        devices=request,
        extra=["-v", f"{root}{other}:{other}"],
    )
    assert result.returncode == 0, result.stderr
    for path, error in expected.items():
        assert _outcome(result.stdout, path).endswith(error), result.stdout
    assert _outcome(result.stdout, other).endswith(EPERM), result.stdout
    listed = {line for line in result.stdout.splitlines() if line.startswith("/dev/")}
    vendor_nodes = {
        p
        for p in listed
        if p.startswith(("/dev/dri", "/dev/accel", "/dev/hl", "/dev/infin", "/dev/kfd"))
    }
    assert vendor_nodes == {*expected, other}


def test_amd_env_request_with_the_vendor_variable(vendor_host, hook_setup, image_busybox):
    """AMD_VISIBLE_DEVICES (the AMD container toolkit's variable), when the config opts in."""
    vendor_host(
        "amd-server", request={"env": True, "annotation": "ocihook.io/devices", "allow": []}
    )
    hook_setup.gate_always()
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _open_script(["/dev/dri/card1", "/dev/dri/renderD128", "/dev/kfd"])],
        extra=["-e", "AMD_VISIBLE_DEVICES=1"],
    )
    assert result.returncode == 0, result.stderr
    for path in ("/dev/dri/card1", "/dev/dri/renderD128", "/dev/kfd"):
        assert _outcome(result.stdout, path).endswith(ENXIO), result.stdout
    assert "/dev/dri/card2" not in result.stdout


def test_userns_container_gets_the_host_nodes_bind_mounted(vendor_host, hook_setup, image_busybox):
    """With a user namespace the hook bind-mounts the host's nodes (in subdirectories such as
    /dev/dri here) instead of mknod; the cgroup still decides: ENXIO for the requested GPU."""
    vendor_host("amd-server")
    nodes = ["/dev/dri/card1", "/dev/dri/renderD128", "/dev/kfd"]
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", _open_script(nodes) + "; grep -c ' /dev/dri/' /proc/self/mountinfo"],
        devices="0000:c1:00.0",
        extra=["--uidmap", "0:200000:65536", "--gidmap", "0:200000:65536"],
    )
    assert result.returncode == 0, result.stderr
    for path in nodes:
        assert _outcome(result.stdout, path).endswith(ENXIO), result.stdout
    assert result.stdout.strip().splitlines()[-1] == "2"  # card1 and renderD128 are bind mounts


def test_nvidia_profile_on_the_common_schema(
    hook_setup, tmp_path_factory, synth_root, image_busybox
):
    """nvidia: `nodes: [/dev/nvidia{index}]` plus control nodes, selected by node name, with
    its (dummy) libraries mounted. Stand-in: 195 and 510 are no registered majors here."""
    from tests.test_plan import nvidia_tree

    nvidia_majors = frozenset(major for major, _ in hosts.NODES.values())
    assert fake_hosts.unregistered_majors(nvidia_majors) == set(nvidia_majors), (
        "a driver of this machine registered NVIDIA's majors: open() would not fail with ENXIO"
    )
    root = nvidia_tree(tmp_path_factory.mktemp("nv") / "driver")
    root.chmod(0o755)
    settings = base_config(
        hook_setup.dir, synth_root, profile="nvidia", ldconfig={"enabled": False}
    )
    settings["source_root"] = settings["device_root"] = str(root)
    hook_setup.write_config(**settings)
    nodes = ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    result = hook_setup.run(
        image_busybox,
        [
            "/bin/sh",
            "-c",
            _open_script([*nodes, "/dev/nvidia0"]) + "; find /usr -name 'libcuda.so.*'",
        ],
        devices="nvidia1",
        extra=["-v", f"{root}/dev/nvidia0:/dev/nvidia0"],
    )
    assert result.returncode == 0, result.stderr
    for path in nodes:
        assert _outcome(result.stdout, path).endswith(ENXIO), result.stdout
    assert _outcome(result.stdout, "/dev/nvidia0").endswith(EPERM), result.stdout
    assert "libcuda.so.550.54.14" in result.stdout
