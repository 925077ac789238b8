"""The documentation's links land where they say.

README.md and the pages under docs/ link to each other (and to files of the repository) by relative
paths and #anchors. GitHub makes an anchor of every heading: the heading's text, lower-cased, with
punctuation dropped and each space turned into a hyphen; a repeated anchor gets -1, -2, ... appended, so
a link to a heading that repeats lands on the first of them. These tests fail on a relative link whose
file is missing, on an #anchor no heading of the target makes, and on a heading that repeats in its file.
Lines inside fenced code blocks are neither headings nor links.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[2]

# Pages other pages (and other branches) link to by these names.
FIXED_PAGES = (
    "README.md",
    "docs/api.md",
    "docs/billing.md",
    "docs/chains/bitcoin.md",
    "docs/chains/ethereum.md",
    "docs/development.md",
    "docs/operations.md",
    "docs/sizing.md",
    "docs/webhooks.md",
)

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
INLINE_LINK = re.compile(r"!?\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_TAG = re.compile(r"<[^>]+>")
# Asterisks make emphasis anywhere; underscores only at the edges of words (snake_case stays as it is).
EMPHASIS = re.compile(r"\*{1,3}(?=\S)(.+?)(?<=\S)\*{1,3}|(?<!\w)_{1,3}(?=\S)(.+?)(?<=\S)_{1,3}(?!\w)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _markup_strip(text: str) -> str:
    text = HTML_TAG.sub("", text)
    return EMPHASIS.sub(lambda m: m.group(1) or m.group(2), text)


def heading_text(raw: str) -> str:
    """The text GitHub renders for a heading's source: links, code spans and emphasis keep only their text."""
    text = INLINE_LINK.sub(lambda m: m.group(1), raw)
    pieces, position = [], 0
    for span in CODE_SPAN.finditer(text):  # the inside of a code span is literal
        pieces += [_markup_strip(text[position : span.start()]), span.group(2).strip()]
        position = span.end()
    pieces.append(_markup_strip(text[position:]))
    return "".join(pieces).strip()


def slug(text: str) -> str:
    """GitHub's anchor for a heading's rendered text (before any -1, -2 for repeats)."""
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@dataclass(frozen=True)
class Link:
    line: int
    target: str


@dataclass
class Page:
    path: Path
    headings: list[tuple[int, str]]  # (line, rendered text)
    links: list[Link]

    def anchors(self) -> set[str]:
        """Every anchor the page's headings make, repeats numbered as GitHub numbers them."""
        seen: dict[str, int] = {}
        anchors: set[str] = set()
        for _, text in self.headings:
            base = slug(text)
            count = seen.get(base, 0)
            seen[base] = count + 1
            anchors.add(base if count == 0 else f"{base}-{count}")
        return anchors


def page_read(path: Path) -> Page:
    headings: list[tuple[int, str]] = []
    links: list[Link] = []
    fence: str | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        opening = FENCE.match(line)
        if fence is not None:
            closing = opening and opening.group(1)[0] == fence[0] and len(opening.group(1)) >= len(fence)
            if closing and not line.strip().lstrip(fence[0]):  # a closing fence carries nothing after it
                fence = None
            continue
        if opening:
            fence = opening.group(1)
            continue
        heading = ATX_HEADING.match(line)
        if heading:
            headings.append((number, heading_text(heading.group(2) or "")))
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            links.append(Link(number, definition.group(1)))
            continue
        without_code = CODE_SPAN.sub("", line)
        links.extend(Link(number, m.group(2)) for m in INLINE_LINK.finditer(without_code))
    return Page(path, headings, links)


def link_problems(page: Page, root: Path) -> list[str]:
    """What is wrong with the page's relative links, one line per problem."""
    problems = []
    where = page.path.relative_to(root)
    for link in page.links:
        if not link.target or SCHEME.match(link.target) or link.target.startswith("//"):
            continue  # an absolute URL: not this repository's to check
        path_part, _, fragment = link.target.partition("#")
        path_part = unquote(path_part)
        if not path_part:
            target = page.path
        elif path_part.startswith("/"):
            target = (root / path_part.lstrip("/")).resolve()
        else:
            target = (page.path.parent / path_part).resolve()
        if not target.is_relative_to(root):
            problems.append(f"{where}:{link.line}: {link.target} points outside the repository")
            continue
        if not target.exists():
            problems.append(f"{where}:{link.line}: {link.target}: no file {target.relative_to(root)}")
            continue
        if not fragment:
            continue
        if target.suffix != ".md":
            problems.append(f"{where}:{link.line}: {link.target}: an anchor into a file that is not Markdown")
            continue
        if fragment not in page_read(target).anchors():
            problems.append(f"{where}:{link.line}: {link.target}: no heading makes #{fragment}")
    return problems


def repeated_headings(page: Page, root: Path) -> list[str]:
    first: dict[str, int] = {}
    problems = []
    for line, text in page.headings:
        anchor = slug(text)
        if anchor in first:
            where = page.path.relative_to(root)
            problems.append(f"{where}:{line}: {text!r} repeats the heading of line {first[anchor]} (#{anchor})")
        else:
            first[anchor] = line
    return problems


def documentation(root: Path) -> list[Path]:
    root = root.resolve()
    return [root / "README.md", *sorted((root / "docs").glob("**/*.md"))]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("A customer's walk-through", "a-customers-walk-through"),
        ("Invoices, payments and credit", "invoices-payments-and-credit"),
        ("For developers: emitting events", "for-developers-emitting-events"),
        ("What is refused at start-up", "what-is-refused-at-start-up"),
        ("The sandbox: pay an invoice on your own machine", "the-sandbox-pay-an-invoice-on-your-own-machine"),
        ("`WEBHOOK_TIMEOUT_SECONDS` and *retries*", "webhook_timeout_seconds-and-retries"),
        ("CHAIN_SCAN_SECONDS, _briefly_", "chain_scan_seconds-briefly"),
        ("[Bitcoin](chains/bitcoin.md) / Litecoin", "bitcoin--litecoin"),
        ("Step 1 -- the end", "step-1----the-end"),
        ("Déjà vu (v2.0)", "déjà-vu-v20"),
    ],
)
def test_anchor_follows_github_rules(heading, anchor):
    assert slug(heading_text(heading)) == anchor


def test_the_checks_catch_broken_links_and_repeated_headings(tmp_path):
    tmp_path = tmp_path.resolve()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "# Guide\n\n## Setup\n\ntext\n\n## Setup\n\n```sh\n# Setup\n[in code](missing.md)\n```\n",
        encoding="utf-8",
    )
    (tmp_path / "README.md").write_text(
        "# Project\n\n"
        "[good](docs/guide.md#setup) [second setup](docs/guide.md#setup-1) [here](#project)\n"
        "[no file](docs/nothing.md) [no heading](docs/guide.md#install) [no anchor here](#setup)\n"
        "`[in a code span](gone.md)` [web](https://example.com/x#y) [out](../elsewhere.md)\n"
        "[ref]: docs/absent.md\n",
        encoding="utf-8",
    )
    pages = [page_read(path) for path in documentation(tmp_path)]
    problems = [problem for page in pages for problem in link_problems(page, tmp_path)]
    assert problems == [
        "README.md:4: docs/nothing.md: no file docs/nothing.md",
        "README.md:4: docs/guide.md#install: no heading makes #install",
        "README.md:4: #setup: no heading makes #setup",
        "README.md:5: ../elsewhere.md points outside the repository",
        "README.md:6: docs/absent.md: no file docs/absent.md",
    ]
    repeats = [problem for page in pages for problem in repeated_headings(page, tmp_path)]
    assert repeats == ["docs/guide.md:7: 'Setup' repeats the heading of line 3 (#setup)"]


def test_the_pages_others_link_to_exist():
    missing = [name for name in FIXED_PAGES if not (REPO / name).is_file()]
    assert missing == []


@pytest.mark.parametrize("path", documentation(REPO), ids=lambda path: str(path.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(path):
    page = page_read(path)
    assert link_problems(page, REPO) == []


@pytest.mark.parametrize("path", documentation(REPO), ids=lambda path: str(path.relative_to(REPO)))
def test_no_heading_repeats_in_a_file(path):
    page = page_read(path)
    assert page.headings, f"{path.relative_to(REPO)} has no heading"
    assert repeated_headings(page, REPO) == []
