"""Struct: a plain record class, the part of dataclasses the hook needs.

`dataclasses` pulls in inspect, ast and dis: about 10 ms of imports at every container
start. A Struct subclass lists its fields in __slots__ and optional defaults in
_defaults (lists and dicts are copied per instance).
"""

from __future__ import annotations


class Struct:
    __slots__: tuple[str, ...] = ()
    _defaults: dict = {}

    def __init__(self, *args: object, **kwargs: object) -> None:
        names = self.__slots__
        if not kwargs and len(args) == len(names):  # the hot path: every field positional
            for name, value in zip(names, args):
                object.__setattr__(self, name, value)
            return
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}: too many arguments")
        values = dict(zip(names, args))
        for name, value in kwargs.items():
            if name not in names or name in values:
                raise TypeError(f"{type(self).__name__}: bad or repeated field {name!r}")
            values[name] = value
        for name in names:
            if name in values:
                value = values[name]
            elif name in self._defaults:
                value = self._defaults[name]
                if isinstance(value, (list, dict)):
                    value = value.copy()
            else:
                raise TypeError(f"{type(self).__name__}: missing field {name!r}")
            object.__setattr__(self, name, value)

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values() == self._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({fields})"

    def replace(self, **changes: object) -> Struct:
        """A copy with the fields in `changes` set to new values (the others shared)."""
        names = self.__slots__
        copy = object.__new__(type(self))
        for name in names:
            object.__setattr__(
                copy, name, changes.pop(name) if name in changes else getattr(self, name)
            )
        if changes:
            raise TypeError(f"{type(self).__name__}: no field {next(iter(changes))!r}")
        return copy

    def to_dict(self) -> dict:
        """Fields as plain JSON-able data (nested Structs, lists and tuples too)."""
        return {name: _plain(getattr(self, name)) for name in self.__slots__}


def _plain(value: object) -> object:
    if isinstance(value, Struct):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
