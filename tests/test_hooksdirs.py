"""The hooks.d directories podman and CRI-O read, worked out from their config files
(ocihook/check/hooksdirs.py): podman's file order by version and user, hooks_dir's replace and
append, CRI-O's crio.conf and crio.conf.d walk, and config files the runtimes cannot read.
CRI-O's own `crio config` is the reference for CRI-O; tests/test_hooksdirs_podman.py
checks podman's rules against real containers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ocihook.check import hooksdirs
from ocihook.check.hooksdirs import DEFAULT_DIR, OVERRIDE_DIR
from tests.support import crio as crio_support

REPO = Path(__file__).resolve().parent.parent
V43, V48, V50, V57 = (4, 3), (4, 8), (5, 0), (5, 7)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def engine(*dirs: str, append: bool = False) -> str:
    items = [f'"{d}"' for d in dirs] + (["{append = true}"] if append else [])
    return f"[engine]\nhooks_dir = [{', '.join(items)}]\n"


@pytest.fixture
def root(tmp_path) -> Path:
    """An empty system root: /usr/share/containers and /etc/containers under it."""
    return tmp_path / "root"


def podman(root: Path, home: Path | None = None, uid: int = 0, version=V43, **env):
    environment = {"HOME": str(home or root / "home"), **env}
    return hooksdirs.podman_reader(environment, uid, version, str(root))


def test_podman_reads_only_the_usr_share_dir_by_default(root):
    reader = podman(root)
    assert reader.directories == [DEFAULT_DIR] and reader.origin == "default"
    assert OVERRIDE_DIR not in reader.directories
    assert reader.problems == [] and reader.notes == []


def test_podman_files_in_order_each_replacing_the_list(root):
    write(root / "usr/share/containers/containers.conf", engine("/a"))
    write(root / "etc/containers/containers.conf", engine("/b"))
    write(root / "etc/containers/containers.conf.d/10-x.conf", engine("/c"))
    write(root / "etc/containers/containers.conf.d/05-y.conf", engine("/d"))
    write(root / "etc/containers/containers.conf.d/20-z.toml", engine("/not-read"))
    write(root / "etc/containers/containers.conf.d/30-other.conf", "[containers]\nx = 1\n")
    reader = podman(root)
    assert reader.directories == ["/c"]
    assert reader.origin == f"hooks_dir in {root}/etc/containers/containers.conf.d/10-x.conf"
    assert reader.files == [
        f"{root}/usr/share/containers/containers.conf",
        f"{root}/etc/containers/containers.conf",
        f"{root}/etc/containers/containers.conf.d/05-y.conf",
        f"{root}/etc/containers/containers.conf.d/10-x.conf",
        f"{root}/etc/containers/containers.conf.d/30-other.conf",
    ]


def test_append_from_podman_4_8(root):
    write(root / "etc/containers/containers.conf", engine("/b"))
    write(root / "etc/containers/containers.conf.d/10.conf", engine("/c", append=True))
    assert podman(root, version=V48).directories == ["/b", "/c"]
    old = podman(root, version=V43)
    assert old.directories == ["/b"]
    assert old.problems == [
        f"{root}/etc/containers/containers.conf.d/10.conf: hooks_dir must hold strings before "
        "podman 4.8, not a table: podman runs no container until it is fixed"
    ]


def test_an_empty_list_reads_nothing_or_the_deprecated_pair(root):
    write(root / "etc/containers/containers.conf", "[engine]\nhooks_dir = []\n")
    assert podman(root, version=V43).directories == []
    assert podman(root, version=V50).directories == [DEFAULT_DIR, OVERRIDE_DIR]
    assert podman(root, uid=1000, version=V50).directories == []


def test_rootless_podman_reads_the_user_s_files(root, tmp_path):
    home = tmp_path / "home"
    write(root / "etc/containers/containers.conf", engine("/system"))
    write(home / ".config/containers/containers.conf", engine("/user"))
    write(home / ".config/containers/containers.conf.d/1.conf", engine("/user.d", append=True))
    assert podman(root, home, uid=1000, version=V48).directories == ["/user", "/user.d"]
    assert podman(root, home, uid=0, version=V43).directories == ["/system"]  # root: not before 5
    assert podman(root, home, uid=0, version=V50).directories == ["/user", "/user.d"]
    xdg = tmp_path / "xdg"
    write(xdg / "containers/containers.conf", engine("/xdg"))
    assert podman(root, home, uid=1000, XDG_CONFIG_HOME=str(xdg)).directories == ["/xdg"]


def test_rootless_system_files_from_podman_5_7(root, tmp_path):
    write(root / "etc/containers/containers.rootless.conf", engine("/rootless"))
    write(root / "etc/containers/containers.rootless.conf.d/1000/a.conf", engine("/u", append=True))
    write(root / "etc/containers/containers.rootless.conf.d/1001/a.conf", engine("/other"))
    assert podman(root, uid=1000, version=V57).directories == ["/rootless", "/u"]
    assert podman(root, uid=1000, version=V50).directories == [DEFAULT_DIR]
    assert podman(root, uid=0, version=V57).directories == [DEFAULT_DIR]


def test_containers_conf_replaces_every_file(root, tmp_path):
    write(root / "etc/containers/containers.conf", engine("/system"))
    only = write(tmp_path / "only.conf", engine("/only"))
    reader = podman(root, CONTAINERS_CONF=str(only))
    assert reader.directories == ["/only"] and reader.files == [str(only)]
    missing = podman(root, CONTAINERS_CONF=str(tmp_path / "missing.conf"))
    assert missing.problems == [
        f"{tmp_path}/missing.conf: does not exist: podman runs no container until it is fixed"
    ]


def test_containers_conf_override_comes_last_from_podman_4_5(root, tmp_path):
    write(root / "etc/containers/containers.conf", engine("/system"))
    override = write(tmp_path / "override.conf", engine("/override"))
    assert podman(root, version=(4, 5), CONTAINERS_CONF_OVERRIDE=str(override)).directories == [
        "/override"
    ]
    assert podman(root, version=V43, CONTAINERS_CONF_OVERRIDE=str(override)).directories == [
        "/system"
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "[engine\nhooks_dir = []\n",
            " line 1, column 8: expected ']' at the end of a table declaration",
        ),
        ('[engine]\nhooks_dir = "/x"\n', ": hooks_dir must be an array of strings, not a string"),
        ("[engine]\nhooks_dir = [1]\n", ": hooks_dir must hold strings, not a int"),
        ("engine = 1\n", ": engine must be a table, not a int"),
        ("[engine]\nhooks_dir = [{x = 1}]\n", ": hooks_dir: unsupported {x = ...} (only append)"),
    ],
)
def test_config_files_podman_cannot_read(root, text, problem):
    path = write(root / "etc/containers/containers.conf", text)
    reader = podman(root, version=V50)
    assert reader.problems == [f"{path}{problem}: podman runs no container until it is fixed"]
    assert reader.directories == [DEFAULT_DIR]


# --- CRI-O ---------------------------------------------------------------------------------


def crio_env(tmp_path: Path, **env) -> dict:
    return {
        "CONTAINER_CONFIG": str(tmp_path / "crio.conf"),
        "CONTAINER_CONFIG_DIR": str(tmp_path / "crio.conf.d"),
        **env,
    }


def runtime(*dirs: str) -> str:
    return "[crio.runtime]\nhooks_dir = [" + ", ".join(f'"{d}"' for d in dirs) + "]\n"


CRIO_CASES = {
    "defaults": {"crio.conf": "[crio]\n"},
    "main file": {"crio.conf": runtime("/main")},
    "drop-ins": {
        "crio.conf": runtime("/main"),
        "crio.conf.d/10-a.conf": runtime("/a1", "/a2"),
        "crio.conf.d/20-b": runtime("/b"),  # every file, not only *.conf
        "crio.conf.d/15-sub/zz.conf": runtime("/sub"),  # walked in lexical order
        "crio.conf.d/30-other.conf": "[crio.api]\nlisten = '/x.sock'\n",
    },
    "dotted keys": {"crio.conf": 'crio.runtime.hooks_dir = ["/dotted"]\n'},
    "empty list": {"crio.conf": runtime()},
}


def write_crio(tmp_path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        write(tmp_path / name, text)
    (tmp_path / "crio.conf.d").mkdir(exist_ok=True)


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("defaults", [DEFAULT_DIR]),
        ("main file", ["/main"]),
        ("drop-ins", ["/b"]),
        ("dotted keys", ["/dotted"]),
        ("empty list", []),
    ],
)
def test_crio_reads_crio_conf_then_every_drop_in(case, expected, tmp_path):
    write_crio(tmp_path, CRIO_CASES[case])
    assert hooksdirs.crio_reader(crio_env(tmp_path)).directories == expected


def test_crio_hooks_dir_from_the_environment(tmp_path):
    write_crio(tmp_path, CRIO_CASES["main file"])
    reader = hooksdirs.crio_reader(crio_env(tmp_path, CONTAINER_HOOKS_DIR="/e1,/e2"))
    assert reader.directories == ["/e1", "/e2"] and reader.origin == "CONTAINER_HOOKS_DIR"


def test_crio_config_files_it_cannot_read(tmp_path):
    write_crio(tmp_path, {"crio.conf": '[crio.runtime]\nhooks_dir = "/x"\n', "crio.conf.d/a": "["})
    reader = hooksdirs.crio_reader(crio_env(tmp_path))
    assert reader.problems == [
        f"{tmp_path}/crio.conf: hooks_dir must be an array of strings, not a string: CRI-O does "
        "not start until it is fixed",
        f"{tmp_path}/crio.conf.d/a: at the end of the file: invalid initial character for a key "
        "part: CRI-O does not start until it is fixed",
    ]


def crio_config(tmp_path: Path, env: dict) -> list[str]:
    """hooks_dir as `crio config` prints it: CRI-O's own merge of the same files."""
    found = crio_support.binaries()
    assert found, crio_support.unmet()
    result = subprocess.run(
        [found["crio"], "--config", env["CONTAINER_CONFIG"], "--config-dir"]
        + [env["CONTAINER_CONFIG_DIR"], "config"],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(tmp_path),
            **{k: v for k, v in env.items() if k == "CONTAINER_HOOKS_DIR"},
        },
    )
    assert result.returncode == 0, result.stderr[-2000:]
    from ocihook.check import tomlfile

    document = tomlfile.parse(result.stdout.encode(), "crio config")
    found, value = tomlfile.lookup(document, ("crio", "runtime", "hooks_dir"))
    if found:
        return value
    # crio config comments out a value that is CRI-O's default: "# hooks_dir = [" ... "# ]"
    lines = result.stdout.splitlines()
    start = lines.index("# hooks_dir = [")
    end = lines.index("# ]", start)
    block = "\n".join(line[2:] for line in lines[start : end + 1])
    return tomlfile.parse(block.encode(), "crio config")["hooks_dir"]


@pytest.mark.crio
@pytest.mark.parametrize("case", sorted(CRIO_CASES))
def test_crio_reader_agrees_with_crio_config(case, tmp_path):
    """CRI-O 1.37 itself (`crio config` prints the merged configuration and starts nothing)."""
    write_crio(tmp_path, CRIO_CASES[case])
    env = crio_env(tmp_path)
    assert hooksdirs.crio_reader(env).directories == crio_config(tmp_path, env)


@pytest.mark.crio
def test_crio_hooks_dir_environment_agrees_with_crio_config(tmp_path):
    write_crio(tmp_path, CRIO_CASES["drop-ins"])
    env = crio_env(tmp_path, CONTAINER_HOOKS_DIR="/e1,/e2")
    assert hooksdirs.crio_reader(env).directories == crio_config(tmp_path, env) == ["/e1", "/e2"]
