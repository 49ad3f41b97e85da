"""ocihook/selinux/access.py: asking the running policy through selinuxfs.

This machine's kernel runs no SELinux, so the request and the bits are checked against a
stand-in selinuxfs class tree (the files and numbers as the kernel lays them out:
class/<name>/index, class/<name>/perms/<perm>, numbered from 1); the kernel's answer itself
is proven in the enforcing guests (tests/enforcing/guest_checks.py, host-root-driver: a
driver in the host's /usr, bin_t binaries, accepted because the policy allows them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ocihook.selinux import access

CONTAINER = "system_u:system_r:container_t:s0:c1,c2"
BIN = "system_u:object_r:bin_t:s0"


def standin_selinuxfs(root: Path) -> Path:
    """class/file (index 6; getattr 7, open 20, read 2, map 23, execute 14) and class/dir."""
    for name, index, perms in (
        ("file", 6, {"read": 2, "execute": 14, "getattr": 7, "open": 20, "map": 23}),
        ("dir", 7, {"read": 2, "getattr": 7, "open": 20, "search": 21}),
    ):
        cls = root / "class" / name
        (cls / "perms").mkdir(parents=True)
        (cls / "index").write_text(f"{index}\n")
        for perm, bit in perms.items():
            (cls / "perms" / perm).write_text(f"{bit}\n")
    return root


def test_request_names_the_class_by_its_number(tmp_path):
    fs = standin_selinuxfs(tmp_path)
    assert access.request(CONTAINER, BIN, "file", str(fs)) == f"{CONTAINER} {BIN} 6".encode()
    with pytest.raises(ValueError):
        access.request(f"{CONTAINER} x", BIN, "file", str(fs))


def test_permission_bits_are_numbered_from_one(tmp_path):
    fs = str(standin_selinuxfs(tmp_path))
    assert access.permission_bits("file", ("read",), fs) == 1 << 1
    tclass, perms = access.use("file", executable=True)
    assert (tclass, perms) == ("file", ("getattr", "open", "read", "map", "execute"))
    bits = access.permission_bits(tclass, perms, fs)
    assert bits == (1 << 6) | (1 << 19) | (1 << 1) | (1 << 22) | (1 << 13)


def test_the_allowed_vector_is_the_first_hex_field():
    reply = b"400046 ffffffff 0 ffffffff 3 0"
    assert access.allowed_vector(reply) == 0x400046
    assert access.allowed_vector(reply) & 0x46 == 0x46


def test_what_each_kind_of_source_needs():
    assert access.use("file", executable=False) == ("file", ("getattr", "open", "read"))
    assert access.use("dir", executable=False) == ("dir", ("getattr", "open", "read", "search"))
    assert access.use("sock", executable=False) == ("sock_file", ("getattr", "write"))


def test_no_answer_where_the_kernel_cannot_be_asked(tmp_path):
    """No selinuxfs (this machine), an unknown class or permission: None, never a guess."""
    assert access.allowed(CONTAINER, BIN, "file", ("read",), str(tmp_path / "none")) is None
    fs = str(standin_selinuxfs(tmp_path))
    assert access.allowed(CONTAINER, BIN, "nosuchclass", ("read",), fs) is None
    assert access.allowed(CONTAINER, BIN, "file", ("nosuchperm",), fs) is None
    # a selinuxfs without its access transaction file
    assert access.allowed(CONTAINER, BIN, "file", ("read",), fs) is None
