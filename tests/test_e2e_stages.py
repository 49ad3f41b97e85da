"""The stage the hook runs at, in real containers: the shipped registrations say
`createRuntime` (the OCI runtime spec deprecates `prestart`), and podman 4.3 with runc 1.1.5
and CRI-O 1.37 run it there, where prestart hooks run: the driver is injected the same. A
`prestart` registration (kept for runtimes without createRuntime) works too.

What each runtime wrote into the container's OCI config is read back (podman's config.json,
CRI-O's runtimeSpec): the hook sits in the stage the registration names (podman 4.3,
containers/common 0.50), or in createRuntime whatever it names (CRI-O 1.37: containers/common
0.58 and later handle prestart as createRuntime).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support import crio as crio_support
from tests.support import podman, synthetic

REPO = Path(__file__).resolve().parent.parent


def _registration(hook_setup, stages: list[str]) -> None:
    """The shipped hooks.d/ocihook.json, pointed at the test's hook and config, with `stages`."""
    document = json.loads((REPO / "hooks.d/ocihook.json").read_text())
    document["hook"]["path"] = str(hook_setup.hook)
    document["hook"]["args"] = [
        "ocihook-hook", "--config", str(hook_setup.config), "--cache-dir", str(hook_setup.cache_dir)
    ]  # fmt: skip
    document["stages"] = stages
    (hook_setup.hooks_dir / "ocihook.json").write_text(json.dumps(document))


def _oci_hooks(name: str) -> dict:
    path = subprocess.run(
        ["podman", "inspect", "-f", "{{.OCIConfigPath}}", name],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return json.loads(Path(path).read_text()).get("hooks", {})


@pytest.mark.parametrize("stage", ["createRuntime", "prestart"])
def test_podman_runs_the_hook_at_the_registrations_stage(hook_setup, image_rhel, stage):
    shipped = json.loads((REPO / "hooks.d/ocihook.json").read_text())["stages"]
    assert shipped == ["createRuntime"]
    _registration(hook_setup, [stage, "poststop"])
    name = podman.unique_name("ocihook-stage")
    args = ["podman", "--runtime", "runc", "--hooks-dir", str(hook_setup.hooks_dir), "run"]
    args += [*podman.LIMITS, "--name", name, "--annotation", "ocihook.io/devices=0"]
    try:
        result = subprocess.run(
            [*args, image_rhel, "/usr/bin/synth-smi"], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
        assert synthetic.opened("synth0") in result.stdout
        hooks = _oci_hooks(name)
    finally:
        podman.remove(name)
    paths = {k: [h["path"] for h in v] for k, v in hooks.items()}
    assert paths.get(stage) == [str(hook_setup.hook)], paths
    other = "prestart" if stage == "createRuntime" else "createRuntime"
    assert str(hook_setup.hook) not in paths.get(other, [])
    (record,) = hook_setup.records()
    assert json.loads(record.read_text())["status"] == "exited"  # poststop ran too


def test_crio_runs_the_shipped_registration_at_create_runtime(crio, crio_setup):
    """CRI-O 1.37 with the shipped stage (createRuntime) in its hooks dir: the
    hook is in the runtimeSpec's createRuntime once, and injects."""
    first_dir = Path(crio_support.hooks_dirs(crio.drop_in)[0])
    registration = json.loads((first_dir / "ocihook.json").read_text())
    assert registration["stages"] == ["createRuntime"]  # the tests' copy of it
    pod = crio_setup.pod("stage", "team-a", {"ocihook.io/devices": "0"})
    container = pod.run("smi", crio.images["rhel"], ["/usr/bin/synth-smi"])
    assert pod.wait_exited(container)["exitCode"] == 0
    assert synthetic.opened("synth0") in pod.logs(container).stdout
    hooks = pod.spec(container)["hooks"]
    assert [h["path"] for h in hooks["createRuntime"]] == [registration["hook"]["path"]]
    assert "prestart" not in hooks
