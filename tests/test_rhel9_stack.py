"""The RHEL 9 tier (make test-py39) runs on what it claims: RHEL 9's Python version and
exactly the versions of packaging/rhel9-python.txt, which setup.cfg names as the minimums."""

from __future__ import annotations

import configparser
import re
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PINS = dict(
    re.findall(
        r"^([A-Za-z0-9_.-]+)==(\S+)$", (REPO / "packaging/rhel9-python.txt").read_text(), re.M
    )
)


def test_setup_cfg_minimums_are_the_rhel9_versions():
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    requires = setup["options"]["install_requires"].split()
    for name in ("click", "PyYAML", "jsonschema"):
        assert f"{name}>={PINS[name]}" in requires
    build = (REPO / "pyproject.toml").read_text()
    assert f'requires = ["setuptools>={PINS["setuptools"].split(".")[0]}"]' in build


@pytest.mark.skipif(sys.version_info[:2] != (3, 9), reason="run by make test-py39 (Python 3.9)")
def test_this_interpreter_has_exactly_the_rhel9_stack():
    assert sys.version_info[:3] == (3, 9, 18)
    assert {name: version(name) for name in PINS} == PINS
    import click
    import jsonschema
    import yaml

    assert (click.__version__, yaml.__version__) == (PINS["click"], PINS["PyYAML"])
    assert not hasattr(jsonschema, "Draft202012Validator")
