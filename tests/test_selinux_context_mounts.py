"""Labelling on file systems that refuse `setxattr(security.selinux)`, and device node modes.

podman's rootfs overlay and runc's /dev tmpfs are mounted with `context=` under SELinux:
every file has the mount's one label and setxattr fails with EOPNOTSUPP. This host runs no
SELinux LSM, so no `context=` mount can exist here; ramfs is the real stand-in for the
refusal (the kernel answers EOPNOTSUPP for security.* xattrs on it). That a file on a real
`context=` mount which already has the wanted label is accepted is proved in the enforcing
guest (make test-enforcing, check "labels").
"""

from __future__ import annotations

import errno
import os
import stat

import pytest

from ocihook.apply.writer import ContainerWriter
from ocihook.errors import OcihookError
from ocihook.linux import securepath, syscalls
from ocihook.plan.model import DeviceNode, Link
from ocihook.selinux.label import get_label, label_at
from tests.support import synthetic
from tests.support.sandbox import in_private_mount_ns

LABEL = "system_u:object_r:container_file_t:s0:c1,c2"


def test_label_at_sets_where_the_file_system_allows(tmp_path):
    (tmp_path / "f").write_text("x")
    fd = securepath.open_dir(str(tmp_path))
    try:
        assert label_at(fd, "f", LABEL) is None
    finally:
        os.close(fd)
    assert get_label(str(tmp_path / "f")) == LABEL


@pytest.mark.root
def test_label_at_on_a_refusing_file_system_says_which_label_it_has(tmp_path):
    """EOPNOTSUPP from the kernel (ramfs): no exception, a line naming the label it has."""

    def body() -> None:
        syscalls.mount("none", str(tmp_path), "ramfs", 0)
        (tmp_path / "f").write_text("x")
        with pytest.raises(OSError) as refused:
            os.setxattr(str(tmp_path / "f"), "security.selinux", LABEL.encode())
        assert refused.value.errno == errno.EOPNOTSUPP
        fd = securepath.open_dir(str(tmp_path))
        problem = label_at(fd, "f", LABEL)
        assert problem is not None
        assert "context= mount" in problem and "labels it nothing" in problem, problem
        assert LABEL in problem

    in_private_mount_ns(body)


@pytest.mark.root
def test_writer_on_a_refusing_file_system_fails_with_one_line_and_rolls_back(tmp_path):
    """The hook fails closed (OcihookError naming the container path) and removes what it
    created, instead of an uncaught OSError."""

    def body() -> None:
        syscalls.mount("none", str(tmp_path), "ramfs", 0)
        (tmp_path / "usr/lib64").mkdir(parents=True)
        root_fd = securepath.open_dir(str(tmp_path))
        writer = ContainerWriter(root_fd, LABEL)
        with pytest.raises(OcihookError) as failed:
            writer.link(Link("/usr/lib64/libsynth.so.1", "libsynth.so.1.2.3"))
        message = str(failed.value)
        assert message.startswith("container /usr/lib64/libsynth.so.1: ") and "\n" not in message
        writer.rollback()
        assert not os.path.lexists(tmp_path / "usr/lib64/libsynth.so.1")

    in_private_mount_ns(body)


@pytest.mark.root
def test_device_nodes_get_the_host_nodes_mode_whatever_the_umask(tmp_path):
    """mknod applies the umask; a non-root container user needs the host node's 0666."""

    def body() -> None:
        syscalls.mount("none", str(tmp_path), "tmpfs", 0, "mode=755")
        (tmp_path / "dev").mkdir()
        root_fd = securepath.open_dir(str(tmp_path))
        writer = ContainerWriter(root_fd, None)
        old = os.umask(0o022)
        try:
            accel = synthetic.suite_devices()["synth0"]
            node = DeviceNode(
                "/dev/synth0", accel.path, "c", accel.major, accel.minor, 0o666, 0, "rw"
            )
            writer.device_node(node)
        finally:
            os.umask(old)
        st = os.stat(tmp_path / "dev/synth0")
        assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666

    in_private_mount_ns(body)
