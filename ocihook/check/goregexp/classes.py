"""The parser's reading of one rune, escape or character class (Go's parseEscape through
parseClass): \\x{...}, octal, \\pN and \\p{Name}, [[:alpha:]], \\d, [...]."""

from __future__ import annotations

from ocihook.check.goregexp.charclass import (
    PERL_GROUPS,
    POSIX_GROUPS,
    append_class,
    append_folded_class,
    append_folded_range,
    append_negated_class,
    append_range,
    clean_class,
    negate_class,
)
from ocihook.check.goregexp.dialect import Dialect
from ocihook.check.goregexp.runes import MAX_RUNE
from ocihook.check.goregexp.stack import Stack
from ocihook.check.goregexp.tree import (
    CHAR_CLASS,
    CLASS_NL,
    ERR_INVALID_CHAR_RANGE,
    ERR_INVALID_ESCAPE,
    ERR_INVALID_UTF8,
    ERR_MISSING_BRACKET,
    ERR_TRAILING_BACKSLASH,
    FOLD_CASE,
    Error,
)
from ocihook.check.goregexp.unicode import UNICODE_CLASSES, append_unicode, unicode_table


def invalid_utf8(c: str) -> bool:
    """Whether c stands for a byte that is not valid UTF-8 (surrogateescape)."""
    return "\udc80" <= c <= "\udcff"


def is_alnum(c: str) -> bool:
    return "0" <= c <= "9" or "A" <= c <= "Z" or "a" <= c <= "z"


def _unhex(c: str) -> int:
    if "0" <= c <= "9":
        return ord(c) - 0x30
    if "a" <= c <= "f":
        return ord(c) - 0x61 + 10
    if "A" <= c <= "F":
        return ord(c) - 0x41 + 10
    return -1


class ClassReader(Stack):
    """Reads runes, escapes and classes at a position of `self.s`, under `dialect`."""

    def __init__(self, s: str, dialect: Dialect) -> None:
        super().__init__(s)
        self.dialect = dialect

    def next_rune(self, t: int) -> tuple[int, int]:
        """The rune at t and the position after it; Go's U+FFFD at the end of the text."""
        if t >= len(self.s):
            return 0xFFFD, t
        c = self.s[t]
        if invalid_utf8(c):
            raise Error(ERR_INVALID_UTF8, self.s[t:])
        return ord(c), t + 1

    def check_utf8(self, start: int, end: int) -> None:
        for i in range(start, end):
            if invalid_utf8(self.s[i]):
                raise Error(ERR_INVALID_UTF8, self.s[i:end])

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
        elif c < 0x80 and not is_alnum(ch):
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
        group = PERL_GROUPS.get(self.s[t : t + 2])
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
        group = POSIX_GROUPS.get(name)
        if group is None:
            raise Error(ERR_INVALID_CHAR_RANGE, name)
        return self.append_group(r, group), i + 2

    def append_group(self, r: list[int], group: tuple[int, list[int]]) -> list[int]:
        sign, cls = group
        if not self.flags & FOLD_CASE:
            return append_negated_class(r, cls) if sign < 0 else append_class(r, cls)
        tmp = clean_class(append_folded_class([], cls))
        return append_negated_class(r, tmp) if sign < 0 else append_class(r, tmp)

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
        table, fold, tsign = unicode_table(name, self.dialect)
        if table is None:
            raise Error(ERR_INVALID_CHAR_RANGE, seq)
        if tsign < 0:
            sign = -sign
        folded = fold if self.flags & FOLD_CASE else None
        if r:
            return append_unicode(r, table, folded, sign), t
        key = (table, folded, sign)  # a class of its own: the same runes every time
        cached = UNICODE_CLASSES.get(key)
        if cached is None:
            cached = UNICODE_CLASSES[key] = tuple(append_unicode([], table, folded, sign))
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
                cls = append_range(cls, lo, hi)
            else:
                cls = append_folded_range(cls, lo, hi)
        t += 1
        cls = clean_class(cls)
        if sign < 0:
            cls = negate_class(cls)
        re.rune = cls
        self.push(re)
        return t
