"""JSON for the hot path without importing `json` (its decoder and encoder compile regular
expressions at import time: about 10 ms at every container start).

`loads` uses the C scanner that `json` itself uses (`_json.make_scanner`); `dumps` writes
plain data (dict, list, tuple, str, int, float, bool, None): on one line with the C encoder
`json.dumps` itself uses without an indent (`_json.make_encoder`: the records, the precreate
stage's config), indented with `_json`'s string encoder. Where a Python build lacks `_json`,
both fall back to `json`.
"""

from __future__ import annotations

try:
    from _json import encode_basestring_ascii as _encode_string
    from _json import make_scanner as _make_scanner
except ImportError:  # pragma: no cover - every CPython build has _json
    _make_scanner = _encode_string = None
try:
    from _json import make_encoder as _make_encoder
except ImportError:  # pragma: no cover
    _make_encoder = None

_WHITESPACE = " \t\n\r"


class _Context:
    """The attributes the C scanner reads (those of json.JSONDecoder's defaults)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo: dict = {}

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


_scanner = _make_scanner(_Context()) if _make_scanner else None


def loads(data: bytes | str) -> object:
    """Parse one JSON document (bytes are UTF-8); ValueError on anything else."""
    text = data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data
    if _scanner is None:  # pragma: no cover
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scanner(text, start)
    except Exception:  # noqa: BLE001 - bad input: let `json` say exactly what is wrong
        return _slow_loads(text)
    if text[end:].strip(_WHITESPACE):
        return _slow_loads(text)
    return value


def _slow_loads(text: str) -> object:
    """`json.loads`, for input the fast path rejected (its errors need json.decoder loaded)."""
    import json

    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def dumps(value: object, indent: int | None = 1) -> str:
    """Serialize plain data, keys sorted, `indent` spaces per level (like json.dumps); with
    `indent` None on one line, as `json.dumps(value, sort_keys=True)` writes it."""
    if indent is None and _make_encoder is not None and _encode_string is not None:
        # json.encoder's own C encoder, as json.dumps builds it: circular check, keys sorted,
        # NaN and infinities refused, anything but plain data a TypeError (`_refuse`).
        encode = _make_encoder({}, _refuse, _encode_string, None, ": ", ", ", True, False, False)
        return "".join(encode(value, 0))
    if _encode_string is None or indent is None:  # pragma: no cover
        import json

        return json.dumps(value, indent=indent, sort_keys=True)
    parts: list[str] = []
    _encode(value, parts, indent, 0)
    return "".join(parts)


def _refuse(value: object) -> object:
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _encode(value: object, out: list[str], indent: int, level: int) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_encode_string(value))
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"cannot encode {value!r} as JSON")
        out.append(float.__repr__(value))
    elif isinstance(value, (list, tuple)):
        _container("[", "]", [(None, v) for v in value], out, indent, level)
    elif isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"JSON object keys must be strings, not {type(key).__name__}")
        _container("{", "}", sorted(value.items()), out, indent, level)
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _container(open_: str, close: str, items: list, out: list[str], indent: int, level: int):
    if not items:
        out.append(open_ + close)
        return
    inner = "\n" + " " * (indent * (level + 1))
    out.append(open_)
    for i, (key, item) in enumerate(items):
        out.append(("," if i else "") + inner)
        if key is not None:
            out.append(_encode_string(key) + ": ")
        _encode(item, out, indent, level + 1)
    out.append("\n" + " " * (indent * level) + close)
