"""The half of regexp/syntax's parser that builds the tree (Go's parse.go: push, concat,
alternate, collapse, factor, the node free list and the size and height limits); the
other half reads the text (goregexp/classes.py, goregexp/syntax.py) and calls it."""

from __future__ import annotations

from ocihook.check.goregexp.runes import min_fold_rune, simple_fold
from ocihook.check.goregexp.tree import (
    ALTERNATE,
    CAPTURE,
    CHAR_CLASS,
    CONCAT,
    EMPTY_MATCH,
    ERR_INVALID_REPEAT_OP,
    ERR_INVALID_REPEAT_SIZE,
    ERR_LARGE,
    ERR_MISSING_REPEAT_ARGUMENT,
    ERR_NESTING_DEPTH,
    FOLD_CASE,
    LITERAL,
    MAX_HEIGHT,
    MAX_RUNES,
    MAX_SIZE,
    NO_MATCH,
    NON_GREEDY,
    PERL,
    PLUS,
    PSEUDO,
    QUEST,
    REPEAT,
    STAR,
    Error,
    Panic,
    Regexp,
    clean_alt,
    is_char_class,
    merge_char_class,
    repeat_is_valid,
)


class Stack:
    """The parser's stack of pieces and what it does with them. Positions index `self.s`
    (Go slices a string where this keeps an offset)."""

    def __init__(self, s: str) -> None:
        self.s = s
        self.flags = PERL
        self.stack: list[Regexp] = []
        self.free: list[Regexp] = []
        self.num_cap = 0
        self.num_regexp = 0
        self.num_runes = 0
        self.repeats = 0
        self.height: dict[Regexp, int] | None = None
        self.size: dict[Regexp, int] | None = None

    # node allocation, as Go's newRegexp / reuse (a LIFO free list)
    def new(self, op: int) -> Regexp:
        if self.free:
            re = self.free.pop()
            re.reset(op)
        else:
            re = Regexp()
            re.op = op
            self.num_regexp += 1
        return re

    def reuse(self, re: Regexp) -> None:
        if self.height is not None:
            self.height.pop(re, None)
        self.free.append(re)

    # limits
    def check_limits(self, re: Regexp) -> None:
        if self.num_runes > MAX_RUNES:
            raise Panic(ERR_LARGE)
        self.check_size(re)
        self.check_height(re)

    def check_size(self, re: Regexp) -> None:
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
            raise Panic(ERR_LARGE)

    def calc_size(self, re: Regexp, force: bool) -> int:
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

    def check_height(self, re: Regexp) -> None:
        if self.num_regexp < MAX_HEIGHT:
            return
        if self.height is None:
            self.height = {}
            for node in self.stack:
                self.check_height(node)
        if self.calc_height(re, True) > MAX_HEIGHT:
            raise Panic(ERR_NESTING_DEPTH)

    def calc_height(self, re: Regexp, force: bool) -> int:
        assert self.height is not None
        if not force and re in self.height:
            return self.height[re]
        h = 1
        for sub in re.sub:
            h = max(h, 1 + self.calc_height(sub, False))
        self.height[re] = h
        return h

    # stack
    def push(self, re: Regexp) -> Regexp | None:
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
            r = min_fold_rune(r)
        re.rune = [r]
        self.push(re)

    def op(self, op: int) -> Regexp | None:
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
        if op == REPEAT and (lo >= 2 or hi >= 2) and not repeat_is_valid(re, 1000):
            raise Error(ERR_INVALID_REPEAT_SIZE, self.s[before:after])
        return after

    def concat(self) -> Regexp | None:
        self.maybe_concat(-1, 0)
        i = len(self.stack)
        while i > 0 and self.stack[i - 1].op < PSEUDO:
            i -= 1
        subs = self.stack[i:]
        del self.stack[i:]
        if not subs:
            return self.push(self.new(EMPTY_MATCH))
        return self.push(self.collapse(subs, CONCAT))

    def alternate(self) -> Regexp | None:
        i = len(self.stack)
        while i > 0 and self.stack[i - 1].op < PSEUDO:
            i -= 1
        subs = self.stack[i:]
        del self.stack[i:]
        if subs:
            clean_alt(subs[-1])
        if not subs:
            return self.push(self.new(NO_MATCH))
        return self.push(self.collapse(subs, ALTERNATE))

    def collapse(self, subs: list[Regexp], op: int) -> Regexp:
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

    def factor(self, sub: list[Regexp]) -> list[Regexp]:
        if len(sub) < 2:
            return sub
        sub = list(sub)

        # Round 1: common literal prefixes.
        string: list[int] = []
        strflags = 0
        start = 0
        out: list[Regexp] = []
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
        first: Regexp | None = None
        for i in range(len(sub) + 1):
            ifirst: Regexp | None = None
            if i < len(sub):
                ifirst = self.leading_regexp(sub[i])
                if (
                    first is not None
                    and first.equal(ifirst)
                    and (
                        is_char_class(first)
                        or first.op == REPEAT
                        and first.min == first.max
                        and is_char_class(first.sub[0])
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
            if i < len(sub) and is_char_class(sub[i]):
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
                    merge_char_class(sub[start], sub[j])
                    self.reuse(sub[j])
                clean_alt(sub[start])
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

    def leading_string(self, re: Regexp) -> tuple[list[int], int]:
        if re.op == CONCAT and re.sub:
            re = re.sub[0]
        if re.op != LITERAL:
            return [], 0
        return re.rune, re.flags & FOLD_CASE

    def remove_leading_string(self, re: Regexp, n: int) -> Regexp:
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

    def leading_regexp(self, re: Regexp) -> Regexp | None:
        if re.op == EMPTY_MATCH:
            return None
        if re.op == CONCAT and re.sub:
            sub = re.sub[0]
            if sub.op == EMPTY_MATCH:
                return None
            return sub
        return re

    def remove_leading_regexp(self, re: Regexp, reuse: bool) -> Regexp:
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
