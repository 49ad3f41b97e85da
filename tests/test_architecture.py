"""The package's shape, as docs/architecture.md states it: no import cycle, no import from a
lower layer to a higher one, the read-only commands (`plan`, `check`, `features`, `cdi
generate`) never import the privileged injection path, and kinds of injected file are read
from their one table (kinds.py), never compared as bare strings.

Static checks read every `import` of ocihook/ with `ast` (inside functions too; imports
under `if TYPE_CHECKING:` are annotations only and never run). The runtime check runs each
read-only command in a fresh interpreter and lists the modules it imported."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ocihook.plan.kinds import KINDS
from tests.support import synthetic

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "ocihook"

# Lowest first; a module may import its own layer and the layers below (docs/architecture.md).
LAYERS = {
    "base": {
        "ocihook",
        "ocihook.linux.atomic",
        "ocihook.audit",
        "ocihook.cgroups.dbuswire",
        "ocihook.cdi",
        "ocihook.request.names",
        "ocihook.plan.devrules",
        "ocihook.ld.elf",
        "ocihook.errors",
        "ocihook.fastjson",
        "ocihook.check.findings",
        "ocihook.check.hooksd",
        "ocihook.plan.kinds",
        "ocihook.linux.syscalls",
        "ocihook.linux.mountinfo",
        "ocihook.linux.privileges",
        "ocihook.check.goregexp.tables",
        "ocihook.check.goregexp.syntax",
        "ocihook.config.schemaerrors",
        "ocihook.linux.securepath",
        "ocihook.selinux",
        "ocihook.selinux.access",
        "ocihook.selinux.label",
        "ocihook.selinux.names",
        "ocihook.structs",
        "ocihook.linux.trusted",
        "ocihook.check.tomlread",
    },
    "model": {  # plain data, pure decisions and formatting
        "ocihook.audit.explain",
        "ocihook.audit.names",
        "ocihook.audit.parse",
        "ocihook.audit.policy",
        "ocihook.audit.records",
        "ocihook.audit.report",
        "ocihook.cdi.spec",
        "ocihook.config.compiled",
        "ocihook.plan.cuda",
        "ocihook.request.imex",
        "ocihook.plan.model",
        "ocihook.plan.text",
        "ocihook.records",
        "ocihook.request.parse",
        "ocihook.request.rootless",
        "ocihook.selinux.relabel",
        "ocihook.selinux.status",
        "ocihook.request.state",
        "ocihook.plan.decide",
    },
    "discovery": {  # reads the host by fd, changes nothing
        "ocihook.discover.devices",
        "ocihook.discover.build",
        "ocihook.discover.binaries",
        "ocihook.discover.devicenodes",
        "ocihook.discover.files",
        "ocihook.discover.firmware",
        "ocihook.discover.found",
        "ocihook.discover.libraries",
        "ocihook.discover.gpudirect",
        "ocihook.check.hooksdirs",
        "ocihook.discover.imex",
        "ocihook.ld.cachefile",
        "ocihook.ld.conf",
        "ocihook.discover.nvidia",
        "ocihook.discover.nvml",
        "ocihook.discover.procdevices",
        "ocihook.apply.owned",
        "ocihook.check.registration",
        "ocihook.discover.roots",
        "ocihook.check.routes",
    },
    "execution": {  # the privileged injection path: mounts, nodes, cgroups, ld cache
        "ocihook.apply.execute",
        "ocihook.cgroups.bpf",
        "ocihook.cgroups.v2",
        "ocihook.cgroups.grant",
        "ocihook.apply.inject",
        "ocihook.apply.ldcache",
        "ocihook.ld.native",
        "ocihook.cgroups.systemd",
    },
    "frontends": {  # the hook and the commands
        "ocihook.cli.audit",
        "ocihook.cli.cdi",
        "ocihook.cdi.hooks",
        "ocihook.cli.main",
        "ocihook.cli.commands",
        "ocihook.cli.completion",
        "ocihook.cli.features",
        "ocihook.hook",
        "ocihook.cli.output",
        "ocihook.apply.precreate",
        "ocihook.cli.selinux",
    },
}
RANK = {module: rank for rank, group in enumerate(LAYERS.values()) for module in group}
# Packages of stages: empty __init__ files, below everything.
PACKAGES = {
    ".".join(p.relative_to(REPO).parent.parts)
    for p in PACKAGE.rglob("__init__.py")
    if not p.read_text().strip()
}
RANK.update(dict.fromkeys(PACKAGES, 0))
PRIVILEGED = LAYERS["execution"]
# The read-only commands' modules (ocihook.cli.commands also holds prestart/poststop, which
# import the hook inside their functions only).
READ_ONLY_MODULES = ("ocihook.cli.commands", "ocihook.cli.features", "ocihook.cli.cdi")


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str) -> dict[str, bool]:
    """The ocihook modules `name` imports -> whether at module level (eagerly)."""
    tree = ast.parse(MODULES[name].read_text())
    typing_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    eager_nodes = {id(n) for n in tree.body}
    found: dict[str, bool] = {}

    def add(module: str, node: ast.AST) -> None:
        if module in MODULES and module != name:
            found[module] = found.get(module, False) or id(node) in eager_nodes

    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:  # `from ocihook import apply` imports ocihook.apply.execute
                full = f"{node.module}.{alias.name}"
                add(full if full in MODULES else node.module, node)
    return found


GRAPH = {name: _imports(name) for name in MODULES}


def test_every_module_has_a_layer():
    assert sorted(set(MODULES) - set(RANK)) == [], (
        "new module: give it a layer here and in the docs"
    )
    assert sorted(set(RANK) - set(MODULES)) == []


def test_no_import_from_a_lower_layer_to_a_higher_one():
    upward = [
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if RANK[target] > RANK[name]
    ]
    assert upward == []


def test_no_import_cycle():
    state: dict[str, str] = {}
    cycles = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for target in sorted(GRAPH[name]):
            if state.get(target) == "open":
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_read_only_command_modules_import_nothing_privileged_eagerly():
    """What importing the read-only commands' modules pulls in, statically (the eager
    closure), and in a fresh interpreter (sys.modules)."""
    seen, todo = set(), list(READ_ONLY_MODULES)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += [t for t, eager in GRAPH[name].items() if eager]
    assert sorted(seen & PRIVILEGED) == []
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(READ_ONLY_MODULES)!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
        ).stdout
    )
    assert sorted(set(loaded) & PRIVILEGED) == []


DRIVER = r"""
import json, sys
from ocihook.cli.main import cli
out, args = sys.argv[1], sys.argv[2:]
try:
    cli.main(args=args, prog_name="ocihook", standalone_mode=False)
except SystemExit:
    pass
with open(out, "w") as f:
    json.dump(sorted(m for m in sys.modules if m.startswith("ocihook")), f)
"""


@pytest.mark.root
def test_read_only_commands_never_import_the_injection_path(synth_root, tmp_path):
    """Each read-only command, run to its end against the synthetic driver in a fresh
    interpreter: none of the execution layer's modules is imported (the injection path
    itself is, as a control)."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(synthetic.config(synth_root, tmp_path)))
    image = tmp_path / "image"
    (image / "usr/lib64").mkdir(parents=True)
    hooks = tmp_path / "hooks.d"
    hooks.mkdir()
    c = ["--config", str(config)]
    commands = {
        "plan": ["plan", *c],
        "plan --json --rootfs": ["plan", *c, "--json", "--rootfs", str(image)],
        "check": ["check", *c, "--hooks-dir", str(hooks)],
        "features": ["features", *c, "--output", "-", "--hooks-dir", str(hooks)],
        "cdi generate": ["cdi", "generate", *c, "--hook-path", "/usr/bin/ocihook"],
    }
    for what, args in commands.items():
        out = tmp_path / "modules.json"
        result = subprocess.run(
            [sys.executable, "-c", DRIVER, str(out), *args],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
        )
        loaded = set(json.loads(out.read_text()))
        assert "ocihook.discover.build" in loaded, (what, result.stderr)  # it did plan something
        assert sorted(loaded & PRIVILEGED) == [], what
    code = (
        "import json, sys, ocihook.hook, ocihook.apply.inject; print(json.dumps(list(sys.modules)))"
    )
    control = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, check=True).stdout
    )
    lazy = {
        "ocihook.cgroups.v2",
        "ocihook.cgroups.bpf",
        "ocihook.cgroups.systemd",
    }  # v2 hosts; systemd manager
    assert PRIVILEGED - lazy <= set(control)
    assert not lazy & set(control) and "ocihook.cgroups.dbuswire" not in control


def _kind_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing something's `.kind` with a kind's name as a string literal."""
    names = set(KINDS)
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        has_kind = any(isinstance(o, ast.Attribute) and o.attr == "kind" for o in operands)
        literals = [
            c.value
            for o in operands
            for c in ([o] if isinstance(o, ast.Constant) else getattr(o, "elts", []))
            if isinstance(c, ast.Constant)
        ]
        if has_kind and names & set(literals):
            lines.append(node.lineno)
    return lines


def test_kinds_are_read_from_their_table():
    """No module decides by a kind's name (`m.kind == "library"`): what a kind means is a
    column of kinds.KINDS (flags, file types, lib dir, label rule, words)."""
    found = {
        name: lines
        for name, path in MODULES.items()
        if name != "ocihook.plan.kinds"
        and (lines := _kind_comparisons(ast.parse(path.read_text())))
    }
    assert found == {}


def test_every_kind_has_every_column():
    for kind in KINDS.values():
        assert kind.source in {"file", "sock", "dir"}
        assert kind.source in kind.mount_points or kind.source == "sock"
        assert kind.lib_dir in (None, "lib_dir", "lib_dir32")
        assert kind.sections and kind.label and kind.shown and kind.audit
        assert kind.flags()[0] == "ro" and kind.flags(True)[0] == "rw"
        assert ("noexec" in kind.flags()) is not kind.executable
