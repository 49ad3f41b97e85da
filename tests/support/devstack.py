"""Modules that only the development host's Python stack has (the `devstack` mark).

Debian's SELinux bindings (`selinux` with `audit2why`, `setools`, `sepolgen`) are built for
its /usr/bin/python3 (3.11), which the main venv sees (--system-site-packages), and
kubernetes-validate needs jsonschema >= 4: none of them imports under RHEL 9's Python stack
(make test-py39). A test that needs one carries `pytest.mark.devstack("module", ...)`; the
RHEL 9 tier deselects the mark, and elsewhere conftest skips it, naming the module, where
one does not import. Test modules import them with `module()`, so that collecting the file
works without them.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def module(name: str) -> ModuleType | None:
    """`name` imported, or None where it does not import here (or is only a namespace
    package: the checkout's selinux/ policy directory is one when `.` is on sys.path)."""
    try:
        found = importlib.import_module(name)
    except ImportError:
        return None
    return found if getattr(found, "__file__", None) else None


def missing(names: tuple[str, ...]) -> list[str]:
    """The names among `names` that do not import here."""
    return [name for name in names if module(name) is None]
