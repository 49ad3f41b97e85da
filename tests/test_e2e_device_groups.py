"""A non-root container user and a device node that only its group may open (mode 0660),
as NVIDIA's toolkit 1.19 serves it (CDI `additionalGids`: the node's group added to the
container's processes, the node made with that group), in real containers.

- the CDI path: `ocihook cdi generate` writes the node's gid and the device's
  `additionalGids` (CDI 0.7.0: CRI-O 1.37 reads it, podman 4.3 does not); a user of the
  container opens the node, and does not without them (`--no-additional-gids`);
- podman's precreate route: the config edit gives the node its group and the process the
  group; the prestart route cannot change the process's groups (the runtime set them before
  any hook runs), it makes the node with the host's group, which a user the runtime gave that
  group (`podman --group-add`) opens.

Stand-ins: the synthetic driver (real char devices of this machine that runc's default rules
deny), with synth0 made mode 0660 and group GID, a group no container user has by default.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ocihook.plan.model import additional_gids
from tests.conftest import base_config
from tests.support import podman, synthetic

GID = 4242
USER = "1000:1000"
OPEN = "(exec 3<>/dev/synth0) 2>&1 && echo OPENED; id -G"
OCIHOOK = str(Path(sys.executable).with_name("ocihook"))


@pytest.mark.parametrize(
    "gid, mode, wanted",
    [(0, 0o660, []), (44, 0o666, []), (44, 0o664, [44]), (44, 0o662, [44]), (44, 0o660, [44])],
)
def test_which_nodes_need_a_group(gid, mode, wanted):
    """NVIDIA's rule: the node's group, unless it is root's or the node is everyone's."""
    assert additional_gids([{"gid": gid, "mode": mode}]) == wanted


@pytest.fixture(scope="module")
def group_driver(tmp_path_factory) -> Path:
    root = synthetic.build_driver(tmp_path_factory.mktemp("groups") / "root")
    node = root / "dev/synth0"
    os.chown(node, 0, GID)
    node.chmod(0o660)
    root.chmod(0o755)
    return root


def _spec(config: Path, path: Path, kind: str, *extra: str) -> dict:
    result = subprocess.run(
        [OCIHOOK, "cdi", "generate", "--config", str(config), "--kind", kind,
         "--hook-path", OCIHOOK, "--output", str(path), *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(path.read_text())


@pytest.mark.root  # the driver's node is made and given its group (mknod, chown)
def test_the_cdi_spec_carries_the_nodes_group(group_driver, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(base_config(tmp_path, group_driver)))
    spec = _spec(config, tmp_path / "spec.yaml", "ocihook.io/groups")
    device = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert spec["cdiVersion"] == "0.7.0"
    assert device["0"]["additionalGids"] == [GID]
    assert device["0"]["deviceNodes"][0]["gid"] == GID
    assert "additionalGids" not in device["1"]  # synth1 is everyone's
    assert device["all"]["additionalGids"] == [GID]
    plain = _spec(config, tmp_path / "plain.yaml", "ocihook.io/groups", "--no-additional-gids")
    assert plain["cdiVersion"] == "0.5.0"
    assert not any("additionalGids" in d["containerEdits"] for d in plain["devices"])


@pytest.mark.parametrize("gids", [True, False], ids=["additionalGids", "--no-additional-gids"])
def test_crio_cdi_user_gets_the_nodes_group(crio, crio_setup, group_driver, gids):
    """CRI-O 1.37 applies the spec: the node is made with the host's group (the spec's gid)
    and the process gets that group (additionalGids); without them it does not. CDI itself
    makes a node without a uid the container user's (its container-edits.go), so that user
    opens it either way: the group is what other users of the container (and podman exec as
    another user) open it by."""
    crio_setup.write_config(**base_config(crio_setup.dir, group_driver))
    kind = "ocihook.io/groups"
    path = crio.cdi_dir / "ocihook.io_groups.yaml"
    _spec(crio_setup.config, path, kind, *(() if gids else ("--no-additional-gids",)))
    try:
        pod = crio_setup.pod("groups", "team-a")
        container = pod.run(
            "user",
            crio.images["busybox"],
            ["/bin/sh", "-c", f"{OPEN}; stat -c 'node %u %g %a' /dev/synth0"],
            CDI_devices=[{"name": f"{kind}=0"}],
            linux={
                "security_context": {
                    "run_as_user": {"value": 1000},
                    "run_as_group": {"value": 1000},
                    "namespace_options": {"network": 2, "pid": 1, "ipc": 0},
                }
            },
        )
        pod.wait_exited(container)
        lines = pod.logs(container).stdout.splitlines()
    finally:
        path.unlink(missing_ok=True)
    assert "OPENED" in lines and f"node 1000 {GID} 660" in lines, lines
    groups = lines[lines.index("OPENED") + 1].split()
    assert (str(GID) in groups) is gids, lines


@pytest.fixture
def group_setup(hook_setup, group_driver):
    hook_setup.write_config(**base_config(hook_setup.dir, group_driver))
    return hook_setup


def test_precreate_gives_the_user_the_nodes_group(group_setup, image_busybox):
    podman.write_hooks_dir(
        group_setup.hooks_dir, group_setup.hook, group_setup.config, group_setup.cache_dir,
        precreate=True,
    )  # fmt: skip
    result = group_setup.run(
        image_busybox, ["/bin/sh", "-c", OPEN], devices="0", extra=["--user", USER]
    )
    assert result.returncode == 0, result.stderr
    assert "OPENED" in result.stdout and str(GID) in result.stdout.split(), result.stdout


def test_prestart_makes_the_node_with_its_group(group_setup, image_busybox):
    """The prestart route: a user without the group cannot open it (as on the host); one the
    runtime gave the group can (the node the hook made carries it)."""
    plain = group_setup.run(
        image_busybox, ["/bin/sh", "-c", OPEN], devices="0", extra=["--user", USER]
    )
    assert "Permission denied" in plain.stdout and "OPENED" not in plain.stdout, plain.stdout
    grouped = group_setup.run(
        image_busybox,
        ["/bin/sh", "-c", f"{OPEN}; stat -c '%g %a' /dev/synth0"],
        devices="0",
        extra=["--user", USER, "--group-add", str(GID)],
    )
    assert "OPENED" in grouped.stdout and f"{GID} 660" in grouped.stdout, grouped.stdout
