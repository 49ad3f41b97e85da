"""The tiers fit the person running them (tests/conftest.py): for an ordinary user without
pyenv, the `py39` tier (RHEL 9's venv) is skipped with the reason; under `make test`
(OCIHOOK_REQUIRE_TIERS=1) the same tier fails with it instead of being skipped. Run for real
as user nobody (setpriv), who cannot read root's pyenv; needs root for setpriv."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
# nobody's environment: no pyenv of anyone's, no make test.
ENV = ["env", "-u", "OCIHOOK_REQUIRE_TIERS", "-u", "PYENV_ROOT", "HOME=/nonexistent"]

pytestmark = pytest.mark.root


def _as_nobody(*env: str) -> subprocess.CompletedProcess:
    test = "tests/test_rhel9_stack.py::test_the_rhel9_tier_runs_exactly_the_rhel9_stack"
    command = [*NOBODY, *ENV, *env, sys.executable, "-m", "pytest", test]
    command += ["-p", "no:cacheprovider", "-q", "-rs"]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_a_missing_tier_is_skipped_for_a_user_and_fails_under_make_test():
    found = subprocess.run(
        [*NOBODY, *ENV, str(REPO / "scripts/py39-venv.sh"), "--find"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert found.returncode == 2, "nobody finds a pyenv 3.9.18 here: " + found.stdout
    why = "needs RHEL 9's Python stack (.venv-py39): py39-venv: pyenv's Python 3.9.18 not found"
    user = _as_nobody()
    assert user.returncode == 0, user.stdout + user.stderr
    assert "1 skipped" in user.stdout and why in user.stdout, user.stdout
    required = _as_nobody("OCIHOOK_REQUIRE_TIERS=1")
    assert required.returncode == 1, required.stdout + required.stderr
    assert "1 error" in required.stdout, required.stdout
    assert f"OCIHOOK_REQUIRE_TIERS=1 (make test runs every tier): {why}" in required.stdout


def test_a_missing_kubernetes_fails_the_kube_tier_under_make_test(tmp_path):
    """Without ../shared/tools/kubernetes the kube tier is skipped for a user and fails
    under make test, as the crio tier does; no cluster is started."""
    test = "tests/test_e2e_kube.py::test_a_resource_quota_refuses_a_namespaces_second_pod"
    env = ["env", f"OCIHOOK_K8S_TOOLS={tmp_path / 'missing'}"]
    why = f"needs the Kubernetes cluster scripts: {tmp_path / 'missing'}/cluster/up.sh"
    runs = {}
    for require in ("0", "1"):
        command = [*env, f"OCIHOOK_REQUIRE_TIERS={require}", sys.executable, "-m", "pytest"]
        command += [test, "-p", "no:cacheprovider", "-q", "-rs"]
        runs[require] = subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=300
        )
    assert runs["0"].returncode == 0 and "1 skipped" in runs["0"].stdout, runs["0"].stdout
    assert why in runs["0"].stdout
    assert runs["1"].returncode == 1 and "1 error" in runs["1"].stdout, runs["1"].stdout
    assert f"OCIHOOK_REQUIRE_TIERS=1 (make test runs every tier): {why}" in runs["1"].stdout
