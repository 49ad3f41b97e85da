"""hooks.d files as podman and CRI-O read them (ocihook/check/hooksd.py): containers/common's 1.0.0
rules, Go's JSON decoding and Go's regexp; differential against Go's encoding/json and
regexp (tests/support/hooksoracle) on thousands of generated files."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from ocihook.check import hooksd
from tests.support import goregexp

REPO = Path(__file__).resolve().parent.parent
EXISTING = "/bin/sh"  # a hook.path that exists on every machine of this project


def base(**changes) -> dict:
    document = {
        "version": "1.0.0",
        "hook": {
            "path": EXISTING,
            "args": ["ocihook-hook", "--config", "/etc/ocihook/config.yaml"],
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
            "timeout": 30,
        },
        "when": {"annotations": {r"^ocihook\.io/devices$": ".+"}},
        "stages": ["prestart", "poststop"],
    }
    document.update(changes)
    return document


def report(tmp_path: Path, document: object | str | bytes) -> hooksd.HookFile:
    path = tmp_path / "hook.json"
    if isinstance(document, bytes):
        path.write_bytes(document)
    else:
        path.write_text(document if isinstance(document, str) else json.dumps(document))
    return hooksd.check_hook_file(str(path))


@pytest.mark.parametrize("name", ["ocihook.json", "ocihook-env.json"])
def test_the_shipped_files_are_what_the_runtimes_accept(name, tmp_path):
    document = json.loads((REPO / "hooks.d" / name).read_text())
    document["hook"]["path"] = EXISTING
    result = report(tmp_path, document)
    assert result.verdict == "ok" and result.ocihook and result.usable
    assert result.problems == [] and result.warnings == []


@pytest.mark.parametrize(
    ("document", "verdict", "kind", "words"),
    [
        # Hook.Validate
        (base(version="1.0"), "error", "rejected", 'version must be "1.0.0", not "1.0"'),
        (base(hook={"args": []}), "error", "rejected", "hook.path: missing"),
        (base(hook={"path": "", "env": []}), "error", "rejected", "hook.path: must not be empty"),
        (base(hook={"path": "/nonexistent/hook", "env": []}), "skip", "skipped",
         "/nonexistent/hook does not exist: the runtime ignores this file"),
        (base(stages=None), "error", "rejected", "stages: missing"),
        (base(stages=["prestart", "bogus"]), "error", "rejected", "unknown stage 'bogus'"),
        (base(stages=["precreate"]), "error", "rejected", "'precreate' is podman's only"),
        (base(when={"annotations": {"(?=x)": ".+"}}), "error", "rejected",
         "when.annotations key '(?=x)': not a Go regexp (invalid or unsupported Perl syntax"),
        (base(when={"annotations": {"a": "(x)\\1"}}), "error", "rejected",
         "when.annotations['a'] '(x)\\\\1': not a Go regexp (invalid escape sequence"),
        (base(when={"commands": ["a++"]}), "error", "rejected",
         "when.commands 'a++': not a Go regexp (invalid nested repetition operator"),
        (base(when={"annotations": {"(?<n>a)": ".+"}}), "error", "rejected",
         "go1.19 and go1.21's regexp rejects it"),
        (base(when={"annotations": {"\\p{Old_Italic}": ".+"}}), "error", "rejected",
         "go1.26's regexp rejects it"),
        (base(when={"annotations": {"\\p{Kawi}": ".+"}}), "error", "rejected",
         "go1.19's regexp rejects it"),
        # Go's JSON decoding
        (base(hook={"path": EXISTING, "env": [], "timeout": 1.0}), "error", "rejected",
         "hook.timeout: must be integer or null, not 1.0"),
        (base(hook={"path": EXISTING, "env": [], "timeout": "5"}), "error", "rejected",
         'hook.timeout: must be integer or null, not "5"'),
        (base(hook={"path": EXISTING, "env": [], "timeout": 2**63}), "error", "rejected",
         "hook.timeout: 9223372036854775808 is greater than the maximum"),
        (base(when={"always": "true"}), "error", "rejected",
         'when.always: must be boolean or null, not "true"'),
        (base(stages="prestart"), "error", "rejected", 'stages: must be array, not "prestart"'),
        (base(hook="/bin/sh"), "error", "rejected", 'hook: must be object, not "/bin/sh"'),
        ("[1, 2]", "error", "rejected", "must be a JSON object"),
        ('{"version": "1.0.0",', "error", "rejected", "not valid JSON"),
        ('{"version": NaN}', "error", "rejected", "not valid JSON: NaN is not JSON"),
        # accepted, never runs
        (base(when={}), "ok", "never_runs", "when: no condition: the runtime never runs"),
        (base(when={"always": False}), "ok", "never_runs", "when.always is false"),
        (base(when={"hasBindMounts": False}), "ok", "never_runs", "when.hasBindMounts is false"),
        (base(stages=[]), "ok", "never_runs", "stages: empty: the hook never runs"),
        # ocihook's own needs
        (base(hook={"path": EXISTING, "args": ["ocihook-hook"]}), "ok", "ocihook_needs",
         "hook.env: missing (ocihook expects an explicit environment)"),
        (base(hook={"path": EXISTING, "args": ["ocihook-hook"], "env": [], "timeout": 0}), "ok",
         "ocihook_needs", "hook.timeout: must be a positive integer"),
        (base(stages=["poststop"]), "ok", "ocihook_needs",
         "neither prestart nor createRuntime: the hook never injects the driver"),
        (base(version="0.1.0"), "unchecked", "ocihook_needs", "the deprecated 0.1.0 format"),
        (base(wehn={"always": True}), "ok", "warnings", "wehn: unknown key, ignored"),
    ],
)  # fmt: skip
def test_what_the_runtime_and_ocihook_say(document, verdict, kind, words, tmp_path):
    result = report(tmp_path, document)
    assert result.verdict == verdict, result
    assert any(words in p for p in getattr(result, kind)), getattr(result, kind)


def test_ocihook_needs_an_executable(tmp_path):
    plain = tmp_path / "ocihook-hook"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    result = report(tmp_path, base(hook={"path": str(plain), "env": []}))
    assert result.verdict == "ok"  # the runtime accepts it; runc fails to run it
    assert result.ocihook_needs == [f"hook.path {plain} is not an executable file"]


def test_valid_patterns_of_go_that_python_rejects(tmp_path):
    """RE2 syntax that Python's re does not take: \\pL, \\z, \\Q...\\E, POSIX classes."""
    patterns = {"\\pL+": "\\z", "\\A\\p{Greek}": "[[:alpha:]]\\Q.*\\E", "(?P<n>x)": "(?i)k"}
    assert report(tmp_path, base(when={"annotations": patterns})).problems == []


def test_keys_are_matched_as_go_matches_struct_fields(tmp_path):
    """Go's decoder ignores case in field names (and folds ſ to s, the Kelvin sign to k);
    a repeated object merges into the first; null leaves a string as it was."""
    text = (
        '{"VERSION": "1.0.0", "Hook": {"PATH": "/bin/sh", "env": []}, '
        '"hook": {"args": ["ocihook-hook"]}, "version": null, '
        '"when": {"Annotations": {"a": "b"}}, "WHEN": {"annotations": {"c": null}}, '
        '"\u017ftages": ["prestart", "poststop"]}'
    )
    result = report(tmp_path, text)
    assert result.verdict == "ok" and result.ocihook and result.problems == [], result
    document, ignored, type_errors = hooksd.decode(text.encode())
    assert document == {
        "version": "1.0.0",
        "hook": {"path": "/bin/sh", "env": [], "args": ["ocihook-hook"]},
        "when": {"annotations": {"a": "b", "c": ""}},
        "stages": ["prestart", "poststop"],
    }
    assert ignored == [] and type_errors == []


# --- differential: Go's encoding/json and regexp -----------------------------------------


@pytest.fixture(scope="session")
def hooks_oracles(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("hooksoracle")
    source = REPO / "tests" / "support" / "hooksoracle" / "main.go"
    out = {}
    for name, version in goregexp.TOOLCHAINS.items():
        binary = work / f"hooksoracle-{version}"
        goregexp.go_run(version, ["build", "-o", str(binary), str(source)], work)
        out[name] = binary
    return out


def ask(oracle: Path, documents: list[bytes]) -> list[dict]:
    data = b"".join(d.hex().encode() + b"\n" for d in documents)
    result = subprocess.run([str(oracle)], input=data, capture_output=True, check=True)
    return [json.loads(line) for line in result.stdout.decode().splitlines()]


def go_shape(document: dict) -> dict:
    """A decoded document as Go marshals the struct (zero values, omitempty)."""
    hook = document.get("hook") or {}
    when = document.get("when") or {}
    out_hook = {"path": hook.get("path") or ""}
    for key in ("args", "env"):
        if hook.get(key):
            out_hook[key] = hook[key]
    if hook.get("timeout") is not None:
        out_hook["timeout"] = hook["timeout"]
    out_when = {}
    for key in ("always", "hasBindMounts"):
        if when.get(key) is not None:
            out_when[key] = when[key]
    if when.get("annotations"):
        out_when["annotations"] = when["annotations"]
    if when.get("commands"):
        out_when["commands"] = when["commands"]
    return {
        "version": document.get("version") or "",
        "hook": out_hook,
        "when": out_when,
        "stages": document.get("stages"),
    }


KEYS = {
    "": ["version", "hook", "when", "stages", "VERSION", "Hook", "WHEN", "ſtages", "extra"],
    "hook": ["path", "args", "env", "timeout", "PATH", "Args", "timeOut", "arguments"],
    "when": ["always", "annotations", "commands", "hasBindMounts", "hasbindmounts", "Always"],
}
PATTERNS = [
    "^ocihook\\.io/devices$", ".+", "", "(?=x)", "a++", "\\pL", "\\p{greek}", "(?<n>a)",
    "(?P<n>a)", "\\p{Old_Italic}", "[[:alpha:]]", "a{1001}", "(", "\\Q.\\E", "(?i)k", "\\z",
]  # fmt: skip
VALUES = [None, True, False, 0, 1, 30, -1, 1.5, 2**63, "x", "", [], {}, ["a"], [None], [1]]


def generated_document(rng: random.Random) -> bytes:
    def value(kind: str) -> object:
        roll = rng.random()
        if roll < 0.15:
            return rng.choice(VALUES)
        if kind == "version":
            return rng.choice(["1.0.0", "1.0.0", "1.0.0", "0.1.0", "2.0", None])
        if kind == "path":
            return rng.choice([EXISTING, EXISTING, "/nonexistent", "", "/etc"])
        if kind in ("args", "env", "commands"):
            return [rng.choice(PATTERNS + ["ocihook-hook"]) for _ in range(rng.randint(0, 3))]
        if kind == "timeout":
            return rng.choice([30, 0, -5, 1.0, "5", None, 2**62])
        if kind in ("always", "hasBindMounts"):
            return rng.choice([True, False, None, "true"])
        if kind == "annotations":
            return {rng.choice(PATTERNS): rng.choice(PATTERNS) for _ in range(rng.randint(0, 3))}
        if kind == "stages":
            names = ["prestart", "poststop", "createRuntime", "precreate", "bogus", "Prestart"]
            return [rng.choice(names) for _ in range(rng.randint(0, 3))]
        if kind in ("hook", "when"):
            return obj(kind)
        return rng.choice(VALUES)

    def canonical(key: str) -> str:
        lowered = key.lower().replace("ſ", "s")
        for name in ("version", "hook", "when", "stages", "path", "args", "env", "timeout"):
            if lowered == name:
                return name
        return {"always": "always", "hasbindmounts": "hasBindMounts"}.get(
            lowered, "annotations" if lowered == "annotations" else lowered
        )

    def obj(level: str) -> str:
        pairs = []
        for _ in range(rng.randint(1, 6)):
            key = rng.choice(KEYS[level])
            pairs.append(f"{json.dumps(key)}: {encode(value(canonical(key)))}")
        return "{" + ", ".join(pairs) + "}"

    def encode(v: object) -> str:
        return v if isinstance(v, str) and v.startswith("{") else json.dumps(v)

    text = obj("")
    if rng.random() < 0.05:  # a syntax error now and then
        cut = rng.randrange(len(text))
        text = text[:cut] + rng.choice(["", ",", "}", "\x01", "NaN"]) + text[cut + 1 :]
    return text.encode()


def python_verdict(tmp_path: Path, document: bytes) -> tuple[str, object]:
    result = report(tmp_path, document)
    try:
        decoded, _, _ = hooksd.decode(document)
    except ValueError:
        decoded = None
    return result.verdict, decoded


@pytest.mark.go
def test_hooks_files_are_read_as_go_reads_them(hooks_oracles, tmp_path):
    rng = random.Random(20260512)
    documents = [generated_document(rng) for _ in range(3000)]
    documents += [json.dumps(base()).encode(), b"null", b"[]", b'"1.0.0"', b"{}"]
    go = {name: ask(oracle, documents) for name, oracle in hooks_oracles.items()}
    problems = []
    verdicts = set()
    for i, document in enumerate(documents):
        ours, decoded = python_verdict(tmp_path, document)
        theirs = {name: answers[i]["verdict"] for name, answers in go.items()}
        # ocihook check holds a file to every Go version: an error for one is an error.
        expected = "error" if "error" in theirs.values() else theirs["go1.26"]
        verdicts.add(expected)
        if ours != expected:
            problems.append(f"{document[:160]!r}: go {theirs}, hooksd {ours}")
        elif go["go1.26"][i]["decoded"] is not None and isinstance(decoded, dict):
            if go_shape(decoded) != go["go1.26"][i]["decoded"]:
                problems.append(
                    f"{document[:160]!r}: go decoded {go['go1.26'][i]['decoded']}, "
                    f"hooksd {go_shape(decoded)}"
                )
    assert not problems, f"{len(problems)} of {len(documents)}:\n" + "\n".join(problems[:20])
    assert verdicts == {"ok", "error", "skip", "unchecked"}


def test_the_shipped_precreate_registration_in_a_podman_only_dir(tmp_path):
    """hooks.d/ocihook-precreate.json (its hook.path pointed at an executable here): accepted
    where only podman reads the dir, with the warning that CRI-O refuses to start with it;
    rejected in a dir CRI-O reads (the default)."""
    document = json.loads((REPO / "hooks.d/ocihook-precreate.json").read_text())
    document["hook"]["path"] = "/bin/true"
    path = tmp_path / "ocihook-precreate.json"
    path.write_text(json.dumps(document))
    podman_only = hooksd.check_hook_file(str(path), extension_stages=("precreate",))
    assert podman_only.verdict == "ok", podman_only
    assert podman_only.ocihook_needs == []
    assert any("CRI-O refuses to start" in w for w in podman_only.warnings)
    shared = hooksd.check_hook_file(str(path))
    assert shared.verdict == "error"
    assert any("keep it in a dir only podman reads" in r for r in shared.rejected)
    document["hook"]["args"] = ["ocihook-hook"]
    path.write_text(json.dumps(document))
    bare = hooksd.check_hook_file(str(path), extension_stages=("precreate",))
    assert any("--stage precreate" in n for n in bare.ocihook_needs)
