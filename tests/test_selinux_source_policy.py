"""selinux/source_policy.py: which labels a bind-mount source may carry for the container
that mounts it (pure rules; the kernel is asked only with a process label, which these
tests leave out: tests/test_selinux_access.py asks it)."""

from __future__ import annotations

from ocihook.selinux.source_policy import (
    SourceLabelPolicy,
    policy_allows,
    relabel_fix,
    writable_label_problem,
)

RO = "system_u:object_r:container_ro_file_t:s0"
RW = "system_u:object_r:container_file_t:s0"
HOME = "system_u:object_r:user_home_t:s0"


def test_fix_for_a_host_system_source_root_is_not_a_relabel(tmp_path):
    assert relabel_fix(str(tmp_path)) == f"run: ocihook selinux relabel {tmp_path}"
    for root in ("/", "/usr"):
        fix = relabel_fix(root)
        assert "does not relabel" in fix and "source_check: warn" in fix


def test_a_read_write_source_must_be_writable_by_every_container():
    assert writable_label_problem("/run/mps", RW) is None
    for context in (RO, f"{RW}:c1,c2", HOME, None):
        problem = writable_label_problem("/run/mps", context)
        assert problem is not None and "chcon -R -t container_file_t -l s0 /run/mps" in problem
    policy = SourceLabelPolicy(None, "/srv/driver")
    assert policy.problem("/run/mps", RO, True, "dir", False) == writable_label_problem(
        "/run/mps", RO
    )


def test_a_read_only_source_of_a_shared_type_is_fine(tmp_path):
    policy = SourceLabelPolicy(None, str(tmp_path))
    for context in (RO, RW, "system_u:object_r:lib_t:s0"):
        assert policy.problem("/srv/driver/libx.so", context, False, "file", True) is None


def test_a_read_only_source_no_container_may_read_gets_the_roots_relabel(tmp_path):
    policy = SourceLabelPolicy(None, str(tmp_path), str(tmp_path))
    problem = policy.problem(f"{tmp_path}/libx.so", HOME, False, "file", True)
    assert problem == (
        f"{tmp_path}/libx.so is labelled {HOME}, which containers cannot read; "
        f"run: ocihook selinux relabel {tmp_path}"
    )
    unlabelled = policy.problem(f"{tmp_path}/bin/x", None, False, "file", True)
    assert unlabelled == (
        f"{tmp_path}/bin/x has no SELinux label, containers cannot read it; "
        f"run: ocihook selinux relabel {tmp_path}"
    )


def test_the_policy_is_not_asked_without_a_process_label_or_a_label():
    asked: dict = {}
    assert policy_allows(None, HOME, "file", True, asked) is False
    assert (
        policy_allows("system_u:system_r:container_t:s0:c1,c2", None, "file", True, asked) is False
    )
    assert asked == {}
