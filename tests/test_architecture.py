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
import re
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
# Each package sits whole on one layer ("ocihook.x.*": every module in it); a top-level
# module is named alone.
LAYERS = {
    "base": (  # the operating system and the small shared types
        "ocihook",
        "ocihook.errors",
        "ocihook.structs",
        "ocihook.fastjson",
        "ocihook.globmatch",
        "ocihook.linux.*",
    ),
    "model": (  # data, file formats and the decisions on them
        "ocihook.request.*",
        "ocihook.config.*",
        "ocihook.selinux.*",
        "ocihook.ld.*",
        "ocihook.plan.*",
        "ocihook.records",
        "ocihook.cdi.*",
        "ocihook.audit.*",
    ),
    "discovery": (  # what the host has, read by fd in the roots, and the one pipeline
        "ocihook.discover.*",
        "ocihook.pipeline",
    ),
    "execution": (  # the privileged injection path: mounts, nodes, cgroups, ld cache
        "ocihook.apply.*",
        "ocihook.cgroups.*",
    ),
    "stages": (  # the hook the runtime runs, and its stages
        "ocihook.hook",
        "ocihook.stages.*",
    ),
    "services": (  # never on the hook's path: check, the device plugin, the metrics
        "ocihook.check.*",
        "ocihook.deviceplugin.*",
        "ocihook.metrics.*",
    ),
    "frontends": ("ocihook.cli.*",),  # every click command
}
EXECUTION = list(LAYERS).index("execution")


def _layer_of(module: str) -> int | None:
    """The rank of the most specific LAYERS name that covers `module`; None: none does."""
    best = None  # (length of the match, rank)
    for rank, names in enumerate(LAYERS.values()):
        for name in names:
            if name.endswith(".*"):
                covers = module.startswith(name[:-1])
            else:
                covers = module == name
            if covers and (best is None or len(name) > best[0]):
                best = (len(name), rank)
    return None if best is None else best[1]


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, typing: bool = False) -> dict[str, bool]:
    """The ocihook modules `name` imports -> whether at module level (eagerly); `typing`:
    with those imported for annotations only (under `if TYPE_CHECKING:`)."""
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
        if id(node) in typing_only and not typing:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:  # `from ocihook.linux import securepath`: a module
                full = f"{node.module}.{alias.name}"
                add(full if full in MODULES else node.module, node)
    return found


GRAPH = {name: _imports(name) for name in MODULES}
TYPED_GRAPH = {name: _imports(name, typing=True) for name in MODULES}
# Packages are empty (__init__.py holds at most a docstring): below everything.
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}
RANK = {name: 0 if name in PACKAGES else _layer_of(name) for name in MODULES}
PRIVILEGED = {name for name, rank in RANK.items() if rank == EXECUTION}
# The read-only commands' modules (ocihook.cli.commands also holds prestart/poststop, which
# import the hook inside their functions only).
READ_ONLY_MODULES = ("ocihook.cli.commands", "ocihook.cli.features", "ocihook.cli.cdi")


def test_every_module_has_a_layer():
    assert sorted(m for m, rank in RANK.items() if rank is None) == [], (
        "new module: give it a layer here and in the docs"
    )
    names = [n for names in LAYERS.values() for n in names]
    unused = [n for n in names if not any(RANK[m] is not None and _covers(n, m) for m in MODULES)]
    assert unused == [], "LAYERS names a module or package that is gone"


def _covers(name: str, module: str) -> bool:
    return module.startswith(name[:-1]) if name.endswith(".*") else module == name


def test_packages_are_empty():
    """A package's __init__.py holds at most a docstring: importing a stage's package costs
    nothing on the hook's path, and nothing hides there."""
    for name in PACKAGES:
        body = ast.parse(MODULES[name].read_text()).body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        if name == "ocihook":  # the version, the one place it is written
            body = [
                n
                for n in body
                if not (isinstance(n, ast.Assign) and n.targets[0].id == "__version__")
            ]
        assert body == [], name


def test_no_import_from_a_lower_layer_to_a_higher_one():
    upward = [
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if RANK[target] > RANK[name]
    ]
    assert upward == []


def test_no_import_cycle():
    """None at all: not through a function's import, not through annotations either."""
    state: dict[str, str] = {}
    cycles = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for target in sorted(TYPED_GRAPH[name]):
            if state.get(target) == "open":
                cycles.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in sorted(TYPED_GRAPH):
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
        "ocihook.cgroups.pinned",
        "ocihook.cgroups.dbuswire",
    }  # v2 hosts; systemd manager (over D-Bus); crun 1.23+ under systemd
    assert PRIVILEGED - lazy <= set(control)
    assert not lazy & set(control)


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


def _source_lines(predicate) -> dict[str, list[int]]:
    """Per module, the lines of the AST nodes `predicate` picks."""
    found = {}
    for name, path in MODULES.items():
        lines = [n.lineno for n in ast.walk(ast.parse(path.read_text())) if predicate(n)]
        if lines:
            found[name] = lines
    return found


def test_only_the_command_line_imports_click():
    def imports_click(node: ast.AST) -> bool:
        if isinstance(node, ast.Import):
            return any(a.name.split(".")[0] == "click" for a in node.names)
        return isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "click"

    found = _source_lines(imports_click)
    assert sorted(m for m in found if not m.startswith("ocihook.cli.")) == []
    assert "ocihook.cli.main" in found  # the check sees click where it is


def _calls(names: set[str]):
    def predicate(node: ast.AST) -> bool:
        if not isinstance(node, ast.Call):
            return False
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        return called in names

    return predicate


def test_one_pipeline():
    """Discovery, the decision and the finalizing are called in one place, the pipeline
    (ocihook/pipeline.py); cdi-hook carries out a spec's recorded decision
    (plan.decide.carried_decision), or asks the pipeline for a legacy spec's."""
    assert sorted(_source_lines(_calls({"build_plan"}))) == ["ocihook.pipeline"]
    assert sorted(_source_lines(_calls({"decide"}))) == ["ocihook.pipeline"]
    finalizing = sorted(_source_lines(_calls({"finalize"})))
    assert finalizing == ["ocihook.apply.inject", "ocihook.pipeline", "ocihook.stages.precreate"]
    # ... and those two finalize a pipeline.Planned, in the container's mount namespace.
    for name in ("ocihook.apply.inject", "ocihook.stages.precreate"):
        assert "ocihook.pipeline" in GRAPH[name], name


def test_one_ld_so_cache_parser():
    """The cache file's format (its magics, its tables) is known to ld/cachefile.py alone;
    the native writer and discovery read it through it."""

    def knows_the_format(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Constant)
            and isinstance(node.value, bytes)
            and (b"ld.so-1.7.0" in node.value or b"glibc-ld.so.cache" in node.value)
        )

    assert sorted(_source_lines(knows_the_format)) == ["ocihook.ld.cachefile"]
    # The entries' layouts (struct file_entry, file_entry_new): one parser reads them.
    entry_formats = {"=iII", "=iIIIQ"}

    def reads_entries(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in entry_formats

    assert sorted(_source_lines(reads_entries)) == ["ocihook.ld.cachefile"]


def test_fd_paths_come_from_fd_path():
    """A path naming an open fd (`/proc/self/fd/N`) is built by securepath.fd_path only."""

    def names_an_fd(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and ("/proc/self/fd/" in node.value)
        )

    assert sorted(_source_lines(names_an_fd)) == ["ocihook.linux.securepath"]


# -- packages as units --------------------------------------------------------------------

# Generated, not written by hand: a committed table (its generator is named in it) and the
# gRPC stubs `make stubs` writes (not committed: a fresh clone has none).
GENERATED_TABLES = {"ocihook.check.goregexp.tables"}  # scripts/re2data's output
GENERATED = GENERATED_TABLES | {
    "ocihook.deviceplugin.v1beta1.api_pb2",
    "ocihook.deviceplugin.v1beta1.api_pb2_grpc",
}
MAX_MODULE_LINES = 600


def _unit(module: str) -> str:
    """The package a module belongs to (`ocihook.apply.inject` -> `ocihook.apply`); a
    top-level module (`ocihook.hook`) is a unit of its own, the `ocihook` package too."""
    parts = module.split(".")
    if len(parts) >= 3 or (len(parts) == 2 and module in PACKAGES):
        return ".".join(parts[:2])
    return module


def test_no_two_packages_import_each_other():
    """Between packages the imports go one way (annotations and functions' imports too): a
    two-way tie means a piece lives in the wrong package."""
    ties = {
        (_unit(name), _unit(target))
        for name, targets in TYPED_GRAPH.items()
        for target in targets
        if _unit(name) != _unit(target)
    }
    assert sorted(f"{a} <-> {b}" for a, b in ties if a < b and (b, a) in ties) == []


def test_no_private_name_is_imported_from_another_package():
    """`from ocihook.x.y import _name` across packages reaches into another package's
    insides: a name that is shared is public (a dunder such as `__version__` is not private)."""
    found = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and not node.level):
                continue
            if not node.module.startswith("ocihook"):
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and full not in MODULES and _unit(node.module) != _unit(name):
                    found.append(f"{name}: from {node.module} import {alias.name}")
    assert found == []


def test_no_hand_written_module_is_over_600_lines():
    """A module over 600 lines holds more than one job; generated and ported tables aside."""
    long = {
        name: n
        for name, path in MODULES.items()
        if name not in GENERATED and (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
    assert GENERATED_TABLES <= set(MODULES), "GENERATED_TABLES names a module that is gone"


# -- docs/architecture.md against the code --------------------------------------------------

ARCHITECTURE = REPO / "docs" / "architecture.md"
_SPAN = re.compile(r"`([^`\n]+)`")
_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


def _page_names() -> list[str]:
    """The dotted names in code spans of the page that start with a package or a top-level
    module of ocihook (`plan.decide.finalize`, `apply.inject`, `Decision.in_image` is not)."""
    roots = {name.split(".")[1] for name in MODULES if name.count(".") >= 1}
    names = []
    for span in _SPAN.findall(ARCHITECTURE.read_text()):
        text = span.strip().rstrip("()")
        text = text[len("ocihook.") :] if text.startswith("ocihook.") else text
        if text.endswith((".py", ".json")):
            continue  # a file: test_every_path_the_architecture_page_gives_exists
        if _DOTTED.fullmatch(text) and text.split(".")[0] in roots:
            names.append(text)
    return names


def _config_key(dotted: str) -> bool:
    """Whether `dotted` is a key of the config (`request.allow`), by its JSON Schema."""
    node = json.loads((PACKAGE / "config" / "schema.json").read_text())
    for part in dotted.split("."):
        node = node.get("properties", {}).get(part)
        if node is None:
            return False
    return True


def _resolves(dotted: str) -> bool:
    """Whether `dotted` (below ocihook) is a module, or a module and names defined in it
    (read with ast: a function, a class and its attributes, a constant)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = "ocihook." + ".".join(parts[:cut])
        if module in MODULES:
            break
    else:
        return False
    rest = parts[cut:]
    if not rest:
        return True
    scope: list[ast.stmt] = ast.parse(MODULES[module].read_text()).body
    for name in rest:
        found = None
        for node in scope:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                found = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(getattr(t, "id", None) == name for t in targets):
                    found = node
            elif isinstance(node, ast.ImportFrom) and any(
                (a.asname or a.name) == name for a in node.names
            ):
                found = node
        if found is None:
            slots = [
                n
                for n in scope
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__slots__"
            ]
            return any(name in ast.literal_eval(n.value) for n in slots)
        scope = getattr(found, "body", [])
    return True


def test_every_name_the_architecture_page_gives_exists():
    """Every `package.module` and `module.name` in a code span of docs/architecture.md is a
    module of ocihook, or a function, class, field or constant defined in one."""
    names = _page_names()
    assert len(names) > 50  # the page names the code; an empty list would prove nothing
    wrong = {name for name in names if not (_resolves(name) or _config_key(name))}
    assert sorted(wrong) == []


def test_every_path_the_architecture_page_gives_exists():
    """Every file or directory the page names in a code span (`ocihook/pipeline.py`,
    `apply/inject.py`, `tests/golden/...`) is in the tree."""
    missing = []
    for span in _SPAN.findall(ARCHITECTURE.read_text()):
        if " " in span or "*" in span or "<" in span or not re.search(r"(\.py|\.json|/)$", span):
            continue
        if span.startswith(("/", "-", ".")) or "/" not in span:
            continue
        if not any((base / span).exists() for base in (REPO, PACKAGE)):
            missing.append(span)
    assert sorted(set(missing)) == []


def test_the_tree_names_every_module():
    """The page's tree has a row per package naming each of its modules (`module`), and a
    row for each top-level module."""
    text = ARCHITECTURE.read_text()
    tree = text[text.index("## The tree") : text.index("\n## ", text.index("## The tree") + 1)]
    rows = {}
    for line in tree.splitlines():
        cells = line.split("|")
        if len(cells) > 2 and cells[1].strip().startswith("`"):
            for where in _SPAN.findall(cells[1]):
                rows[where.strip().rstrip("/").removesuffix(".py")] = cells[2]
    missing = []
    for name in MODULES:
        parts = name.split(".")
        if name in GENERATED or parts[-1] == "__init__" or name == "ocihook":
            continue
        if name in PACKAGES:
            if parts[1] not in rows:
                missing.append(name)
            continue
        package = "/".join(parts[1:-1])
        if package and package in rows:
            if f"`{parts[-1]}`" not in rows[package]:
                missing.append(name)
        elif not package and parts[-1] not in rows:
            missing.append(name)
        elif package and package not in rows:
            top = parts[1]
            if top not in rows or f"`{parts[-1]}`" not in rows[top]:
                missing.append(name)
    assert sorted(missing) == []
