"""Write the hook executable (packaging/ocihook-hook) for one Python interpreter.

    python3 packaging/hook_executable.py OUTPUT [--python PY] [--package-dir DIR]

The hook runs as `PY -IS`: without the `site` module, so the directories `site` would add
for PY (asked from PY itself: its sys.path with and without `site`) are written into the
executable, after DIR (where the ocihook package was installed) when given; should the
package not be found there, the hook falls back to `site`. Used by
`make install`, the RPM spec, the bench and the tests.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "ocihook-hook"
SHEBANG = "#!/usr/bin/python3 -IS"
PLACEHOLDER = "SITE_DIRS: list[str] = []"


def _ask(python: str, flags: str, code: str):
    out = subprocess.run(
        [python, flags, "-c", f"import site, sys; print(repr({code}))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return ast.literal_eval(out)


def site_dirs(python: str) -> list[str]:
    """The directories `site` adds to `python -I`'s sys.path (its site-packages and what their
    .pth files add), in its order, then the site-packages it would add if they existed."""
    bare = set(_ask(python, "-IS", "sys.path"))
    full, candidates = _ask(python, "-I", "[sys.path, site.getsitepackages()]")
    return [p for p in full if p not in bare] + [p for p in candidates if p not in full]


def render(python: str, dirs: list[str], template: str | None = None) -> str:
    text = TEMPLATE.read_text() if template is None else template
    first, rest = text.split("\n", 1)
    if first != SHEBANG or rest.count(PLACEHOLDER) != 1:
        raise SystemExit(f"{TEMPLATE}: not the expected template")
    unique = list(dict.fromkeys(dirs))
    return f"#!{python} -IS\n" + rest.replace(PLACEHOLDER, f"SITE_DIRS: list[str] = {unique!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--python", default="/usr/bin/python3", help="the hook's interpreter")
    parser.add_argument("--package-dir", help="where the ocihook package is installed")
    args = parser.parse_args(argv)
    dirs = ([args.package_dir] if args.package_dir else []) + site_dirs(args.python)
    tmp = args.output.with_name(f".{args.output.name}.tmp")
    tmp.write_text(render(args.python, dirs))
    tmp.chmod(0o755)
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
