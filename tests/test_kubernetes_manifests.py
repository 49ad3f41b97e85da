"""packaging/kubernetes: the manifests against the Kubernetes API schemas (kubernetes-validate,
offline, strict: unknown fields fail) for every supported version, and their agreement with
the installer script, the Containerfile and ocihook's own config schema."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ocihook.config.compiled import compile_config
from tests.support import devstack

kubernetes_validate = devstack.module("kubernetes_validate")  # jsonschema >= 4
NEEDS_VALIDATE = pytest.mark.devstack("kubernetes_validate")

K8S = Path(__file__).resolve().parent.parent / "packaging/kubernetes"
PROFILES = K8S.parent / "profiles"
MANIFESTS = (
    "namespace.yaml",
    "serviceaccount.yaml",
    "configmap.yaml",
    "daemonset.yaml",
    "service.yaml",
)
# OpenShift's and the Prometheus Operator's (kubectl apply -k packaging/kubernetes/monitoring/)
MONITORING = K8S / "monitoring"
# The Kubernetes versions ocihook's manifests support (docs/kubernetes.md says the same).
SUPPORTED = ("1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0", "1.35.0", "1.36.0", "1.37.0")


def load(name: str) -> dict:
    return yaml.safe_load((K8S / name).read_text())


@NEEDS_VALIDATE
@pytest.mark.parametrize("version", SUPPORTED)
@pytest.mark.parametrize("name", MANIFESTS)
def test_manifest_is_valid_for_supported_version(name, version):
    kubernetes_validate.validate(load(name), version, strict=True)


@NEEDS_VALIDATE
def test_schema_check_is_real():
    """Control: a misplaced field and a wrong type fail the same validation."""
    daemonset = load("daemonset.yaml")
    misplaced = copy.deepcopy(daemonset)
    misplaced["spec"]["template"]["spec"]["containers"][0]["privileged"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(misplaced, SUPPORTED[-1], strict=True)
    wrong = copy.deepcopy(daemonset)
    wrong["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "sixty"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, SUPPORTED[0], strict=True)


@NEEDS_VALIDATE
@pytest.mark.root
def test_validation_runs_offline():
    """The schemas ship in the package: the CLI validates in a network namespace of its own."""
    cli = Path(sys.executable).with_name("kubernetes-validate")
    args = ["unshare", "--net", str(cli), "--strict", "-k", SUPPORTED[0]]
    result = subprocess.run(
        [*args, *(str(K8S / name) for name in MANIFESTS)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("passed for resource") == len(MANIFESTS)


def test_kustomization_lists_every_manifest():
    assert load("kustomization.yaml")["resources"] == list(MANIFESTS)


def test_configmap_is_a_valid_ocihook_config(tmp_path):
    text = load("configmap.yaml")["data"]["config.yaml"]
    config = yaml.safe_load(text)
    assert "/opt/ocihook/profiles" in config["profile_dirs"], "where the installer puts them"
    config["profile_dirs"] = [str(PROFILES)]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    compiled, _ = compile_config(str(path))
    assert compiled["profile"]["name"] == "nvidia"


def test_daemonset_runs_what_the_image_installs():
    container = load("daemonset.yaml")["spec"]["template"]["spec"]["containers"][0]
    containerfile = (K8S / "Containerfile").read_text()
    assert container["command"] == ["/usr/local/bin/ocihook-installer", "run"]
    assert "COPY --from=build /payload-bin/ocihook-installer /usr/local/bin/ocihook-installer" in (
        containerfile
    )
    script = (K8S / "ocihook-installer").read_text()
    known = set(re.findall(r"^([A-Z_]+)=\$\{", script, re.MULTILINE))
    assert {env["name"] for env in container["env"]} <= known
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/host", "/config"} <= mounts


def test_the_installer_is_ready_as_soon_as_the_hook_is_installed():
    """A startup probe every second until the hook is there: the kubelet runs the readiness
    probe as soon as it passes, instead of waiting out the readiness period (30 s) after a
    first probe that ran before the install ended (a rollout took 1 to 31 s)."""
    container = load("daemonset.yaml")["spec"]["template"]["spec"]["containers"][0]
    startup, readiness = container["startupProbe"], container["readinessProbe"]
    assert startup["exec"] == readiness["exec"]
    assert startup["periodSeconds"] == 1
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # a slow semodule


def test_the_device_plugin_runs_from_the_image_with_only_what_it_needs():
    spec = load("daemonset.yaml")["spec"]["template"]["spec"]
    plugin = {c["name"]: c for c in spec["containers"]}["device-plugin"]
    containerfile = (K8S / "Containerfile").read_text()
    assert plugin["command"][:2] == ["/usr/local/bin/ocihook", "device-plugin"]
    assert "COPY --from=build /payload-bin/ocihook /usr/local/bin/ocihook" in containerfile
    assert "--host-root=/host" in plugin["command"]
    assert "--kubelet-dir=/var/lib/kubelet/device-plugins" in plugin["command"]
    security = plugin["securityContext"]
    assert security["privileged"] is False and security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m for m in plugin["volumeMounts"]}
    assert set(mounts) == {"/host", "/var/lib/kubelet/device-plugins", "/config"}
    assert mounts["/host"]["readOnly"] and mounts["/config"]["readOnly"]
    config = yaml.safe_load(load("configmap.yaml")["data"]["config.yaml"])
    assert config["kubernetes"]["device_plugin"] is True


@NEEDS_VALIDATE
@pytest.mark.parametrize("version", SUPPORTED)
def test_monitoring_rbac_is_valid_for_supported_version(version):
    for document in yaml.safe_load_all((MONITORING / "prometheus-rbac.yaml").read_text()):
        kubernetes_validate.validate(document, version, strict=True)


def test_the_metrics_port_is_served_exposed_and_scraped():
    """The plugin's --metrics-port (the CLI's default, above 9000 for OpenShift), its
    container port, the Service's target and the ServiceMonitor's endpoint agree."""
    from ocihook.cli.deviceplugin import DEFAULT_METRICS_PORT
    from ocihook.metrics.server import DEFAULT_PORT

    assert DEFAULT_METRICS_PORT == DEFAULT_PORT > 9000
    spec = load("daemonset.yaml")["spec"]["template"]
    plugin = {c["name"]: c for c in spec["spec"]["containers"]}["device-plugin"]
    assert f"--metrics-port={DEFAULT_PORT}" in plugin["command"]
    (port,) = plugin["ports"]
    assert port == {"name": "metrics", "containerPort": DEFAULT_PORT, "protocol": "TCP"}
    service = load("service.yaml")
    assert service["spec"]["selector"].items() <= spec["metadata"]["labels"].items()
    (exposed,) = service["spec"]["ports"]
    assert exposed["targetPort"] == "metrics" and exposed["port"] == DEFAULT_PORT
    monitor = yaml.safe_load((MONITORING / "servicemonitor.yaml").read_text())
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [exposed["name"]]
    namespace = load("namespace.yaml")["metadata"]
    assert namespace["labels"]["openshift.io/cluster-monitoring"] == "true"
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["servicemonitor.yaml", "prometheus-rbac.yaml"]
    (dashboard,) = kustomization["configMapGenerator"]
    assert dashboard["files"] == ["grafana-dashboard.json"]
