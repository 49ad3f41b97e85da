"""`ocihook check`'s TOML (ocihook/check/tomlfile.py): the reader is Python's tomllib from 3.11
and tomli before (the RPM's bundled ocihook._vendor.tomli, else an installed one: .venv-py39
pins the bundled version), and podman's and CRI-O's real configuration files read through
hooksdirs give the same directories, files and problems in both tiers: these tests run under
.venv (3.11, tomllib) and under .venv-py39 (make test-py39: 3.9.18, tomli 2.0.1), each
against the same golden (tests/golden/toml-trees.json). tests/test_rpm.py checks the bundled
copy in the RPM built for RHEL 9."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from ocihook.check import hooksdirs, tomlfile
from ocihook.check.hooksdirs import DEFAULT_DIR
from ocihook.errors import OcihookError, exit_line
from tests.support import py39
from tests.support.golden import golden_json

GOLDEN = Path(__file__).resolve().parent / "golden" / "toml-trees.json"
REPO = Path(__file__).resolve().parent.parent
SPEC = (REPO / "packaging/ocihook.spec").read_text()
TOMLI_VERSION = re.search(r"^%global tomli_version (\S+)$", SPEC, re.M)[1]

# podman's containers.conf as distributions ship it (containers-common 0.60: most of it comments),
# with the hooks_dir array across lines and comments inside it.
CONTAINERS_CONF = """\
# The containers configuration file specifies all of the available configuration
# command-line options/flags for container engine tools like Podman & Buildah,
# but in a TOML format that can be easily modified and versioned.

[containers]

# List of devices. Specified as
# "<device-on-host>:<device-on-container>:<permissions>", for example:
# "/dev/sdc:/dev/xvdc:rwm".
#devices = []

default_capabilities = [
  "CHOWN",
  "DAC_OVERRIDE",
  "FOWNER",
  "FSETID",
  "KILL",
  "NET_BIND_SERVICE",
  "SETFCAP",
  "SETGID",
  "SETPCAP",
  "SETUID",
  "SYS_CHROOT"
]
default_sysctls = [
  "net.ipv4.ping_group_range=0 0",
]
log_driver = "journald"
pids_limit = 2048
tz = ""

[secrets]
#driver = "file"

[secrets.opts]
#root = "/example/directory"

[network]
network_backend = "netavark"
default_subnet_pools = [
  {"base" = "10.89.0.0/16", "size" = 24},
  {"base" = "10.90.0.0/15", "size" = 24},
]

[engine]
cgroup_manager = "systemd"
events_logger = "journald"

# Path to the OCI hooks directories for automatically executed hooks.
hooks_dir = [
  "/usr/share/containers/oci/hooks.d",   # the packages' registrations
  '/etc/containers/oci/hooks.d',         # the administrator's
]

runtime = "crun"
image_parallel_copies = 0
[engine.runtimes]
crun = [
  "/usr/bin/crun",
  "/usr/local/bin/crun",
]
runc = ["/usr/bin/runc"]

[engine.volume_plugins]
#testplugin = "/run/podman/plugins/test.sock"

[machine]
cpus = 1
memory = 2_048
disk_size = 100
image = "testing"

[farms]
#default = ""
"""

# A drop-in of podman 4.8 and later: appends, with a dotted key.
APPEND_DROP_IN = 'engine.hooks_dir = ["/opt/ocihook/hooks.d", {append = true}]\n'

# crio.conf as `crio config` writes it, abridged: [crio.runtime] with hooks_dir across lines.
CRIO_CONF = """\
# The CRI-O configuration file specifies all of the available configuration
# options and command-line flags for the crio(8) OCI Kubernetes Container Runtime
# daemon, but in a TOML format that can be more easily modified and versioned.

[crio]
root = "/var/lib/containers/storage"
runroot = "/run/containers/storage"
storage_driver = "overlay"
log_dir = "/var/log/crio/pods"
version_file = "/var/run/crio/version"

[crio.api]
listen = "/var/run/crio/crio.sock"
stream_address = "127.0.0.1"
stream_port = "0"
grpc_max_send_msg_size = 83886080

[crio.runtime]
default_runtime = "crun"
no_pivot = false
conmon_env = [
]
default_ulimits = [
]
selinux = true
cgroup_manager = "systemd"
default_capabilities = [
	"CHOWN",
	"DAC_OVERRIDE",
	"FSETID",
	"FOWNER",
	"SETGID",
	"SETUID",
	"SETPCAP",
	"NET_BIND_SERVICE",
	"KILL",
]
hooks_dir = [
	"/usr/share/containers/oci/hooks.d",
]
pids_limit = -1
log_size_max = -1

[crio.runtime.runtimes.crun]
runtime_path = "/usr/bin/crun"
runtime_type = "oci"
runtime_root = "/run/crun"
monitor_path = "/usr/libexec/crio/conmon"
allowed_annotations = [
	"io.containers.trace-syscall",
]

[crio.image]
default_transport = "docker://"
pause_image = "registry.k8s.io/pause:3.10"

[crio.network]
network_dir = "/etc/cni/net.d/"
plugin_dirs = [
	"/opt/cni/bin/",
]

[crio.metrics]
enable_metrics = false
metrics_port = 9090
"""

# CRI-O drop-ins (every file under crio.conf.d, walked in lexical order).
CRIO_DROP_IN = '[crio.runtime]\nhooks_dir = [\n\t"/etc/ocihook/crio-hooks.d",\n]\n'
CRIO_OTHER = "[crio.runtime.runtimes.runc]\nruntime_path = '/usr/bin/runc'\n"

# Malformed files: (text, the problem's text after the path).
MALFORMED = {
    "unclosed header": ("[engine\nhooks_dir = []\n", " line 1, column 8: expected ']'"),
    "missing comma": (
        '[engine]\nhooks_dir = [\n  "/a"\n  "/b",\n]\n',
        " line 4, column 3: unclosed array",
    ),
    "redefined table": (
        '[engine]\nhooks_dir = ["/a"]\n\n[engine]\nruntime = "crun"\n',
        " line 4, column 8: cannot declare ('engine',) twice",
    ),
    "redefined key": (
        '[engine]\nhooks_dir = ["/a"]\nhooks_dir = ["/b"]\n',
        " line 3, column 19: cannot overwrite a value",
    ),
    "end of file": ('[engine]\nhooks_dir = ["/a"', ": at the end of the file: unclosed array"),
    "not UTF-8": (b"[engine]\n# caf\xe9\n", " line 2, column 6: not UTF-8"),
}


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def results(base: str) -> dict:
    """What hooksdirs reads from the realistic trees written under `base`, with `base`
    written ROOT: the same for every interpreter (the golden)."""
    top = Path(base)
    out: dict = {"reader": tomlfile.reader().__name__}

    def plain(reader: hooksdirs.Reader) -> dict:
        fields = {
            "directories": reader.directories,
            "origin": reader.origin,
            "files": reader.files,
            "problems": reader.problems,
        }
        return json.loads(json.dumps(fields).replace(str(top), "ROOT"))

    root = top / "podman"
    write(root / "usr/share/containers/containers.conf", CONTAINERS_CONF)
    write(root / "etc/containers/containers.conf.d/50-ocihook.conf", APPEND_DROP_IN)
    env = {"HOME": str(root / "home")}
    out["podman"] = plain(hooksdirs.podman_reader(env, 0, (5, 8), str(root)))
    out["podman 4.3"] = plain(hooksdirs.podman_reader(env, 0, (4, 3), str(root)))

    crio = top / "crio"
    write(crio / "crio.conf", CRIO_CONF)
    write(crio / "crio.conf.d/10-crun.conf", CRIO_OTHER)
    write(crio / "crio.conf.d/50-ocihook.conf", CRIO_DROP_IN)
    crio_env = {
        "CONTAINER_CONFIG": str(crio / "crio.conf"),
        "CONTAINER_CONFIG_DIR": str(crio / "crio.conf.d"),
    }
    out["crio"] = plain(hooksdirs.crio_reader(crio_env))

    for name, (text, _) in MALFORMED.items():
        conf = write(top / "malformed" / name.replace(" ", "-") / "containers.conf", text)
        reader = hooksdirs.podman_reader({"CONTAINERS_CONF": str(conf)}, 0, (5, 8))
        out[f"podman: {name}"] = plain(reader)
        crio_conf = write(top / "malformed-crio" / name.replace(" ", "-") / "crio.conf", text)
        reader = hooksdirs.crio_reader({"CONTAINER_CONFIG": str(crio_conf)})
        out[f"crio: {name}"] = plain(reader)
    return out


def test_the_reader_is_tomllib_from_3_11_else_tomli():
    reader = tomlfile.reader()
    if sys.version_info >= (3, 11):
        assert reader.__name__ == "tomllib"
    else:
        assert reader.__name__ in ("ocihook._vendor.tomli", "tomli")
    if py39.is_this_interpreter():  # .venv-py39: the bundled version, installed
        from importlib.metadata import version

        assert reader.__name__ == "tomli" and version("tomli") == TOMLI_VERSION


def test_tomllib_first_then_the_bundled_tomli_then_an_installed_one(monkeypatch):
    bundled = types.ModuleType("ocihook._vendor.tomli")
    vendor = types.ModuleType("ocihook._vendor")
    vendor.tomli = bundled  # type: ignore[attr-defined]
    installed = types.ModuleType("tomli")
    monkeypatch.setitem(sys.modules, "ocihook._vendor", vendor)
    monkeypatch.setitem(sys.modules, "ocihook._vendor.tomli", bundled)
    monkeypatch.setitem(sys.modules, "tomli", installed)
    if sys.version_info >= (3, 11):
        import tomllib

        assert tomlfile.reader() is tomllib
    monkeypatch.setitem(sys.modules, "tomllib", None)  # None: the import fails
    assert tomlfile.reader() is bundled
    monkeypatch.setitem(sys.modules, "ocihook._vendor", None)
    monkeypatch.setitem(sys.modules, "ocihook._vendor.tomli", None)
    assert tomlfile.reader() is installed
    monkeypatch.setitem(sys.modules, "tomli", None)
    with pytest.raises(OcihookError, match=r"^no TOML reader: this Python has no tomllib"):
        tomlfile.reader()


def test_the_reader_is_not_imported_with_the_module():
    code = (
        "import sys; import ocihook.check.hooksdirs, ocihook.check.routes; "
        "print(sorted(m for m in sys.modules if 'toml' in m))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert done.stdout.split() == ["['ocihook.check.tomlfile']"]


def test_podman_s_containers_conf_and_an_appending_drop_in(tmp_path):
    out = results(str(tmp_path))
    etc = "ROOT/podman/etc/containers/containers.conf.d/50-ocihook.conf"
    assert out["podman"] == {
        "directories": [DEFAULT_DIR, "/etc/containers/oci/hooks.d", "/opt/ocihook/hooks.d"],
        "origin": f"hooks_dir in {etc}",
        "files": ["ROOT/podman/usr/share/containers/containers.conf", etc],
        "problems": [],
    }
    # before podman 4.8 {append = true} is no string: podman stops
    assert out["podman 4.3"]["directories"] == [DEFAULT_DIR, "/etc/containers/oci/hooks.d"]
    assert out["podman 4.3"]["problems"] == [
        f"{etc}: hooks_dir must hold strings before podman 4.8, not a table: podman runs no "
        "container until it is fixed"
    ]


def test_crio_conf_and_its_drop_ins(tmp_path):
    out = results(str(tmp_path))
    assert out["crio"] == {
        "directories": ["/etc/ocihook/crio-hooks.d"],
        "origin": "hooks_dir in ROOT/crio/crio.conf.d/50-ocihook.conf",
        "files": [
            "ROOT/crio/crio.conf",
            "ROOT/crio/crio.conf.d/10-crun.conf",
            "ROOT/crio/crio.conf.d/50-ocihook.conf",
        ],
        "problems": [],
    }


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_file_is_one_problem_naming_file_line_and_column(name, tmp_path):
    out = results(str(tmp_path))
    where = MALFORMED[name][1]
    slug = name.replace(" ", "-")
    for runtime, directory, stops in (
        ("podman", "malformed", "podman runs no container until it is fixed"),
        ("crio", "malformed-crio", "CRI-O does not start until it is fixed"),
    ):
        reader = out[f"{runtime}: {name}"]
        conf = "containers.conf" if runtime == "podman" else "crio.conf"
        (problem,) = reader["problems"]
        assert problem.startswith(f"ROOT/{directory}/{slug}/{conf}{where}"), problem
        assert problem.endswith(f": {stops}") and "\n" not in problem
        assert reader["directories"] == [DEFAULT_DIR] and reader["files"] == []


def test_the_error_is_the_project_s_one_line(tmp_path):
    path = write(tmp_path / "containers.conf", "[engine\n")
    with pytest.raises(tomlfile.TomlError) as caught:
        tomlfile.load(str(path))
    error = caught.value
    assert isinstance(error, OcihookError) and (error.line, error.column) == (1, 8)
    assert error.path == str(path) and error.message.startswith("expected ']'")
    assert exit_line(error) == (1, f"ocihook: {path} line 1, column 8: {error.message}")
    with pytest.raises(FileNotFoundError):
        tomlfile.load(str(tmp_path / "missing.conf"))


def test_every_tier_reads_the_trees_as_the_golden_says(tmp_path):
    """The trees read by this interpreter's reader against one golden: under .venv (3.11,
    tomllib) and under .venv-py39 (make test-py39, which make test runs: tomli 2.0.1), so
    both readers give the same directories, files and problems, to the message."""
    out = results(str(tmp_path))
    assert out.pop("reader") == ("tomllib" if sys.version_info >= (3, 11) else "tomli")
    assert out == golden_json(GOLDEN, out)


def test_the_pins_of_the_bundled_tomli_agree():
    """The spec's tomli (bundled), .venv-py39's pin and setup.cfg's requirement."""
    pins = (REPO / "packaging/rhel9-python.txt").read_text()
    assert re.search(rf"^tomli=={re.escape(TOMLI_VERSION)}$", pins, re.M)
    assert not re.search(r"^tomli==", (REPO / "tests/rhel9-test-tools.txt").read_text(), re.M)
    assert re.search(r"^%global tomli_sha256 [0-9a-f]{64}$", SPEC, re.M)
    assert 'tomli>=1.1.0; python_version < "3.11"' in (REPO / "setup.cfg").read_text()
