"""The enforcing tier's host side (tests/enforcing/vm.py) that needs no guest: the macros
the Fedora guest's RPMs are built with make the spec's scriptlets RHEL's, not its fallbacks.
Needs ../shared/tools/sources (Fedora's selinux-policy dist tarball): the fedora_sources
mark, as for the Fedora guest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "enforcing"))

import vm  # noqa: E402

pytestmark = pytest.mark.fedora_sources


@pytest.fixture
def macros(tmp_path) -> Path:
    return vm.rhel_macros(tmp_path)


def spec_with(macros: Path) -> str:
    """packaging/ocihook.spec parsed as the Fedora guest's build parses it."""
    return subprocess.run(
        ["rpmspec", "-P", "--load", str(macros), "--define", "rhel 9"]
        + ["--define", "ocihook_version 0.1.0", str(REPO / "packaging/ocihook.spec")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def section(spec: str, header: str) -> str:
    """The body of one scriptlet section (up to the next %section)."""
    lines = spec.split("\n")
    start = lines.index(header) + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("%"))
    return "\n".join(lines[start:end])


def test_rhel_macros_fill_in_the_values_fedoras_spec_does(macros):
    text = macros.read_text()
    assert "SELINUXPOLICYVERSION" not in text and "SELINUXSTOREPATH" not in text
    assert "%_selinux_policy_version 38.1-1" in text
    assert "%_selinux_store_path /var/lib/selinux" in text


def test_the_spec_gets_rhels_scriptlets_not_its_fallbacks(macros):
    spec = spec_with(macros)
    post = section(spec, "%post selinux")
    assert "semodule -n -s ${_policytype} -X 200 -i /usr/share/selinux/packages/ocihook.pp" in post
    assert "load_policy" in post
    assert 'echo "ocihook-selinux: semodule -i failed' not in post  # the fallback
    assert "file_contexts.pre" in section(spec, "%pre selinux")
    assert "fixfiles -C" in section(spec, "%posttrans selinux")
    assert "-r ocihook" in section(spec, "%postun selinux")
    assert "/usr/bin/systemd-tmpfiles --create /usr/lib/tmpfiles.d/ocihook.conf" in section(
        spec, "%post"
    )


def test_without_them_the_spec_falls_back(tmp_path):
    """Debian's bare rpmbuild (make rpm): the spec's own fallbacks, default priority."""
    spec = subprocess.run(
        ["rpmspec", "-P", "--define", "ocihook_version 0.1.0"]
        + [str(REPO / "packaging/ocihook.spec")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    post = section(spec, "%post selinux")
    assert "-X 200" not in post and "/usr/sbin/semodule -i" in post
