"""The Go versions whose regexp/syntax rules differ (goregexp/syntax.py's docstring says how)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    """The rules of one Go version's regexp/syntax."""

    name: str
    angle_named_groups: bool  # (?<name>re), Go 1.22
    tr18_names: bool  # \p{...} lookup by canonical name, Any/ASCII/Assigned/aliases, Go 1.25
    unicode_13: bool  # Go before 1.21: Unicode 13's script names


GO119 = Dialect("go1.19", angle_named_groups=False, tr18_names=False, unicode_13=True)
GO121 = Dialect("go1.21", angle_named_groups=False, tr18_names=False, unicode_13=False)
GO126 = Dialect("go1.26", angle_named_groups=True, tr18_names=True, unicode_13=False)
