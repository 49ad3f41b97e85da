"""Which hooks directories real podman reads, and whether `ocihook check` says the same: a
registration in podman's default dir, in /etc/containers/oci/hooks.d, in a dir named by
hooks_dir in a containers.conf, masked by a same-named file, behind an empty hooks_dir or a
broken containers.conf, and with patterns Go's regexp rejects or takes where Python's does
the opposite. Whether podman ran the hook is read from a marker the hook writes.

The hook is a stand-in (a shell script named ocihook-hook, so that check counts its file as
ocihook's registration): the question here is which files podman loads, not what the hook
does. Every podman here gets CONTAINERS_CONF (an isolated containers.conf) so the host's own
is never involved; the registrations that go into the host's real hooks dirs are gated by an
annotation only these tests set, written atomically and removed afterwards (with the dir,
when the test made it), so other podman runs on the machine never see a half-written file
or run these hooks."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from ocihook.check import hooksdirs
from ocihook.check.hooksdirs import DEFAULT_DIR, OVERRIDE_DIR
from tests.support import podman
from tests.support.podman import placed

REPO = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.root, pytest.mark.podman]


class Bed:
    """One test's hook, annotation, markers and isolated runtime configs."""

    def __init__(self, tmp_path: Path, config: Path, image: str) -> None:
        tmp_path.mkdir(mode=0o755)
        self.tmp = tmp_path
        self.config = config
        self.image = image
        self.key = f"ocihook.test/hooksdirs-{uuid.uuid4().hex[:12]}"
        self.markers = tmp_path / "markers"
        self.markers.mkdir()
        self.hook = tmp_path / "bin" / "ocihook-hook"
        self.hook.parent.mkdir()
        self.hook.write_text(f'#!/bin/sh\ncat > "{self.markers}/$1"\n')
        self.hook.chmod(0o755)
        self.containers_conf = tmp_path / "containers.conf"
        self.containers_conf.write_text("")
        self.crio_conf = tmp_path / "crio.conf"
        self.crio_conf.write_text("")
        self.name = f"zz-ocihook-test-{self.key[-12:]}.json"

    def document(self, label: str, pattern: str | None = None) -> dict:
        key = pattern if pattern is not None else "^" + self.key.replace(".", "\\.") + "$"
        return {
            "version": "1.0.0",
            "hook": {"path": str(self.hook), "args": ["ocihook-hook", label], "env": []},
            "when": {"annotations": {key: ".*"}},
            "stages": ["prestart", "poststop"],
        }

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "CONTAINERS_CONF": str(self.containers_conf),
            "CONTAINER_CONFIG": str(self.crio_conf),
            "CONTAINER_CONFIG_DIR": str(self.tmp / "crio.conf.d"),
        }

    def podman_ran(self) -> tuple[set[str], subprocess.CompletedProcess]:
        """Run a container with the annotation; the labels of the hooks that ran."""
        for marker in self.markers.iterdir():
            marker.unlink()
        args = ["podman", "--runtime", "runc", "run", *podman.RUN_FLAGS]
        args += ["--annotation", f"{self.key}=1", self.image, "true"]
        result = subprocess.run(args, capture_output=True, text=True, env=self.env(), timeout=180)
        return {m.name for m in self.markers.iterdir()}, result

    def check(self) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "ocihook.cli.main", "check", "--config", str(self.config)],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=self.env(),
        )
        return result.stdout + result.stderr


@pytest.fixture
def bed(tmp_path, hook_setup, image_busybox) -> Bed:
    return Bed(tmp_path / "bed", hook_setup.config, image_busybox)


@pytest.fixture(autouse=True)
def real_hooks_dirs_unchanged():
    """The host's own hooks dirs are left as they were."""

    def listing():
        dirs = (DEFAULT_DIR, OVERRIDE_DIR)
        return {d: sorted(os.listdir(d)) if os.path.isdir(d) else None for d in dirs}

    before = listing()
    yield
    assert listing() == before


def test_podman_reads_its_default_dir(bed):
    with placed(DEFAULT_DIR, bed.name, bed.document("default")) as path:
        ran, result = bed.podman_ran()
        report = bed.check()
    assert result.returncode == 0, result.stderr
    assert ran == {"default"}
    assert f"ok      hooks.d file {path} (read by podman, CRI-O)\n" in report, report


def test_podman_does_not_read_etc_containers_oci_hooks_d(bed):
    with placed(OVERRIDE_DIR, bed.name, bed.document("etc")) as path:
        ran, result = bed.podman_ran()
        report = bed.check()
    assert result.returncode == 0, result.stderr
    assert ran == set()
    assert (
        f"FAILED  hooks.d file {path} sits in a directory nobody reads (podman reads "
        f"{DEFAULT_DIR}; CRI-O reads {DEFAULT_DIR})\n"
    ) in report, report


def test_podman_reads_the_hooks_dir_of_containers_conf(bed):
    custom = bed.tmp / "custom.d"
    bed.containers_conf.write_text(f'[engine]\nhooks_dir = ["{custom}"]\n')
    with (
        placed(custom, bed.name, bed.document("custom")) as path,
        placed(DEFAULT_DIR, bed.name, bed.document("default")) as default,
    ):
        ran, result = bed.podman_ran()
        report = bed.check()
    assert result.returncode == 0, result.stderr
    assert ran == {"custom"}  # and no longer the default dir
    assert f"ok      hooks.d file {path} (read by podman)\n" in report, report
    assert (
        f"ok      hooks dirs: podman reads {custom} (hooks_dir in {bed.containers_conf})\n"
    ) in report
    assert f"ok      hooks.d file {default} (read by CRI-O)\n" in report


def test_a_later_dir_masks_a_same_named_file(bed):
    first, second = bed.tmp / "first.d", bed.tmp / "second.d"
    bed.containers_conf.write_text(f'[engine]\nhooks_dir = ["{first}", "{second}"]\n')
    with (
        placed(first, bed.name, bed.document("first")) as masked,
        placed(second, bed.name, bed.document("second")) as used,
    ):
        ran, result = bed.podman_ran()
        report = bed.check()
    assert result.returncode == 0, result.stderr
    assert ran == {"second"}
    assert f"ok      hooks.d file {used} (read by podman)\n" in report, report
    assert f"WARNING hooks.d file {masked}: masked by {used} for podman (same name)\n" in report


def test_an_empty_hooks_dir_reads_nothing_in_podman_4(bed):
    bed.containers_conf.write_text("[engine]\nhooks_dir = []\n")
    with placed(DEFAULT_DIR, bed.name, bed.document("default")):
        ran, result = bed.podman_ran()
        report = bed.check()
    version = hooksdirs.podman_version(os.environ)
    assert result.returncode == 0, result.stderr
    if version < (4, 8):
        assert ran == set()
        assert f"hooks_dir in {bed.containers_conf} is empty: podman reads no hooks" in report
    else:  # podman 4.8 and later: the deprecated pair, as root
        assert ran == {"default"}
        assert "read the deprecated implicit" in report


def test_a_broken_containers_conf_stops_podman_and_check_says_where(bed):
    bed.containers_conf.write_text('[engine]\nhooks_dir = ["/x"\n')
    ran, result = bed.podman_ran()
    report = bed.check()
    assert result.returncode != 0 and "decode configuration" in result.stderr
    assert (
        f"FAILED  {bed.containers_conf}: at the end of the file: unclosed array: podman runs "
        "no container until it is fixed\n"
    ) in report, report


@pytest.mark.parametrize(
    ("pattern", "podman_runs_it"),
    [
        ("(?=x)|^ocihook\\.test/", False),  # a lookahead: Python's re takes it, Go's does not
        ("^ocihook\\.test/\\pL+", True),  # \pL: Go's regexp takes it, Python's re does not
        ("^ocihook\\.test/.*\\z", True),
    ],
)
def test_patterns_as_go_compiles_them(bed, pattern, podman_runs_it):
    custom = bed.tmp / "custom.d"
    bed.containers_conf.write_text(f'[engine]\nhooks_dir = ["{custom}"]\n')
    with placed(custom, bed.name, bed.document("pattern", pattern)) as path:
        ran, result = bed.podman_ran()
        report = bed.check()
    if podman_runs_it:
        assert result.returncode == 0 and ran == {"pattern"}, result.stderr
        assert f"ok      hooks.d file {path} (read by podman)\n" in report, report
    else:
        assert result.returncode != 0 and ran == set()
        assert "invalid or unsupported Perl syntax" in result.stderr
        assert f"FAILED  hooks.d file {path}: when.annotations key {pattern!r}: not a Go " in report


def test_a_hook_path_that_does_not_exist_is_skipped_without_a_word(bed):
    """containers/common passes over a file whose hook.path does not exist ("not found" is
    the one error its reader ignores): the container starts, without the hook."""
    custom = bed.tmp / "custom.d"
    bed.containers_conf.write_text(f'[engine]\nhooks_dir = ["{custom}"]\n')
    document = bed.document("missing")
    document["hook"]["path"] = str(bed.tmp / "gone" / "ocihook-hook")
    with placed(custom, bed.name, document) as path:
        ran, result = bed.podman_ran()
        report = bed.check()
    assert result.returncode == 0 and ran == set(), result.stderr
    assert (
        f"FAILED  hooks.d file {path}: hook.path {document['hook']['path']} does not exist: "
        "the runtime ignores this file (the hook never runs)\n"
    ) in report, report
