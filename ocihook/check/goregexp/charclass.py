"""Character classes as regexp/syntax keeps them: flat lists of lo, hi pairs (Go's []rune),
and the arithmetic on them; the Perl (\\d \\s \\w) and POSIX ([:alpha:]) groups."""

from __future__ import annotations

from ocihook.check.goregexp.runes import MAX_FOLD, MAX_RUNE, MIN_FOLD, simple_fold


def append_range(r: list[int], lo: int, hi: int) -> list[int]:
    n = len(r)
    for i in (2, 4):
        if n >= i:
            rlo, rhi = r[n - i], r[n - i + 1]
            if lo <= rhi + 1 and rlo <= hi + 1:
                if lo < rlo:
                    r[n - i] = lo
                if hi > rhi:
                    r[n - i + 1] = hi
                return r
    r.append(lo)
    r.append(hi)
    return r


def append_folded_range(r: list[int], lo: int, hi: int) -> list[int]:
    if lo <= MIN_FOLD and hi >= MAX_FOLD:
        return append_range(r, lo, hi)
    if hi < MIN_FOLD or lo > MAX_FOLD:
        return append_range(r, lo, hi)
    if lo < MIN_FOLD:
        r = append_range(r, lo, MIN_FOLD - 1)
        lo = MIN_FOLD
    if hi > MAX_FOLD:
        r = append_range(r, MAX_FOLD + 1, hi)
        hi = MAX_FOLD
    for c in range(lo, hi + 1):
        r = append_range(r, c, c)
        f = simple_fold(c)
        while f != c:
            r = append_range(r, f, f)
            f = simple_fold(f)
    return r


def append_class(r: list[int], x: list[int]) -> list[int]:
    for i in range(0, len(x), 2):
        r = append_range(r, x[i], x[i + 1])
    return r


def append_folded_class(r: list[int], x: list[int]) -> list[int]:
    for i in range(0, len(x), 2):
        r = append_folded_range(r, x[i], x[i + 1])
    return r


def append_negated_class(r: list[int], x: list[int]) -> list[int]:
    next_lo = 0
    for i in range(0, len(x), 2):
        lo, hi = x[i], x[i + 1]
        if next_lo <= lo - 1:
            r = append_range(r, next_lo, lo - 1)
        next_lo = hi + 1
    if next_lo <= MAX_RUNE:
        r = append_range(r, next_lo, MAX_RUNE)
    return r


def clean_class(r: list[int]) -> list[int]:
    """Sort the ranges (lo up, hi down), merge abutting and overlapping ones."""
    pairs = sorted(((r[i], r[i + 1]) for i in range(0, len(r), 2)), key=lambda p: (p[0], -p[1]))
    if not pairs:
        return []
    out = [pairs[0][0], pairs[0][1]]
    for lo, hi in pairs[1:]:
        if lo <= out[-1] + 1:
            if hi > out[-1]:
                out[-1] = hi
            continue
        out.append(lo)
        out.append(hi)
    return out


def negate_class(r: list[int]) -> list[int]:
    out = []
    next_lo = 0
    for i in range(0, len(r), 2):
        lo, hi = r[i], r[i + 1]
        if next_lo <= lo - 1:
            out.append(next_lo)
            out.append(lo - 1)
        next_lo = hi + 1
    if next_lo <= MAX_RUNE:
        out.append(next_lo)
        out.append(MAX_RUNE)
    return out


PERL_GROUPS = {
    "\\d": (1, [0x30, 0x39]),
    "\\D": (-1, [0x30, 0x39]),
    "\\s": (1, [0x9, 0xA, 0xC, 0xD, 0x20, 0x20]),
    "\\S": (-1, [0x9, 0xA, 0xC, 0xD, 0x20, 0x20]),
    "\\w": (1, [0x30, 0x39, 0x41, 0x5A, 0x5F, 0x5F, 0x61, 0x7A]),
    "\\W": (-1, [0x30, 0x39, 0x41, 0x5A, 0x5F, 0x5F, 0x61, 0x7A]),
}

_POSIX = {
    "alnum": [0x30, 0x39, 0x41, 0x5A, 0x61, 0x7A],
    "alpha": [0x41, 0x5A, 0x61, 0x7A],
    "ascii": [0x0, 0x7F],
    "blank": [0x9, 0x9, 0x20, 0x20],
    "cntrl": [0x0, 0x1F, 0x7F, 0x7F],
    "digit": [0x30, 0x39],
    "graph": [0x21, 0x7E],
    "lower": [0x61, 0x7A],
    "print": [0x20, 0x7E],
    "punct": [0x21, 0x2F, 0x3A, 0x40, 0x5B, 0x60, 0x7B, 0x7E],
    "space": [0x9, 0xD, 0x20, 0x20],
    "upper": [0x41, 0x5A],
    "word": [0x30, 0x39, 0x41, 0x5A, 0x5F, 0x5F, 0x61, 0x7A],
    "xdigit": [0x30, 0x39, 0x41, 0x46, 0x61, 0x66],
}
POSIX_GROUPS = {f"[:{k}:]": (1, v) for k, v in _POSIX.items()}
POSIX_GROUPS.update({f"[:^{k}:]": (-1, v) for k, v in _POSIX.items()})
