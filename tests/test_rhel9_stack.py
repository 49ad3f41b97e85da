"""The RHEL 9 tier (make test-py39) runs on what it claims: RHEL 9's Python version and
exactly the versions of packaging/rhel9-python.txt, which setup.cfg names as the minimums."""

from __future__ import annotations

import configparser
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.support import py39

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


# Run by RHEL 9's interpreter whichever tier this is (in make test-py39 it is this one).
STACK = """
import json, sys
from importlib.metadata import version
import click, jsonschema, yaml
print(json.dumps({
    "python": list(sys.version_info[:3]),
    "pins": {name: version(name) for name in sys.argv[1:]},
    "modules": [click.__version__, yaml.__version__],
    "draft2020": hasattr(jsonschema, "Draft202012Validator"),
}))
"""


@pytest.mark.py39
def test_the_rhel9_tier_runs_exactly_the_rhel9_stack():
    result = subprocess.run(
        [str(py39.python()), "-c", STACK, *PINS], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    stack = json.loads(result.stdout)
    assert stack["python"] == [3, 9, 18]
    assert stack["pins"] == PINS
    assert stack["modules"] == [PINS["click"], PINS["PyYAML"]]
    assert stack["draft2020"] is False
