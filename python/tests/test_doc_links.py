"""The documentation holds together: docs/README.md (the index) links every
page of docs/, every relative link of README.md and docs/*.md names a file
or folder of the checkout, and a page of more than about 4,000 words opens
with a summary."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INDEX = DOCS / "README.md"
PAGES = sorted(DOCS.glob("*.md"))
# [text](target) and ![alt](target), the target up to a space or ')'; a
# reference definition `[name]: target` too.
INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")
LONG_PAGE_WORDS = 4000


def prose(text):
    """The page without its fenced blocks and inline code, where a bracket
    and parenthesis are code, not a link."""
    return CODE.sub("", FENCE.sub("", text))


def links(page):
    text = prose(page.read_text(encoding="utf-8"))
    found = INLINE.findall(text) + REFERENCE.findall(text)
    return [t for t in found if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


def test_the_extraction_finds_links():
    """A regex gone wrong would find no links and pass every test below."""
    assert len(links(ROOT / "README.md")) >= 10
    assert len(links(INDEX)) >= len(PAGES) - 1
    assert links_of_text("[a](b.md) ![c](img/d.png) `[e](f.md)` [g](h.md#i)") == [
        "b.md", "img/d.png", "h.md#i"]


def links_of_text(text):
    return [t for t in INLINE.findall(prose(text))]


def test_the_index_links_every_page():
    linked = {(DOCS / t.split("#", 1)[0]).resolve() for t in links(INDEX)}
    missing = [p.name for p in PAGES if p != INDEX and p.resolve() not in linked]
    assert not missing, f"docs/README.md does not link {missing}"


def test_the_readme_links_the_index():
    assert "docs/README.md" in links(ROOT / "README.md")


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "CONTRIBUTING.md"] + PAGES,
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page):
        path = target.split("#", 1)[0]
        if not path:  # a link within the page
            continue
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links what does not exist: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_long_page_opens_with_a_summary(page):
    text = page.read_text(encoding="utf-8")
    if len(text.split()) <= LONG_PAGE_WORDS:
        return
    # The summary comes before the first section heading, under its own
    # "In short" line.
    head = text.split("\n## ", 1)[0]
    assert "**In short.**" in head, (
        f"docs/{page.name} has {len(text.split())} words and no '**In short.**' summary "
        "before its first section")
