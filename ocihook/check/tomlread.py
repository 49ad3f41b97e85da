"""A TOML 1.0 reader for `ocihook check`: Python 3.9 has no `tomllib`, and RHEL 9 ships no TOML
package that this project may depend on.

containers.conf and crio.conf are TOML, and podman and CRI-O refuse to start on a file their
reader (BurntSushi/toml, TOML 1.0) rejects. `ocihook check` needs one key from each
(`[engine] hooks_dir`, `[crio.runtime] hooks_dir`), but must read the whole file to know
that the runtime can: so this is a whole reader, tables, array tables, dotted and quoted
keys, the four kinds of strings, integers, floats, booleans, dates and times, arrays across
lines, inline tables, comments, and TOML's rules against defining a key or table twice. A
malformed file raises TomlError, one line that names the file and the line.

tests/test_tomlread.py compares it with Python 3.11's tomllib on a corpus.
"""

from __future__ import annotations

import datetime
import re
import string
from typing import Any

_WS = " \t"
_BARE = frozenset(string.ascii_letters + string.digits + "-_")
# Control characters TOML allows nowhere but as escapes (tab is allowed).
_CONTROL = frozenset(chr(c) for c in [*range(0x00, 0x09), *range(0x0A, 0x20), 0x7F])
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}

_NUMBER = re.compile(
    r"0x[0-9A-Fa-f](?:_?[0-9A-Fa-f])*"
    r"|0o[0-7](?:_?[0-7])*"
    r"|0b[01](?:_?[01])*"
    r"|(?P<dec>[+-]?(?:0|[1-9](?:_?[0-9])*)"
    r"(?P<frac>\.[0-9](?:_?[0-9])*)?(?P<exp>[eE][+-]?[0-9](?:_?[0-9])*)?)"
)
_TIME = r"([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9])(?:\.([0-9]+))?"
_DATETIME = re.compile(
    r"([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    rf"(?:[Tt ]{_TIME}(?:([Zz])|([+-])([01][0-9]|2[0-3]):([0-5][0-9]))?)?"
)
_LOCAL_TIME = re.compile(_TIME)


class TomlError(ValueError):
    """A file that is not TOML: `PATH line N: what`."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path} line {line}: {message}")
        self.path = path
        self.line = line
        self.message = message


def load(path: str) -> dict[str, Any]:
    """Read and parse the TOML file at path (OSError if it cannot be read)."""
    with open(path, "rb") as file:
        data = file.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise TomlError(path, line, "not UTF-8") from None
    return loads(text, path)


def loads(text: str, path: str = "<string>") -> dict[str, Any]:
    """Parse a TOML document."""
    return _Parser(text.replace("\r\n", "\n"), path).document()


def lookup(document: dict[str, Any], keys: tuple[str, ...]) -> tuple[bool, Any]:
    """(True, value) at the dotted path `keys`, or (False, None) where it is not set."""
    node: Any = document
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


class _Namespaces:
    """What each table path may still become (TOML's 'defined once' rules): a table defined
    by a [header] or by dotted keys, and an inline table or array, which is frozen."""

    EXPLICIT, FROZEN = 1, 2

    def __init__(self) -> None:
        self.tree: dict[str, list] = {}  # key -> [flags, recursive flags, children]
        self.pending: set[tuple[tuple[str, ...], int]] = set()

    def _node(self, key: tuple[str, ...]) -> list:
        tree = self.tree
        node: list = []
        for part in key:
            node = tree.setdefault(part, [0, 0, {}])
            tree = node[2]
        return node

    def set(self, key: tuple[str, ...], flag: int, recursive: bool = False) -> None:
        self._node(key)[1 if recursive else 0] |= flag

    def has(self, key: tuple[str, ...], flag: int) -> bool:
        if not key:
            return False
        tree = self.tree
        for part in key[:-1]:
            if part not in tree:
                return False
            if tree[part][1] & flag:
                return True
            tree = tree[part][2]
        node = tree.get(key[-1])
        return node is not None and bool((node[0] | node[1]) & flag)

    def clear(self, key: tuple[str, ...]) -> None:
        tree = self.tree
        for part in key[:-1]:
            if part not in tree:
                return
            tree = tree[part][2]
        tree.pop(key[-1], None)

    def finish_section(self) -> None:
        for key, flag in self.pending:
            self.set(key, flag)
        self.pending.clear()


class _Parser:
    def __init__(self, src: str, path: str) -> None:
        self.src = src
        self.path = path
        self.data: dict[str, Any] = {}
        self.names = _Namespaces()

    def fail(self, pos: int, message: str) -> TomlError:
        return TomlError(self.path, self.src.count("\n", 0, pos) + 1, message)

    def char(self, pos: int) -> str:
        return self.src[pos] if pos < len(self.src) else ""

    def skip_ws(self, pos: int) -> int:
        while self.char(pos) in ("\t", " ") and pos < len(self.src):
            pos += 1
        return pos

    def skip_comment(self, pos: int) -> int:
        if self.char(pos) != "#":
            return pos
        end = self.src.find("\n", pos)
        end = len(self.src) if end < 0 else end
        for i in range(pos + 1, end):
            if self.src[i] in _CONTROL:
                raise self.fail(i, f"control character {self.src[i]!r} in a comment")
        return end

    def skip_blank(self, pos: int) -> int:
        """Whitespace, newlines and comments (inside arrays)."""
        while True:
            pos = self.skip_comment(self.skip_ws(pos))
            if self.char(pos) != "\n":
                return pos
            pos += 1

    # document structure
    def document(self) -> dict[str, Any]:
        src = self.src
        pos = 0
        header: tuple[str, ...] = ()
        while True:
            pos = self.skip_ws(pos)
            if pos >= len(src):
                break
            c = src[pos]
            if c == "\n":
                pos += 1
                continue
            if c in _BARE or c in "\"'":
                pos = self.key_value(pos, header)
            elif c == "[":
                self.names.finish_section()
                if self.char(pos + 1) == "[":
                    pos, header = self.array_table(pos)
                else:
                    pos, header = self.table(pos)
            elif c != "#":
                raise self.fail(pos, f"unexpected {c!r}: expected a key, a [table] or a comment")
            pos = self.skip_comment(self.skip_ws(pos))
            if pos >= len(src):
                break
            if src[pos] != "\n":
                raise self.fail(
                    pos, f"unexpected {src[pos]!r} after a statement: expected a newline"
                )
            pos += 1
        return self.data

    def nest(self, key: tuple[str, ...]) -> dict[str, Any]:
        """The table at key (the last element of an array of tables), created as needed."""
        node: Any = self.data
        for part in key:
            node = node.setdefault(part, {})
            if isinstance(node, list):
                node = node[-1]
            if not isinstance(node, dict):
                raise KeyError(part)
        return node

    def table(self, pos: int) -> tuple[int, tuple[str, ...]]:
        pos, key = self.key(self.skip_ws(pos + 1))
        if self.names.has(key, _Namespaces.EXPLICIT) or self.names.has(key, _Namespaces.FROZEN):
            raise self.fail(pos, f"table [{'.'.join(key)}] is defined twice")
        self.names.set(key, _Namespaces.EXPLICIT)
        try:
            self.nest(key)
        except KeyError:
            raise self.fail(pos, f"[{'.'.join(key)}]: a value, not a table, is there") from None
        if self.char(pos) != "]":
            raise self.fail(pos, "expected ']' at the end of the table header")
        return pos + 1, key

    def array_table(self, pos: int) -> tuple[int, tuple[str, ...]]:
        pos, key = self.key(self.skip_ws(pos + 2))
        if self.names.has(key, _Namespaces.FROZEN):
            raise self.fail(pos, f"[[{'.'.join(key)}]]: an inline value cannot be extended")
        self.names.clear(key)
        self.names.set(key, _Namespaces.EXPLICIT)
        try:
            parent = self.nest(key[:-1])
        except KeyError:
            raise self.fail(pos, f"[[{'.'.join(key)}]]: a value, not a table, is there") from None
        items = parent.setdefault(key[-1], [])
        if not isinstance(items, list):
            raise self.fail(pos, f"[[{'.'.join(key)}]]: a value, not an array, is there")
        items.append({})
        if self.src[pos : pos + 2] != "]]":
            raise self.fail(pos, "expected ']]' at the end of the array table header")
        return pos + 2, key

    def key_value(self, pos: int, header: tuple[str, ...]) -> int:
        pos, key, value = self.pair(pos)
        for i in range(1, len(key)):
            namespace = header + key[:i]
            if self.names.has(namespace, _Namespaces.EXPLICIT):
                raise self.fail(
                    pos, f"{'.'.join(key)}: table {'.'.join(namespace)} is defined twice"
                )
            self.names.pending.add((namespace, _Namespaces.EXPLICIT))
        parent = header + key[:-1]
        if self.names.has(parent, _Namespaces.FROZEN):
            raise self.fail(pos, f"{'.'.join(key)}: an inline value cannot be extended")
        try:
            nest = self.nest(parent)
        except KeyError:
            raise self.fail(pos, f"{'.'.join(key)}: a value is already there") from None
        if key[-1] in nest:
            raise self.fail(pos, f"{'.'.join(key)}: defined twice")
        if isinstance(value, (dict, list)):
            self.names.set(header + key, _Namespaces.FROZEN, recursive=True)
        nest[key[-1]] = value
        return pos

    def pair(self, pos: int) -> tuple[int, tuple[str, ...], Any]:
        pos, key = self.key(pos)
        if self.char(pos) != "=":
            raise self.fail(pos, f"expected '=' after the key {'.'.join(key)}")
        pos, value = self.value(self.skip_ws(pos + 1))
        return pos, key, value

    def key(self, pos: int) -> tuple[int, tuple[str, ...]]:
        parts = []
        while True:
            c = self.char(pos)
            if c == '"':
                pos, part = self.basic_string(pos)
            elif c == "'":
                pos, part = self.literal_string(pos)
            elif c in _BARE and c:
                end = pos
                while self.char(end) in _BARE and end < len(self.src):
                    end += 1
                part, pos = self.src[pos:end], end
            else:
                raise self.fail(pos, f"expected a key, not {c!r}" if c else "expected a key")
            parts.append(part)
            pos = self.skip_ws(pos)
            if self.char(pos) != ".":
                return pos, tuple(parts)
            pos = self.skip_ws(pos + 1)

    # values
    def value(self, pos: int) -> tuple[int, Any]:
        src = self.src
        c = self.char(pos)
        if c == '"':
            if src.startswith('"""', pos):
                return self.multiline_string(pos, '"""')
            return self.basic_string(pos)
        if c == "'":
            if src.startswith("'''", pos):
                return self.multiline_string(pos, "'''")
            return self.literal_string(pos)
        if c == "[":
            return self.array(pos)
        if c == "{":
            return self.inline_table(pos)
        for word, value in (("true", True), ("false", False)):
            if src.startswith(word, pos):
                return pos + len(word), value
        match = _DATETIME.match(src, pos)
        if match:
            return match.end(), self.datetime(match)
        match = _LOCAL_TIME.match(src, pos)
        if match:
            hour, minute, second, fraction = match.groups()
            micro = int((fraction or "")[:6].ljust(6, "0"))
            return match.end(), datetime.time(int(hour), int(minute), int(second), micro)
        for word in ("inf", "+inf", "-inf", "nan", "+nan", "-nan"):
            if src.startswith(word, pos):
                return pos + len(word), float(word)
        match = _NUMBER.match(src, pos)
        if match:
            text = match.group().replace("_", "")
            if match.group("frac") or match.group("exp"):
                return match.end(), float(text)
            if match.group("dec") is not None:
                return match.end(), int(text)
            return match.end(), int(text, 0)
        raise self.fail(pos, f"expected a value, not {c!r}" if c else "expected a value")

    def datetime(self, match: re.Match) -> Any:
        year, month, day, hour, minute, second, fraction, zulu, sign, oh, om = match.groups()
        try:
            date = datetime.date(int(year), int(month), int(day))
            if hour is None:
                return date
            micro = int((fraction or "")[:6].ljust(6, "0"))
            tz = None
            if zulu:
                tz = datetime.timezone.utc
            elif sign:
                offset = datetime.timedelta(hours=int(oh), minutes=int(om))
                tz = datetime.timezone(-offset if sign == "-" else offset)
            return datetime.datetime(
                date.year, date.month, date.day, int(hour), int(minute), int(second), micro, tz
            )
        except ValueError:
            raise self.fail(match.start(), f"invalid date or time {match.group()!r}") from None

    def array(self, pos: int) -> tuple[int, list]:
        start = pos
        items: list = []
        pos = self.skip_blank(pos + 1)
        while self.char(pos) != "]":
            if pos >= len(self.src):
                raise self.fail(start, "an array that is never closed")
            pos, item = self.value(pos)
            items.append(item)
            pos = self.skip_blank(pos)
            c = self.char(pos)
            if c == "]":
                break
            if not c:
                raise self.fail(start, "an array that is never closed")
            if c != ",":
                raise self.fail(pos, "expected ',' or ']' in an array")
            pos = self.skip_blank(pos + 1)
        return pos + 1, items

    def inline_table(self, pos: int) -> tuple[int, dict]:
        table: dict[str, Any] = {}
        names = _Namespaces()
        pos = self.skip_ws(pos + 1)
        if self.char(pos) == "}":
            return pos + 1, table
        while True:
            pos, key, value = self.pair(pos)
            node = table
            for i, part in enumerate(key[:-1]):
                if names.has(key[: i + 1], _Namespaces.FROZEN):
                    raise self.fail(pos, f"{'.'.join(key)}: an inline value cannot be extended")
                node = node.setdefault(part, {})
                if not isinstance(node, dict):
                    raise self.fail(pos, f"{'.'.join(key)}: a value is already there")
            if names.has(key[:-1], _Namespaces.FROZEN):
                raise self.fail(pos, f"{'.'.join(key)}: an inline value cannot be extended")
            if key[-1] in node:
                raise self.fail(pos, f"{'.'.join(key)}: defined twice")
            node[key[-1]] = value
            if isinstance(value, (dict, list)):
                names.set(key, _Namespaces.FROZEN, recursive=True)
            pos = self.skip_ws(pos)
            c = self.char(pos)
            if c == "}":
                return pos + 1, table
            if c != ",":
                raise self.fail(pos, "expected ',' or '}' in an inline table")
            pos = self.skip_ws(pos + 1)

    # strings
    def literal_string(self, pos: int) -> tuple[int, str]:
        end = pos + 1
        while True:
            c = self.char(end)
            if c == "'":
                return end + 1, self.src[pos + 1 : end]
            if not c or c == "\n":
                raise self.fail(end, "unterminated string")
            if c in _CONTROL:
                raise self.fail(end, f"control character {c!r} in a string")
            end += 1

    def basic_string(self, pos: int) -> tuple[int, str]:
        out = []
        pos += 1
        while True:
            c = self.char(pos)
            if c == '"':
                return pos + 1, "".join(out)
            if not c or c == "\n":
                raise self.fail(pos, "unterminated string")
            if c == "\\":
                pos, text = self.escape(pos)
                out.append(text)
                continue
            if c in _CONTROL:
                raise self.fail(pos, f"control character {c!r} in a string")
            out.append(c)
            pos += 1

    def multiline_string(self, pos: int, quote: str) -> tuple[int, str]:
        basic = quote == '"""'
        start = pos
        pos += 3
        if self.char(pos) == "\n":
            pos += 1
        out = []
        while True:
            c = self.char(pos)
            if not c:
                raise self.fail(start, "a multi-line string that is never closed")
            if self.src.startswith(quote, pos):
                # Up to two quotes right before the closing three belong to the string.
                extra = 0
                while extra < 2 and self.char(pos + 3 + extra) == quote[0]:
                    extra += 1
                out.append(quote[0] * extra)
                return pos + 3 + extra, "".join(out)
            if basic and c == "\\":
                after = self.skip_ws(pos + 1)
                if self.char(after) == "\n":  # a line-ending backslash trims what follows
                    pos = after
                    while self.char(pos) in (" ", "\t", "\n") and pos < len(self.src):
                        pos += 1
                    continue
                pos, text = self.escape(pos)
                out.append(text)
                continue
            if c in _CONTROL and c != "\n":
                raise self.fail(pos, f"control character {c!r} in a string")
            out.append(c)
            pos += 1

    def escape(self, pos: int) -> tuple[int, str]:
        c = self.char(pos + 1)
        if c in _ESCAPES and c:
            return pos + 2, _ESCAPES[c]
        if c in ("u", "U"):
            width = 4 if c == "u" else 8
            digits = self.src[pos + 2 : pos + 2 + width]
            if len(digits) == width and all(d in string.hexdigits for d in digits):
                code = int(digits, 16)
                if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF:
                    return pos + 2 + width, chr(code)
            raise self.fail(pos, f"invalid escape \\{c}{digits}: not a Unicode scalar value")
        raise self.fail(pos, f"invalid escape {self.src[pos : pos + 2]!r}")
