"""regexp/syntax's parse tree: the ops and flags, the limits and error codes, the errors,
the Regexp node and what the parser asks of nodes."""

from __future__ import annotations

from ocihook.check.goregexp.charclass import (
    append_class,
    append_folded_range,
    append_range,
    clean_class,
)
from ocihook.check.goregexp.runes import MAX_RUNE

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


class Error(Exception):
    """A pattern Go's regexp.Compile rejects: Go's error code and the text it quotes."""

    def __init__(self, code: str, expr: str) -> None:
        super().__init__(f"{code}: `{expr}`")
        self.code = code
        self.expr = expr


class Panic(Exception):
    """Go's panic(ErrLarge) / panic(ErrNestingDepth) inside the parser."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _append_literal(r: list[int], x: int, flags: int) -> list[int]:
    if flags & FOLD_CASE:
        return append_folded_range(r, x, x)
    return append_range(r, x, x)


class Regexp:
    """One regexp/syntax.Regexp node (identity matters: Go keys its size and height maps
    by pointer and recycles nodes through a free list)."""

    __slots__ = ("op", "flags", "rune", "sub", "min", "max", "cap", "name")

    def __init__(self) -> None:
        self.reset(0)

    def reset(self, op: int) -> None:
        self.op = op
        self.flags = 0
        self.rune: list[int] = []
        self.sub: list[Regexp] = []
        self.min = 0
        self.max = 0
        self.cap = 0
        self.name = ""

    def equal(self, y: Regexp | None) -> bool:
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


def is_char_class(re: Regexp) -> bool:
    return (
        re.op == LITERAL and len(re.rune) == 1 or re.op in (CHAR_CLASS, ANY_CHAR_NOT_NL, ANY_CHAR)
    )


def _match_rune(re: Regexp, r: int) -> bool:
    if re.op == LITERAL:
        return len(re.rune) == 1 and re.rune[0] == r
    if re.op == CHAR_CLASS:
        return any(re.rune[i] <= r <= re.rune[i + 1] for i in range(0, len(re.rune), 2))
    if re.op == ANY_CHAR_NOT_NL:
        return r != 0x0A
    return re.op == ANY_CHAR


def merge_char_class(dst: Regexp, src: Regexp) -> None:
    if dst.op == ANY_CHAR:
        pass
    elif dst.op == ANY_CHAR_NOT_NL:
        if _match_rune(src, 0x0A):
            dst.op = ANY_CHAR
    elif dst.op == CHAR_CLASS:
        if src.op == LITERAL:
            dst.rune = _append_literal(dst.rune, src.rune[0], src.flags)
        else:
            dst.rune = append_class(dst.rune, src.rune)
    elif dst.op == LITERAL:
        if src.rune[0] == dst.rune[0] and src.flags == dst.flags:
            return
        dst.op = CHAR_CLASS
        first = dst.rune[0]
        dst.rune = _append_literal([], first, dst.flags)
        dst.rune = _append_literal(dst.rune, src.rune[0], src.flags)


def clean_alt(re: Regexp) -> None:
    if re.op == CHAR_CLASS:
        re.rune = clean_class(re.rune)
        if re.rune == [0, MAX_RUNE]:
            re.rune = []
            re.op = ANY_CHAR
        elif re.rune == [0, 0x09, 0x0B, MAX_RUNE]:
            re.rune = []
            re.op = ANY_CHAR_NOT_NL


def repeat_is_valid(re: Regexp, n: int) -> bool:
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
    return all(repeat_is_valid(sub, n) for sub in re.sub)
