"""ocihook/check/tomlread.py, the TOML reader `ocihook check` reads containers.conf and crio.conf
with, against Python 3.11's tomllib: on a hand-written corpus, this host's own
containers.conf, thousands of mutations of them and generated documents, both accept with
the same data (the hooks_dir keys in particular) or both reject. Under Python 3.9 (the RHEL 9
tier) tomllib runs in a Python 3.11+ beside it (tests/support/tomllib_python.py)."""

from __future__ import annotations

import math
import pickle
import random
import subprocess
from pathlib import Path

import pytest

from ocihook.check import tomlread
from tests.support.tomllib_python import tomllib_python

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "data" / "toml" / "corpus.txt"
KEYS = (("engine", "hooks_dir"), ("crio", "runtime", "hooks_dir"))
HOST_FILES = [
    Path("/usr/share/containers/containers.conf"),
    Path("/etc/containers/containers.conf"),
]


def corpus() -> list[str]:
    docs = CORPUS.read_text(encoding="utf-8").split("\n=====\n")[1:]
    docs += [
        "a = 1\r\nb = 2\r\n",  # CRLF line ends
        'a = "x\ry"',  # a bare CR is not a line end
        "a = 1\r",
        "a = '''x\r\ny'''",
        "[engine]\r\nhooks_dir = [\r\n  '/a',\r\n]\r\n",
        "a = 1 # \x00",  # control characters
        'a = "\x7f"',
        "a = '\x1f'",
        'a = """\x08"""',
        "\ufeffa = 1",  # a byte order mark
        "é = 1",
        '"é" = "\u00e9 \U0001f600"',
        "a = 9223372036854775808",
    ]
    docs += [p.read_text(encoding="utf-8") for p in HOST_FILES if p.is_file()]
    return docs


def normal(value):
    """Comparable data (NaN equals NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


# The reference reader's verdict on each document, run by an interpreter that has tomllib
# (this one, or Python 3.11+ beside it: the RHEL 9 tier runs under 3.9): its data, or
# REJECTED. Pickled both ways: TOML has datetimes and NaN, which JSON lacks.
REJECTED = "rejected"
REFERENCE = """
import pickle, sys, tomllib
out = []
for text in pickle.load(sys.stdin.buffer):
    try:
        out.append(tomllib.loads(text))
    except tomllib.TOMLDecodeError:
        out.append("rejected")
pickle.dump(out, sys.stdout.buffer, protocol=4)
"""


def reference(docs: list[str]) -> list:
    """tomllib's verdicts on `docs`, in order."""
    python = tomllib_python()
    assert python, "no Python with tomllib (the tomllib mark skips then)"
    done = subprocess.run(
        [python, "-I", "-c", REFERENCE],
        input=pickle.dumps(docs, protocol=4),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return pickle.loads(done.stdout)


def disagreement(text: str, expected) -> str | None:
    try:
        ours = tomlread.loads(text, "doc.toml")
    except tomlread.TomlError as error:
        ours = error
    if expected == REJECTED or isinstance(ours, Exception):
        if expected == REJECTED and isinstance(ours, Exception):
            return None
        return f"{text[:200]!r}: tomllib {expected!r}, tomlread {ours!r}"
    for key in KEYS:
        mine = tomlread.lookup(ours, key)
        theirs = tomlread.lookup(expected, key)
        if normal(list(mine)) != normal(list(theirs)):
            return f"{text[:200]!r}: {'.'.join(key)} tomllib {theirs}, tomlread {mine}"
    if normal(ours) != normal(expected):
        return f"{text[:200]!r}: tomllib {expected}, tomlread {ours}"
    return None


def check_all(docs: list[str]) -> list:
    """Every document read alike by both; tomllib's verdicts."""
    expected = reference(docs)
    problems = [p for p in map(disagreement, docs, expected) if p]
    assert not problems, f"{len(problems)} of {len(docs)}:\n" + "\n".join(problems[:20])
    return expected


NOISE = list("[]{}=,.\"'#\n \t\\abc019_-+:eExotTzZ") + ["é", "\r", "\x00", "\x7f"]


def mutate(rng: random.Random, text: str) -> str:
    if len(text) > 2000:  # a window of a big file
        start = rng.randrange(len(text) - 400)
        text = text[start : start + 400]
    chars = list(text)
    for _ in range(rng.randint(1, 3)):
        roll = rng.random()
        if roll < 0.4 and chars:
            del chars[rng.randrange(len(chars))]
        elif roll < 0.8:
            chars.insert(rng.randrange(len(chars) + 1), rng.choice(NOISE))
        elif chars:
            chars[rng.randrange(len(chars))] = rng.choice(NOISE)
    return "".join(chars)


def generated(rng: random.Random) -> str:
    """A random document of headers, dotted keys and inline values over a few names: it
    exercises TOML's rules about defining a table or key once."""
    names = ["a", "b", "engine", "crio", "runtime", "hooks_dir", '"a"', "'b'"]
    values = ['["/x"]', '"/y"', "1", "{c = 1}", "[{d = 2}]", '["/z", {append = true}]', "[]"]

    def key() -> str:
        return ".".join(rng.choice(names) for _ in range(rng.randint(1, 3)))

    lines = []
    for _ in range(rng.randint(1, 8)):
        roll = rng.random()
        if roll < 0.25:
            lines.append(f"[{key()}]")
        elif roll < 0.35:
            lines.append(f"[[{key()}]]")
        else:
            lines.append(f"{key()} = {rng.choice(values)}")
    return "\n".join(lines) + "\n"


@pytest.mark.tomllib
def test_the_corpus_agrees_with_tomllib():
    docs = corpus()
    accepted = sum(1 for verdict in check_all(docs) if verdict != REJECTED)
    assert 40 < accepted < len(docs) - 30  # both kinds, plenty of each


@pytest.mark.tomllib
def test_mutations_agree_with_tomllib():
    rng = random.Random(20260512)
    docs = corpus()
    check_all([mutate(rng, rng.choice(docs)) for _ in range(8000)])


@pytest.mark.tomllib
def test_generated_documents_agree_with_tomllib():
    rng = random.Random(7)
    check_all([generated(rng) for _ in range(4000)])


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("[engine]\nhooks_dir = [\n  '/a'\n  '/b',\n]\n", 4, "expected ',' or ']'"),
        ("[engine]\nhooks_dir = ['/a'", 2, "an array that is never closed"),
        ("[engine]\nhooks_dir = [\n  '/a',\n\n", 2, "an array that is never closed"),
        ('a = 1\nb = "x\n', 2, "unterminated string"),
        ("a = 1\n[a]\n", 2, "a value, not a table"),
        ("[a]\nx = 1\n\n[a]\n", 4, "defined twice"),
        ("x = 1\nx = 2\n", 2, "defined twice"),
        ("# ok\nhooks_dir == 1\n", 2, "expected a value"),
        ('a = "\\q"\n', 1, "invalid escape"),
        ("a = 1979-02-30\n", 1, "invalid date"),
        ('\n\n\na = """\nx\n', 4, "a multi-line string that is never closed"),
    ],
)
def test_a_malformed_file_is_one_line_naming_file_and_line(text, line, words, tmp_path):
    path = tmp_path / "containers.conf"
    path.write_text(text)
    with pytest.raises(tomlread.TomlError) as caught:
        tomlread.load(str(path))
    message = str(caught.value)
    assert message.startswith(f"{path} line {line}: "), message
    assert words in message and "\n" not in message


def test_a_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "crio.conf"
    path.write_bytes(b"[crio]\n# caf\xe9\n")
    with pytest.raises(tomlread.TomlError, match=r"crio.conf line 2: not UTF-8"):
        tomlread.load(str(path))


def test_lookup():
    doc = tomlread.loads('[crio.runtime]\nhooks_dir = ["/x"]\n[engine]\nx = 1\n')
    assert tomlread.lookup(doc, ("crio", "runtime", "hooks_dir")) == (True, ["/x"])
    assert tomlread.lookup(doc, ("engine", "hooks_dir")) == (False, None)
    assert tomlread.lookup(doc, ("engine", "x", "y")) == (False, None)
