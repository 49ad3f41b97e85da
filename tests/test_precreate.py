"""The precreate stage (`ocihook-hook --stage precreate`, podman only): the proposed OCI config
in, the config with the request's nodes and bind mounts out (never device rules: podman
update resends podman's own device list, docs/cgroups.md); and the prestart stage's
view of what config.json has the runtime do (ocihook/apply/owned.py). The real podman + runc runs
are in tests/test_e2e_precreate.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from ocihook.apply import owned
from ocihook.plan.devrules import DeviceRule
from ocihook.plan.model import DeviceNode
from ocihook.request.state import runtime_owned
from tests.support import synthetic
from tests.support.golden import golden_json

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests/golden"
SAMPLE = REPO / "tests/data/precreate-config.json"  # podman 4.3's proposed config, as captured
ANNOTATION = "ocihook.io/devices"


def sample(rootfs: Path, devices: str | None = None) -> bytes:
    spec = json.loads(SAMPLE.read_text())
    spec["root"]["path"] = str(rootfs)
    if devices is not None:
        spec["annotations"][ANNOTATION] = devices
    return json.dumps(spec).encode()


def precreate(hook: Path, config: Path, cache: Path, stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(hook), "--stage", "precreate", "--config", str(config), "--cache-dir", str(cache)],
        input=stdin,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )


def rhel_root(path: Path) -> Path:
    """An image root with RHEL's layout (its lib dir is /usr/lib64), nothing else."""
    (path / "usr/lib64").mkdir(parents=True)
    return path


@pytest.fixture
def setup(tmp_path, hook_exe):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(tmp_path / "no-driver", tmp_path)))
    return hook_exe, config, tmp_path / "cache"


# -- no request, bad input -----------------------------------------------------------------


def test_no_request_passes_the_config_through_byte_for_byte(setup, tmp_path):
    data = sample(rhel_root(tmp_path / "rootfs"))
    result = precreate(*setup, data)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data
    assert result.stderr == b""


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        (
            b"",
            "ocihook: config on stdin (precreate): empty (podman passes the proposed OCI config)",
        ),
        (b"{not json", "ocihook: config on stdin (precreate): not valid JSON"),
        (b"[1]", "ocihook: config on stdin (precreate): must be a JSON object"),
        (b'{"ociVersion": "1.0.2"}', "ocihook: config on stdin (precreate): missing field 'root'"),
        (
            b'{"ociVersion": "1.0.2", "id": "x", "status": "creating", "bundle": "/b"}',
            "ocihook: config on stdin (precreate): this is a container state, not an OCI config",
        ),
    ],
)
def test_bad_stdin_is_one_line_and_nothing_on_stdout(setup, stdin, message):
    result = precreate(*setup, stdin)
    assert result.returncode == 1
    assert result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), result.stderr


def test_unknown_stage_is_refused(setup):
    hook, config, cache = setup
    result = subprocess.run([str(hook), "--stage", "poststart"], capture_output=True, input=b"")
    assert result.returncode == 1
    assert result.stderr.decode().strip() == (
        "ocihook: --stage 'poststart': one of prestart, precreate"
    )


# -- the edit, from the synthetic driver's plan --------------------------------------------


def _edit(hook_exe, tmp_path, synth_root, devices="all", **overrides):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(synth_root, tmp_path, **overrides)))
    rootfs = rhel_root(tmp_path / "rootfs")
    data = sample(rootfs, devices)
    result = precreate(hook_exe, config, tmp_path / "cache", data)
    assert result.returncode == 0, result.stderr
    return json.loads(data), json.loads(result.stdout), rootfs


def test_edit_keeps_every_field_and_adds_only_the_plans_entries(hook_exe, tmp_path, synth_root):
    """Mounts and nodes are added; linux.resources (the device rules among them) is
    podman's own, byte for byte: `podman update` resends podman's stored list, and crun
    1.23+ refuses an update whose list differs from the program it built at create."""
    before, after, _ = _edit(hook_exe, tmp_path, synth_root)
    added_mounts = after["mounts"][len(before["mounts"]) :]
    assert after["mounts"][: len(before["mounts"])] == before["mounts"]
    for key in set(before) | set(after):
        if key not in ("mounts", "linux"):
            assert after[key] == before[key], key
    for key in set(before["linux"]) | set(after["linux"]):
        if key != "devices":
            assert after["linux"][key] == before["linux"][key], key
    assert added_mounts and len(after["linux"]["devices"]) == 5


def test_edited_config_matches_golden(hook_exe, tmp_path, synth_root):
    """The edit is the finalized plan written down (tests/golden/precreate-synthetic.json):
    the synthetic nodes are this machine's own char devices, whose numbers differ by
    kernel: each is checked against its host node, then left out of the golden."""
    before, after, rootfs = _edit(hook_exe, tmp_path, synth_root)
    edit = {
        "mounts": after["mounts"][len(before["mounts"]) :],
        "devices": after["linux"]["devices"],
    }
    nodes = {d["path"]: d for d in edit["devices"]}
    for node in edit["devices"]:
        rdev = os.stat(synth_root / "dev" / os.path.basename(node["path"])).st_rdev
        numbers = (os.major(rdev), os.minor(rdev))
        assert (node.pop("major"), node.pop("minor")) == numbers
    assert sorted(nodes) == sorted(f"/dev/{n}" for n in synthetic.SUITE_NAMES[:5])
    text = json.loads(json.dumps(edit).replace(str(synth_root), "<source>"))
    assert text == golden_json(GOLDEN / "precreate-synthetic.json", text)


def test_edit_is_the_cdi_specs_mounts_and_nodes(hook_exe, tmp_path, synth_root):
    """One decision site: the mounts and nodes are the CDI spec's (`cdi generate` renders
    the same executor view), but for the container paths of libraries: the CDI spec keeps
    the host's lib dir, the precreate stage has the image at hand (RHEL's /usr/lib64)."""
    before, after, _ = _edit(hook_exe, tmp_path, synth_root)
    config = tmp_path / "config.yaml"
    ocihook = str(Path(os.sys.executable).with_name("ocihook"))
    generate = [ocihook, "cdi", "generate", "--config", str(config), "--format", "json"]
    spec = json.loads(subprocess.run(generate, capture_output=True, check=True).stdout)
    cdi = spec["containerEdits"]["mounts"]
    ours = after["mounts"][len(before["mounts"]) :]
    assert [(m["hostPath"], m["options"]) for m in cdi] == [
        (m["source"], m["options"]) for m in ours
    ]
    everything = {n["path"]: n for d in spec["devices"] if d["name"] == "all"
                  for n in d["containerEdits"]["deviceNodes"]}  # fmt: skip
    everything.update({n["path"]: n for n in spec["containerEdits"]["deviceNodes"]})
    for node in after["linux"]["devices"]:
        cdi_node = everything[node["path"]]
        assert (cdi_node["major"], cdi_node["minor"], cdi_node["fileMode"]) == (
            node["major"],
            node["minor"],
            node["fileMode"],
        )


def test_sources_are_resolved_inside_the_source_root(hook_exe, tmp_path, synth_root):
    """Every mount source is the canonical host path of a file inside the source root,
    never a path of the image (the rootfs) and never through a symlink."""
    before, after, rootfs = _edit(hook_exe, tmp_path, synth_root)
    real_root = os.path.realpath(synth_root)
    for mount in after["mounts"][len(before["mounts"]) :]:
        assert mount["source"].startswith(real_root + "/"), mount
        assert os.path.realpath(mount["source"]) == mount["source"]
        assert not mount["source"].startswith(str(rootfs))


def test_user_namespace_leaves_the_nodes_and_rules_to_prestart(hook_exe, tmp_path, synth_root):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(synth_root, tmp_path)))
    spec = json.loads(sample(rhel_root(tmp_path / "rootfs"), "0"))
    spec["linux"]["namespaces"].append({"type": "user"})
    result = precreate(hook_exe, config, tmp_path / "cache", json.dumps(spec).encode())
    assert result.returncode == 0, result.stderr
    after = json.loads(result.stdout)
    assert after["linux"].get("devices") in (None, [])
    assert after["linux"]["resources"] == spec["linux"]["resources"]
    assert len(after["mounts"]) > len(spec["mounts"])


def test_a_failed_edit_hands_the_config_back_and_logs_why(hook_exe, tmp_path, synth_root):
    """podman 4.3 drops a precreate hook's stderr: the config goes back unchanged (the
    prestart stage meets the same error and refuses the container with its line, which
    podman shows: tests/test_e2e_precreate.py) and the hook's log says why."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(synth_root, tmp_path)))
    data = sample(tmp_path, "9")
    result = precreate(hook_exe, config, tmp_path / "cache", data)
    assert result.returncode == 0, result.stderr
    assert result.stdout == data
    log = (tmp_path / "ocihook.log").read_text()
    assert (
        f"precreate: annotation {ANNOTATION}: device index 9 does not exist (available: 0,1,2);"
        " left to the prestart stage"
    ) in log


# -- what config.json has the runtime do (owned.py) ----------------------------------------


def node(path="/dev/x0", major=10, minor=237, strategy="mknod") -> DeviceNode:
    return DeviceNode(path, path, "c", major, minor, 0o666, 0, "rw", strategy)


def config_with(devices=(), rules=(), mounts=()) -> dict:
    return {
        "root": {"path": "/r"},
        "mounts": list(mounts),
        "linux": {"devices": list(devices), "resources": {"devices": list(rules)}},
    }


DENY_ALL = {"allow": False, "access": "rwm"}


@pytest.mark.parametrize(
    ("rules", "allowed"),
    [
        ([DENY_ALL], False),
        ([DENY_ALL, {"allow": True, "type": "c", "major": 10, "minor": 237, "access": "rw"}], True),
        ([DENY_ALL, {"allow": True, "type": "c", "major": 10, "minor": 237, "access": "r"}], False),
        (
            [DENY_ALL, {"allow": True, "type": "b", "major": 10, "minor": 237, "access": "rw"}],
            False,
        ),
        ([DENY_ALL, {"allow": True, "type": "c", "major": 10, "access": "rwm"}], True),
        ([DENY_ALL, {"allow": True, "type": "a", "access": "rwm"}], True),
        (
            [
                {"allow": True, "type": "c", "major": 10, "minor": 237, "access": "rw"},
                DENY_ALL,
            ],
            False,
        ),  # a later deny takes it back
        (
            [DENY_ALL, {"allow": True, "type": "c", "major": 10, "minor": "237", "access": "rw"}],
            False,
        ),  # fmt: skip
    ],
)
def test_rules_are_evaluated_in_order(rules, allowed):
    owned_ = runtime_owned(config_with(rules=rules))
    assert owned.rule_allowed(owned_, DeviceRule("c", 10, 237, "rw")) is allowed


def test_a_node_counts_only_as_the_very_device_at_that_path():
    entry = {"path": "/dev/x0", "type": "c", "major": 10, "minor": 237}
    have = runtime_owned(config_with(devices=[entry]))
    assert owned.node_made(have, node())
    assert not owned.node_made(have, node(minor=238))
    assert not owned.node_made(have, node(path="/dev/x1"))
    assert not owned.node_made(have, node(strategy="bind"))  # a user namespace: ours
    assert not owned.node_made(None, node())


def test_annotations_never_count_as_owned():
    """A container author can set any annotation, never config.json's devices: an
    annotation that claims the runtime made every node changes nothing."""
    spec = config_with(rules=[DENY_ALL])
    spec["annotations"] = {"ocihook.io/runtime-owned": "all", ANNOTATION: "all"}
    have = runtime_owned(spec)
    assert not owned.node_made(have, node())
    assert not owned.rule_allowed(have, DeviceRule("c", 10, 237, "rw"))
