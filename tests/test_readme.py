"""README.md is the package's page on the package index: its links must work there.

The index shows the README without the repository around it, so a relative link
(``docs/concepts.md``, ``#quick-start``) leads nowhere. Every link is absolute: to the
docs site, whose pages are the files of ``docs/``, or to the repository. Links to
either must name a page or file that exists, and an anchor that a heading makes.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS_SITE = "https://goflux-py.github.io/goflux/"
REPOSITORY = "https://github.com/goflux-py/goflux"
ABSOLUTE = re.compile(r"^(?:https?|mailto):", re.IGNORECASE)

FENCED = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+[^)]*)?\)")
DEFINITION = re.compile(r"^[ ]{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
AUTOLINK = re.compile(r"<([a-z][a-z0-9+.-]*:[^<>\s]*)>", re.IGNORECASE)
HTML = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)


def links(markdown: str) -> list[str]:
    """Every link target of a Markdown text, outside code blocks and code spans."""
    text = CODE_SPAN.sub("", FENCED.sub("", markdown))
    found: list[str] = []
    for pattern in (INLINE, DEFINITION, AUTOLINK, HTML):
        found += pattern.findall(text)
    return found


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension (MkDocs) gives a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    """The anchors of a docs page: one per heading outside code blocks."""
    text = FENCED.sub("", page.read_text())
    return {slug(m[1]) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.MULTILINE)}


def wrong_links(markdown: str) -> list[str]:
    """The links of a README that would not work on the package index, and why."""
    wrong = []
    for target in links(markdown):
        if not ABSOLUTE.match(target):
            wrong.append(f"{target}: relative; link to {DOCS_SITE} or {REPOSITORY} instead")
            continue
        url, _, anchor = target.partition("#")
        if url.startswith(DOCS_SITE):
            page = url.removeprefix(DOCS_SITE) or "index.html"
            source = ROOT / "docs" / re.sub(r"\.html$", ".md", page)
            if not page.endswith(".html") or not source.is_file():
                wrong.append(f"{target}: no page docs/{page.removesuffix('.html')}.md")
            elif anchor and anchor not in anchors(source):
                wrong.append(f"{target}: no heading #{anchor} in docs/{source.name}")
        elif url.startswith((f"{REPOSITORY}/blob/main/", f"{REPOSITORY}/tree/main/")):
            path = url.removeprefix(REPOSITORY).split("/", 3)[3]
            if not (ROOT / path).exists():
                wrong.append(f"{target}: no file {path} in the repository")
    return wrong


def test_readme_links_are_absolute_and_lead_somewhere() -> None:
    readme = README.read_text()
    assert len(links(readme)) >= 20  # a parser that found nothing would pass anything
    wrong = wrong_links(readme)
    assert not wrong, "README.md links that break on the package index:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    ("markdown", "wrong"),
    [
        ("[a](https://example.org/x.md) <https://example.org>", []),
        ("[Concepts](docs/concepts.md)", ["docs/concepts.md"]),
        ("[top](#quick-start)", ["#quick-start"]),
        ('![chart](bench/chart.png "title")', ["bench/chart.png"]),
        ("[a][ref]\n\n[ref]: ./LICENSE\n", ["./LICENSE"]),
        ('<a href="docs/index.md">docs</a>', ["docs/index.md"]),
        ("`[not](a-link.md)` and\n```md\n[not](either.md)\n```\n", []),
        (f"[ok]({DOCS_SITE}concepts.html#codecs)", []),
        (f"[ok]({DOCS_SITE})", []),
        (f"[no page]({DOCS_SITE}nowhere.html)", [f"{DOCS_SITE}nowhere.html"]),
        (f"[no anchor]({DOCS_SITE}concepts.html#nope)", [f"{DOCS_SITE}concepts.html#nope"]),
        (f"[folder]({DOCS_SITE}concepts/)", [f"{DOCS_SITE}concepts/"]),
        (f"[ok]({REPOSITORY}/blob/main/LICENSE)", []),
        (f"[no file]({REPOSITORY}/blob/main/NOPE.md)", [f"{REPOSITORY}/blob/main/NOPE.md"]),
    ],
)
def test_wrong_links_are_found(markdown: str, wrong: list[str]) -> None:
    assert [w.split(": ", 1)[0] for w in wrong_links(markdown)] == wrong
