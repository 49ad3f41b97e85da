"""The installed hook executable (packaging/hook_executable.py renders packaging/ocihook-hook):
it runs `python3 -IS`, finds the package and its dependencies through the site dirs written
into it at install time (no `site` module, no .pth file read at container start), falls back
to `site` when the package is not where it was installed, and exits with main()'s status
after flushing what it printed (no interpreter teardown). Unprivileged: a no-request state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import synthetic

REPO = Path(__file__).resolve().parent.parent
RENDER = REPO / "packaging/hook_executable.py"
NO_REQUEST = json.dumps(
    {
        "ociVersion": "1.0.2",
        "id": "executable",
        "status": "creating",
        "pid": 1,
        "bundle": "/",
        "annotations": {},
    }
).encode()


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A venv of this interpreter whose site-packages holds a .pth file that leaves a mark
    when `site` reads it (and the system's packages, for the hook's dependencies)."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run(
        ["/usr/bin/python3", "-m", "venv", "--without-pip", "--system-site-packages", str(root)],
        check=True,
    )
    site_packages = next(root.glob("lib/python3*/site-packages"))
    mark = root / "site-ran"
    (site_packages / "zz-mark.pth").write_text(f"import os; os.close(os.open({str(mark)!r}, 65))\n")
    return root


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "config.yaml"
    (tmp_path / "driver").mkdir()
    path.write_text(json.dumps(synthetic.config(tmp_path / "driver", tmp_path)))
    os.utime(path, (time.time() - 10, time.time() - 10))
    return path


def render(venv: Path, out: Path, package_dir: Path) -> str:
    python = venv / "bin/python3"
    subprocess.run(
        [sys.executable, str(RENDER), str(out), "--python", str(python)]
        + ["--package-dir", str(package_dir)],
        check=True,
    )
    (venv / "site-ran").unlink(missing_ok=True)  # rendering asks `python -I` (with site)
    return out.read_text()


def run(exe: Path, config: Path, state: bytes, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(exe), "--config", str(config), "--cache-dir", str(config.parent / "cache"), *extra],
        input=state,
        capture_output=True,
    )


def test_site_dirs_written_and_site_never_runs(venv, config, tmp_path):
    text = render(venv, tmp_path / "ocihook-hook", REPO)
    assert text.startswith(f"#!{venv}/bin/python3 -IS\n")
    line = next(x for x in text.splitlines() if x.startswith("SITE_DIRS"))
    dirs = eval(line.split("=", 1)[1])  # a list literal we wrote
    site_packages = str(next(venv.glob("lib/python3*/site-packages")))
    assert dirs[0] == str(REPO) and site_packages in dirs, dirs
    result = run(tmp_path / "ocihook-hook", config, NO_REQUEST)
    assert (result.returncode, result.stderr) == (0, b"")
    assert not (venv / "site-ran").exists(), "the .pth file was read: `site` ran"


def test_falls_back_to_site_when_the_package_moved(venv, config, tmp_path):
    """Installed dir gone (say, a Python upgrade moved it): the hook still finds the package
    where `site` does (here through a .pth file naming the checkout)."""
    site_packages = next(venv.glob("lib/python3*/site-packages"))
    text = render(venv, tmp_path / "ocihook-hook", tmp_path / "not-there")
    assert str(REPO) not in text
    (site_packages / "checkout.pth").write_text(f"{REPO}\n")  # after: only `site` reads it
    try:
        result = run(tmp_path / "ocihook-hook", config, NO_REQUEST)
        assert (result.returncode, result.stderr) == (0, b"")
        assert (venv / "site-ran").exists()
    finally:
        (site_packages / "checkout.pth").unlink()
        (venv / "site-ran").unlink(missing_ok=True)


def test_exit_status_and_message_survive_the_fast_exit(venv, config, tmp_path):
    """os._exit skips the teardown, not the output: the one-line error and status 1 arrive,
    and --help still prints."""
    render(venv, tmp_path / "ocihook-hook", REPO)
    result = run(tmp_path / "ocihook-hook", config, b"{")
    assert result.returncode == 1
    assert result.stderr.decode().startswith("ocihook: state on stdin"), result.stderr
    helped = run(tmp_path / "ocihook-hook", config, b"", "--help")
    assert helped.returncode == 0 and helped.stdout.startswith(b"usage: ocihook-hook")


def test_refuses_a_template_that_is_not_the_hook(tmp_path):
    sys.path.insert(0, str(RENDER.parent))
    try:
        import hook_executable
    finally:
        sys.path.remove(str(RENDER.parent))
    with pytest.raises(SystemExit, match="not the expected template"):
        hook_executable.render("/usr/bin/python3", [], template="#!/bin/sh\necho\n")
