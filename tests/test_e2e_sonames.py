"""No half-working container, in real podman + runc containers (issue 25): a driver whose
soname link is missing on the host works (the program loads the library through the link
the hook made from its DT_SONAME); a driver whose soname link names another soname than
the library's DT_SONAME is refused in one line, and the container never runs.

The synthetic driver's libraries are real gcc-built shared objects that synth-smi is
linked against (DT_NEEDED libsynth.so.1); the second case patches the DT_SONAME string of
a copy in place (same length)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, base_config
from tests.support import synthetic

LIBDIR = synthetic.MULTIARCH
REAL = f"libsynth.so.{synthetic.VERSION}"


def driver(tmp_path: Path) -> Path:
    root = synthetic.build_driver(tmp_path / "driver")
    for name in synthetic.LIBRARIES:
        (root / LIBDIR / f"{name}.so.1").unlink()  # versioned files only
    return root


def test_missing_soname_link_is_made_and_loaded_through(hook_setup, image_rhel, tmp_path):
    root = driver(tmp_path)
    hook_setup.write_config(**base_config(hook_setup.dir, root))
    result = hook_setup.run(
        image_rhel,
        ["/bin/sh", "-c", "readlink /usr/lib64/libsynth.so.1 && /usr/bin/synth-smi /dev/synth0"],
        devices="0",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == REAL  # the link the hook created, by the DT_SONAME
    assert f"libsynth {synthetic.VERSION} loaded from /usr/lib64/libsynth.so.1" in result.stdout
    assert synthetic.opened("synth0") in result.stdout


def test_without_the_link_the_same_program_cannot_load_it(hook_setup, image_rhel, tmp_path):
    """Control: the same image and files, mounted by podman itself without a soname link
    (what the container got before): the loader does not find libsynth.so.1."""
    root = driver(tmp_path)
    source = root / LIBDIR / REAL
    result = hook_setup.run(
        image_rhel,
        ["/x"],
        extra=["-v", f"{source}:/usr/lib64/{REAL}:ro", "-v", f"{root}/usr/bin/synth-smi:/x:ro"],
    )
    assert result.returncode != 0
    assert "libsynth.so.1: cannot open shared object file" in result.stderr


def test_soname_link_of_another_name_is_refused_in_one_line(hook_setup, image_rhel, tmp_path):
    """libsynth.so.1 -> libsynth.so.1.2.3 whose DT_SONAME is libsynth.so.2: the hook takes
    the plain link as the soname without reading the file, and the native ld cache writer,
    which reads every injected library in the container, refuses; `ocihook plan` reads it
    on the host and refuses the same container."""
    root = synthetic.build_driver(tmp_path / "driver")
    lib = root / LIBDIR / REAL
    data = lib.read_bytes()
    assert data.count(b"libsynth.so.1\0") == 1
    lib.write_bytes(data.replace(b"libsynth.so.1\0", b"libsynth.so.2\0"))
    hook_setup.write_config(**base_config(hook_setup.dir, root))
    result = hook_setup.run(image_rhel, ["/usr/bin/synth-smi"], devices="0")
    assert result.returncode != 0
    assert "synth-smi" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if "ocihook: " in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].endswith(
        f"ocihook: container /usr/lib64/{REAL}: DT_SONAME libsynth.so.2 names nothing in "
        "/usr/lib64 (the driver's soname link has another name): programs would not load it"
    ), result.stderr
    assert hook_setup.records() == []  # undone: no record of an injection
    plan = subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "plan", "--config", str(hook_setup.config)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert plan.returncode == 1
    assert plan.stderr == (
        f"ocihook: source {lib}: DT_SONAME libsynth.so.2 differs from its soname link "
        "libsynth.so.1: programs would not load it\n"
    )


@pytest.mark.root
def test_check_reports_what_the_container_gets(tmp_path):
    """`ocihook check`: the links the host lacks as warnings, and still ok."""
    root = driver(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(root)))
    hooks = tmp_path / "hooks.d"
    hooks.mkdir()
    shutil.copy(REPO / "hooks.d/ocihook.json", hooks)
    result = subprocess.run(
        [sys.executable, "-m", "ocihook.cli.main", "check", "--config", str(config)]
        + ["--hooks-dir", str(hooks)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert (
        f"WARNING {root}/{LIBDIR}: 2 libraries lack a soname link; the container gets them "
        "(DT_SONAME)\n"
    ) in result.stdout
    assert f"ok      source root {root}:" in result.stdout
    assert os.path.exists(root / LIBDIR / REAL)
