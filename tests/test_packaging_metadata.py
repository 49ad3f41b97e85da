"""The wheel's metadata (setup.cfg), built as the RPM's %build fallback builds it: `pip wheel`
without build isolation, so with this interpreter's own setuptools. The main venv has a recent
setuptools; the RHEL 9 tier (make test-py39) runs the same test with setuptools 53, which
ignores pyproject.toml's [project] table: both must give the same name, version,
dependencies, console script and package data."""

from __future__ import annotations

import email
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ocihook

REPO = Path(__file__).resolve().parent.parent
REQUIRES = {
    "click>=7.1.2",
    "PyYAML>=5.4.1",
    "jsonschema>=3.2.0",  # no "selinux": the PyPI shim shadows the real bindings
    'tomli>=1.1.0;python_version<"3.11"',  # tomllib from 3.11 (ocihook/check/tomlfile.py)
}


def checkout_files() -> list[str]:
    """The checkout's files that git tracks or would (untracked, not ignored)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (REPO / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """The wheel of a copy of the checkout's files, less what git ignores (setuptools writes
    build/ and *.egg-info into the tree it builds)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    for name in checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--no-cache-dir", "--disable-pip-version-check", "-w", str(tmp / "dist"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (built,) = (tmp / "dist").glob("*.whl")
    assert built.name == f"ocihook-{ocihook.__version__}-py3-none-any.whl"
    return zipfile.ZipFile(built)


def test_metadata_names_the_package_its_version_and_rhel9_minimums(wheel):
    info = f"ocihook-{ocihook.__version__}.dist-info"
    metadata = email.message_from_bytes(wheel.read(f"{info}/METADATA"))
    assert metadata["Name"] == "ocihook"
    assert metadata["Version"] == ocihook.__version__
    assert metadata["Requires-Python"] == ">=3.9"
    assert metadata["License"] == "Apache-2.0"
    # "click (>=7.1.2)" from older setuptools, "click>=7.1.2" from newer ones
    requires = [re.sub(r"[ ()]", "", r) for r in metadata.get_all("Requires-Dist")]
    runtime = {r for r in requires if "extra==" not in r}
    assert runtime == REQUIRES
    assert metadata.get_payload().startswith("# ocihook\n")  # the README


def test_console_script_and_package_data(wheel):
    info = f"ocihook-{ocihook.__version__}.dist-info"
    entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert re.search(
        r"^\[console_scripts\]\nocihook = ocihook\.cli\.main:main$", entry_points, re.M
    )
    names = set(wheel.namelist())
    for data in (
        "ocihook/config/schema.json",
        "ocihook/check/hooksd.schema.json",
        "ocihook/cdi/schema.json",
    ):
        assert data in names
    package = {n for n in checkout_files() if n.startswith("ocihook/")}
    assert {n for n in names if n.startswith("ocihook/")} == package
