"""One line for a JSON Schema failure, the same under every supported jsonschema.

jsonschema 3.2 (RHEL 9) and 4.x pick a different "best" error (`best_match`) and word some
errors differently, and 3.2 lists unknown keys in set order. The config's errors are chosen
and worded here instead:
- among the errors, the one highest up in the document (a oneOf/anyOf there only when
  nothing else is wrong at that level), then the first by path;
- inside a oneOf/anyOf, the alternatives whose type the value has (a string is not read as
  an object); of those, the one the value got furthest in, when one did; when several are
  left at the same depth their messages are joined with ", or "; when none is left, the
  types that were expected;
- messages that differ between versions (minItems, minLength, not, false schemas, unknown
  keys) in words of our own.
A key that must be absent is written `{"not": {}}`, not `false`: jsonschema 4 reports a false
schema under `properties` without the key's name in the error's path.
Imported only when a config is compiled (never on the hook's fresh-cache path).
"""

from __future__ import annotations

WEAK = frozenset({"oneOf", "anyOf"})


def one_line(errors: list) -> tuple[str, str]:
    """(dotted key, message) for the errors of one validation (not empty)."""
    error, message = _resolve(_first(errors))
    return ".".join(str(p) for p in error.absolute_path) or "(top level)", message


def _first(errors: list):
    """The shallowest error, oneOf/anyOf last at a level, then the first by path."""
    return min(errors, key=lambda e: (len(e.path), e.validator in WEAK, [str(p) for p in e.path]))


def _resolve(error) -> tuple:
    """The error to name the key of, and the message."""
    if error.validator not in WEAK or not error.context:
        return error, _message(error)
    branches: dict[int, list] = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    mismatched = {
        index
        for index, errors in branches.items()
        if any(e.validator == "type" and not e.path for e in errors)
    }
    fitting = {index: errors for index, errors in branches.items() if index not in mismatched}
    if not fitting:
        wanted: list[str] = []
        for e in error.context:
            if e.validator == "type" and not e.path:
                types = e.validator_value
                wanted += [types] if isinstance(types, str) else list(types)
        names = " or ".join(repr(t) for t in dict.fromkeys(wanted))
        return error, f"{error.instance!r} is not of type {names}"
    depth = {index: max(len(e.path) for e in errors) for index, errors in fitting.items()}
    deepest = max(depth.values())
    chosen = [fitting[index] for index in sorted(fitting) if depth[index] == deepest]
    if len(chosen) == 1 or deepest > 0:
        return _resolve(_first(chosen[0]))
    return error, ", or ".join(_resolve(_first(errors))[1] for errors in chosen)


def _message(error) -> str:
    validator, value, instance = error.validator, error.validator_value, error.instance
    if validator == "additionalProperties" and isinstance(instance, dict):
        known = error.schema.get("properties", {})
        extra = [key for key in instance if key not in known]
        verb = "was" if len(extra) == 1 else "were"
        return f"unknown key ({', '.join(repr(key) for key in extra)} {verb} unexpected)"
    if validator in ("minItems", "minLength") and value == 1:
        return f"{instance!r} must not be empty"
    if validator in ("minItems", "minLength"):
        return f"{instance!r} is too short (at least {value})"
    if validator in ("maxItems", "maxLength"):
        return f"{instance!r} is too long (at most {value})"
    if validator == "not" or validator is None:  # None: a false schema
        return f"{instance!r} is not allowed"
    return error.message
