#!/bin/sh
# RHEL 9's Python stack in a venv: pyenv's CPython 3.9.18 (RHEL 9's python3 is 3.9.18) with
# exactly the versions of packaging/rhel9-python.txt, the test tools of
# tests/rhel9-test-tools.txt, and this checkout installed editable (setuptools 53, no build
# isolation, as RHEL builds). Used by `make test-py39` and tests/test_rpm.py (the RPM built
# the RHEL way), so both get the same environment.
#
#   scripts/py39-venv.sh VENV   build VENV unless it is newer than its inputs; prints VENV's python
#                               (without pyenv's 3.9.18: one line saying so, exit 2)
#   scripts/py39-venv.sh --find print pyenv's 3.9.18 it would build from, or that line, exit 2
#                               (tests/support/py39.py: whether the py39 tier can run here)
#
# PyPI is used only here, at install time, and only for the pinned versions.
set -eu

VERSION=3.9.18
repo=$(cd "$(dirname "$0")/.." && pwd)

find_python() {
    roots="${PYENV_ROOT:-}"
    if command -v pyenv >/dev/null 2>&1; then
        roots="$roots $(pyenv root 2>/dev/null || true)"
    fi
    roots="$roots $HOME/.pyenv /root/.pyenv"
    for root in $roots; do
        if [ -x "$root/versions/$VERSION/bin/python3.9" ]; then
            echo "$root/versions/$VERSION/bin/python3.9"
            return 0
        fi
    done
    echo "py39-venv: pyenv's Python $VERSION not found (looked in \$PYENV_ROOT, \`pyenv root\`, ~/.pyenv, /root/.pyenv): pyenv install $VERSION" >&2
    return 2
}

if [ -z "${1:-}" ]; then
    echo "usage: $0 VENV | --find" >&2
    exit 2
fi
if [ "$1" = --find ]; then
    find_python
    exit $?
fi

venv=$1
python=$(find_python) || exit 2
inputs="$repo/packaging/rhel9-python.txt $repo/tests/rhel9-test-tools.txt $repo/setup.cfg
$repo/setup.py $repo/pyproject.toml $0"
fresh=yes
if [ -f "$venv/.stamp" ]; then
    for input in $inputs; do
        [ "$input" -nt "$venv/.stamp" ] && fresh=no
    done
else
    fresh=no
fi
if [ "$fresh" = no ]; then
    echo "py39-venv: building $venv from $python" >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    vpy="$venv/bin/python"
    pins="$repo/packaging/rhel9-python.txt"
    pip="$vpy -m pip -q --disable-pip-version-check --no-cache-dir"
    # pip first (RHEL's), then the build tools, then the rest built with them (pyrsistent is a
    # source release: built by setuptools 53 as RHEL's is), then the checkout itself.
    $pip install -c "$pins" pip
    $pip install -c "$pins" setuptools wheel
    $pip install --no-build-isolation -r "$pins" -r "$repo/tests/rhel9-test-tools.txt"
    # --no-deps: the `selinux` requirement is met by RHEL's python3-libselinux, which has no
    # counterpart on PyPI (its `selinux` is a shim that loads those bindings).
    (cd "$repo" && $pip install --no-build-isolation --no-deps -e .)
    "$vpy" - "$pins" <<'EOF'
import re, sys
from importlib.metadata import version
for line in open(sys.argv[1]):
    match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)$", line.strip())
    if match and version(match[1]) != match[2]:
        sys.exit(f"py39-venv: {match[1]} {version(match[1])} installed, {match[2]} pinned")
EOF
    touch "$venv/.stamp"
fi
echo "$venv/bin/python"
