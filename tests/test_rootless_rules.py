"""The rootless decisions that are plain functions, unprivileged: reading a uid_map, which
namespace the hook is in, and which host nodes a rootless container can open. The real
thing (the hook in rootless podman, the trust rule in the user's namespace) is
tests/test_rootless.py."""

from __future__ import annotations

import os
import stat

import pytest

from ocihook.errors import OcihookError
from ocihook.linux import userns
from ocihook.request import rootless

ROOTLESS_MAP = "         0       1001          1\n         1     100000      65536\n"


def test_parse_id_map_and_outside_ids():
    id_map = userns.parse_id_map(ROOTLESS_MAP)
    assert id_map == ((0, 1001, 1), (1, 100000, 65536))
    assert userns.outside_id(id_map, 0) == 1001
    assert userns.outside_id(id_map, 1) == 100000
    assert userns.outside_id(id_map, 65536) == 165535
    assert userns.outside_id(id_map, 65537) is None
    with pytest.raises(ValueError):
        userns.parse_id_map("0 0\n")


def test_detect_reads_the_processes_own_map(tmp_path):
    identity = tmp_path / "identity"
    identity.write_text("         0          0 4294967295\n")
    ns = userns.detect_namespace(str(identity))
    assert not ns.rootless and ns.host_uid is None
    mapped = tmp_path / "mapped"
    mapped.write_text(ROOTLESS_MAP)
    ns = userns.detect_namespace(str(mapped))
    assert ns.rootless and ns.uid_map == ((0, 1001, 1), (1, 100000, 65536))
    # A partial identity map is a user namespace too (root of a nested container).
    partial = tmp_path / "partial"
    partial.write_text("0 0 65536\n")
    assert userns.detect_namespace(str(partial)).rootless
    garbage = tmp_path / "garbage"
    garbage.write_text("zero 0 1\n")
    with pytest.raises(OcihookError, match="cannot tell whether the hook runs in a user namespace"):
        userns.detect_namespace(str(garbage))


def test_this_process_namespace_agrees_with_proc():
    with open("/proc/self/uid_map") as file:
        text = file.read()
    assert userns.hook_namespace().rootless == (userns.parse_id_map(text) != userns.IDENTITY_MAP)


def _node(uid: int, gid: int, mode: int) -> os.stat_result:
    fields = (stat.S_IFCHR | mode, 1, 5, 1, uid, gid, 0, 0, 0, 0)
    return os.stat_result(fields, {"st_rdev": os.makedev(10, 237)})


NS = userns.HookNamespace(True, ((0, 1001, 1), (1, 100000, 65536)), 1001, 65534, 65534)
OUTSIDE = 65534  # what host root (and any unmapped id) shows as


@pytest.mark.parametrize(
    "uid, gid, mode, access, acl, keeps, opens",
    [
        (OUTSIDE, OUTSIDE, 0o666, "rw", False, False, True),  # world read-write (NVIDIA's)
        (OUTSIDE, OUTSIDE, 0o664, "r", False, False, True),  # read is all it asks
        (OUTSIDE, OUTSIDE, 0o664, "rw", False, False, False),
        (OUTSIDE, OUTSIDE, 0o660, "rw", False, False, False),  # a host group's (render)
        (OUTSIDE, OUTSIDE, 0o600, "rw", True, False, True),  # an ACL may name the user
        (OUTSIDE, OUTSIDE, 0o660, "rw", False, True, True),  # crun keep-groups
        (OUTSIDE, 0, 0o660, "rw", False, False, True),  # the user's own group
        (0, OUTSIDE, 0o600, "rw", False, False, True),  # the user's own node
    ],
)
def test_device_problem(uid, gid, mode, access, acl, keeps, opens):
    problem = rootless.device_problem(NS, "/dev/x", _node(uid, gid, mode), access, acl, keeps)
    assert (problem is None) == opens, problem
    if problem:
        assert problem.startswith(f"rootless: device /dev/x (10:237, mode {mode:04o})")
        assert "\n" not in problem
        assert problem.endswith(
            "or use root podman (CDI cannot help: a rootless container gets its nodes as bind "
            "mounts too)"
        )
