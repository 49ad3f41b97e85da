"""Driver capabilities: what a container may ask for, and from where."""

from __future__ import annotations

import pytest

from ocihook.errors import OcihookError
from ocihook.request.parse import parse_capabilities, requested_capabilities
from tests.conftest import base_config

NVIDIA = ["utility", "compute", "video", "graphics", "display", "ngx", "compat32"]


@pytest.mark.parametrize(
    ("value", "wanted"),
    [
        ("compute,utility", ["utility", "compute"]),
        (" Video , compute ", ["compute", "video"]),
        ("all", NVIDIA),
        ("compute,all", NVIDIA),
        ("", None),
        (" , ", None),
    ],
)
def test_parse(value, wanted):
    assert parse_capabilities(value, "annotation x", NVIDIA) == wanted


@pytest.mark.parametrize("value", ["compute,telepathy", "a" * 2000, "../etc"])
def test_bad_values_are_one_line(value):
    with pytest.raises(OcihookError) as error:
        parse_capabilities(value, "annotation ocihook.io/capabilities", NVIDIA)
    assert "\n" not in str(error.value)
    assert str(error.value).startswith("annotation ocihook.io/capabilities: ")


def test_annotation_wins_and_env_only_when_enabled():
    annotations = {"ocihook.io/capabilities": "video"}
    env = {"NVIDIA_DRIVER_CAPABILITIES": "graphics"}
    key = "ocihook.io/capabilities"
    assert requested_capabilities(annotations, env, key, "NVIDIA_DRIVER_CAPABILITIES", NVIDIA) == [
        "video"
    ]
    assert requested_capabilities({}, env, key, "NVIDIA_DRIVER_CAPABILITIES", NVIDIA) == [
        "graphics"
    ]
    assert requested_capabilities({}, env, key, None, NVIDIA) is None  # env off: default


def test_image_env_asks_for_capabilities_when_enabled(hook_setup, image_busybox, synth_root):
    """request.env on (and the always-run hooks.d file): SYNTH_DRIVER_CAPABILITIES counts."""
    profile = {
        "name": "synthcaps",
        "env_prefix": "SYNTH",
        "library_dirs": ["/usr/lib/x86_64-linux-gnu"],
        "default_capabilities": ["base"],
        "capabilities": {
            "base": {"libraries": ["libsynth.so.*"]},
            "tools": {"binaries": ["synth-smi"]},
        },
        "devices": {"node": "/dev/synth{index}", "control": ["/dev/synthctl"]},
    }
    hook_setup.write_config(
        **base_config(
            hook_setup.dir,
            synth_root,
            profile=profile,
            request={"env": True},
            ldconfig={"enabled": False},
        )
    )
    hook_setup.gate_always()
    result = hook_setup.run(
        image_busybox,
        ["/bin/sh", "-c", "ls /usr/bin/synth-smi"],
        extra=["--env", "SYNTH_VISIBLE_DEVICES=0", "--env", "SYNTH_DRIVER_CAPABILITIES=tools"],
    )
    assert result.returncode == 0, result.stderr
    assert "/usr/bin/synth-smi" in result.stdout
