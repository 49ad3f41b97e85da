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

This module is the parser's main loop (groups, flags, repetition, alternation) and `check`;
the rest of the port: `stack` (the tree built on the parser's stack, the limits), `classes`
(escapes and character classes), `tree` (ops, flags, errors, the node), `charclass` (rune
ranges), `unicode` (\\p{Name} tables), `runes` (case folding), `dialect`.
"""

from __future__ import annotations

import sys

from ocihook.check.goregexp.classes import ClassReader, invalid_utf8, is_alnum
from ocihook.check.goregexp.dialect import GO126, Dialect
from ocihook.check.goregexp.tree import (
    ANY_CHAR,
    ANY_CHAR_NOT_NL,
    BEGIN_LINE,
    BEGIN_TEXT,
    CAPTURE,
    CHAR_CLASS,
    DOT_NL,
    END_LINE,
    END_TEXT,
    ERR_INVALID_ESCAPE,
    ERR_INVALID_NAMED_CAPTURE,
    ERR_INVALID_PERL_OP,
    ERR_INVALID_REPEAT_SIZE,
    ERR_INVALID_UTF8,
    ERR_MISSING_PAREN,
    ERR_UNEXPECTED_PAREN,
    FOLD_CASE,
    LEFT_PAREN,
    MAX_HEIGHT,
    NO_WORD_BOUNDARY,
    NON_GREEDY,
    ONE_LINE,
    PLUS,
    QUEST,
    REPEAT,
    STAR,
    VERTICAL_BAR,
    WAS_DOLLAR,
    WORD_BOUNDARY,
    Error,
    Panic,
    Regexp,
    clean_alt,
    is_char_class,
    merge_char_class,
)

_MASK32 = 0xFFFF  # Flags is a uint16


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


class _Parser(ClassReader):
    """regexp/syntax's parser with the Perl flags: the main loop, groups, flags,
    repetition and alternation (the tree is built on stack.Stack)."""

    # the main loop
    def parse(self) -> Regexp:
        try:
            return self._parse()
        except Panic as panic:
            raise Error(panic.code, self.s) from None

    def _parse(self) -> Regexp:
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
                    if invalid_utf8(s[i]):
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
            if not name or not all(c == "_" or is_alnum(c) for c in name):
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
            and is_char_class(stack[n - 1])
            and is_char_class(stack[n - 3])
        ):
            re1 = stack[n - 1]
            re3 = stack[n - 3]
            if re1.op > re3.op:
                re1, re3 = re3, re1
                stack[n - 3] = re3
            merge_char_class(re3, re1)
            self.reuse(re1)
            stack.pop()
            return True
        if n >= 2:
            re1 = stack[n - 1]
            re2 = stack[n - 2]
            if re2.op == VERTICAL_BAR:
                if n >= 3:
                    clean_alt(stack[n - 3])
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
