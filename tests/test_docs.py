"""The documentation's shape: README.md is a short front door, every chapter lives in one
file, every relative link leads somewhere, and every page under docs/ is reachable from the
README. Plain file reads: any user, no root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
README_LIMIT = 16000  # bytes
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, REPO / "CONTRIBUTING.md", *DOCS, *sorted((REPO / "docs/vendors").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `# comment` in a block is no heading)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def _headings(path: Path) -> list[tuple[int, str]]:
    found = []
    for line in _prose(path.read_text()):
        match = HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors, seen = set(), {}
    for _, text in _headings(path):
        slug = _slug(text)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(path: Path) -> list[str]:
    return [m.group(1) for line in _prose(path.read_text()) for m in LINK.finditer(line)]


def _relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target)


def test_the_readme_is_a_front_door():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes, more than {README_LIMIT}"
    assert README.read_text().startswith("# ocihook\n")  # the package's long description
    for command in ("make demo", "make test"):
        assert f"\n{command}  " in README.read_text(), command


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert page.exists(), page
    broken = []
    for target in _links(page):
        if not _relative(target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(REPO)}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.name}")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def _normalized(heading: str) -> str:
    return " ".join(re.sub(r"[^\w ]", " ", heading.lower().replace("`", "")).split())


def test_no_chapter_is_in_two_files():
    where: dict[str, list[str]] = {}
    for page in PAGES:
        for level, text in _headings(page):
            if level >= 2:
                where.setdefault(_normalized(text), []).append(str(page.relative_to(REPO)))
    twice = {text: files for text, files in where.items() if len(set(files)) > 1}
    assert not twice, twice


def test_every_docs_page_is_linked_from_the_readme():
    linked = {
        (README.parent / target.partition("#")[0]).resolve()
        for target in _links(README)
        if _relative(target) and target.partition("#")[0]
    }
    missing = [str(p.relative_to(REPO)) for p in DOCS if p.resolve() not in linked]
    assert not missing, missing
    assert (REPO / "CONTRIBUTING.md").resolve() in linked
