"""ocihook/check/goregexp/syntax.py against Go's own regexp.Compile: every pattern of a corpus
(hand-written, enumerated and fuzzed, several thousand) gets the same verdict, error code and
offending text from both, for each Go version the validator models (go1.21.13 and go1.26.6,
CRI-O 1.37's)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from ocihook.check.goregexp import syntax, tables
from ocihook.check.goregexp.dialect import GO119, GO121, GO126, Dialect
from tests.support import goregexp

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "data" / "re2" / "patterns.txt"
DIALECTS = {"go1.21": GO121, "go1.26": GO126}


@pytest.fixture(scope="session")
def oracles(tmp_path_factory) -> dict[str, Path]:
    """re2oracle built once per session with each Go toolchain."""
    work = tmp_path_factory.mktemp("go")
    return {
        name: goregexp.build_oracle(version, work) for name, version in goregexp.TOOLCHAINS.items()
    }


def verdict(pattern: bytes, dialect: Dialect) -> tuple[str, bytes] | None:
    error = syntax.check(pattern, dialect)
    return None if error is None else (error.code, syntax.expr_bytes(error))


def disagreements(oracle: Path, dialect: Dialect, patterns: list[bytes]) -> list[str]:
    go = goregexp.ask(oracle, patterns)
    out = []
    for pattern, expected in zip(patterns, go):
        ours = verdict(pattern, dialect)
        if ours != expected:
            out.append(f"{pattern[:80]!r}: go {expected}, goregexp {ours}")
    return out


# --- the corpus ---------------------------------------------------------------------------


def hand_written() -> list[bytes]:
    lines = CORPUS.read_text(encoding="utf-8").split("\n")
    patterns = [line.encode() for line in lines if line and not line.startswith("## ")]
    patterns.append(b"")  # the empty pattern
    # Go strings are bytes: invalid UTF-8 where the parser reads a rune, a name, a class.
    for bad in (b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"):
        for template in (
            b"a%sb",
            b"%s",
            b"(?P<%s>a)",
            b"(?P<a%s",
            b"\\p{%s}",
            b"\\p%s",
            b"\\p{Greek%s",
            b"[%s]",
            b"[a-%s]",
            b"(?i%s)",
            b"\\Q%s\\E",
            b"\\x%s",
            b"\\x{%s}",
            b"\\%s",
            b"a{%s}",
            b"(%s",
            b"[[:%s:]]",
        ):
            patterns.append(template % bad)
    patterns += [b"\n", b"a\nb", b"[\n]", b"(?s:\n)", b"\x00", b"[\x00-\x7f]", b"\xef\xbf\xbd"]
    return patterns


def enumerated() -> list[bytes]:
    """Every escape, flag and class name, and a grid of repeat counts."""
    out = []
    chars = [chr(c) for c in range(0x20, 0x7F)] + ["é", "\u212a", "\U0001f600"]
    for c in chars:
        out += [f"\\{c}", f"(?{c})", f"(?{c}:a)", f"(?-{c})", f"[\\{c}]", f"\\p{c}", f"\\P{c}"]
        out += [f"a{c}", f"{c}a", f"[{c}]", f"[^{c}]", f"(?i){c}", f"(?i)[{c}]"]
    posix = "alnum alpha ascii blank cntrl digit graph lower print punct space upper word xdigit"
    for name in posix.split() + ["foo", "Alpha", ""]:
        out += [f"[[:{name}:]]", f"[[:^{name}:]]", f"(?i)[[:{name}:]]", f"[^[:{name}:]x]"]
    names = tables.CATEGORIES.split() + tables.SCRIPTS.split()
    aliases = [pair.split("=")[0] for pair in tables.CATEGORY_ALIASES.split()]
    for name in names + aliases + ["Any", "Assigned", "ASCII", "Unknown", "L&", "Xx"]:
        variants = {name, name.lower(), name.upper(), name.replace("_", ""), name.replace("_", " ")}
        for v in sorted(variants):
            out += [f"\\p{{{v}}}", f"\\P{{^{v}}}", f"[\\p{{{v}}}]", f"(?i)\\p{{{v}}}"]
    counts = ["0", "1", "2", "9", "10", "999", "1000", "1001", "01", "", "-1", "100000000"]
    for lo in counts:
        for hi in counts:
            out += [f"a{{{lo},{hi}}}", f"(?:ab){{{lo},{hi}}}?"]
        out += [f"a{{{lo}}}", f"a{{{lo},}}", f"(a{{{lo}}}){{{lo}}}"]
    return [p.encode() for p in out]


ATOMS = [
    "a", "b", "K", "k", "s", "ſ", "é", "Σ", "σ", "ς", ".", "^", "$", "\\d", "\\W", "\\s", "\\pL",
    "\\p{Greek}", "\\PN", "\\p{Zl}", "[a-z]", "[^a]", "[[:alpha:]]", "[\\pL\\d]", "\\b", "\\B",
    "\\A", "\\z", "\\x41", "\\x{1F600}", "\\Q*\\E", "[Kk]", "[Aa]", "[ſs]", "\\n", "\\.", "\\\\",
    "(?i:k)", "()", "(?:)", "\\p{Han}", "[^\\n]", "[\\x00-\\x{10FFFF}]", "x", "\\p{Old_Italic}",
    "\\p{letter}", "\\pC",
]  # fmt: skip
OPERATORS = ["*", "+", "?", "*?", "+?", "??", "{2}", "{2,}", "{2,5}", "{0}", "{1000}", "{,3}", "{"]
GROUPS = ["(", "(?:", "(?P<n>", "(?<m>", "(?i:", "(?s:", "(?U:", "(?i)("]
FLAGS = ["(?i)", "(?s)", "(?m)", "(?U)", "(?i-s)", "(?-i)", ""]
NOISE = list("ab()[]{}|*+?.^$\\-:,=!<>PpQEzAbBdDwWsS0123456789xiUm_ \n") + ["é", "K", "ſ"]


def generate(rng: random.Random, depth: int = 0) -> str:
    """A random pattern from RE2's grammar (mostly valid)."""
    roll = rng.random()
    if depth > 4 or roll < 0.3:
        return rng.choice(ATOMS)
    if roll < 0.5:
        return "".join(generate(rng, depth + 1) for _ in range(rng.randint(1, 4)))
    if roll < 0.65:
        return "|".join(generate(rng, depth + 1) for _ in range(rng.randint(2, 4)))
    if roll < 0.8:
        return rng.choice(GROUPS) + generate(rng, depth + 1) + ")"
    if roll < 0.92:
        return generate(rng, depth + 1) + rng.choice(OPERATORS)
    return rng.choice(FLAGS) + generate(rng, depth + 1)


def mutate(rng: random.Random, pattern: str) -> str:
    """Delete, insert or replace a few characters (mostly invalid afterwards)."""
    chars = list(pattern)
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.4 and chars:
            del chars[rng.randrange(len(chars))]
        elif roll < 0.8:
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(NOISE))
        elif chars:
            chars[rng.randrange(len(chars))] = rng.choice(NOISE)
    return "".join(chars)


def fuzzed(seed: int = 20260512, count: int = 3000) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        pattern = generate(rng)
        if rng.random() < 0.5:
            pattern = mutate(rng, pattern)
        out.append(pattern.encode())
    for _ in range(1000):  # short noise, invalid UTF-8 included
        raw = bytes(
            rng.choice(b"ab()[]{}|*+?.^$\\-:,=<>PpQEzx0123456789i\xff\xc3") for _ in range(8)
        )
        out.append(raw[: rng.randint(1, 8)])
    return out


def limits() -> list[bytes]:
    """Go's limits: nesting depth 1000, 1000 copies in nested repeats, 3.3 M instructions
    (checked only once nodes x repeats could reach it), 33 M runes of classes."""
    out = []
    for k in (998, 999, 1000, 1001):
        out += [
            "(" * k + "a" + ")" * k,
            "(?:" * k + "a" + ")" * k,
            "(?:a|" * k + "b" + ")" * k,
            "(?:a*" * k + "b" + ")" * k,
            "(a|" * k + "b" + ")" * k,
            "(ab|ac|" * k + "b" + ")" * k,
            "(?i)(" * k + "k" + ")" * k,
            "[a]" * k,
            "(?:a+)?" * k,
        ]
    for n in (3350, 3355, 3356, 5000):
        out += [
            "(?:" + "a" * n + "){1000}",
            "(?:" + "ab|" * (n // 3) + "){1000}",
            "(" + "a" * n + "){1000}",
            "(?:" + "a" * n + "x*){1000}",
            "(?:" + "[ab]" * (n // 2) + "){1000}",
            "(?:" + "(?:a)" * n + "){999}",
            "(?:(?:" + "a" * (n // 10) + "){10}){100}",
        ]
    out += ["\\pL" * 24000, "\\pL" * 30000, "(?i)\\pL" * 27000, "[\\pL\\pN]" * 1000]
    out += ["a{1000}b{1000}c{1000}d{1000}" * 900, "(?:a{1000}b{1000}c{1000}){1}" * 1200]
    return [p.encode() for p in out]


# --- the differential tests ------------------------------------------------------------------


def corpus() -> list[bytes]:
    return hand_written() + enumerated() + fuzzed()


def test_the_corpus_is_large_and_mixed():
    patterns = corpus()
    assert len(patterns) > 5000
    verdicts = [verdict(p, GO126) for p in patterns]
    assert sum(v is None for v in verdicts) > 1000  # compiles
    codes = {v[0] for v in verdicts if v is not None}
    assert len(codes) >= 12, codes  # nearly every error code Go has


@pytest.mark.go
@pytest.mark.parametrize("name", sorted(DIALECTS))
def test_every_pattern_gets_go_s_verdict(name, oracles):
    problems = disagreements(oracles[name], DIALECTS[name], corpus())
    assert not problems, f"{len(problems)} disagreements:\n" + "\n".join(problems[:30])


@pytest.mark.go
@pytest.mark.slow
def test_go_s_size_and_depth_limits(oracles):
    """Against go1.26 only: the limits are the same code in every dialect (the patterns name
    no class whose lookup differs), and this corpus is the slow one."""
    problems = disagreements(oracles["go1.26"], GO126, limits())
    assert not problems, "\n".join(problems)


@pytest.mark.go
def test_the_unicode_data_is_what_go_generates(tmp_path):
    """ocihook/check/goregexp/tables.py is scripts/re2data's output with go1.26.6, and go1.21.13
    knows the same scripts and the categories without Cn and LC (those Go 1.25 added)."""
    fresh = goregexp.go_run("1.26.6", ["run", "./scripts/re2data"], tmp_path).stdout
    assert fresh.decode() == (REPO / "ocihook/check/goregexp/tables.py").read_text()
    names = goregexp.go_run("1.21.13", ["run", "./scripts/re2data", "-names"], tmp_path)
    version, categories, scripts = names.stdout.decode().splitlines()
    assert version.startswith("go1.21.13 15.0.0")
    assert scripts.split() == tables.SCRIPTS.split()
    assert set(categories.split()) == set(tables.CATEGORIES.split()) - {"Cn", "LC"}


# --- what the dialects mean (facts about Go versions; no Go needed) ---------------------------


PERL = "invalid or unsupported Perl syntax"
RANGE = "invalid character class range"
ESCAPE = "invalid escape sequence"


@pytest.mark.parametrize(
    ("pattern", "go119", "go121", "go126"),
    [
        ("(?<n>a)", PERL, PERL, None),
        ("(?P<n>a)", None, None, None),
        ("\\p{Kawi}", RANGE, None, None),
        ("\\p{Old_Italic}", None, None, RANGE),
        ("\\p{greek}", RANGE, RANGE, None),
        ("\\p{Letter}", RANGE, RANGE, None),
        ("(?=x)", PERL, PERL, PERL),
        ("(a)\\1", ESCAPE, ESCAPE, ESCAPE),
        ("\\Z", ESCAPE, ESCAPE, ESCAPE),
        ("a{1001}", "invalid repeat count", "invalid repeat count", "invalid repeat count"),
        ("\\pL\\z\\A[[:alpha:]]\\Q.\\E", None, None, None),
    ],
)
def test_dialects(pattern, go119, go121, go126):
    got = [syntax.check(pattern, d) for d in (GO119, GO121, GO126)]
    assert [e and e.code for e in got] == [go119, go121, go126]


def test_json_strings_with_lone_surrogates_are_read_as_go_reads_them():
    """Go's JSON decoder turns a lone surrogate escape into U+FFFD: a valid rune."""
    assert syntax.check("a\ud800b") is None
    assert syntax.check(b"a\xed\xa0\x80b").code == "invalid UTF-8"


def test_the_hook_never_imports_the_validator():
    code = (
        "import sys, ocihook.hook, ocihook.apply.inject, ocihook.apply.execute;"
        "print(sorted(m for m in sys.modules if m.startswith('ocihook.re2')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert result.stdout.strip() == "[]"
