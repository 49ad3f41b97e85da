"""Go's unicode tables as regexp/syntax looks up a \\p{Name} class (goregexp/tables.py,
generated from Go, decoded on first use), per dialect, and the classes they make."""

from __future__ import annotations

from ocihook.check.goregexp.charclass import (
    append_class,
    append_negated_class,
    append_range,
    clean_class,
)
from ocihook.check.goregexp.dialect import Dialect
from ocihook.check.goregexp.runes import MAX_RUNE

# Scripts that Unicode 14 and 15 added (in Go 1.21's tables, not in Go 1.19's Unicode 13).
_UNICODE_14_15_SCRIPTS = frozenset(
    {"Cypro_Minoan", "Old_Uyghur", "Tangsa", "Toto", "Vithkuqi", "Kawi", "Nag_Mundari"}
)


class Table:
    """A unicode.RangeTable: R16 and R32 lists of (lo, hi, stride)."""

    __slots__ = ("r16", "r32")

    def __init__(self, r16: list, r32: list) -> None:
        self.r16 = r16
        self.r32 = r32


def _decode_table(text: str) -> Table:
    halves = text.split("|")
    prev = 0
    out = []
    for half in halves:
        ranges = []
        for token in half.split():
            stride = 1
            if "/" in token:
                token, s = token.split("/")
                stride = int(s, 36)
            if ":" in token:
                gap, span = token.split(":")
            else:
                gap, span = token, "0"
            lo = prev + int(gap, 36)
            hi = lo + int(span, 36)
            ranges.append((lo, hi, stride))
            prev = hi
        out.append(ranges)
    return Table(out[0], out[1] if len(out) > 1 else [])


class _Unicode:
    """Go's unicode tables as regexp/syntax looks them up, decoded once."""

    _instance: _Unicode | None = None

    def __init__(self) -> None:
        from ocihook.check.goregexp import tables

        self.categories = {k: _decode_table(v) for k, v in tables.CATEGORY_TABLES.items()}
        self.scripts = {k: _decode_table(v) for k, v in tables.SCRIPT_TABLES.items()}
        self.fold_category = {k: _decode_table(v) for k, v in tables.FOLD_CATEGORY.items()}
        self.fold_script = {k: _decode_table(v) for k, v in tables.FOLD_SCRIPT.items()}
        self.aliases = {}
        for pair in getattr(tables, "CATEGORY_ALIASES", "").split():
            name, actual = pair.split("=")
            self.aliases[_canonical_name(name)] = actual
        # Before Go 1.25, C was Cc|Cf|Co|Cs (Go 1.25 added Cn to it) and there was no Cn or
        # LC table to name. The union is taken as one range list (contents only count for
        # the 33 M rune limit).
        merged: list[int] = []
        for name in ("Cc", "Cf", "Co", "Cs"):
            merged = _append_table(merged, self.categories[name])
        merged = clean_class(merged)
        pairs = [(merged[i], merged[i + 1], 1) for i in range(0, len(merged), 2)]
        self.c_before_go125 = Table(
            [p for p in pairs if p[1] <= 0xFFFF], [p for p in pairs if p[1] > 0xFFFF]
        )

    @classmethod
    def get(cls) -> _Unicode:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance


_ANY = Table([(0, 0xFFFF, 1)], [(0x10000, MAX_RUNE, 1)])
_ASCII = Table([(0, 0x7F, 1)], [])
_ASCII_FOLD = Table([(0, 0x7F, 1), (0x17F, 0x17F, 1), (0x212A, 0x212A, 1)], [])


def _canonical_name(name: str) -> str:
    """Go 1.25's canonicalName: first letter upper, the rest lower, no _ - or space."""
    out = []
    first = True
    for c in name:
        if c in "_- ":
            continue
        if first:
            if "a" <= c <= "z":
                c = c.upper()
            first = False
        elif "A" <= c <= "Z":
            c = c.lower()
        out.append(c)
    return "".join(out)


def unicode_table(name: str, dialect: Dialect) -> tuple[Table | None, Table | None, int]:
    """regexp/syntax's unicodeTable: (table, fold table, sign) or (None, None, 0)."""
    data = _Unicode.get()
    if not dialect.tr18_names:
        if name == "Any":
            return _ANY, _ANY, 1
        if name == "C":
            return data.c_before_go125, data.fold_category.get("C"), 1
        if name in data.categories and name not in ("Cn", "LC"):
            return data.categories[name], data.fold_category.get(name), 1
        if name in data.scripts and not (dialect.unicode_13 and name in _UNICODE_14_15_SCRIPTS):
            return data.scripts[name], data.fold_script.get(name), 1
        return None, None, 0
    name = _canonical_name(name)
    if name == "Any":
        return _ANY, _ANY, 1
    if name == "Assigned":
        return data.categories["Cn"], data.categories["Cn"], -1
    if name == "Ascii":
        return _ASCII, _ASCII_FOLD, 1
    if name == "Lc":
        return data.categories["LC"], data.fold_category.get("LC"), 1
    if name in data.categories:
        return data.categories[name], data.fold_category.get(name), 1
    if name in data.scripts:
        return data.scripts[name], data.fold_script.get(name), 1
    actual = data.aliases.get(name)
    if actual:
        return data.categories[actual], data.fold_category.get(actual), 1
    return None, None, 0


def _append_table(r: list[int], table: Table) -> list[int]:
    for ranges in (table.r16, table.r32):
        for lo, hi, stride in ranges:
            if stride == 1:
                r = append_range(r, lo, hi)
                continue
            for c in range(lo, hi + 1, stride):
                r = append_range(r, c, c)
    return r


def _append_negated_table(r: list[int], table: Table) -> list[int]:
    next_lo = 0
    for ranges in (table.r16, table.r32):
        for lo, hi, stride in ranges:
            if stride == 1:
                if next_lo <= lo - 1:
                    r = append_range(r, next_lo, lo - 1)
                next_lo = hi + 1
                continue
            for c in range(lo, hi + 1, stride):
                if next_lo <= c - 1:
                    r = append_range(r, next_lo, c - 1)
                next_lo = c + 1
    if next_lo <= MAX_RUNE:
        r = append_range(r, next_lo, MAX_RUNE)
    return r


def append_unicode(r: list[int], table: Table, fold: Table | None, sign: int) -> list[int]:
    """Append a \\p class (its fold table too under (?i), where it has one) to r."""
    if fold is None:
        return _append_table(r, table) if sign > 0 else _append_negated_table(r, table)
    tmp = clean_class(_append_table(_append_table([], table), fold))
    return append_class(r, tmp) if sign > 0 else append_negated_class(r, tmp)


# (table, fold table, sign) -> the runes of a \p class standing alone: made once each.
UNICODE_CLASSES: dict[tuple, tuple] = {}
