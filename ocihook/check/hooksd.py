"""One hooks.d file, checked the way podman and CRI-O read it (containers/common pkg/hooks,
format 1.0.0), and what ocihook needs of its own registration.

The runtime decodes the JSON with Go's encoding/json into hook.Hook (keys matched to field
names without regard to case, unknown keys ignored, a JSON null leaving a field as it was,
a repeated object merged into the one before), then Hook.Validate: version "1.0.0", a
non-empty hook.path that exists, every when.annotations key and value and every
when.commands entry compiled by Go's regexp, stages present and each a known stage. A file
that fails is rejected, and with it every container the runtime starts (podman fails the
container, CRI-O does not start); a hook.path that does not exist makes the runtime skip the
file without a word. Some files pass and never run: `when` without a condition, `always` or
`hasBindMounts` false, no stage.

Here the decoded document is validated against ocihook/hooksd.schema.json (JSON Schema draft
7, which jsonschema 3.2 has), the patterns by ocihook/check/goregexp/syntax.py under the regexp of
each Go version the runtimes are built with (podman 4.3 on Debian 12: go1.19; CRI-O 1.37
here: go1.26): a pattern must be valid for all of them.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field

from ocihook.errors import describe

RUNTIME_STAGES = (
    "createContainer",
    "createRuntime",
    "prestart",
    "poststart",
    "poststop",
    "startContainer",
)
PODMAN_EXTENSION_STAGES = ("precreate",)  # podman runs these itself; CRI-O rejects them

# Go struct fields of containers/common's hook.Hook, by JSON name: the kind of each.
_STRUCTS = {
    "": {"version": "string", "hook": "struct:hook", "when": "struct:when", "stages": "slice"},
    "hook": {"path": "string", "args": "slice", "env": "slice", "timeout": "pointer"},
    "when": {
        "always": "pointer",
        "annotations": "map",
        "commands": "slice",
        "hasBindMounts": "pointer",
    },
}


@dataclass
class HookFile:
    """What is wrong with one hooks.d file, sorted by consequence."""

    path: str
    ocihook: bool = False  # its hook runs ocihook
    rejected: list[str] = field(default_factory=list)  # the runtime refuses the file
    skipped: list[str] = field(default_factory=list)  # the runtime ignores the file
    never_runs: list[str] = field(default_factory=list)  # accepted, but never runs
    ocihook_needs: list[str] = field(default_factory=list)  # what ocihook's hook needs
    warnings: list[str] = field(default_factory=list)  # keys the runtime ignores, and such
    # What the runtime does with the file: ok, error (refuses it), skip (hook.path does not
    # exist: Validate's first error is "not found", which the runtime passes over silently),
    # unchecked (the deprecated 0.1.0 format).
    verdict: str = "error"
    precreate: bool = False  # its stages are podman's precreate only (the precreate route)
    stages: list[str] = field(default_factory=list)  # the stages it names (strings only)

    @property
    def usable(self) -> bool:
        """Whether the runtime runs this file's hook for some container."""
        return not (self.rejected or self.skipped or self.never_runs) and self.verdict == "ok"

    @property
    def problems(self) -> list[str]:
        """Everything that keeps the file from working (not the warnings)."""
        return self.rejected + self.skipped + self.never_runs + self.ocihook_needs


class _Pairs(list):
    """A JSON object as its (key, value) pairs, in order, repeats included."""


def _go_fold(name: str) -> str:
    """encoding/json's foldName: ASCII upper case, other runes the least of their case
    orbit (so "ſ" matches "s" and the Kelvin sign "k")."""
    from ocihook.check.goregexp.runes import simple_fold

    out = []
    for c in name:
        r = ord(c)
        if r < 0x80:
            out.append(c.upper())
            continue
        while True:
            r2 = simple_fold(r)
            if r2 <= r:
                break
            r = r2
        out.append(chr(r2))
    return "".join(out)


def _plain(value: object) -> object:
    """JSON data with objects as dicts (a repeated key: the last one) and strings as Go
    has them (a lone surrogate escape is U+FFFD)."""
    if isinstance(value, _Pairs):
        return {_go_string(k): _plain(v) for k, v in value}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return _go_string(value)
    return value


def _go_string(text: str) -> str:
    if all(not 0xD800 <= ord(c) <= 0xDFFF for c in text):
        return text
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


@functools.cache
def _schema() -> dict:
    schema_path = os.path.join(os.path.dirname(__file__), "hooksd.schema.json")
    with open(schema_path, "rb") as file:
        return json.loads(file.read())


@functools.cache
def _validator_class():
    import jsonschema

    base = jsonschema.Draft7Validator
    # Go's int takes no 1.0 (JSON Schema draft 7's "integer" does).
    checker = base.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    )
    return jsonschema.validators.extend(base, type_checker=checker)


def _where(path) -> str:
    """A field path as text: hook.args[0], when.annotations["^a\\.b$"]."""
    out = ""
    for part in path:
        if isinstance(part, str) and part and all(c.isalnum() or c == "_" for c in part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


_GO_TYPES = ("type", "minimum", "maximum")  # the schema's rules that Go's decoder applies
_VALIDATORS: dict[int, object] = {}  # by id of a part of the (cached) schema


class _Decoder:
    """encoding/json decoding a document into hook.Hook: keys folded to field names (an
    exact match first), unknown keys ignored, null leaving a string or struct as it was and
    making a pointer, slice or map nil, an object decoded into the struct or map decoded so
    far. Each value is checked against its part of ocihook/hooksd.schema.json as Go checks
    its type: one that does not fit is an error even when a later repeat of the key fits
    (Go reports the first such error after decoding the rest)."""

    def __init__(self) -> None:
        self.schema = _schema()
        self.validator = _validator_class()
        self.type_errors: list[tuple[tuple, str]] = []  # (field path, message)
        self.ignored: list[str] = []

    def fits(self, value: object, schema: dict, path: tuple) -> bool:
        """Whether Go decodes value into the field (its type and, for an int, its range)."""
        validator = _VALIDATORS.get(id(schema))
        if validator is None:
            validator = _VALIDATORS[id(schema)] = self.validator(schema)
        errors = [e for e in validator.iter_errors(value) if e.validator in _GO_TYPES]
        errors.sort(key=lambda e: [str(p) for p in e.path])
        for error in errors:
            where = _where(path + tuple(error.path))
            if error.validator == "type":
                wanted = error.validator_value
                wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
                message = f"{where}: must be {wanted}, not {json.dumps(error.instance)}"
            else:
                message = f"{where}: {error.message}"
            self.type_errors.append((path, message))
        return not errors

    def struct(self, pairs: _Pairs, kind: str, schema: dict, into: dict, path: tuple) -> dict:
        fields = _STRUCTS[kind]
        folded = {_go_fold(name): name for name in fields}
        for key, value in pairs:
            key = _go_string(key)
            name = key if key in fields else folded.get(_go_fold(key))
            if name is None:
                self.ignored.append(_where(path + (key,)))
                continue
            ftype = fields[name]
            sub = schema["properties"][name]
            where = path + (name,)
            if value is None:
                if ftype in ("pointer", "slice", "map"):
                    into.pop(name, None)
                continue
            if ftype.startswith("struct:") and isinstance(value, _Pairs):
                previous = into.get(name) if isinstance(into.get(name), dict) else {}
                into[name] = self.struct(value, ftype[7:], sub, previous, where)
            elif ftype == "map" and isinstance(value, _Pairs):
                merged = into.get(name) if isinstance(into.get(name), dict) else {}
                for k, v in value:
                    v = "" if v is None else _plain(v)
                    if self.fits(v, sub["additionalProperties"], where + (_go_string(k),)):
                        merged[_go_string(k)] = v
                into[name] = merged
            elif ftype == "slice" and isinstance(value, list) and not isinstance(value, _Pairs):
                items = ["" if v is None else _plain(v) for v in value]
                if self.fits(items, sub, where):
                    into[name] = items
            elif self.fits(_plain(value), sub, where):
                into[name] = _plain(value)
        return into


def decode(data: bytes) -> tuple[object, list[str], list[tuple[tuple, str]]]:
    """(the document as Go decodes it into hook.Hook, the keys it ignores, the type errors:
    (field path, message)). ValueError when it is not JSON (Go's decoder refuses it too)."""

    def constant(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    text = data.decode("utf-8", "replace")  # Go puts U+FFFD for invalid UTF-8 in strings
    try:
        document = json.loads(text, object_pairs_hook=_Pairs, parse_constant=constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(document, _Pairs):
        return _plain(document), [], []
    decoder = _Decoder()
    decoded = decoder.struct(document, "", decoder.schema, {}, ())
    return decoded, decoder.ignored, decoder.type_errors


def _structure_problems(document: dict) -> list[str]:
    """What Hook.Validate requires of the decoded document's structure (the schema's
    "required" and "minLength"), as messages."""
    problems = []
    validator = _validator_class()(_schema())
    errors = sorted(validator.iter_errors(document), key=lambda e: [str(p) for p in e.path])
    for error in errors:
        where = _where(error.absolute_path)
        if error.validator == "required":
            missing = error.message.split("'")[1]
            problems.append(f"{where}.{missing}: missing" if where else f"{missing}: missing")
        elif error.validator == "minLength":
            problems.append(f"{where}: must not be empty")
        elif error.validator == "const":
            problems.append(f'{where}: must be "1.0.0", not {json.dumps(error.instance)}')
    return problems


def _pattern_problem(pattern: str, where: str) -> str | None:
    """Why the Go versions the runtimes are built with reject a when pattern, or None."""
    from ocihook.check.goregexp import syntax
    from ocihook.check.goregexp.dialect import GO119, GO121, GO126

    dialects = (GO119, GO121, GO126)
    errors = {d.name: syntax.check(pattern, d) for d in dialects}
    failing = [name for name, error in errors.items() if error is not None]
    if not failing:
        return None
    error = next(e for e in errors.values() if e is not None)
    if len(failing) == len(dialects):
        return f"{where} {pattern!r}: not a Go regexp ({error})"
    hint = " (write (?P<name>...))" if "(?<" in error.expr else ""
    return (
        f"{where} {pattern!r}: {' and '.join(failing)}'s regexp rejects it ({error}){hint}; "
        f"podman 4.3 on Debian 12 is built with go1.19, CRI-O 1.37 here with go1.26"
    )


def runs_ocihook(document: object, data: bytes) -> bool:
    """Whether a hooks.d file registers ocihook (its hook's path or first argument names
    it; for a file that is not valid, whether it mentions ocihook at all)."""
    if isinstance(document, dict) and isinstance(document.get("hook"), dict):
        hook = document["hook"]
        args = hook.get("args") if isinstance(hook.get("args"), list) else []
        names = [hook.get("path")] + args[:1]
        return any(isinstance(n, str) and "ocihook" in os.path.basename(n) for n in names)
    return b"ocihook" in data


def check_hook_file(path: str, extension_stages: tuple[str, ...] = ()) -> HookFile:
    """Everything podman, CRI-O and ocihook would say about the hooks.d file at path.
    `extension_stages`: the ones the runtimes reading its dir accept (podman's precreate,
    for a dir only podman reads); by default none, as CRI-O (which refuses to start with
    such a file in its hooks dir)."""
    result = HookFile(path)
    try:
        with open(path, "rb") as file:
            data = file.read(1 << 20)
    except OSError as error:
        result.rejected.append(f"cannot be read ({describe(error)})")
        return result
    try:
        document, ignored, type_errors = decode(data)
    except ValueError as error:
        result.ocihook = b"ocihook" in data
        result.rejected.append(f"not valid JSON: {error}")
        return result
    result.ocihook = runs_ocihook(document, data)
    if document is None:
        result.verdict = "unchecked"
        result.warnings.append("null: the runtime reads it in the deprecated 0.1.0 format")
        return result
    if not isinstance(document, dict):
        result.rejected.append("must be a JSON object")
        return result
    version_errors = [m for p, m in type_errors if p == ("version",)]
    if version_errors:
        result.rejected += version_errors
        return result
    version = document.get("version", "")
    if version != "1.0.0":
        if version in ("", "0.1.0"):
            result.verdict = "unchecked"
            message = (
                f"version {json.dumps(version)}: the runtime reads it in the deprecated 0.1.0 "
                'format, which ocihook check does not check (ocihook ships "1.0.0")'
            )
            (result.ocihook_needs if result.ocihook else result.warnings).append(message)
        else:
            result.rejected.append(f'version must be "1.0.0", not {json.dumps(version)}')
        return result
    result.warnings += [f"{key}: unknown key, ignored by the runtime" for key in ignored]
    result.rejected += [m for _, m in type_errors]
    structure = [] if type_errors else _structure_problems(document)
    result.rejected += structure
    path_missing = _runtime_rules(document, result, extension_stages)
    result.precreate = document.get("stages") == ["precreate"]
    if type_errors or any(p.startswith("hook") for p in structure):
        result.verdict = "error"  # Go's decoder, or Validate before it looks at hook.path
    elif path_missing:
        result.verdict = "skip"
    elif result.rejected:
        result.verdict = "error"
    else:
        result.verdict = "ok"
    if result.ocihook:
        _ocihook_rules(document, result)
    return result


def _runtime_rules(
    document: dict, result: HookFile, extension_stages: tuple[str, ...] = ()
) -> bool:
    """Hook.Validate's rules past the types; True when hook.path does not exist."""
    hook = document.get("hook") if isinstance(document.get("hook"), dict) else {}
    exe = hook.get("path")
    path_missing = False
    if isinstance(exe, str) and exe:
        try:
            os.stat(exe)
        except FileNotFoundError:
            path_missing = True
            result.skipped.append(
                f"hook.path {exe} does not exist: the runtime ignores this file "
                "(the hook never runs)"
            )
        except OSError as error:
            result.rejected.append(f"hook.path {exe}: {describe(error)}")
    when = document.get("when") if isinstance(document.get("when"), dict) else {}
    annotations = when.get("annotations")
    if isinstance(annotations, dict):
        for key, value in annotations.items():
            problem = _pattern_problem(key, "when.annotations key")
            if problem:
                result.rejected.append(problem)
            if isinstance(value, str):
                problem = _pattern_problem(value, f"when.annotations[{key!r}]")
                if problem:
                    result.rejected.append(problem)
    commands = when.get("commands")
    if isinstance(commands, list):
        for command in commands:
            if isinstance(command, str):
                problem = _pattern_problem(command, "when.commands")
                if problem:
                    result.rejected.append(problem)
    stages = document.get("stages")
    if isinstance(stages, list):
        result.stages = [stage for stage in stages if isinstance(stage, str)]
        for stage in stages:
            if not isinstance(stage, str) or stage in RUNTIME_STAGES:
                continue
            if stage in PODMAN_EXTENSION_STAGES and stage in extension_stages:
                result.warnings.append(
                    f"stages: {stage!r} is podman's only: CRI-O refuses to start with this "
                    "file in a dir it reads"
                )
            elif stage in PODMAN_EXTENSION_STAGES:
                result.rejected.append(
                    f"stages: {stage!r} is podman's only: CRI-O rejects it (and refuses to "
                    "start with it in its hooks dir); keep it in a dir only podman reads"
                )
            else:
                result.rejected.append(f"stages: unknown stage {stage!r}")
        if not stages:
            result.never_runs.append("stages: empty: the hook never runs")
    conditions = [when.get(k) for k in ("always", "hasBindMounts")]
    if not any(c is not None for c in conditions) and not annotations and not commands:
        result.never_runs.append("when: no condition: the runtime never runs this hook")
    for key in ("always", "hasBindMounts"):
        if when.get(key) is False:
            result.never_runs.append(f"when.{key} is false: the runtime never runs this hook")
    return path_missing


def _ocihook_rules(document: dict, result: HookFile) -> None:
    hook = document.get("hook") if isinstance(document.get("hook"), dict) else {}
    exe = hook.get("path")
    if isinstance(exe, str) and exe and os.path.exists(exe):
        if not os.path.isabs(exe):
            result.ocihook_needs.append(f"hook.path {exe}: must be absolute")
        elif not os.path.isfile(exe) or not os.access(exe, os.X_OK):
            result.ocihook_needs.append(f"hook.path {exe} is not an executable file")
    if "env" not in hook or hook.get("env") is None:
        result.ocihook_needs.append("hook.env: missing (ocihook expects an explicit environment)")
    timeout = hook.get("timeout")
    if isinstance(timeout, int) and not isinstance(timeout, bool) and timeout < 1:
        result.ocihook_needs.append(
            f"hook.timeout: must be a positive integer (the runtime stops the hook after "
            f"{timeout} s)"
        )
    stages = document.get("stages")
    if isinstance(stages, list) and "precreate" in stages:
        args = hook.get("args") if isinstance(hook.get("args"), list) else []
        if "--stage" not in args or "precreate" not in args:
            result.ocihook_needs.append(
                "stages: precreate: hook.args must have --stage precreate (the hook reads "
                "an OCI config there, not the state)"
            )
        if set(stages) != {"precreate"}:
            result.ocihook_needs.append(
                "stages: precreate shares a file with other stages: the precreate "
                "registration is a file of its own (hooks.d/ocihook-precreate.json)"
            )
        return
    if isinstance(stages, list) and stages:
        if not {"prestart", "createRuntime"} & set(stages):
            result.ocihook_needs.append(
                "stages: neither prestart nor createRuntime: the hook never injects the driver"
            )
        elif {"prestart", "createRuntime"} <= set(stages):
            result.ocihook_needs.append(
                "stages: both prestart and createRuntime: the runtime runs the hook twice at "
                "the same point; keep createRuntime (prestart only for a runtime without it)"
            )
