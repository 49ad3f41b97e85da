"""The `firmware` section: paths in the source root as `files` entries name them
(files.place) but for `target`, `writable` and `optional`, mounted at the same path in the
container; one that matches nothing is listed as unmatched, never an error."""

from __future__ import annotations

from ocihook.discover import files
from ocihook.discover.found import Found


def discover(found: Found) -> None:
    entries = [{"path": f} for f in found.parts["firmware"]]
    files.place(found, "firmware", entries, required=False)
