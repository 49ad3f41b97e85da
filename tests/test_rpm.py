"""The RPMs (issue 6): `make rpm` from a clean checkout with the real rpmbuild, what the
packages hold (files, modes, config flags, dependencies), rpmlint, and the installed hook,
registered by the installed hooks.d file, injecting the synthetic driver into a real
podman + runc container.

The packages install into a scratch root (`rpm --root`). The installed files name absolute
host paths (/usr/libexec/ocihook/ocihook-hook, /etc/ocihook/config.yaml, and the hook's
`#!/usr/bin/python3 -I` only searches the host's site dirs), so podman runs in a private
mount namespace (`unshare --mount --propagation private`) where read-only overlays put the
scratch root's /usr and /etc over the host's. The host's mount table is untouched.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from ocihook import records
from tests.support import podman, py39, synthetic
from tests.support.overlay_root import namespace_script

pytestmark = [pytest.mark.root, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
VERSION = re.search(
    r'^__version__ = "([^"]+)"$', (REPO / "ocihook/__init__.py").read_text(), re.M
).group(1)
RELEASE = "1"
SPEC = (REPO / "packaging/ocihook.spec").read_text()
TOMLI = re.search(r"^%global tomli_version (\S+)$", SPEC, re.M)[1]
TOMLI_WHEEL = f"tomli-{TOMLI}-py3-none-any.whl"
# The bundled tomli's modules (where Python has no tomllib: the RHEL 9 build).
VENDOR = ["_vendor/__init__.py"] + [
    f"_vendor/tomli/{name}.py" for name in ("__init__", "_parser", "_re", "_types")
]
HOST_PYTHON = "/usr/bin/python3"
SITELIB = "/usr/lib/python3/dist-packages"  # Debian's: where the fallback installs
PYTAG = "cpython-{}{}".format(
    *subprocess.run(
        [HOST_PYTHON, "-c", "import sys; print(*sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
)
MAIN_REQUIRES = {
    "python3",
    "python3-click",
    "python3-pyyaml",
    "python3-jsonschema",
    "python3-libselinux",
}


@dataclass
class Build:
    source: Path  # the clean checkout it was built from
    topdir: Path
    seconds: float

    @property
    def main(self) -> Path:
        return self.topdir / f"RPMS/noarch/ocihook-{VERSION}-{RELEASE}.noarch.rpm"

    @property
    def selinux(self) -> Path:
        return self.topdir / f"RPMS/noarch/ocihook-selinux-{VERSION}-{RELEASE}.noarch.rpm"

    @property
    def srpm(self) -> Path:
        return self.topdir / f"SRPMS/ocihook-{VERSION}-{RELEASE}.src.rpm"


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


def query(rpm_file: Path, *args: str) -> list[str]:
    result = run(["rpm", "-qp", *args, str(rpm_file)], check=True)
    return result.stdout.splitlines()


def make_rpm(tmp: Path, *make_args: str) -> Build:
    """`make rpm` in a clone of this checkout's HEAD: uncommitted files cannot leak in."""
    source = tmp / "ocihook"
    head = run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True).stdout.strip()
    run(["git", "clone", "-q", "--no-checkout", str(REPO), str(source)], check=True)
    run(["git", "-C", str(source), "checkout", "-q", head], check=True)
    # The top-level Makefile includes the fragment; before that merge, name both files.
    included = "packaging/Makefile.rpm.mk" in (source / "Makefile").read_text()
    target = ["rpm"] if included else ["-f", "Makefile", "-f", "packaging/Makefile.rpm.mk", "rpm"]
    start = time.monotonic()
    result = run(["make", "-C", str(source), *target, *make_args], timeout=600)
    seconds = time.monotonic() - start
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-6000:]
    (source / "build/rpm/make.log").write_text(result.stdout + result.stderr)
    print(f"make rpm {' '.join(make_args)}: {seconds:.1f} s", file=sys.stderr)
    return Build(source=source, topdir=source / "build/rpm", seconds=seconds)


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Build:
    return make_rpm(tmp_path_factory.mktemp("rpm"))


def test_make_rpm_builds_srpm_and_both_noarch_rpms(build):
    built = sorted(p.relative_to(build.topdir) for p in build.topdir.glob("*RPMS/**/*.rpm"))
    assert built == sorted(
        p.relative_to(build.topdir) for p in (build.main, build.selinux, build.srpm)
    )
    # the tomli wheel: the SRPM holds every source, whichever Python it is rebuilt with
    assert query(build.srpm, "-l") == [f"ocihook-{VERSION}.tar.gz", "ocihook.spec", TOMLI_WHEEL]
    # this Python (3.11) has tomllib: nothing bundled, Apache-2.0 alone
    assert query(build.main, "--qf", "%{VERSION}-%{RELEASE} %{ARCH} %{LICENSE}") == [
        f"{VERSION}-{RELEASE} noarch Apache-2.0"
    ]
    assert not [p for p in query(build.main, "--provides") if "tomli" in p]


def expected_main_files(
    source: Path, sitelib: str = SITELIB, pytag: str = PYTAG, bundled: bool = False
) -> set[str]:
    package = run(["git", "-C", str(source), "ls-files", "ocihook"], check=True).stdout.split()
    package += [f"ocihook/{name}" for name in VENDOR] if bundled else []
    files = {"/usr/bin/ocihook"}
    dirs = {f"{sitelib}/ocihook"}
    for name in package:
        path = Path(name)
        files.add(f"{sitelib}/{name}")
        for parent in path.parents:
            if parent != Path("."):
                dirs.add(f"{sitelib}/{parent}")
        if path.suffix == ".py":
            dirs.add(f"{sitelib}/{path.parent}/__pycache__")
            files.add(f"{sitelib}/{path.parent}/__pycache__/{path.stem}.{pytag}.pyc")
    info = f"{sitelib}/ocihook-{VERSION}.dist-info"
    dirs.add(info)
    for name in ("INSTALLER", "LICENSE", "METADATA", "RECORD", "WHEEL", "entry_points.txt"):
        files.add(f"{info}/{name}")
    files.add(f"{info}/top_level.txt")
    profiles = sorted((source / "packaging/profiles").glob("*.yaml"))
    assert profiles, "no profiles to ship"
    files |= {f"/usr/share/ocihook/profiles/{p.name}" for p in profiles}
    files |= {
        "/usr/libexec/ocihook/ocihook-hook",
        "/usr/share/containers/oci/hooks.d/ocihook.json",
        "/usr/share/ocihook/examples/ocihook-env.json",
        "/usr/share/ocihook/examples/50-ocihook-precreate.conf",
        "/usr/share/ocihook/hooks.d.podman/ocihook-precreate.json",
        "/etc/ocihook/config.yaml",
        "/usr/share/man/man1/ocihook.1.gz",
        "/usr/share/bash-completion/completions/ocihook",
        "/usr/share/zsh/site-functions/_ocihook",
        "/usr/lib/tmpfiles.d/ocihook.conf",
        f"/usr/share/doc/ocihook-{VERSION}/README.md",
        f"/usr/share/licenses/ocihook-{VERSION}/LICENSE",
    }
    if bundled:
        files.add(f"/usr/share/licenses/ocihook-{VERSION}/LICENSE.tomli")
    dirs |= {
        "/usr/libexec/ocihook",
        "/usr/share/containers",
        "/usr/share/containers/oci",
        "/usr/share/containers/oci/hooks.d",
        "/etc/ocihook",
        "/etc/ocihook/profiles",
        "/usr/share/ocihook",
        "/usr/share/ocihook/profiles",
        "/usr/share/ocihook/examples",
        "/usr/share/ocihook/hooks.d.podman",
        "/run/ocihook",
        "/usr/share/bash-completion",
        "/usr/share/bash-completion/completions",
        "/usr/share/zsh",
        "/usr/share/zsh/site-functions",
        f"/usr/share/doc/ocihook-{VERSION}",
        f"/usr/share/licenses/ocihook-{VERSION}",
    }
    return files | dirs


def test_main_rpm_lists_exactly_the_expected_files(build):
    assert set(query(build.main, "-l")) == expected_main_files(build.source)


def test_selinux_rpm_lists_exactly_the_module_and_license(build):
    assert set(query(build.selinux, "-l")) == {
        "/usr/share/selinux/packages/ocihook.pp",
        f"/usr/share/licenses/ocihook-selinux-{VERSION}",
        f"/usr/share/licenses/ocihook-selinux-{VERSION}/LICENSE",
    }


def file_table(rpm_file: Path) -> dict[str, tuple[str, str]]:
    rows = query(rpm_file, "--qf", "[%{FILENAMES} %{FILEMODES:octal} %{FILEFLAGS:fflags}\n]")
    table = {}
    for row in rows:
        name, mode, *flags = row.split(" ")
        table[name] = (mode, "".join(flags))
    return table


def test_modes_and_flags(build):
    table = file_table(build.main)
    assert table["/usr/libexec/ocihook/ocihook-hook"] == ("100755", "")
    assert table["/usr/bin/ocihook"] == ("100755", "")
    mode, flags = table["/etc/ocihook/config.yaml"]
    assert mode == "100644" and "c" in flags and "n" in flags  # %config(noreplace)
    assert table["/usr/share/containers/oci/hooks.d/ocihook.json"] == ("100644", "")
    assert table["/etc/ocihook/profiles"] == ("40755", "")
    assert table["/run/ocihook"] == ("40700", "g")  # %ghost: made by tmpfiles.d and the hook
    assert table[f"/usr/share/doc/ocihook-{VERSION}/README.md"] == ("100644", "d")
    assert table[f"/usr/share/licenses/ocihook-{VERSION}/LICENSE"] == ("100644", "l")
    assert table["/usr/share/man/man1/ocihook.1.gz"] == ("100644", "d")
    assert table["/usr/share/bash-completion/completions/ocihook"] == ("100644", "")
    assert table["/usr/share/zsh/site-functions/_ocihook"] == ("100644", "")
    for name, (mode, flags) in table.items():
        if name.startswith(SITELIB) or name.startswith("/usr/share/ocihook/"):
            assert mode in ("100644", "40755"), name
            assert flags == "", name
    assert file_table(build.selinux)["/usr/share/selinux/packages/ocihook.pp"] == ("100644", "")


def test_requires(build):
    names = {line.split(" ")[0] for line in query(build.main, "--requires")}
    assert MAIN_REQUIRES <= names
    assert "python(abi)" in names
    assert "container-selinux" not in names
    assert not [n for n in names if "tomli" in n]
    selinux = query(build.selinux, "--requires")
    assert "container-selinux" in selinux
    assert f"ocihook = {VERSION}-{RELEASE}" in selinux


def test_selinux_scriptlets_load_and_remove_the_module_without_failing(build):
    scripts = "\n".join(query(build.selinux, "--scripts"))
    assert "semodule -i /usr/share/selinux/packages/ocihook.pp" in scripts
    assert "semodule -r ocihook" in scripts
    # Guarded: a host without the SELinux tools does not fail the transaction.
    assert "[ -x /usr/sbin/semodule ]" in scripts


def test_selinux_rpm_ships_a_policy_module_package(build, tmp_path):
    extract_into(tmp_path, build.selinux)
    module = tmp_path / "usr/share/selinux/packages/ocihook.pp"
    assert module.read_bytes()[:4] == bytes.fromhex("8fff7cf9")  # SELinux module package magic


def extract_into(root: Path, rpm_file: Path) -> None:
    cpio = subprocess.run(["rpm2cpio", str(rpm_file)], capture_output=True, check=True).stdout
    subprocess.run(["cpio", "-idm", "--quiet"], input=cpio, cwd=root, check=True)


def test_rpmlint_reports_no_errors(build):
    result = run(
        [
            "rpmlint",
            "-r",
            str(build.source / "packaging/ocihook.rpmlintrc"),
            str(build.main),
            str(build.selinux),
            str(build.srpm),
            str(build.source / "packaging/ocihook.spec"),
        ]
    )
    summary = result.stdout.strip().splitlines()[-1]
    print(result.stdout, file=sys.stderr)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 errors," in summary, result.stdout


def install(build: Build, root: Path) -> Path:
    """Both RPMs installed into a scratch root (no RPM database of the host's packages here,
    and no shell in the scratch root to run scriptlets in: --nodeps --noscripts)."""
    root.mkdir(mode=0o755, exist_ok=True)
    root.chmod(0o755)
    result = run(
        ["rpm", "--root", str(root), "--nodeps", "--noscripts", "-i"]
        + [str(build.main), str(build.selinux)]
    )
    assert result.returncode == 0, result.stderr
    return root


@pytest.fixture(scope="module")
def installed(build, tmp_path_factory) -> Path:
    return install(build, tmp_path_factory.mktemp("rpmroot"))


def test_installed_files(installed):
    root = installed
    assert (
        (root / "usr/libexec/ocihook/ocihook-hook")
        .read_text()
        .startswith("#!/usr/bin/python3 -IS\n")
    )
    assert os.access(root / "usr/libexec/ocihook/ocihook-hook", os.X_OK)
    assert (root / "etc/ocihook/config.yaml").read_text() == (
        REPO / "packaging/config.yaml"
    ).read_text()
    assert (root / "usr/share/selinux/packages/ocihook.pp").stat().st_size > 0
    assert not (root / "usr/share/containers/oci/hooks.d/ocihook-env.json").exists()
    assert (root / "usr/lib/tmpfiles.d/ocihook.conf").read_text().splitlines()[-1] == (
        "d /run/ocihook 0700 root root -"
    )
    # The completion scripts of the build's click (Debian's python3-click here: click 8).
    bash = (root / "usr/share/bash-completion/completions/ocihook").read_text()
    assert "_OCIHOOK_COMPLETE=bash_complete" in bash and "-F _ocihook_completion ocihook" in bash
    zsh = (root / "usr/share/zsh/site-functions/_ocihook").read_text()
    assert zsh.startswith("#compdef ocihook\n") and "_OCIHOOK_COMPLETE=zsh_complete" in zsh


# Runs in a private mount namespace over the host's (tests/support/overlay_root.py).
NAMESPACE_SCRIPT = namespace_script("ocihook-rpm", "$ROOT/usr")


def test_installed_hook_injects_driver_into_podman_container(
    installed, synth_root, image_rhel, tmp_path
):
    root = installed
    # The host's python cannot import ocihook: only the installed package can serve the hook.
    assert run([HOST_PYTHON, "-I", "-c", "import ocihook"]).returncode != 0
    tmp_path.chmod(0o755)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                # profile_dirs: the default, /etc/ocihook/profiles and the installed
                # /usr/share/ocihook/profiles, which hold synthetic.yaml
                "profile": "synthetic",
                "source_root": str(synth_root),
                "device_root": str(synth_root),
                "state_dir": str(tmp_path / "state"),
                "log": {"target": str(tmp_path / "ocihook.log"), "debug": True},
            }
        )
    )
    hooks_dir = root / "usr/share/containers/oci/hooks.d"
    command = ["podman", "--runtime", "runc", "--hooks-dir", str(hooks_dir), "run"]
    command += [*podman.RUN_FLAGS, "--annotation", f"{podman.ANNOTATION}=all"]
    command += [image_rhel, "/usr/bin/synth-smi"]

    # The tmpfs needs a mount point: /run/ocihook, as the package's tmpfiles.d makes it.
    made_run_dir = not os.path.exists("/run/ocihook")
    if made_run_dir:
        os.mkdir("/run/ocihook", 0o700)
    try:
        result = run(
            ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c"]
            + [NAMESPACE_SCRIPT, "ocihook-rpm-test", *command],
            env={**os.environ, "ROOT": str(root), "CONFIG": str(config), "SCRATCH": str(tmp_path)},
            timeout=180,
        )
    finally:
        if made_run_dir:
            os.rmdir("/run/ocihook")
    log = (tmp_path / "ocihook.log").read_text() if (tmp_path / "ocihook.log").exists() else ""
    assert result.returncode == 0, result.stdout + result.stderr + log
    assert f"module: {SITELIB}/ocihook/__init__.py" in result.stdout
    assert f"command: ocihook, version {VERSION}" in result.stdout
    assert "libsynth 1.2.3 loaded from /usr/lib64/libsynth.so.1" in result.stdout
    for node in ("synth0", "synthctl"):
        assert synthetic.opened(node) in result.stdout
    assert log, "the installed hook wrote no log"
    # The container's record is kept; the shipped registration has no poststop stage, so it
    # still says running, and its process is gone (the next sweep marks it orphaned).
    (record,) = (tmp_path / "state").glob("*.json")
    body = json.loads(record.read_text())
    assert body["status"] == "running" and not records.is_running(body)


def test_rpm_erase_removes_every_installed_file(build, tmp_path):
    root = install(build, tmp_path / "root")
    owned = query(build.main, "-l") + query(build.selinux, "-l")
    installed = {root / name.lstrip("/") for name in owned if name != "/run/ocihook"}
    assert all(path.exists() for path in installed)
    assert root / "usr/libexec/ocihook/ocihook-hook" in installed
    result = run(
        ["rpm", "--root", str(root), "--nodeps", "--noscripts", "-e"]
        + ["ocihook-selinux", "ocihook"]
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p for p in installed if p.exists()) == []


# The RPM built the RHEL way (docs/rpm.md): `make rpm RPM_PYTHON=...` makes %__python3 RHEL 9's
# Python stack, .venv-py39 as scripts/py39-venv.sh builds it for make test-py39 (pyenv's CPython
# 3.9.18, setuptools 53, no build isolation, no network), and the installed files run under it.
PY39_SITELIB = "/usr/lib/python3.9/site-packages"  # the spec's python3_sitelib for it, as on RHEL 9


@dataclass
class Rhel9Build:
    build: Build
    python: Path  # .venv-py39/bin/python: the build's %__python3
    root: Path  # the main RPM extracted (rpm2cpio | cpio)


@pytest.fixture(scope="module")
def rhel9(tmp_path_factory) -> Rhel9Build:
    python = py39.python()
    built = make_rpm(tmp_path_factory.mktemp("rpm39"), f"RPM_PYTHON={python}")
    root = tmp_path_factory.mktemp("rpm39root")
    extract_into(root, built.main)
    return Rhel9Build(build=built, python=python, root=root)


def test_rhel9_build_makes_the_named_wheel_into_the_39_sitelib(rhel9):
    log = (rhel9.build.topdir / "make.log").read_text()
    assert f"{rhel9.python} -m pip wheel --no-deps --no-build-isolation --no-index" in log
    assert f"filename=ocihook-{VERSION}-py3-none-any.whl" in log
    assert "UNKNOWN" not in log
    files = set(query(rhel9.build.main, "-l"))
    assert files == expected_main_files(rhel9.build.source, PY39_SITELIB, "cpython-39", True)
    metadata = rhel9.root / PY39_SITELIB.lstrip("/") / f"ocihook-{VERSION}.dist-info/METADATA"
    head = metadata.read_text().split("\n\n")[0].splitlines()
    assert "Name: ocihook" in head and f"Version: {VERSION}" in head
    assert "python(abi) = 3.9" in query(rhel9.build.main, "--requires")


def test_rhel9_rpm_bundles_tomli_with_its_licence_and_provides(rhel9):
    """Python 3.9 has no tomllib and RHEL 9 no tomli: the RPM bundles the registry's wheel of
    the spec's version (its modules, unchanged, in ocihook/_vendor/tomli), its MIT licence
    under %license, and says so (Provides: bundled(...), License), asking for no tomli."""
    main = rhel9.build.main
    assert query(main, "--qf", "%{LICENSE}") == ["Apache-2.0 AND MIT"]
    assert query(rhel9.build.selinux, "--qf", "%{LICENSE}") == ["Apache-2.0"]
    assert f"bundled(python3dist(tomli)) = {TOMLI}" in query(main, "--provides")
    assert not [r for r in query(main, "--requires") if "tomli" in r]
    licence = f"/usr/share/licenses/ocihook-{VERSION}/LICENSE.tomli"
    assert file_table(main)[licence] == ("100644", "l")
    wheel = zipfile.ZipFile(rhel9.build.topdir / "SOURCES" / TOMLI_WHEEL)
    text = (rhel9.root / licence.lstrip("/")).read_bytes()
    assert text == wheel.read(f"tomli-{TOMLI}.dist-info/LICENSE") and b"MIT License" in text
    sitelib = rhel9.root / PY39_SITELIB.lstrip("/") / "ocihook"
    for name in VENDOR[1:]:
        module = name.split("/")[-1]
        assert (sitelib / name).read_bytes() == wheel.read(f"tomli/{module}"), name
    assert (sitelib / VENDOR[0]).read_bytes() == b""


def test_rhel9_installed_check_reads_toml_with_the_bundled_tomli(rhel9, tmp_path):
    """`ocihook check` of the RPM under Python 3.9: containers.conf read, a malformed one
    reported with its line and column, by ocihook._vendor.tomli (.venv-py39 has a tomli
    too: the bundled one comes first)."""
    env = py39_env(rhel9)
    code = "from ocihook.check import tomlfile; print(tomlfile.reader().__file__)"
    where = run([str(rhel9.python), "-c", code], env=env, cwd=tmp_path, check=True)
    assert where.stdout.strip() == (f"{rhel9.root}{PY39_SITELIB}/ocihook/_vendor/tomli/__init__.py")
    command = [str(rhel9.root / "usr/bin/ocihook"), "check", "--config"]
    command.append(str(REPO / "packaging/config.yaml"))
    good = tmp_path / "containers.conf"
    good.write_text('[engine]\nhooks_dir = [\n  "/opt/hooks.d",  # ocihook\n]\n')
    bad = tmp_path / "bad.conf"
    bad.write_text("[engine]\nhooks_dir = ['/a'\n[engine]\n")
    checked = {}
    for conf in (good, bad):
        env = {**py39_env(rhel9), "CONTAINERS_CONF": str(conf), "PATH": "/usr/bin:/bin"}
        checked[conf] = run(command, env=env, cwd=tmp_path, timeout=120)
        assert "internal error" not in checked[conf].stderr, checked[conf].stderr
    assert f"hooks dirs: podman reads /opt/hooks.d (hooks_dir in {good})" in checked[good].stdout
    assert (
        f"FAILED  {bad} line 3, column 1: unclosed array: podman runs no container until it "
        "is fixed"
    ) in checked[bad].stdout, checked[bad].stdout


def test_rhel9_completion_scripts_are_click_7s(rhel9):
    """%install asks the build's click (RHEL 9's 7.1.2) for the scripts: click 7's protocol."""
    bash = (rhel9.root / "usr/share/bash-completion/completions/ocihook").read_text()
    assert "_OCIHOOK_COMPLETE=complete " in bash and "bash_complete" not in bash
    zsh = (rhel9.root / "usr/share/zsh/site-functions/_ocihook").read_text()
    assert '_OCIHOOK_COMPLETE="complete_zsh"' in zsh and "zsh_complete" not in zsh


def py39_env(rhel9: Rhel9Build) -> dict:
    """The extracted sitelib on the interpreter's path, as /usr/lib/python3.9/site-packages is
    on RHEL 9's python3's (PYTHONPATH comes before the venv's own site-packages)."""
    return {**os.environ, "PYTHONPATH": str(rhel9.root / PY39_SITELIB.lstrip("/"))}


def test_rhel9_installed_command_runs_under_python39(rhel9, synth_root, tmp_path):
    env = py39_env(rhel9)
    code = "import ocihook, sys; print(ocihook.__file__, sys.version.split()[0])"
    where = run([str(rhel9.python), "-c", code], env=env, cwd=tmp_path, check=True)
    assert where.stdout.split() == [f"{rhel9.root}{PY39_SITELIB}/ocihook/__init__.py", "3.9.18"]
    command = str(rhel9.root / "usr/bin/ocihook")
    assert (rhel9.root / "usr/bin/ocihook").read_text().startswith(f"#!{rhel9.python}\n")
    helped = run([command, "--help"], env=env, cwd=tmp_path)
    assert helped.returncode == 0 and "Usage: ocihook [OPTIONS] COMMAND" in helped.stdout, (
        helped.stderr
    )
    config = tmp_path / "config.yaml"
    profiles = rhel9.root / "usr/share/ocihook/profiles"
    config.write_text(yaml.safe_dump(synthetic.config(synth_root, profile_dirs=[str(profiles)])))
    planned = run([command, "plan", "--config", str(config)], env=env, cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    # the same plan as the checkout's, under this venv's Python
    reference = run(
        [sys.executable, "-m", "ocihook.cli.main", "plan", "--config", str(config)], cwd=REPO
    )
    assert planned.stdout == reference.stdout and "libsynth.so.1" in planned.stdout


# The hook's paths are the installed ones: the extracted /usr lies over the host's in a private
# mount namespace. Where its sys.path finds ocihook.hook, then the hook twice: the config
# compiled, then read from its cache.
HOOK39_SCRIPT = """
set -u
mount -t overlay ocihook-rpm39-usr -o "lowerdir=$ROOT/usr:/usr" /usr || exit 1
"$PY" -IS -c "$WHERE"
for run in 1 2; do
    status=0
    /usr/libexec/ocihook/ocihook-hook --config "$CONFIG" --cache-dir "$CACHE" <"$STATE" || status=$?
    echo "exit $status"
done
"""


def test_rhel9_installed_hook_answers_a_no_request_state(rhel9, tmp_path):
    hook = rhel9.root / "usr/libexec/ocihook/ocihook-hook"
    assert hook.read_text().startswith(f"#!{rhel9.python} -IS\n")
    site_dirs = ast.literal_eval(
        re.search(r"^SITE_DIRS: list\[str\] = (.*)$", hook.read_text(), re.M)[1]
    )
    assert site_dirs[0] == PY39_SITELIB
    config = tmp_path / "config.yaml"
    (tmp_path / "driver").mkdir()
    config.write_text(yaml.safe_dump(synthetic.config(tmp_path / "driver")))
    os.utime(config, (time.time() - 10, time.time() - 10))  # older than the cache's racy window
    state = json.dumps(
        {
            "ociVersion": "1.0.2",
            "id": "rhel9",
            "status": "creating",
            "pid": 1,
            "bundle": "/",
            "annotations": {},
        }
    )
    (tmp_path / "state.json").write_text(state)
    result = run(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", HOOK39_SCRIPT],
        env={
            **os.environ,
            "ROOT": str(rhel9.root),
            "PY": str(rhel9.python),
            "WHERE": f"import sys; sys.path.extend({site_dirs!r}); import ocihook.hook; "
            "print(ocihook.hook.__file__)",
            "CONFIG": str(config),
            "CACHE": str(tmp_path / "cache"),
            "STATE": str(tmp_path / "state.json"),
        },
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"{PY39_SITELIB}/ocihook/hook.py", "exit 0", "exit 0"]
    assert result.stderr == ""
    assert len(list((tmp_path / "cache").glob("*.marshal"))) == 1
