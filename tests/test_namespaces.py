"""Entering a container and opening its rootfs (ocihook/linux/namespaces.py): what is refused
before anything is mounted, in a real private mount namespace of a child process (root).

A rootfs is accepted when it is the root of a mount (runc and crun bind-mount it onto
itself; podman's overlay is mounted there), told by mount id rather than found in the mount
table: the table is not parsed line by line, and a rootfs reached through a symlinked
parent (a store under a symlinked /var/lib/containers) is its mount all the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ocihook.errors import OcihookError
from ocihook.linux import namespaces

REPO = Path(__file__).resolve().parent.parent

# Run in `unshare -m`: mounts made here vanish with the child. Prints one JSON object:
# each case's outcome ("ok" or the refusal's message).
CHILD = r"""
import json, os, subprocess, sys
from ocihook.errors import OcihookError
from ocihook.linux import namespaces
base = sys.argv[1]
subprocess.run(["mount", "--make-rprivate", "/"], check=True)
for name in ("overlay-like", "bound", "plain", "real"):
    os.mkdir(f"{base}/{name}")
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", f"{base}/overlay-like"], check=True)
subprocess.run(["mount", "--bind", f"{base}/bound", f"{base}/bound"], check=True)
os.mkdir(f"{base}/real/store")
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", f"{base}/real/store"], check=True)
os.symlink(f"{base}/real", f"{base}/linked")
os.symlink(f"{base}/overlay-like", f"{base}/last-is-link")
os.mkdir(f"{base}/overlay-like/inside")
cases = {
    "tmpfs": f"{base}/overlay-like",
    "bound onto itself": f"{base}/bound",
    "a plain directory": f"{base}/plain",
    "a directory in a mount": f"{base}/overlay-like/inside",
    "the namespace root": "/",
    "a symlinked parent": f"{base}/linked/store",
    "a symlink as the last part": f"{base}/last-is-link",
    "missing": f"{base}/missing",
}
out = {}
for name, path in cases.items():
    try:
        fd = namespaces.open_rootfs(path, "the test's namespace")
        os.close(fd)
        out[name] = "ok"
    except OcihookError as error:
        out[name] = str(error)
print(json.dumps(out))
"""


@pytest.mark.root
def test_rootfs_must_be_the_root_of_a_mount(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        ["unshare", "-m", sys.executable, "-c", CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["tmpfs"] == "ok"
    assert out["bound onto itself"] == "ok"
    assert out["a symlinked parent"] == "ok"
    assert out["a plain directory"] == (
        f"rootfs {tmp_path}/plain is not a mount point in the test's namespace"
    )
    assert out["a directory in a mount"].endswith(
        "inside is not a mount point in the test's namespace"
    )
    assert out["the namespace root"] == "rootfs / is the root of the test's namespace"
    assert out["a symlink as the last part"].startswith(f"rootfs {tmp_path}/last-is-link: ")
    assert out["missing"] == f"rootfs {tmp_path}/missing: does not exist"


@pytest.mark.root
def test_our_own_mount_namespace_is_never_entered():
    """A state whose pid is in the hook's own (the host's) mount namespace is refused before
    any setns: the hook would otherwise mount on the host."""
    with pytest.raises(OcihookError) as info:
        namespaces.enter_container(os.getpid(), "/")
    assert str(info.value) == (
        f"state on stdin: pid {os.getpid()} is not in a container's mount namespace"
    )
    assert namespaces.mount_namespace() == namespaces.mount_namespace(os.getpid())
