"""securepath: in-root resolution by fd, with openat2 and with the O_PATH walk fallback.

Every test runs twice: once with openat2 (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS), once
with `_have_openat2 = False`, which makes `resolve` take the real fallback code path.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from ocihook.apply import sources
from ocihook.apply.writer import ContainerWriter
from ocihook.linux import securepath
from tests.support.sandbox import in_private_mount_ns


@pytest.fixture(params=["openat2", "walk"])
def mode(request, monkeypatch):
    monkeypatch.setattr(securepath, "_have_openat2", False if request.param == "walk" else None)
    return request.param


@pytest.fixture
def tree(tmp_path) -> dict:
    """A root with a canary outside it; links aimed every way out of the root."""
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "marker").write_text("host")
    root = tmp_path / "root"
    (root / "usr/lib64").mkdir(parents=True)
    (root / "usr/lib64/libc.so.6").write_text("image libc")
    (root / "etc").mkdir()
    (root / "etc/marker").write_text("image")
    (root / canary.relative_to("/")).mkdir(parents=True)  # the same path inside the root
    (root / "abs").symlink_to(canary)
    (root / "dotdot").symlink_to("../../../../../../../..")
    (root / "dotdot_etc").symlink_to("../../../../../../../../etc")
    (root / "procroot").symlink_to("/proc/self/root" + str(canary))
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    (root / "self").symlink_to("self")
    (root / "file").write_text("f")
    (root / "lib").symlink_to("usr/lib64")
    fd = securepath.open_dir(str(root))
    yield {"root": root, "fd": fd, "canary": canary}
    os.close(fd)


def _where(fd: int) -> str:
    try:
        return os.readlink(securepath.fd_path(fd))
    finally:
        os.close(fd)


def test_plain_and_relative_link(tree, mode):
    root = tree["root"]
    assert _where(securepath.resolve(tree["fd"], "/usr/lib64/libc.so.6")) == str(
        root / "usr/lib64/libc.so.6"
    )
    assert _where(securepath.resolve(tree["fd"], "lib/libc.so.6")) == str(
        root / "usr/lib64/libc.so.6"
    )


@pytest.mark.parametrize("path", ["/abs", "/abs/", "abs/."])
def test_absolute_link_stays_in_root(tree, mode, path):
    inside = tree["root"] / tree["canary"].relative_to("/")
    assert _where(securepath.resolve(tree["fd"], path)) == str(inside)


@pytest.mark.parametrize("path", ["/dotdot", "/../../..", "usr/../../../..", "/dotdot/usr/.."])
def test_dotdot_above_root_is_root(tree, mode, path):
    assert _where(securepath.resolve(tree["fd"], path)) == str(tree["root"])


def test_dotdot_link_to_etc_is_root_etc(tree, mode):
    assert _where(securepath.resolve(tree["fd"], "/dotdot_etc/marker")) == str(
        tree["root"] / "etc/marker"
    )


def test_proc_self_root_link_is_not_followed_out(tree, mode):
    # The root has no /proc: the link's target is looked up inside the root, and is missing.
    with pytest.raises(FileNotFoundError):
        os.close(securepath.resolve(tree["fd"], "/procroot/marker"))


@pytest.mark.parametrize("path", ["/proc/self/root/etc", "/proc/1/root", "/proc/self/fd/0"])
def test_magic_links_refused(mode, path):
    """With "/" as the root, /proc is a real procfs: its magic links are never followed."""
    root = securepath.open_dir("/")
    try:
        with pytest.raises(OSError) as info:
            os.close(securepath.resolve(root, path))
        assert info.value.errno in (errno.ELOOP, errno.ENOENT, errno.EACCES)
    finally:
        os.close(root)


@pytest.mark.parametrize("path", ["/loop1", "/self", "/self/x"])
def test_symlink_loops(tree, mode, path):
    with pytest.raises(OSError) as info:
        os.close(securepath.resolve(tree["fd"], path))
    assert info.value.errno == errno.ELOOP


def test_no_follow_final_gives_the_link(tree, mode):
    fd = securepath.resolve(tree["fd"], "/abs", follow_final=False)
    try:
        assert stat.S_ISLNK(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def test_no_follow_final_with_open_flags_refuses_link(tree, mode):
    with pytest.raises(OSError) as info:
        os.close(securepath.resolve(tree["fd"], "/abs", follow_final=False, flags=os.O_RDONLY))
    assert info.value.errno == errno.ELOOP


def test_o_directory_on_a_file(tree, mode):
    with pytest.raises(NotADirectoryError):
        os.close(securepath.resolve(tree["fd"], "/file", flags=os.O_PATH | os.O_DIRECTORY))


def test_file_as_a_directory(tree, mode):
    with pytest.raises(NotADirectoryError):
        os.close(securepath.resolve(tree["fd"], "/file/x"))


def test_readable_fd(tree, mode):
    fd = securepath.resolve(tree["fd"], "/lib/libc.so.6", flags=os.O_RDONLY)
    with os.fdopen(fd) as file:
        assert file.read() == "image libc"


def test_mkdirs_through_escaping_links_creates_inside(tree, mode):
    created: list[str] = []
    before = sorted(os.listdir(tree["canary"]))
    for path in ("/abs/new/deeper", "/dotdot/tmp/x", "/procroot2/y"):
        if path.startswith("/procroot2"):
            (tree["root"] / "procroot2").symlink_to("/proc/self/root/tmp")
        try:
            fd = securepath.mkdirs(tree["fd"], path, 0o755, created)
        except OSError:
            continue  # refused is fine; escaping is not
        where = _where(fd)
        assert where.startswith(str(tree["root"]) + "/"), where
    assert sorted(os.listdir(tree["canary"])) == before
    inside = tree["root"] / tree["canary"].relative_to("/")
    assert (inside / "new/deeper").is_dir()
    assert "/abs/new" in created and "/abs/new/deeper" in created
    assert not Path("/tmp/x").exists() or (tree["root"] / "tmp/x").is_dir()


def test_mkdirs_refuses_a_file(tree, mode):
    with pytest.raises(NotADirectoryError):
        os.close(securepath.mkdirs(tree["fd"], "/file/sub"))


def test_split():
    assert securepath.split("/usr/lib64/libx.so") == ("/usr/lib64", "libx.so")
    assert securepath.split("a") == ("/", "a")
    for bad in ("/", "", "/usr/.."):
        with pytest.raises(OSError):
            securepath.split(bad)


def test_open_dir_refuses_relative_and_symlink(tree):
    with pytest.raises(OSError):
        securepath.open_dir("relative")
    with pytest.raises(OSError):
        securepath.open_dir(str(tree["root"] / "abs"))


@pytest.mark.root
def test_attach_verifies_and_rolls_back(tmp_path, mode):
    """A real bind mount through ContainerWriter in a private mount namespace: it lands on
    the in-root target (not on the host path a link names), dev/ino match, undo removes it."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "libx.so.1").write_text("driver")
    canary = tmp_path / "canary"
    canary.mkdir()
    root = tmp_path / "root"
    (root / "usr").mkdir(parents=True)
    (root / "usr/lib64").symlink_to(canary)  # an image aiming at a host dir
    (root / canary.relative_to("/")).mkdir(parents=True)  # ... that also exists in the root

    def body() -> None:
        from ocihook.plan.model import Mount, Plan

        src_fd = securepath.open_dir(str(source))
        plan = Plan("p", str(source), "/", "all", "/usr/lib64")
        plan.mounts.append(
            Mount("/libx.so.1", str(source / "libx.so.1"), "/usr/lib64/x", "library")
        )
        trees = sources.clone_sources(plan, src_fd)
        root_fd = securepath.open_dir(str(root))
        writer = ContainerWriter(root_fd, None)
        writer.attach(trees[0].fd, "/usr/lib64/x", (trees[0].dev, trees[0].ino), "x")
        inside = root / canary.relative_to("/") / "x"
        assert inside.read_text() == "driver", "mounted inside the root"
        assert os.listdir(canary) == [], "nothing on the host canary"
        try:
            with open(inside, "w") as file:
                file.write("x")
            raise AssertionError("the bind mount is writable")
        except OSError as error:
            assert error.errno == errno.EROFS
        writer.rollback()
        assert not inside.exists(), "rollback removed the mount point it created"
        assert source.joinpath("libx.so.1").read_text() == "driver"

    in_private_mount_ns(body)
    assert os.listdir(canary) == []


@pytest.mark.root
def test_a_source_swapped_for_a_link_after_planning_is_refused_not_followed(tmp_path):
    """clone_sources resolves each source's directory in the source root and clones the file
    from that directory's fd without following a link there: a planned library replaced by
    a symlink (to a file inside the root, or to the host's /etc/shadow) is refused by the
    type check, one line, and nothing is cloned."""
    from ocihook.errors import OcihookError
    from ocihook.plan.model import Mount, Plan

    source = tmp_path / "src"
    (source / "lib").mkdir(parents=True)
    (source / "lib/other.so.1").write_text("another file of the driver")
    for points_to in ("other.so.1", "/etc/shadow"):
        link = source / "lib/libx.so.1"
        link.unlink(missing_ok=True)
        link.symlink_to(points_to)
        src_fd = securepath.open_dir(str(source))
        try:
            plan = Plan("p", str(source), "/", "all", "/usr/lib64")
            plan.mounts.append(
                Mount("/lib/libx.so.1", str(link), "/usr/lib64/libx.so.1", "library")
            )
            with pytest.raises(OcihookError, match=r"libx\.so\.1"):
                sources.clone_sources(plan, src_fd)
        finally:
            os.close(src_fd)
