"""Vendor device nodes under SELinux, on the linked policy (Debian's refpolicy + refpolicy's
container module + ours, tests/policy_build.py): every node that a vendor profile plans on
its fake host gets, from the linked file_contexts, a type that container_t may use, with
our type always and with the vendors' own types only when ocihook_use_vendor_devices is on.

What the nodes are called: refpolicy and container-selinux type /dev/dri/* dri_device_t and
/dev/infiniband/* infiniband_device_t; container-selinux (Fedora) also types /dev/kfd
hsa_device_t, refpolicy leaves it device_t. Nobody types /dev/accel/* or /dev/hl*: the
module labels them ocihook_device_t. (Inside a container without a user namespace the hook
mknods the nodes on the container's /dev with the container's own label, so these host
types matter for user-namespace containers, which get the host nodes bind-mounted.)
"""

from __future__ import annotations

import json
import stat

import pytest

from tests.policy_build import build_linked_policy, linked_file_contexts
from tests.support import devstack, fake_hosts
from tests.support.plans import run_plan
from tests.test_devices_plan import write_config
from tests.test_selinux_policy import DEVICE_USE, TUNABLE, allowed

setools = devstack.module("setools")
selinux = devstack.module("selinux")

pytestmark = [pytest.mark.root, pytest.mark.devstack("setools", "selinux")]

CHR = stat.S_IFCHR | 0o666

EXPECTED_TYPES = {
    "/dev/dri/card1": "dri_device_t",
    "/dev/dri/renderD128": "dri_device_t",
    "/dev/infiniband/uverbs0": "infiniband_device_t",
    "/dev/infiniband/umad0": "infiniband_device_t",
    "/dev/infiniband/rdma_cm": "infiniband_device_t",
    "/dev/accel/accel0": "ocihook_device_t",
    "/dev/accel/accel_controlD7": "ocihook_device_t",
    "/dev/hl3": "ocihook_device_t",
    "/dev/hl_controlD3": "ocihook_device_t",
    "/dev/kfd": "device_t",  # refpolicy has no type for it (Fedora: hsa_device_t)
    "/dev/hlx": "device_t",  # the patterns are exact: no other node is ours
}


@pytest.fixture(scope="module")
def policy() -> setools.SELinuxPolicy:
    return setools.SELinuxPolicy(str(build_linked_policy()))


@pytest.fixture(scope="module")
def type_of():
    assert selinux.matchpathcon_init(str(linked_file_contexts())) == 0

    def lookup(path: str) -> str:
        rc, context = selinux.matchpathcon(path, CHR)
        assert rc == 0, path
        return context.split(":")[2]

    yield lookup
    selinux.matchpathcon_fini()


@pytest.mark.parametrize(("path", "expected"), sorted(EXPECTED_TYPES.items()))
def test_vendor_node_file_contexts(type_of, path, expected):
    assert type_of(path) == expected


def test_infiniband_devices_follow_the_tunable(policy):
    target = "infiniband_device_t"
    assert not allowed(policy, "container_t", target, "chr_file", {TUNABLE: False}) & DEVICE_USE
    assert DEVICE_USE <= allowed(policy, "container_t", target, "chr_file", {TUNABLE: True})


def test_generic_device_type_stays_closed(policy):
    """/dev/kfd on refpolicy hosts: device_t, which no tunable of ours opens."""
    everything_on = {str(b): True for b in policy.bools()}
    assert not allowed(policy, "container_t", "device_t", "chr_file", everything_on) & {
        "open",
        "read",
        "write",
    }


@pytest.mark.parametrize("tree", sorted(fake_hosts.TREES))
def test_every_planned_node_is_usable_by_a_container(tree, tmp_path, policy, type_of):
    """The nodes `ocihook plan` lists for the tree, looked up in the linked file contexts,
    are usable by container_t: ours always, the vendors' with the tunable on."""
    config, _ = write_config(tmp_path, tree)
    result = run_plan(config, "--json")
    assert result.returncode == 0, result.stderr
    paths = [d["path"] for d in json.loads(result.stdout)["devices"]]
    assert paths
    for path in paths:
        node_type = type_of(path)
        if path == "/dev/kfd":
            assert node_type == "device_t"  # refpolicy's gap, see the module docstring
            continue
        on = allowed(policy, "container_t", node_type, "chr_file", {TUNABLE: True})
        off = allowed(policy, "container_t", node_type, "chr_file", {TUNABLE: False})
        assert DEVICE_USE <= on, (path, node_type)
        if node_type == "ocihook_device_t":
            assert DEVICE_USE <= off, path
        else:
            assert not off & DEVICE_USE, (path, node_type)
