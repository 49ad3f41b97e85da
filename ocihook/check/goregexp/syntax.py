"""Go's regexp syntax (RE2, as `regexp.Compile` parses it), checked in Python.

podman and CRI-O compile a hooks.d file's `when.annotations` keys and values and its
`when.commands` with Go's `regexp.Compile`, which is `regexp/syntax.Parse(expr, Perl)`: the
runtime rejects the file (and so every container) when one pattern fails. Python's `re` is
another language (lookaround and backreferences pass it; `\\pL`, `\\z` and `(?P<n>)` of RE2
differ), so `ocihook check` runs this module instead: a port of Go's parser, node for node,
free list and size bookkeeping included, so that it fails exactly where Go fails, with Go's
error code and Go's offending text, including the limits (repeat counts over 1000 or nested
past 1000 copies, nesting over 1000 deep, programs over 3.3 M instructions, 33 M runes of
character classes).

Go's parser changed twice in ways that matter, so the check names a dialect:

- `GO119` podman 4.3 as Debian 12 builds it (go1.19.8), and any Go before 1.21: go1.21's
  parser with the Unicode 13 script names (Go 1.21 moved to Unicode 15, which added seven).
- `GO121` go1.21: `(?<name>re)` is an error (only `(?P<name>re)` names a group), and a
  `\\p{Name}` must be a category or script name exactly as Go spells it.
- `GO126` go1.22 added `(?<name>re)`; go1.25 looks names up the way Unicode TR18 says
  (case, spaces, underscores and hyphens ignored; `Any`, `ASCII`, `Assigned`, `Cn`, `LC` and
  aliases such as `Letter`), which also makes the script names that contain an underscore
  (`Old_Italic`) unknown there (go1.27 accepts them again). CRI-O 1.37 as built here is
  go1.26.6.

GO121 and GO126 are differential-tested against those Go toolchains (tests/test_goregexp_syntax.py).
Only `ocihook check` imports this module, never the hook.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

# Ops, in Go's order (the order matters: the parser compares them).
NO_MATCH, EMPTY_MATCH, LITERAL, CHAR_CLASS, ANY_CHAR_NOT_NL, ANY_CHAR = range(1, 7)
BEGIN_LINE, END_LINE, BEGIN_TEXT, END_TEXT, WORD_BOUNDARY, NO_WORD_BOUNDARY = range(7, 13)
CAPTURE, STAR, PLUS, QUEST, REPEAT, CONCAT, ALTERNATE = range(13, 20)
PSEUDO = 128
LEFT_PAREN, VERTICAL_BAR = PSEUDO, PSEUDO + 1

# Flags (regexp/syntax.Flags).
FOLD_CASE, LITERAL_FLAG, CLASS_NL, DOT_NL, ONE_LINE, NON_GREEDY = 1, 2, 4, 8, 16, 32
PERL_X, UNICODE_GROUPS, WAS_DOLLAR = 64, 128, 256
PERL = CLASS_NL | ONE_LINE | PERL_X | UNICODE_GROUPS

MAX_HEIGHT = 1000
MAX_SIZE = (128 << 20) // 40
MAX_RUNES = (128 << 20) // 4
MAX_RUNE = 0x10FFFF
MIN_FOLD, MAX_FOLD = 0x41, 0x1E943
_MASK32 = 0xFFFF  # Flags is a uint16

ERR_INVALID_CHAR_RANGE = "invalid character class range"
ERR_INVALID_ESCAPE = "invalid escape sequence"
ERR_INVALID_NAMED_CAPTURE = "invalid named capture"
ERR_INVALID_PERL_OP = "invalid or unsupported Perl syntax"
ERR_INVALID_REPEAT_OP = "invalid nested repetition operator"
ERR_INVALID_REPEAT_SIZE = "invalid repeat count"
ERR_INVALID_UTF8 = "invalid UTF-8"
ERR_MISSING_BRACKET = "missing closing ]"
ERR_MISSING_PAREN = "missing closing )"
ERR_MISSING_REPEAT_ARGUMENT = "missing argument to repetition operator"
ERR_TRAILING_BACKSLASH = "trailing backslash at end of expression"
ERR_UNEXPECTED_PAREN = "unexpected )"
ERR_NESTING_DEPTH = "expression nests too deeply"
ERR_LARGE = "expression too large"

# Scripts that Unicode 14 and 15 added (in Go 1.21's tables, not in Go 1.19's Unicode 13).
_UNICODE_14_15_SCRIPTS = frozenset(
    {"Cypro_Minoan", "Old_Uyghur", "Tangsa", "Toto", "Vithkuqi", "Kawi", "Nag_Mundari"}
)


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


class Error(Exception):
    """A pattern Go's regexp.Compile rejects: Go's error code and the text it quotes."""

    def __init__(self, code: str, expr: str) -> None:
        super().__init__(f"{code}: `{expr}`")
        self.code = code
        self.expr = expr


class _Panic(Exception):
    """Go's panic(ErrLarge) / panic(ErrNestingDepth) inside the parser."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def check(pattern: str | bytes, dialect: Dialect = GO126) -> Error | None:
    """Why Go's regexp.Compile(pattern) fails under `dialect`, or None when it compiles.

    A str is the decoded JSON string (surrogates, which Go's JSON decoder turns into U+FFFD,
    are taken as U+FFFD); bytes are Go's string as is (invalid UTF-8 included)."""
    if isinstance(pattern, bytes):
        text = pattern.decode("utf-8", "surrogateescape")
    else:
        text = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in pattern)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 8 * MAX_HEIGHT))  # trees up to Go's height limit
    try:
        _Parser(text, dialect).parse()
    except Error as error:
        return error
    finally:
        sys.setrecursionlimit(limit)
    return None


def expr_bytes(error: Error) -> bytes:
    """The offending text of an error as Go's bytes (invalid UTF-8 restored)."""
    return error.expr.encode("utf-8", "surrogateescape")


def _invalid(c: str) -> bool:
    """Whether c stands for a byte that is not valid UTF-8 (surrogateescape)."""
    return "\udc80" <= c <= "\udcff"


# --- Unicode data (goregexp/tables.py, generated from Go), decoded on first use ---------


class _Table:
    """A unicode.RangeTable: R16 and R32 lists of (lo, hi, stride)."""

    __slots__ = ("r16", "r32")

    def __init__(self, r16: list, r32: list) -> None:
        self.r16 = r16
        self.r32 = r32


def _decode_table(text: str) -> _Table:
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
    return _Table(out[0], out[1] if len(out) > 1 else [])


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
        self.fold: dict[int, int] = {}
        for orbit in tables.ORBITS.split():
            runes = []
            prev = 0
            for gap in orbit.split(":"):
                prev += int(gap, 36)
                runes.append(prev)
            for i, r in enumerate(runes):
                self.fold[r] = runes[(i + 1) % len(runes)]
        # Before Go 1.25, C was Cc|Cf|Co|Cs (Go 1.25 added Cn to it) and there was no Cn or
        # LC table to name. The union is taken as one range list (contents only count for
        # the 33 M rune limit).
        merged: list[int] = []
        for name in ("Cc", "Cf", "Co", "Cs"):
            merged = _append_table(merged, self.categories[name])
        merged = _clean_class(merged)
        pairs = [(merged[i], merged[i + 1], 1) for i in range(0, len(merged), 2)]
        self.c_before_go125 = _Table(
            [p for p in pairs if p[1] <= 0xFFFF], [p for p in pairs if p[1] > 0xFFFF]
        )

    @classmethod
    def get(cls) -> _Unicode:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance


_ANY = _Table([(0, 0xFFFF, 1)], [(0x10000, MAX_RUNE, 1)])
_ASCII = _Table([(0, 0x7F, 1)], [])
_ASCII_FOLD = _Table([(0, 0x7F, 1), (0x17F, 0x17F, 1), (0x212A, 0x212A, 1)], [])


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
    return _Unicode.get().fold.get(r, r)


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


def _unicode_table(name: str, dialect: Dialect) -> tuple[_Table | None, _Table | None, int]:
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


# --- Character classes (flat lists of lo, hi pairs, as Go's []rune) -----------------------


def _append_range(r: list[int], lo: int, hi: int) -> list[int]:
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


def _append_folded_range(r: list[int], lo: int, hi: int) -> list[int]:
    if lo <= MIN_FOLD and hi >= MAX_FOLD:
        return _append_range(r, lo, hi)
    if hi < MIN_FOLD or lo > MAX_FOLD:
        return _append_range(r, lo, hi)
    if lo < MIN_FOLD:
        r = _append_range(r, lo, MIN_FOLD - 1)
        lo = MIN_FOLD
    if hi > MAX_FOLD:
        r = _append_range(r, MAX_FOLD + 1, hi)
        hi = MAX_FOLD
    for c in range(lo, hi + 1):
        r = _append_range(r, c, c)
        f = simple_fold(c)
        while f != c:
            r = _append_range(r, f, f)
            f = simple_fold(f)
    return r


def _append_class(r: list[int], x: list[int]) -> list[int]:
    for i in range(0, len(x), 2):
        r = _append_range(r, x[i], x[i + 1])
    return r


def _append_folded_class(r: list[int], x: list[int]) -> list[int]:
    for i in range(0, len(x), 2):
        r = _append_folded_range(r, x[i], x[i + 1])
    return r


def _append_negated_class(r: list[int], x: list[int]) -> list[int]:
    next_lo = 0
    for i in range(0, len(x), 2):
        lo, hi = x[i], x[i + 1]
        if next_lo <= lo - 1:
            r = _append_range(r, next_lo, lo - 1)
        next_lo = hi + 1
    if next_lo <= MAX_RUNE:
        r = _append_range(r, next_lo, MAX_RUNE)
    return r


def _append_table(r: list[int], table: _Table) -> list[int]:
    for ranges in (table.r16, table.r32):
        for lo, hi, stride in ranges:
            if stride == 1:
                r = _append_range(r, lo, hi)
                continue
            for c in range(lo, hi + 1, stride):
                r = _append_range(r, c, c)
    return r


def _append_negated_table(r: list[int], table: _Table) -> list[int]:
    next_lo = 0
    for ranges in (table.r16, table.r32):
        for lo, hi, stride in ranges:
            if stride == 1:
                if next_lo <= lo - 1:
                    r = _append_range(r, next_lo, lo - 1)
                next_lo = hi + 1
                continue
            for c in range(lo, hi + 1, stride):
                if next_lo <= c - 1:
                    r = _append_range(r, next_lo, c - 1)
                next_lo = c + 1
    if next_lo <= MAX_RUNE:
        r = _append_range(r, next_lo, MAX_RUNE)
    return r


def _clean_class(r: list[int]) -> list[int]:
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


def _negate_class(r: list[int]) -> list[int]:
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


def _append_literal(r: list[int], x: int, flags: int) -> list[int]:
    if flags & FOLD_CASE:
        return _append_folded_range(r, x, x)
    return _append_range(r, x, x)


def _min_fold_rune(r: int) -> int:
    if r < MIN_FOLD or r > MAX_FOLD:
        return r
    m = r
    r0 = r
    r = simple_fold(r)
    while r != r0:
        m = min(m, r)
        r = simple_fold(r)
    return m


_PERL_GROUPS = {
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
_POSIX_GROUPS = {f"[:{k}:]": (1, v) for k, v in _POSIX.items()}
_POSIX_GROUPS.update({f"[:^{k}:]": (-1, v) for k, v in _POSIX.items()})


def _append_unicode(r: list[int], table: _Table, fold: _Table | None, sign: int) -> list[int]:
    """Append a \\p class (its fold table too under (?i), where it has one) to r."""
    if fold is None:
        return _append_table(r, table) if sign > 0 else _append_negated_table(r, table)
    tmp = _clean_class(_append_table(_append_table([], table), fold))
    return _append_class(r, tmp) if sign > 0 else _append_negated_class(r, tmp)


_UNICODE_CLASSES: dict[tuple, tuple] = {}


# --- The parse tree --------------------------------------------------------------------------


class _Regexp:
    """One regexp/syntax.Regexp node (identity matters: Go keys its size and height maps
    by pointer and recycles nodes through a free list)."""

    __slots__ = ("op", "flags", "rune", "sub", "min", "max", "cap", "name")

    def __init__(self) -> None:
        self.reset(0)

    def reset(self, op: int) -> None:
        self.op = op
        self.flags = 0
        self.rune: list[int] = []
        self.sub: list[_Regexp] = []
        self.min = 0
        self.max = 0
        self.cap = 0
        self.name = ""

    def equal(self, y: _Regexp | None) -> bool:
        x = self
        if y is None:
            return False
        if x.op != y.op:
            return False
        if x.op == END_TEXT:
            if x.flags & WAS_DOLLAR != y.flags & WAS_DOLLAR:
                return False
        elif x.op in (LITERAL, CHAR_CLASS):
            return x.flags & FOLD_CASE == y.flags & FOLD_CASE and x.rune == y.rune
        elif x.op in (ALTERNATE, CONCAT):
            return len(x.sub) == len(y.sub) and all(a.equal(b) for a, b in zip(x.sub, y.sub))
        elif x.op in (STAR, PLUS, QUEST):
            if x.flags & NON_GREEDY != y.flags & NON_GREEDY or not x.sub[0].equal(y.sub[0]):
                return False
        elif x.op == REPEAT:
            if (
                x.flags & NON_GREEDY != y.flags & NON_GREEDY
                or x.min != y.min
                or x.max != y.max
                or not x.sub[0].equal(y.sub[0])
            ):
                return False
        elif x.op == CAPTURE:
            if x.cap != y.cap or x.name != y.name or not x.sub[0].equal(y.sub[0]):
                return False
        return True


def _is_char_class(re: _Regexp) -> bool:
    return (
        re.op == LITERAL and len(re.rune) == 1 or re.op in (CHAR_CLASS, ANY_CHAR_NOT_NL, ANY_CHAR)
    )


def _match_rune(re: _Regexp, r: int) -> bool:
    if re.op == LITERAL:
        return len(re.rune) == 1 and re.rune[0] == r
    if re.op == CHAR_CLASS:
        return any(re.rune[i] <= r <= re.rune[i + 1] for i in range(0, len(re.rune), 2))
    if re.op == ANY_CHAR_NOT_NL:
        return r != 0x0A
    return re.op == ANY_CHAR


def _merge_char_class(dst: _Regexp, src: _Regexp) -> None:
    if dst.op == ANY_CHAR:
        pass
    elif dst.op == ANY_CHAR_NOT_NL:
        if _match_rune(src, 0x0A):
            dst.op = ANY_CHAR
    elif dst.op == CHAR_CLASS:
        if src.op == LITERAL:
            dst.rune = _append_literal(dst.rune, src.rune[0], src.flags)
        else:
            dst.rune = _append_class(dst.rune, src.rune)
    elif dst.op == LITERAL:
        if src.rune[0] == dst.rune[0] and src.flags == dst.flags:
            return
        dst.op = CHAR_CLASS
        first = dst.rune[0]
        dst.rune = _append_literal([], first, dst.flags)
        dst.rune = _append_literal(dst.rune, src.rune[0], src.flags)


def _clean_alt(re: _Regexp) -> None:
    if re.op == CHAR_CLASS:
        re.rune = _clean_class(re.rune)
        if re.rune == [0, MAX_RUNE]:
            re.rune = []
            re.op = ANY_CHAR
        elif re.rune == [0, 0x09, 0x0B, MAX_RUNE]:
            re.rune = []
            re.op = ANY_CHAR_NOT_NL


def _repeat_is_valid(re: _Regexp, n: int) -> bool:
    if re.op == REPEAT:
        m = re.max
        if m == 0:
            return True
        if m < 0:
            m = re.min
        if m > n:
            return False
        if m > 0:
            n //= m
    return all(_repeat_is_valid(sub, n) for sub in re.sub)


def _is_alnum(c: str) -> bool:
    return "0" <= c <= "9" or "A" <= c <= "Z" or "a" <= c <= "z"


def _unhex(c: str) -> int:
    if "0" <= c <= "9":
        return ord(c) - 0x30
    if "a" <= c <= "f":
        return ord(c) - 0x61 + 10
    if "A" <= c <= "F":
        return ord(c) - 0x41 + 10
    return -1


# --- The parser --------------------------------------------------------------------------------


class _Parser:
    """regexp/syntax's parser with the Perl flags. Positions index `self.s` (Go slices a
    string where this keeps an offset)."""

    def __init__(self, s: str, dialect: Dialect) -> None:
        self.s = s
        self.dialect = dialect
        self.flags = PERL
        self.stack: list[_Regexp] = []
        self.free: list[_Regexp] = []
        self.num_cap = 0
        self.num_regexp = 0
        self.num_runes = 0
        self.repeats = 0
        self.height: dict[_Regexp, int] | None = None
        self.size: dict[_Regexp, int] | None = None

    # node allocation, as Go's newRegexp / reuse (a LIFO free list)
    def new(self, op: int) -> _Regexp:
        if self.free:
            re = self.free.pop()
            re.reset(op)
        else:
            re = _Regexp()
            re.op = op
            self.num_regexp += 1
        return re

    def reuse(self, re: _Regexp) -> None:
        if self.height is not None:
            self.height.pop(re, None)
        self.free.append(re)

    # limits
    def check_limits(self, re: _Regexp) -> None:
        if self.num_runes > MAX_RUNES:
            raise _Panic(ERR_LARGE)
        self.check_size(re)
        self.check_height(re)

    def check_size(self, re: _Regexp) -> None:
        if self.size is None:
            if self.repeats == 0:
                self.repeats = 1
            if re.op == REPEAT:
                n = re.max
                if n == -1:
                    n = re.min
                if n <= 0:
                    n = 1
                if n > MAX_SIZE // self.repeats:
                    self.repeats = MAX_SIZE
                else:
                    self.repeats *= n
            if self.num_regexp < MAX_SIZE // self.repeats:
                return
            self.size = {}
            for node in self.stack:
                self.check_size(node)
        if self.calc_size(re, True) > MAX_SIZE:
            raise _Panic(ERR_LARGE)

    def calc_size(self, re: _Regexp, force: bool) -> int:
        assert self.size is not None
        if not force and re in self.size:
            return self.size[re]
        size = 0
        op = re.op
        if op == LITERAL:
            size = len(re.rune)
        elif op in (CAPTURE, STAR):
            size = 2 + self.calc_size(re.sub[0], False)
        elif op in (PLUS, QUEST):
            size = 1 + self.calc_size(re.sub[0], False)
        elif op == CONCAT:
            for sub in re.sub:
                size += self.calc_size(sub, False)
        elif op == ALTERNATE:
            for sub in re.sub:
                size += self.calc_size(sub, False)
            if len(re.sub) > 1:
                size += len(re.sub) - 1
        elif op == REPEAT:
            sub = self.calc_size(re.sub[0], False)
            if re.max == -1:
                size = 2 + sub if re.min == 0 else 1 + re.min * sub
            else:
                size = re.max * sub + (re.max - re.min)
        size = max(1, size)
        self.size[re] = size
        return size

    def check_height(self, re: _Regexp) -> None:
        if self.num_regexp < MAX_HEIGHT:
            return
        if self.height is None:
            self.height = {}
            for node in self.stack:
                self.check_height(node)
        if self.calc_height(re, True) > MAX_HEIGHT:
            raise _Panic(ERR_NESTING_DEPTH)

    def calc_height(self, re: _Regexp, force: bool) -> int:
        assert self.height is not None
        if not force and re in self.height:
            return self.height[re]
        h = 1
        for sub in re.sub:
            h = max(h, 1 + self.calc_height(sub, False))
        self.height[re] = h
        return h

    # stack
    def push(self, re: _Regexp) -> _Regexp | None:
        self.num_runes += len(re.rune)
        r = re.rune
        if re.op == CHAR_CLASS and len(r) == 2 and r[0] == r[1]:
            if self.maybe_concat(r[0], self.flags & ~FOLD_CASE):
                return None
            re.op = LITERAL
            re.rune = r[:1]
            re.flags = self.flags & ~FOLD_CASE
        elif (
            re.op == CHAR_CLASS
            and len(r) == 4
            and r[0] == r[1]
            and r[2] == r[3]
            and simple_fold(r[0]) == r[2]
            and simple_fold(r[2]) == r[0]
        ) or (
            re.op == CHAR_CLASS
            and len(r) == 2
            and r[0] + 1 == r[1]
            and simple_fold(r[0]) == r[1]
            and simple_fold(r[1]) == r[0]
        ):
            if self.maybe_concat(r[0], self.flags | FOLD_CASE):
                return None
            re.op = LITERAL
            re.rune = r[:1]
            re.flags = self.flags | FOLD_CASE
        else:
            self.maybe_concat(-1, 0)
        self.stack.append(re)
        self.check_limits(re)
        return re

    def maybe_concat(self, r: int, flags: int) -> bool:
        n = len(self.stack)
        if n < 2:
            return False
        re1 = self.stack[n - 1]
        re2 = self.stack[n - 2]
        if re1.op != LITERAL or re2.op != LITERAL or re1.flags & FOLD_CASE != re2.flags & FOLD_CASE:
            return False
        re2.rune.extend(re1.rune)
        if r >= 0:
            re1.rune = [r]
            re1.flags = flags
            return True
        self.stack.pop()
        self.reuse(re1)
        return False

    def literal(self, r: int) -> None:
        re = self.new(LITERAL)
        re.flags = self.flags
        if self.flags & FOLD_CASE:
            r = _min_fold_rune(r)
        re.rune = [r]
        self.push(re)

    def op(self, op: int) -> _Regexp | None:
        re = self.new(op)
        re.flags = self.flags
        return self.push(re)

    def repeat(self, op: int, lo: int, hi: int, before: int, after: int, last_repeat: int) -> int:
        """Go's repeat; `before` is where the operator starts, `after` just past it,
        `last_repeat` where the previous repetition operator started (-1: none)."""
        flags = self.flags
        if after < len(self.s) and self.s[after] == "?":
            after += 1
            flags ^= NON_GREEDY
        if last_repeat >= 0:
            raise Error(ERR_INVALID_REPEAT_OP, self.s[last_repeat:after])
        if not self.stack or self.stack[-1].op >= PSEUDO:
            raise Error(ERR_MISSING_REPEAT_ARGUMENT, self.s[before:after])
        sub = self.stack[-1]
        re = self.new(op)
        re.min = lo
        re.max = hi
        re.flags = flags
        re.sub = [sub]
        self.stack[-1] = re
        self.check_limits(re)
        if op == REPEAT and (lo >= 2 or hi >= 2) and not _repeat_is_valid(re, 1000):
            raise Error(ERR_INVALID_REPEAT_SIZE, self.s[before:after])
        return after

    def concat(self) -> _Regexp | None:
        self.maybe_concat(-1, 0)
        i = len(self.stack)
        while i > 0 and self.stack[i - 1].op < PSEUDO:
            i -= 1
        subs = self.stack[i:]
        del self.stack[i:]
        if not subs:
            return self.push(self.new(EMPTY_MATCH))
        return self.push(self.collapse(subs, CONCAT))

    def alternate(self) -> _Regexp | None:
        i = len(self.stack)
        while i > 0 and self.stack[i - 1].op < PSEUDO:
            i -= 1
        subs = self.stack[i:]
        del self.stack[i:]
        if subs:
            _clean_alt(subs[-1])
        if not subs:
            return self.push(self.new(NO_MATCH))
        return self.push(self.collapse(subs, ALTERNATE))

    def collapse(self, subs: list[_Regexp], op: int) -> _Regexp:
        if len(subs) == 1:
            return subs[0]
        re = self.new(op)
        out = []
        for sub in subs:
            if sub.op == op:
                out.extend(sub.sub)
                self.reuse(sub)
            else:
                out.append(sub)
        re.sub = out
        if op == ALTERNATE:
            re.sub = self.factor(re.sub)
            if len(re.sub) == 1:
                old = re
                re = re.sub[0]
                self.reuse(old)
        return re

    def factor(self, sub: list[_Regexp]) -> list[_Regexp]:
        if len(sub) < 2:
            return sub
        sub = list(sub)

        # Round 1: common literal prefixes.
        string: list[int] = []
        strflags = 0
        start = 0
        out: list[_Regexp] = []
        for i in range(len(sub) + 1):
            istr: list[int] = []
            iflags = 0
            if i < len(sub):
                istr, iflags = self.leading_string(sub[i])
                if iflags == strflags:
                    same = 0
                    while same < len(string) and same < len(istr) and string[same] == istr[same]:
                        same += 1
                    if same > 0:
                        string = string[:same]
                        continue
            if i == start:
                pass
            elif i == start + 1:
                out.append(sub[start])
            else:
                prefix = self.new(LITERAL)
                prefix.flags = strflags
                prefix.rune = list(string)
                for j in range(start, i):
                    sub[j] = self.remove_leading_string(sub[j], len(string))
                    self.check_limits(sub[j])
                suffix = self.collapse(sub[start:i], ALTERNATE)
                re = self.new(CONCAT)
                re.sub = [prefix, suffix]
                out.append(re)
            start = i
            string = list(istr)
            strflags = iflags
        sub = out

        # Round 2: common simple leading regexps (a char class, or a fixed repeat of one).
        start = 0
        out = []
        first: _Regexp | None = None
        for i in range(len(sub) + 1):
            ifirst: _Regexp | None = None
            if i < len(sub):
                ifirst = self.leading_regexp(sub[i])
                if (
                    first is not None
                    and first.equal(ifirst)
                    and (
                        _is_char_class(first)
                        or first.op == REPEAT
                        and first.min == first.max
                        and _is_char_class(first.sub[0])
                    )
                ):
                    continue
            if i == start:
                pass
            elif i == start + 1:
                out.append(sub[start])
            else:
                prefix = first
                for j in range(start, i):
                    sub[j] = self.remove_leading_regexp(sub[j], j != start)
                    self.check_limits(sub[j])
                suffix = self.collapse(sub[start:i], ALTERNATE)
                re = self.new(CONCAT)
                re.sub = [prefix, suffix]
                out.append(re)
            start = i
            first = ifirst
        sub = out

        # Round 3: runs of single literals and classes become one class.
        start = 0
        out = []
        for i in range(len(sub) + 1):
            if i < len(sub) and _is_char_class(sub[i]):
                continue
            if i == start:
                pass
            elif i == start + 1:
                out.append(sub[start])
            else:
                most = start
                for j in range(start + 1, i):
                    if sub[most].op < sub[j].op or (
                        sub[most].op == sub[j].op and len(sub[most].rune) < len(sub[j].rune)
                    ):
                        most = j
                sub[start], sub[most] = sub[most], sub[start]
                for j in range(start + 1, i):
                    _merge_char_class(sub[start], sub[j])
                    self.reuse(sub[j])
                _clean_alt(sub[start])
                out.append(sub[start])
            if i < len(sub):
                out.append(sub[i])
            start = i + 1
        sub = out

        # Round 4: runs of empty matches become one.
        out = []
        for i in range(len(sub)):
            if i + 1 < len(sub) and sub[i].op == EMPTY_MATCH and sub[i + 1].op == EMPTY_MATCH:
                continue
            out.append(sub[i])
        return out

    def leading_string(self, re: _Regexp) -> tuple[list[int], int]:
        if re.op == CONCAT and re.sub:
            re = re.sub[0]
        if re.op != LITERAL:
            return [], 0
        return re.rune, re.flags & FOLD_CASE

    def remove_leading_string(self, re: _Regexp, n: int) -> _Regexp:
        if re.op == CONCAT and re.sub:
            sub = self.remove_leading_string(re.sub[0], n)
            re.sub[0] = sub
            if sub.op == EMPTY_MATCH:
                self.reuse(sub)
                if len(re.sub) <= 1:
                    re.op = EMPTY_MATCH
                    re.sub = []
                elif len(re.sub) == 2:
                    old = re
                    re = re.sub[1]
                    self.reuse(old)
                else:
                    del re.sub[0]
            return re
        if re.op == LITERAL:
            re.rune = re.rune[n:]
            if not re.rune:
                re.op = EMPTY_MATCH
        return re

    def leading_regexp(self, re: _Regexp) -> _Regexp | None:
        if re.op == EMPTY_MATCH:
            return None
        if re.op == CONCAT and re.sub:
            sub = re.sub[0]
            if sub.op == EMPTY_MATCH:
                return None
            return sub
        return re

    def remove_leading_regexp(self, re: _Regexp, reuse: bool) -> _Regexp:
        if re.op == CONCAT and re.sub:
            if reuse:
                self.reuse(re.sub[0])
            del re.sub[0]
            if not re.sub:
                re.op = EMPTY_MATCH
                re.sub = []
            elif len(re.sub) == 1:
                old = re
                re = re.sub[0]
                self.reuse(old)
            return re
        if reuse:
            self.reuse(re)
        return self.new(EMPTY_MATCH)

    # the main loop
    def parse(self) -> _Regexp:
        try:
            return self._parse()
        except _Panic as panic:
            raise Error(panic.code, self.s) from None

    def _parse(self) -> _Regexp:
        s = self.s
        n = len(s)
        t = 0
        last_repeat = -1
        while t < n:
            repeat = -1
            c = s[t]
            if c == "(":
                if t + 1 < n and s[t + 1] == "?":
                    t = self.parse_perl_flags(t)
                else:
                    self.num_cap += 1
                    re = self.op(LEFT_PAREN)
                    assert re is not None
                    re.cap = self.num_cap
                    t += 1
            elif c == "|":
                self.parse_vertical_bar()
                t += 1
            elif c == ")":
                self.parse_right_paren()
                t += 1
            elif c == "^":
                self.op(BEGIN_TEXT if self.flags & ONE_LINE else BEGIN_LINE)
                t += 1
            elif c == "$":
                if self.flags & ONE_LINE:
                    re = self.op(END_TEXT)
                    if re is not None:
                        re.flags |= WAS_DOLLAR
                else:
                    self.op(END_LINE)
                t += 1
            elif c == ".":
                self.op(ANY_CHAR if self.flags & DOT_NL else ANY_CHAR_NOT_NL)
                t += 1
            elif c == "[":
                t = self.parse_class(t)
            elif c in "*+?":
                op = {"*": STAR, "+": PLUS, "?": QUEST}[c]
                before = t
                t = self.repeat(op, 0, 0, before, t + 1, last_repeat)
                repeat = before
            elif c == "{":
                before = t
                parsed = self.parse_repeat(t)
                if parsed is None:
                    self.literal(ord("{"))
                    t += 1
                else:
                    lo, hi, after = parsed
                    if lo < 0 or lo > 1000 or hi > 1000 or hi >= 0 and lo > hi:
                        raise Error(ERR_INVALID_REPEAT_SIZE, s[before:after])
                    t = self.repeat(REPEAT, lo, hi, before, after, last_repeat)
                    repeat = before
            elif c == "\\":
                t = self.parse_backslash(t)
            else:
                r, t = self.next_rune(t)
                self.literal(r)
            last_repeat = repeat

        self.concat()
        if self.swap_vertical_bar():
            self.stack.pop()
        self.alternate()
        if len(self.stack) != 1:
            raise Error(ERR_MISSING_PAREN, s)
        return self.stack[0]

    def parse_backslash(self, t: int) -> int:
        s = self.s
        n = len(s)
        if t + 1 < n:
            c = s[t + 1]
            if c == "A":
                self.op(BEGIN_TEXT)
                return t + 2
            if c == "b":
                self.op(WORD_BOUNDARY)
                return t + 2
            if c == "B":
                self.op(NO_WORD_BOUNDARY)
                return t + 2
            if c == "C":
                raise Error(ERR_INVALID_ESCAPE, s[t : t + 2])
            if c == "Q":
                end = s.find("\\E", t + 2)
                lit_end, rest = (n, n) if end < 0 else (end, end + 2)
                i = t + 2
                while i < lit_end:
                    if _invalid(s[i]):
                        raise Error(ERR_INVALID_UTF8, s[i:lit_end])
                    self.literal(ord(s[i]))
                    i += 1
                return rest
            if c == "z":
                self.op(END_TEXT)
                return t + 2
        re = self.new(CHAR_CLASS)
        re.flags = self.flags
        if t + 1 < n and s[t + 1] in "pP":
            found = self.parse_unicode_class(t, [])
            if found is not None:
                re.rune, rest = found
                self.push(re)
                return rest
        found = self.parse_perl_class_escape(t, [])
        if found is not None:
            re.rune, rest = found
            self.push(re)
            return rest
        self.reuse(re)
        r, t = self.parse_escape(t)
        self.literal(r)
        return t

    def next_rune(self, t: int) -> tuple[int, int]:
        """The rune at t and the position after it; Go's U+FFFD at the end of the text."""
        if t >= len(self.s):
            return 0xFFFD, t
        c = self.s[t]
        if _invalid(c):
            raise Error(ERR_INVALID_UTF8, self.s[t:])
        return ord(c), t + 1

    def check_utf8(self, start: int, end: int) -> None:
        for i in range(start, end):
            if _invalid(self.s[i]):
                raise Error(ERR_INVALID_UTF8, self.s[i:end])

    def parse_repeat(self, t: int) -> tuple[int, int, int] | None:
        """{min}, {min,} (max -1) or {min,max} at t: (min, max, after), min -1 when too
        big; None when it is not a repeat (then { is a literal)."""
        s = self.s
        n = len(s)
        if t >= n or s[t] != "{":
            return None
        t += 1
        parsed = self.parse_int(t)
        if parsed is None:
            return None
        lo, t = parsed
        if t >= n:
            return None
        if s[t] != ",":
            hi = lo
        else:
            t += 1
            if t >= n:
                return None
            if s[t] == "}":
                hi = -1
            else:
                parsed = self.parse_int(t)
                if parsed is None:
                    return None
                hi, t = parsed
                if hi < 0:
                    lo = -1
        if t >= n or s[t] != "}":
            return None
        return lo, hi, t + 1

    def parse_int(self, t: int) -> tuple[int, int] | None:
        s = self.s
        n = len(s)
        if t >= n or not "0" <= s[t] <= "9":
            return None
        if t + 1 < n and s[t] == "0" and "0" <= s[t + 1] <= "9":
            return None
        start = t
        while t < n and "0" <= s[t] <= "9":
            t += 1
        value = 0
        for c in s[start:t]:
            if value >= 100_000_000:
                value = -1
                break
            value = value * 10 + ord(c) - 0x30
        return value, t

    def parse_perl_flags(self, start: int) -> int:
        s = self.s
        n = len(s)
        rest = n - start
        starts_with_p = rest > 4 and s[start + 2] == "P" and s[start + 3] == "<"
        starts_with_name = self.dialect.angle_named_groups and rest > 3 and s[start + 2] == "<"
        if starts_with_p or starts_with_name:
            expr_start = start + (4 if starts_with_p else 3)
            end = s.find(">", start)
            if end < 0:
                self.check_utf8(start, n)
                raise Error(ERR_INVALID_NAMED_CAPTURE, s[start:])
            capture = s[start : end + 1]
            name = s[expr_start:end]
            self.check_utf8(expr_start, end)
            if not name or not all(c == "_" or _is_alnum(c) for c in name):
                raise Error(ERR_INVALID_NAMED_CAPTURE, capture)
            self.num_cap += 1
            re = self.op(LEFT_PAREN)
            assert re is not None
            re.cap = self.num_cap
            re.name = name
            return end + 1

        t = start + 2
        flags = self.flags
        sign = 1
        saw_flag = False
        while t < n:
            c, t = self.next_rune(t)
            if c == 0x69:  # i
                flags |= FOLD_CASE
                saw_flag = True
            elif c == 0x6D:  # m
                flags &= ~ONE_LINE
                saw_flag = True
            elif c == 0x73:  # s
                flags |= DOT_NL
                saw_flag = True
            elif c == 0x55:  # U
                flags |= NON_GREEDY
                saw_flag = True
            elif c == 0x2D:  # -
                if sign < 0:
                    break
                sign = -1
                flags = ~flags & _MASK32
                saw_flag = False
            elif c in (0x3A, 0x29):  # : )
                if sign < 0:
                    if not saw_flag:
                        break
                    flags = ~flags & _MASK32
                if c == 0x3A:
                    self.op(LEFT_PAREN)
                self.flags = flags
                return t
            else:
                break
        raise Error(ERR_INVALID_PERL_OP, s[start:t])

    def parse_vertical_bar(self) -> None:
        self.concat()
        if not self.swap_vertical_bar():
            self.op(VERTICAL_BAR)

    def swap_vertical_bar(self) -> bool:
        stack = self.stack
        n = len(stack)
        if (
            n >= 3
            and stack[n - 2].op == VERTICAL_BAR
            and _is_char_class(stack[n - 1])
            and _is_char_class(stack[n - 3])
        ):
            re1 = stack[n - 1]
            re3 = stack[n - 3]
            if re1.op > re3.op:
                re1, re3 = re3, re1
                stack[n - 3] = re3
            _merge_char_class(re3, re1)
            self.reuse(re1)
            stack.pop()
            return True
        if n >= 2:
            re1 = stack[n - 1]
            re2 = stack[n - 2]
            if re2.op == VERTICAL_BAR:
                if n >= 3:
                    _clean_alt(stack[n - 3])
                stack[n - 2] = re1
                stack[n - 1] = re2
                return True
        return False

    def parse_right_paren(self) -> None:
        self.concat()
        if self.swap_vertical_bar():
            self.stack.pop()
        self.alternate()
        n = len(self.stack)
        if n < 2:
            raise Error(ERR_UNEXPECTED_PAREN, self.s)
        re1 = self.stack[n - 1]
        re2 = self.stack[n - 2]
        del self.stack[n - 2 :]
        if re2.op != LEFT_PAREN:
            raise Error(ERR_UNEXPECTED_PAREN, self.s)
        self.flags = re2.flags
        if re2.cap == 0:
            self.push(re1)
        else:
            re2.op = CAPTURE
            re2.sub = [re1]
            self.push(re2)

    def parse_escape(self, start: int) -> tuple[int, int]:
        """The rune of the escape at start (a backslash) and the position after it."""
        s = self.s
        n = len(s)
        t = start + 1
        if t >= n:
            raise Error(ERR_TRAILING_BACKSLASH, "")
        c, t = self.next_rune(t)
        ch = chr(c)
        if ch in "1234567":
            if t < n and "0" <= s[t] <= "7":
                return self._octal(c, t)
        elif ch == "0":
            return self._octal(c, t)
        elif ch == "x":
            if t < n:
                c, t = self.next_rune(t)
                if c == 0x7B:  # {
                    nhex = 0
                    r = 0
                    while True:
                        if t >= n:
                            raise Error(ERR_INVALID_ESCAPE, s[start:t])
                        c, t = self.next_rune(t)
                        if c == 0x7D:
                            break
                        v = _unhex(chr(c))
                        if v < 0:
                            raise Error(ERR_INVALID_ESCAPE, s[start:t])
                        r = r * 16 + v
                        if r > MAX_RUNE:
                            raise Error(ERR_INVALID_ESCAPE, s[start:t])
                        nhex += 1
                    if nhex == 0:
                        raise Error(ERR_INVALID_ESCAPE, s[start:t])
                    return r, t
                x = _unhex(chr(c))
                c, t = self.next_rune(t)
                y = _unhex(chr(c))
                if x >= 0 and y >= 0:
                    return x * 16 + y, t
        elif ch in "afnrtv":
            return {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}[ch], t
        elif c < 0x80 and not _is_alnum(ch):
            return c, t
        raise Error(ERR_INVALID_ESCAPE, s[start:t])

    def _octal(self, c: int, t: int) -> tuple[int, int]:
        s = self.s
        r = c - 0x30
        for _ in range(2):
            if t >= len(s) or not "0" <= s[t] <= "7":
                break
            r = r * 8 + ord(s[t]) - 0x30
            t += 1
        return r, t

    def parse_class_char(self, t: int, whole: int) -> tuple[int, int]:
        if t >= len(self.s):
            raise Error(ERR_MISSING_BRACKET, self.s[whole:])
        if self.s[t] == "\\":
            return self.parse_escape(t)
        return self.next_rune(t)

    def parse_perl_class_escape(self, t: int, r: list[int]) -> tuple[list[int], int] | None:
        group = _PERL_GROUPS.get(self.s[t : t + 2])
        if group is None:
            return None
        return self.append_group(r, group), t + 2

    def parse_named_class(self, t: int, r: list[int]) -> tuple[list[int], int] | None:
        s = self.s
        if not s.startswith("[:", t):
            return None
        i = s.find(":]", t + 2)
        if i < 0:
            return None
        name = s[t : i + 2]
        group = _POSIX_GROUPS.get(name)
        if group is None:
            raise Error(ERR_INVALID_CHAR_RANGE, name)
        return self.append_group(r, group), i + 2

    def append_group(self, r: list[int], group: tuple[int, list[int]]) -> list[int]:
        sign, cls = group
        if not self.flags & FOLD_CASE:
            return _append_negated_class(r, cls) if sign < 0 else _append_class(r, cls)
        tmp = _clean_class(_append_folded_class([], cls))
        return _append_negated_class(r, tmp) if sign < 0 else _append_class(r, tmp)

    def parse_unicode_class(self, start: int, r: list[int]) -> tuple[list[int], int] | None:
        """A \\p{Name} / \\pN class at start: (runes, after), or None if there is none."""
        s = self.s
        n = len(s)
        if n - start < 2 or s[start] != "\\" or s[start + 1] not in "pP":
            return None
        sign = -1 if s[start + 1] == "P" else 1
        c, t = self.next_rune(start + 2)
        if c != 0x7B:
            seq = s[start:t]
            name = seq[2:]
        else:
            end = s.find("}", start)
            if end < 0:
                self.check_utf8(start, n)
                raise Error(ERR_INVALID_CHAR_RANGE, s[start:])
            seq, t = s[start : end + 1], end + 1
            name = s[start + 3 : end]
            self.check_utf8(start + 3, end)
        if name.startswith("^"):
            sign = -sign
            name = name[1:]
        table, fold, tsign = _unicode_table(name, self.dialect)
        if table is None:
            raise Error(ERR_INVALID_CHAR_RANGE, seq)
        if tsign < 0:
            sign = -sign
        folded = fold if self.flags & FOLD_CASE else None
        if r:
            return _append_unicode(r, table, folded, sign), t
        key = (table, folded, sign)  # a class of its own: the same runes every time
        cached = _UNICODE_CLASSES.get(key)
        if cached is None:
            cached = _UNICODE_CLASSES[key] = tuple(_append_unicode([], table, folded, sign))
        return list(cached), t

    def parse_class(self, start: int) -> int:
        s = self.s
        n = len(s)
        t = start + 1
        re = self.new(CHAR_CLASS)
        re.flags = self.flags
        cls: list[int] = []
        sign = 1
        if t < n and s[t] == "^":
            sign = -1
            t += 1
            if not self.flags & CLASS_NL:
                cls.extend((0x0A, 0x0A))
        first = True
        while t >= n or s[t] != "]" or first:
            first = False
            if n - t > 2 and s[t] == "[" and s[t + 1] == ":":
                found = self.parse_named_class(t, cls)
                if found is not None:
                    cls, t = found
                    continue
            found = self.parse_unicode_class(t, cls)
            if found is not None:
                cls, t = found
                continue
            if t < n:
                found = self.parse_perl_class_escape(t, cls)
                if found is not None:
                    cls, t = found
                    continue
            rng = t
            lo, t = self.parse_class_char(t, start)
            hi = lo
            if n - t >= 2 and s[t] == "-" and s[t + 1] != "]":
                t += 1
                hi, t = self.parse_class_char(t, start)
                if hi < lo:
                    raise Error(ERR_INVALID_CHAR_RANGE, s[rng:t])
            if not self.flags & FOLD_CASE:
                cls = _append_range(cls, lo, hi)
            else:
                cls = _append_folded_range(cls, lo, hi)
        t += 1
        cls = _clean_class(cls)
        if sign < 0:
            cls = _negate_class(cls)
        re.rune = cls
        self.push(re)
        return t
