"""Label helpers the hook's apply step calls (pure, import-light)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ocihook.selinux.label import source_label_problem


@pytest.mark.parametrize(
    "context",
    [
        "system_u:object_r:container_ro_file_t:s0",
        "unconfined_u:object_r:container_ro_file_t:s0",
        "system_u:object_r:container_file_t:s0",
        "system_u:object_r:lib_t:s0",
        "system_u:object_r:textrel_shlib_t:s0",
        "system_u:object_r:ld_so_t:s0",
    ],
)
def test_readable_sources(context: str) -> None:
    assert source_label_problem("/run/ocihook/driver/lib/libsynth.so", context) is None


@pytest.mark.parametrize(
    "context, words",
    [
        (None, "no SELinux label"),
        ("system_u:object_r:user_home_t:s0", "user_home_t"),
        ("system_u:object_r:usr_t:s0", "usr_t"),
        ("system_u:object_r:container_file_t:s0:c1,c2", "c1,c2"),
        ("garbage", "invalid"),
    ],
)
def test_problem_sources(tmp_path, context, words) -> None:
    lib = tmp_path / "libsynth.so"
    lib.write_text("")
    problem = source_label_problem(str(lib), context)
    assert problem is not None and words in problem and "\n" not in problem
    assert str(lib) in problem
    assert f"ocihook selinux relabel {tmp_path}" in problem


def test_label_module_is_import_light() -> None:
    code = (
        "import sys, ocihook.selinux.label;"
        "bad = {'selinux', 'click', 'yaml', 'jsonschema', 'setools'} & set(sys.modules);"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
