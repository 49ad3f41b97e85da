"""A config that breaks the schema gets one exact line, the same under jsonschema 3.2 (RHEL 9:
make test-py39 runs this file) and 4.x (the main venv): ocihook/config/schemaerrors.py chooses and
words the error, not the installed jsonschema's best_match."""

from __future__ import annotations

import pytest
import yaml

from ocihook.config.compiled import compile_config
from ocihook.errors import OcihookError

CASES = [
    ({"bogus": 1, "zz": 2}, "(top level): unknown key ('bogus', 'zz' were unexpected)"),
    ({"source_root": "rel"}, "source_root: 'rel' does not match '^/'"),
    (
        {"selinux": {"mode": "on"}},
        "selinux.mode: 'on' is not one of ['auto', 'enabled', 'disabled']",
    ),
    ({"records": {"max_age": -1}}, "records.max_age: -1 is less than the minimum of 0"),
    ({"request": {"env": "yes"}}, "request.env: 'yes' is not of type 'boolean'"),
    (
        {"request": {"trusted_annotations": ["a", "a"]}},
        "request.trusted_annotations: ['a', 'a'] has non-unique elements",
    ),
    # oneOf: the alternative of the value's type, as deep as the value went
    ({"profile": 3}, "profile: 3 is not of type 'string' or 'object'"),
    ({"request": {"allow": [{"devices": "some"}]}}, "request.allow.0.devices: 'all' was expected"),
    (
        {"request": {"allow": [{"devices": [-1]}]}},
        "request.allow.0.devices.0: -1 is less than the minimum of 0",
    ),
    (
        {"request": {"allow": [{"devices": ["a b"]}]}},
        "request.allow.0.devices.0: 'a b' does not match '^[A-Za-z0-9_./:-]+$'",
    ),
    ({"request": {"allow": [{}]}}, "request.allow.0: 'devices' is a required property"),
    (
        {"profile": {"name": "x", "libraries": [{"subdir": "a"}]}},
        "profile.libraries.0: 'name' is a required property",
    ),
    (
        {"profile": {"name": "x", "libraries": [{"name": "a", "x": 1}]}},
        "profile.libraries.0: unknown key ('x' was unexpected)",
    ),
    # oneOf whose alternatives all fit the type: each one's complaint
    (
        {"container": {"lib_dir": "x"}},
        "container.lib_dir: 'auto' was expected, or 'x' does not match '^/'",
    ),
    (
        {"log": {"target": "sislog"}},
        "log.target: 'sislog' is not one of ['syslog', 'none'], or 'sislog' does not match '^/'",
    ),
    # if/then, not, false schemas, lengths: worded alike whatever jsonschema says
    (
        {"profile": {"name": "x", "devices": {"sysfs": {"classes": ["drm"]}}}},
        "profile.devices: 'nodes' is a required property",
    ),
    (
        {
            "profile": {
                "name": "x",
                "devices": {
                    "sysfs": {"classes": ["drm"]},
                    "nodes": ["/dev/x{n}"],
                    "node": "/dev/x{index}",
                },
            }
        },
        "profile.devices.node: '/dev/x{index}' is not allowed",
    ),
    (
        {"profile": {"name": "x", "devices": {"sysfs": {"classes": []}, "nodes": ["/dev/x{n}"]}}},
        "profile.devices.sysfs.classes: [] must not be empty",
    ),
    (
        {"profile": {"name": "x", "devices": {"nodes": []}}},
        "profile.devices.nodes: [] must not be empty",
    ),
    (
        {"profile": {"name": "x", "capabilities": {"all": {}}}},
        "profile.capabilities: 'all' is not allowed",
    ),
    (
        {"profile": {"name": "x", "variables": {"version": "/x"}}},
        "profile.variables: 'version' is not allowed",
    ),
    (
        {"profile": {"name": "x", "binaries": ["b" * 256]}},
        f"profile.binaries.0: '{'b' * 256}' is too long (at most 255)",
    ),
]


@pytest.mark.parametrize(("document", "message"), CASES)
def test_one_exact_line_per_schema_error(tmp_path, document, message):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(document))
    with pytest.raises(OcihookError) as raised:
        compile_config(str(config))
    assert str(raised.value) == f"config {config}: {message}"


def test_a_profile_file_names_its_own_keys(tmp_path):
    profile = tmp_path / "mine.yaml"
    profile.write_text(yaml.safe_dump({"name": "mine", "devices": {"nodes": ["/dev/x"]}}))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"profile": str(profile)}))
    with pytest.raises(OcihookError) as raised:
        compile_config(str(config))
    assert str(raised.value) == (
        f"profile {profile}: devices.nodes.0: '/dev/x' does not match "
        "'^/dev/[^\\\\u0000]*\\\\{(index|n)\\\\}[^/\\\\u0000]*$'"
    )
