"""TOML files for `ocihook check` (containers.conf, crio.conf): read by the standard library's
tomllib where Python has it (3.11 and later), else by tomli, the same reader before it became
tomllib: the copy the RPM bundles (ocihook._vendor.tomli, docs/rpm.md) or an installed one.

The reader is imported when a file is read, never on the hook's path. A file that is not TOML
(or not UTF-8) raises TomlError, one line that names the file and, where the reader says it,
the line and column: `PATH line N, column C: what`.
"""

from __future__ import annotations

import re
from typing import Any

from ocihook.errors import OcihookError

# Where tomllib and tomli put the position: "... (at line 2, column 6)", "... (at end of document)".
_POSITION = re.compile(r" \(at (?:line (\d+), column (\d+)|end of document)\)$")


class TomlError(OcihookError):
    """A file that is not TOML: `PATH line N, column C: what` (line and column None where
    the reader gives none: at the end of the file)."""

    def __init__(
        self, path: str, message: str, line: int | None = None, column: int | None = None
    ) -> None:
        where = f" line {line}, column {column}" if line is not None else ""
        super().__init__(f"{path}{where}: {message}")
        self.path = path
        self.line = line
        self.column = column
        self.message = message


def reader() -> Any:
    """The TOML module: tomllib, else the bundled tomli, else an installed tomli."""
    try:
        import tomllib

        return tomllib
    except ImportError:
        pass
    try:
        from ocihook._vendor import tomli  # type: ignore[import-not-found]

        return tomli
    except ImportError:
        pass
    try:
        import tomli  # type: ignore[import-not-found]
    except ImportError:
        raise OcihookError(
            "no TOML reader: this Python has no tomllib (3.11 and later) and no tomli "
            "(the RPM bundles one; on a by-hand install: pip install tomli, or docs/rpm.md)"
        ) from None
    return tomli


def parse(data: bytes, path: str) -> dict[str, Any]:
    """The TOML document in `data`, read from `path` (named in errors)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - data.rfind(b"\n", 0, error.start)
        raise TomlError(path, "not UTF-8", line, column) from None
    toml = reader()
    try:
        return toml.loads(text)
    except toml.TOMLDecodeError as error:
        raise _error(path, str(error)) from None


def _error(path: str, text: str) -> TomlError:
    match = _POSITION.search(text)
    message = text[: match.start()] if match else text
    message = message[:1].lower() + message[1:]
    if match and match[1]:
        return TomlError(path, message, int(match[1]), int(match[2]))
    if match:
        return TomlError(path, f"at the end of the file: {message}")
    return TomlError(path, message)


def load(path: str) -> dict[str, Any]:
    """Read and parse the TOML file at path (OSError if it cannot be read)."""
    with open(path, "rb") as file:
        data = file.read()
    return parse(data, path)


def lookup(document: dict[str, Any], keys: tuple[str, ...]) -> tuple[bool, Any]:
    """(True, value) at the dotted path `keys`, or (False, None) where it is not set."""
    node: Any = document
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node
