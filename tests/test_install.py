"""`make install` / `make uninstall` (docs/installing.md), DESTDIR and PREFIX aware.

The real check installs into a staging root and then, in a private mount namespace
(`unshare --mount --propagation private`), lays that root's /usr and /etc over the host's
with read-only overlays, exactly where a real `make install` would have put the files: the
host's own `/usr/bin/python3 -I` must import the package, the installed `ocihook` command
must run, the installed hook registered by the installed hooks.d file (podman's default
hooks dir) must inject the synthetic driver into a real podman + runc container, and
`make rpm` must still build while ocihook is installed in the system Python. The host's
mount table and files are untouched.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support import podman
from tests.support.overlay_root import namespace_script

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parent.parent
SITELIB = "usr/lib/python3/dist-packages"  # Debian's, for PREFIX=/usr


def make(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", "-C", str(REPO), *args], capture_output=True, text=True, **kwargs
    )


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stage") / "root"
    result = make("install", f"DESTDIR={root}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no pip: PEP 668" in result.stdout
    return root


EXPECTED = {
    "usr/bin/ocihook": 0o755,
    "usr/libexec/ocihook/ocihook-hook": 0o755,
    f"{SITELIB}/ocihook/__init__.py": 0o644,
    f"{SITELIB}/ocihook/config/schema.json": 0o644,
    f"{SITELIB}/ocihook/audit/records.py": 0o644,
    "usr/share/containers/oci/hooks.d/ocihook.json": 0o644,
    "usr/share/ocihook/examples/ocihook-env.json": 0o644,
    "usr/share/ocihook/examples/50-ocihook-precreate.conf": 0o644,
    "usr/share/ocihook/hooks.d.podman/ocihook-precreate.json": 0o644,
    "usr/share/ocihook/examples/config.yaml": 0o644,
    "etc/ocihook/config.yaml": 0o644,
    "usr/share/ocihook/profiles/nvidia.yaml": 0o644,
    "usr/share/ocihook/profiles/synthetic.yaml": 0o644,
    "usr/share/man/man1/ocihook.1": 0o644,
    "usr/share/bash-completion/completions/ocihook": 0o644,
    "usr/share/zsh/site-functions/_ocihook": 0o644,
    "usr/lib/tmpfiles.d/ocihook.conf": 0o644,
    "usr/share/selinux/packages/ocihook.pp": 0o644,
}


def test_install_lays_out_the_readme_table(staged):
    for name, mode in EXPECTED.items():
        path = staged / name
        assert path.is_file(), name
        assert stat.S_IMODE(path.stat().st_mode) == mode, name
    assert stat.S_IMODE((staged / "run/ocihook").stat().st_mode) == 0o700
    assert (staged / "etc/ocihook/profiles").is_dir()
    hook = (staged / "usr/libexec/ocihook/ocihook-hook").read_text()
    assert hook.startswith("#!/usr/bin/python3 -IS\n")
    # no `site` at run time: the package's dir first, then the interpreter's site dirs
    site_dirs = next(line for line in hook.splitlines() if line.startswith("SITE_DIRS"))
    assert site_dirs.startswith(f"SITE_DIRS: list[str] = ['/{SITELIB}', "), site_dirs
    assert (staged / "etc/ocihook/config.yaml").read_text() == (
        REPO / "packaging/config.yaml"
    ).read_text()
    assert (staged / "usr/share/containers/oci/hooks.d/ocihook.json").read_text() == (
        REPO / "hooks.d/ocihook.json"
    ).read_text()
    assert list((staged / SITELIB / "ocihook/__pycache__").glob("hook.cpython-*.pyc"))


IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE = 0x8, 0x80, 0x100


def _inotify_events(directory: Path, action) -> list[tuple[str, int]]:
    """(name, mask) of every event in `directory` while `action()` runs (inotify(7), read
    through libc: the kernel's own record of what was written and renamed there)."""
    import ctypes
    import select
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    try:
        mask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE
        assert libc.inotify_add_watch(fd, os.fsencode(directory), mask) >= 0
        action()
        events, data = [], b""
        while select.select([fd], [], [], 0.2)[0]:
            data += os.read(fd, 65536)
        while data:
            _wd, event_mask, _cookie, length = struct.unpack_from("iIII", data)
            name = data[16 : 16 + length].rstrip(b"\0").decode()
            events.append((name, event_mask))
            data = data[16 + length :]
        return events
    finally:
        os.close(fd)


def test_the_registration_appears_whole_by_a_rename(tmp_path):
    """CRI-O watches its hooks dirs: the hooks.d file is written to a dot file and renamed
    into place, so no reader ever sees it half-written (the install used to write it in
    place with `sed >`, and CRI-O logged "unexpected end of JSON input")."""
    root = tmp_path / "root"
    hooks = root / "usr/share/containers/oci/hooks.d"
    hooks.mkdir(parents=True)
    results = []
    events = _inotify_events(hooks, lambda: results.append(make("install", f"DESTDIR={root}")))
    assert results[0].returncode == 0, results[0].stderr
    on_file = [mask for name, mask in events if name == "ocihook.json"]
    assert on_file == [IN_MOVED_TO], events  # never created or written under its own name
    assert any(name.startswith(".") and mask & IN_CLOSE_WRITE for name, mask in events)
    assert sorted(p.name for p in hooks.iterdir()) == ["ocihook.json"]


def test_prefix_moves_the_hook_and_rewrites_what_points_at_it(tmp_path):
    root = tmp_path / "root"
    result = make("install", f"DESTDIR={root}", "PREFIX=/usr/local")
    assert result.returncode == 0, result.stderr
    # The registration stays where podman and CRI-O read by default, whatever the PREFIX.
    hooks = yaml.safe_load((root / "usr/share/containers/oci/hooks.d/ocihook.json").read_text())
    assert hooks["hook"]["path"] == "/usr/local/libexec/ocihook/ocihook-hook"
    assert (root / "usr/local/libexec/ocihook/ocihook-hook").is_file()
    assert list(root.glob("usr/local/lib/python3*/dist-packages/ocihook/hook.py"))
    config = yaml.safe_load((root / "etc/ocihook/config.yaml").read_text())
    assert config["profile_dirs"] == ["/etc/ocihook/profiles", "/usr/local/share/ocihook/profiles"]


def test_install_keeps_an_existing_config_and_uninstall_keeps_a_changed_one(tmp_path):
    root = tmp_path / "root"
    (root / "etc/ocihook").mkdir(parents=True)
    (root / "etc/ocihook/config.yaml").write_text("profile: mine\n")
    result = make("install", f"DESTDIR={root}")
    assert result.returncode == 0, result.stderr
    assert "exists: kept" in result.stdout
    assert (root / "etc/ocihook/config.yaml").read_text() == "profile: mine\n"
    result = make("uninstall", f"DESTDIR={root}")
    assert result.returncode == 0, result.stderr
    assert "was changed: kept" in result.stdout
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())
    assert left == ["etc/ocihook/config.yaml"]


def test_uninstall_removes_everything_it_installed(tmp_path):
    root = tmp_path / "root"
    assert make("install", f"DESTDIR={root}").returncode == 0
    result = make("uninstall", f"DESTDIR={root}")
    assert result.returncode == 0, result.stderr
    assert sorted(p for p in root.rglob("*") if not p.is_dir()) == []


NAMESPACE_SCRIPT = namespace_script(
    "ocihook-inst",
    "$PIPROOT/usr:$ROOT/usr",
    """
ocihook check --hooks-dir /usr/share/containers/oci/hooks.d | sed 's/^/check: /'
"$@"
ls -d /usr/lib/python3/dist-packages/ocihook-*.dist-info | sed 's/^/pip: /'
git clone -q "$REPO" "$SCRATCH/clone"
make -s -C "$SCRATCH/clone" rpm > "$SCRATCH/rpm.log" 2>&1 && echo "rpm: built"
""",
)


def test_installed_tree_runs_on_this_host(staged, synth_root, image_rhel, tmp_path):
    """The installed package serves the host's python3 -I, the hook injects through podman's
    default hooks dir, and `make rpm` builds with ocihook installed in the system Python
    (also by pip, with its dist-info: the spec's pip fallback must not skip it as installed)."""
    pip_root = tmp_path / "piproot"
    wheel = subprocess.run(
        ["/usr/bin/python3", "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "-w", str(tmp_path / "wheel"), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert wheel.returncode == 0, wheel.stderr
    pip = subprocess.run(
        ["/usr/bin/python3", "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
        + [
            "--root",
            str(pip_root),
            "--prefix",
            "/usr",
            *map(str, (tmp_path / "wheel").glob("*.whl")),
        ],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "DEB_PYTHON_INSTALL_LAYOUT": "deb_system",
            "PIP_ROOT_USER_ACTION": "ignore",
        },
    )
    assert pip.returncode == 0, pip.stderr
    assert subprocess.run(["/usr/bin/python3", "-I", "-c", "import ocihook"]).returncode != 0
    tmp_path.chmod(0o755)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "profile": "synthetic",  # found in the installed /usr/share/ocihook/profiles
                "source_root": str(synth_root),
                "device_root": str(synth_root),
                "state_dir": str(tmp_path / "state"),
                "log": {"target": str(tmp_path / "ocihook.log"), "debug": True},
            }
        )
    )
    command = ["podman", "--runtime", "runc", "run", *podman.RUN_FLAGS]
    command += ["--annotation", f"{podman.ANNOTATION}=all", image_rhel, "/usr/bin/synth-smi"]
    made_run_dir = not os.path.exists("/run/ocihook")
    if made_run_dir:
        os.mkdir("/run/ocihook", 0o700)
    try:
        result = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c"]
            + [NAMESPACE_SCRIPT, "ocihook-install-test", *command],
            env={
                **os.environ,
                "ROOT": str(staged),
                "PIPROOT": str(pip_root),
                "CONFIG": str(config),
                "SCRATCH": str(tmp_path),
                "REPO": str(REPO),
            },
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        if made_run_dir:
            os.rmdir("/run/ocihook")
    output = result.stdout + result.stderr
    rpm_log = tmp_path / "rpm.log"
    output += rpm_log.read_text()[-3000:] if rpm_log.exists() else ""
    assert result.returncode == 0, output
    assert f"module: /{SITELIB}/ocihook/__init__.py" in result.stdout, output
    assert "command: ocihook, version" in result.stdout
    assert "check: FAILED" not in result.stdout, output
    assert "check: ok      hooks.d file /usr/share/containers/oci/hooks.d/ocihook.json" in output
    assert "libsynth 1.2.3 loaded from /usr/lib64/libsynth.so.1" in result.stdout, output
    assert "pip: /usr/lib/python3/dist-packages/ocihook-" in result.stdout, output
    assert "rpm: built" in result.stdout, output
