"""IMEX channels and the GPUDirect capabilities (gdrcopy, gds, rdma) in `ocihook plan`, the
request and allow-list rules, and the one-line refusals of what the host lacks.

Stand-in: tests/support/nvidia_direct.py's fake device root with FIXED fake numbers (a plan
never opens a node; tests/test_e2e_nvidia_direct.py opens real stand-ins in containers).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ocihook.errors import OcihookError
from ocihook.request.imex import covers, parse_channels
from ocihook.request.parse import DeviceRequest, check_allowed, parse_capabilities
from tests.support import golden, nvidia_direct, synthetic
from tests.support.plans import run_plan

GOLDEN = Path(__file__).parent / "golden"
IMEX_DIR = nvidia_direct.IMEX_DIR


def _config(tmp_path: Path, **build) -> tuple[Path, Path]:
    host = nvidia_direct.build(tmp_path / "root", **build)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(host.root, profile="nvidia")))
    return config, host.root


def _nodes(config: Path, *args: str) -> dict[str, tuple[int, int, str]]:
    result = run_plan(config, "--json", "--devices", "0", *args)
    assert result.returncode == 0, result.stderr
    return {
        d["path"]: (d["major"], d["minor"], d["access"])
        for d in json.loads(result.stdout)["devices"]
    }


def _error(config: Path, *args: str) -> str:
    result = run_plan(config, "--devices", "0", *args)
    assert result.returncode == 1, result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- plans ---------------------------------------------------------------------------


@pytest.mark.root
def test_plan_matches_golden(tmp_path):
    config, root = _config(tmp_path, cufile=True)
    result = run_plan(
        config,
        "--devices",
        "0",
        "--capabilities",
        "compute,gdrcopy,gds,rdma",
        "--imex-channels",
        "all",
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(root), "<root>")
    assert text == golden.golden_text(GOLDEN / "plan-nvidia-direct.txt", text)


@pytest.mark.root
def test_plan_json_has_the_nodes_and_their_rules(tmp_path):
    config, _ = _config(tmp_path)
    result = run_plan(
        config, "--json", "--devices", "0", "--capabilities", "gdrcopy", "--imex-channels", "1,7"
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    nodes = {d["path"]: (d["major"], d["minor"]) for d in plan["devices"]}
    assert nodes[f"{IMEX_DIR}/channel1"] == (509, 1)
    assert nodes[f"{IMEX_DIR}/channel7"] == (509, 7)
    assert f"{IMEX_DIR}/channel0" not in nodes
    assert nodes["/dev/gdrdrv"] == (507, 0)
    assert not any(p.startswith(("/dev/nvidia-fs", "/dev/infiniband")) for p in nodes)
    rules = json.dumps(plan["cgroup_rules"] if "cgroup_rules" in plan else plan)
    assert "509" in rules and "507" in rules
    assert plan["request"] == "0; IMEX channels 1,7"


@pytest.mark.root
def test_gpudirect_only_by_name(tmp_path):
    """`all` capabilities (NVIDIA_DRIVER_CAPABILITIES=all) get no GPUDirect node; `all`
    plus a name gets that one."""
    config, _ = _config(tmp_path)
    plain = _nodes(config, "--capabilities", "all")
    assert not any(p in plain for p in ("/dev/gdrdrv", "/dev/nvidia-fs0"))
    assert "/dev/gdrdrv" in _nodes(config, "--capabilities", "all,gdrcopy")


@pytest.mark.root
def test_rdma_optional_nodes_may_be_absent(tmp_path):
    nodes = {
        p: n
        for p, n in nvidia_direct.FAKE_NODES.items()
        if not p.endswith(("rdma_cm", "umad0", "issm0"))
    }
    config, _ = _config(tmp_path, nodes=nodes, misc={})
    found = _nodes(config, "--capabilities", "rdma")
    assert found["/dev/infiniband/uverbs0"] == (231, 192, "rw")
    assert not any(p.endswith(("rdma_cm", "umad0")) for p in found)


# -- what the host lacks: one line ----------------------------------------------------


@pytest.mark.root
def test_unknown_imex_channel(tmp_path):
    config, _ = _config(tmp_path)
    assert _error(config, "--imex-channels", "0,3") == (
        "ocihook: --imex-channels: IMEX channel 3 does not exist (the host has: 0,1,7)"
    )


@pytest.mark.root
def test_imex_all_without_channels(tmp_path):
    nodes = {p: n for p, n in nvidia_direct.FAKE_NODES.items() if not p.startswith(IMEX_DIR)}
    config, root = _config(tmp_path, nodes=nodes)
    assert _error(config, "--imex-channels", "all") == (
        "ocihook: --imex-channels: IMEX channels 'all': the host has no channel nodes "
        f"({root}{IMEX_DIR}/channelN)"
    )


@pytest.mark.root
def test_imex_channel_of_another_major_is_refused(tmp_path):
    nodes = {**nvidia_direct.FAKE_NODES, f"{IMEX_DIR}/channel2": (195, 2)}
    config, root = _config(tmp_path, nodes=nodes)
    assert _error(config, "--imex-channels", "2") == (
        f"ocihook: --imex-channels: IMEX channel 2: {root}{IMEX_DIR}/channel2 is not the "
        "char device 509:2"
    )


@pytest.mark.root
def test_imex_channel_minor_must_be_its_number(tmp_path):
    nodes = {**nvidia_direct.FAKE_NODES, f"{IMEX_DIR}/channel3": (509, 4)}
    config, _ = _config(tmp_path, nodes=nodes)
    assert "IMEX channel 3: " in _error(config, "--imex-channels", "3")


@pytest.mark.root
def test_imex_without_the_major(tmp_path):
    majors = {k: v for k, v in nvidia_direct.FAKE_MAJORS.items() if "imex" not in k}
    config, root = _config(tmp_path, majors=majors)
    assert _error(config, "--imex-channels", "0") == (
        f"ocihook: --imex-channels: IMEX channels: {root}/proc/devices has no char major "
        "'nvidia-caps-imex-channels' (the nvidia driver has no IMEX support loaded)"
    )


@pytest.mark.root
@pytest.mark.parametrize(
    ("capability", "drop", "expected"),
    [
        (
            "gdrcopy",
            ("/dev/gdrdrv", "gdrdrv"),
            "capability gdrcopy: <root>/dev/gdrdrv: not found, and <root>/proc/devices has no "
            "char major 'gdrdrv' (its kernel module is not loaded)",
        ),
        (
            "gds",
            ("/dev/nvidia-fs0", "/dev/nvidia-fs1"),
            "capability gds: <root>/dev/nvidia-fs* not found (its driver is loaded: the host "
            "has no node for it)",
        ),
        (
            "gds",
            ("nvidia-fs",),
            "capability gds: <root>/dev/nvidia-fs*: <root>/proc/devices has no char major "
            "'nvidia-fs' (its kernel module is not loaded)",
        ),
        (
            "rdma",
            ("/dev/infiniband/uverbs0", "infiniband_verbs"),
            "capability rdma: <root>/dev/infiniband/uverbs*: not found, and <root>/proc/devices "
            "has no char major 'infiniband_verbs' (its kernel module is not loaded)",
        ),
    ],
)
def test_absent_gpudirect_part(capability, drop, expected, tmp_path):
    nodes = {p: n for p, n in nvidia_direct.FAKE_NODES.items() if p not in drop}
    majors = {k: v for k, v in nvidia_direct.FAKE_MAJORS.items() if k not in drop}
    config, root = _config(tmp_path, nodes=nodes, majors=majors)
    line = _error(config, "--capabilities", capability)
    assert line == "ocihook: " + expected.replace("<root>", str(root))


@pytest.mark.root
@pytest.mark.parametrize(
    ("path", "numbers", "capability", "want"),
    [
        ("/dev/gdrdrv", (195, 0), "gdrcopy", "not a node of 'gdrdrv' (c 507)"),
        ("/dev/nvidia-fs1", (507, 1), "gds", "not a node of 'nvidia-fs' (c 506)"),
        ("/dev/infiniband/rdma_cm", (10, 59), "rdma", "not a node of 'rdma_cm' (c 10:58)"),
    ],
)
def test_a_node_of_another_driver_is_refused(path, numbers, capability, want, tmp_path):
    """A stale node of an unloaded module, or another driver's node at the path."""
    config, root = _config(tmp_path, nodes={**nvidia_direct.FAKE_NODES, path: numbers})
    line = _error(config, "--capabilities", capability)
    major, minor = numbers
    assert line == (f"ocihook: capability {capability}: {root}{path} is c {major}:{minor}, {want}")


# -- requests and the allow-list (pure) -----------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("all", None),
        ("ALL", None),
        ("", ()),
        ("none", ()),
        ("void", ()),
        ("0", (0,)),
        ("3,1, 2", (1, 2, 3)),
        ("0-3,7", (0, 1, 2, 3, 7)),
        ("2047", (2047,)),
    ],
)
def test_parse_channels(value, expected):
    assert parse_channels(value, "annotation x") == expected


@pytest.mark.parametrize("value", ["-1", "x", "3-1", "0-99999", "1,,2", "0x1", "1.5", "٣"])
def test_parse_channels_refuses(value):
    with pytest.raises(OcihookError, match="annotation x: invalid IMEX channel list"):
        parse_channels(value, "annotation x")


def _request(imex) -> DeviceRequest:
    return DeviceRequest((0,), "annotation ocihook.io/devices", imex=imex, imex_origin="a i")


@pytest.mark.parametrize(
    ("allowed", "imex", "ok"),
    [
        (None, (), True),  # no channel asked: the entry's devices decide
        (None, (0,), False),  # an entry without imex_channels covers none
        ([0, 1], (0,), True),
        ([0, 1], (0, 2), False),
        ([0, 1], None, False),  # `all` only by `all`
        ("all", None, True),
        ("all", (5,), True),
    ],
)
def test_allow_list_imex_channels(allowed, imex, ok):
    entry = {"devices": [0]}
    if allowed is not None:
        entry["imex_channels"] = allowed
    assert covers(allowed, imex) == ok
    request = _request(imex)
    if ok:
        check_allowed(request, {}, [entry], [])
    else:
        with pytest.raises(OcihookError, match="with IMEX channels .* is not allowed"):
            check_allowed(request, {}, [entry], [])


def test_all_capabilities_leave_out_by_name_ones():
    available = ["utility", "compute", "gdrcopy", "gds"]
    by_name = ["gdrcopy", "gds"]
    assert parse_capabilities("all", "x", available, by_name) == ["utility", "compute"]
    assert parse_capabilities("all,gds", "x", available, by_name) == ["utility", "compute", "gds"]
    assert parse_capabilities("gdrcopy", "x", available, by_name) == ["gdrcopy"]


@pytest.mark.parametrize(
    "entry",
    [
        {"path": "/dev/gdrdrv"},
        {"path": "/dev/gdrdrv", "major": "gdrdrv", "misc": "gdrdrv"},
        {"path": "/etc/gdrdrv", "major": "gdrdrv"},
    ],
)
def test_profile_node_entry_is_validated(entry, tmp_path):
    """A capability node is under /dev and names its driver: a char major or a misc device."""
    from ocihook.config.compiled import compile_config

    profile = yaml.safe_load((synthetic.PROFILES / "nvidia.yaml").read_text())
    profile["capabilities"]["gdrcopy"]["nodes"] = [entry]
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"profile": profile}))
    with pytest.raises(OcihookError, match="capabilities.gdrcopy.nodes.0"):
        compile_config(str(config))


@pytest.mark.root
def test_nvswitch_by_name(tmp_path):
    """NVSwitch's nodes (its nvidia-nvswitchctl included: one major, as the driver makes
    them), by name only."""
    config, _ = _config(tmp_path)
    found = _nodes(config, "--capabilities", "compute,nvswitch")
    assert found["/dev/nvidia-nvswitch0"] == (505, 0, "rw")
    assert found["/dev/nvidia-nvswitchctl"] == (505, 255, "rw")
    assert "/dev/nvidia-nvswitch0" not in _nodes(config, "--capabilities", "all")


# -- NVIDIA's switches: NVIDIA_GDRCOPY, NVIDIA_GDS, NVIDIA_MOFED, NVIDIA_NVSWITCH ---------------


def _hook_request(tmp_path: Path, env: dict, annotations: dict | None = None, request_env=True):
    """The hook's request (request.assemble.container_request) of a container with `env` under the
    nvidia profile, request.env as given."""
    from ocihook.config.compiled import compile_config
    from ocihook.request.assemble import container_request
    from ocihook.request.state import Container

    config_path = tmp_path / "config.yaml"
    settings = synthetic.config(tmp_path, profile="nvidia", request={"env": request_env})
    config_path.write_text(yaml.safe_dump(settings))
    config, _ = compile_config(str(config_path))
    container = Container("c", "creating", 1, str(tmp_path), str(tmp_path), annotations or {}, env)
    return container_request(container, config)


@pytest.mark.parametrize(
    "env, capabilities, switched",
    [
        ({"NVIDIA_GDS": "enabled"}, ["compute", "utility", "gds"], ("gds",)),
        ({"NVIDIA_GDRCOPY": "enabled"}, ["compute", "utility", "gdrcopy"], ("gdrcopy",)),
        ({"NVIDIA_MOFED": "enabled"}, ["compute", "utility", "rdma"], ("rdma",)),
        ({"NVIDIA_NVSWITCH": "enabled"}, ["compute", "utility", "nvswitch"], ("nvswitch",)),
        (
            {"NVIDIA_GDS": "enabled", "NVIDIA_MOFED": "enabled", "NVIDIA_GDRCOPY": "enabled"},
            ["compute", "utility", "gdrcopy", "gds", "rdma"],
            ("gdrcopy", "gds", "rdma"),
        ),
        # with NVIDIA_DRIVER_CAPABILITIES the switch adds to that list
        (
            {"NVIDIA_DRIVER_CAPABILITIES": "video", "NVIDIA_GDS": "enabled"},
            ["video", "gds"],
            ("gds",),
        ),
        # asked for by name as well: not a switch's alone (its nodes are then required)
        (
            {"NVIDIA_DRIVER_CAPABILITIES": "compute,gds", "NVIDIA_GDS": "enabled"},
            ["compute", "gds"],
            (),
        ),
        # exactly `enabled`, as NVIDIA's runtime compares it
        ({"NVIDIA_GDS": "Enabled"}, None, ()),
        ({"NVIDIA_GDS": "true"}, None, ()),
        ({"NVIDIA_GDS": ""}, None, ()),
    ],
)  # fmt: skip
def test_switches_from_the_image_env(tmp_path, env, capabilities, switched):
    request = _hook_request(tmp_path, {"NVIDIA_VISIBLE_DEVICES": "0", **env})
    assert (request.capabilities, request.switched) == (capabilities, switched)


def test_switches_are_env_requests(tmp_path):
    """Read only with request.env (image authors are not trusted by default), and the
    capabilities annotation wins over them as over NVIDIA_DRIVER_CAPABILITIES."""
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_GDS": "enabled"}
    off = _hook_request(tmp_path, env, {"ocihook.io/devices": "0"}, request_env=False)
    assert (off.capabilities, off.switched) == (None, ())
    annotated = _hook_request(tmp_path, env, {"ocihook.io/capabilities": "compute"})
    assert (annotated.capabilities, annotated.switched) == (["compute"], ())


@pytest.mark.root
def test_a_switched_capability_the_host_lacks_is_left_out(tmp_path):
    """NVIDIA_GDS=enabled on a host without nvidia-fs: as NVIDIA's runtime, the container
    starts without it (the plan says so); the same capability asked for by name is refused."""
    from ocihook.config.compiled import compile_config
    from ocihook.discover.build import build_plan
    from ocihook.discover.roots import Roots
    from ocihook.request.parse import parse_request

    nodes = {p: n for p, n in nvidia_direct.FAKE_NODES.items() if "nvidia-fs" not in p}
    majors = {k: v for k, v in nvidia_direct.FAKE_MAJORS.items() if k != "nvidia-fs"}
    config_path, root = _config(tmp_path, nodes=nodes, majors=majors)
    config, _ = compile_config(str(config_path))
    request = parse_request("0", "test")
    request.capabilities = ["compute", "gds"]
    request.switched = ("gds",)
    with Roots(str(root), str(root)) as roots:
        plan = build_plan(config, roots, request)
    assert not any(d.path.startswith("/dev/nvidia-fs") for d in plan.devices)
    assert (
        f"capability gds (its switch): {root}/dev/nvidia-fs*: {root}/proc/devices has no char "
        "major 'nvidia-fs' (its kernel module is not loaded): not given"
    ) in plan.warnings
    assert "/run/udev" in [m.target for m in plan.mounts]
    request.switched = ()
    with Roots(str(root), str(root)) as roots, pytest.raises(OcihookError, match="nvidia-fs"):
        build_plan(config, roots, request)


# -- the CDI spec of IMEX channels -------------------------------------------------------------


def _cdi(config: Path, *args: str) -> subprocess.CompletedProcess:
    ocihook = str(Path(sys.executable).with_name("ocihook"))
    return subprocess.run(
        [ocihook, "cdi", "generate", "--config", str(config), "--hook-path", ocihook, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.root
def test_imex_channels_cdi_spec_matches_golden(tmp_path):
    """NVIDIA's kind and names (nvidia.com/imex-channel=0, =1, =7, as nvidia-ctk writes
    them) and `all`; each channel's node, nothing shared."""
    config, root = _config(tmp_path)
    result = _cdi(config, "--kind", "nvidia.com/imex-channel", "--format", "json")
    assert result.returncode == 0, result.stderr
    spec = json.loads(result.stdout.replace(str(root), "<root>"))
    assert spec == golden.golden_json(GOLDEN / "cdi-nvidia-imex.json", spec)
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "7", "all"]


@pytest.mark.root
def test_a_spec_dir_gets_the_gpus_and_the_channels(tmp_path):
    config, _ = _config(tmp_path)
    out = tmp_path / "cdi"
    out.mkdir()
    result = _cdi(config, "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "nvidia.com_gpu.yaml",
        "nvidia.com_imex-channel.yaml",
    ]
    assert "wrote" in result.stderr and "nvidia.com/imex-channel=7" in result.stderr


@pytest.mark.root
def test_no_channels_no_channel_spec(tmp_path):
    """A host without channels: a spec dir gets the GPUs' spec only; the channels' kind asked
    for gets one line."""
    nodes = {p: n for p, n in nvidia_direct.FAKE_NODES.items() if "imex" not in p}
    config, root = _config(tmp_path, nodes=nodes)
    out = tmp_path / "cdi"
    out.mkdir()
    assert _cdi(config, "--output", str(out)).returncode == 0
    assert [p.name for p in out.iterdir()] == ["nvidia.com_gpu.yaml"]
    result = _cdi(config, "--kind", "nvidia.com/imex-channel")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "ocihook: cdi generate: IMEX channels 'all': the host has no channel nodes "
        f"({root}/dev/nvidia-caps-imex-channels/channelN)"
    )
