"""Go's unicode package as regexp/syntax uses it for case folding: MaxRune, SimpleFold (the
case-folding orbits of goregexp/tables.py, decoded on first use) and the parser's
minFoldRune."""

from __future__ import annotations

MAX_RUNE = 0x10FFFF
MIN_FOLD, MAX_FOLD = 0x41, 0x1E943  # the runes that fold to others lie in between

_ORBITS: dict[int, int] = {}  # rune -> the next rune of its orbit, filled on first use


def _fold() -> dict[int, int]:
    if not _ORBITS:
        from ocihook.check.goregexp import tables

        for orbit in tables.ORBITS.split():
            runes = []
            prev = 0
            for gap in orbit.split(":"):
                prev += int(gap, 36)
                runes.append(prev)
            for i, r in enumerate(runes):
                _ORBITS[r] = runes[(i + 1) % len(runes)]
    return _ORBITS


def simple_fold(r: int) -> int:
    """Go's unicode.SimpleFold: the next rune of r's case-folding orbit."""
    if r < 0 or r > MAX_RUNE:
        return r
    if 0x41 <= r <= 0x5A:
        return r + 32
    if 0x61 <= r <= 0x7A:
        # k and s have three-rune orbits (K, k, Kelvin sign; S, s, long s)
        return {0x6B: 0x212A, 0x73: 0x17F}.get(r, r - 32)
    if r < 0x80:
        return r
    return _fold().get(r, r)


def min_fold_rune(r: int) -> int:
    if r < MIN_FOLD or r > MAX_FOLD:
        return r
    m = r
    r0 = r
    r = simple_fold(r)
    while r != r0:
        m = min(m, r)
        r = simple_fold(r)
    return m
