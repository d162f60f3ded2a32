"""The README fits a screen and every page it leads to is there.

The README keeps what a newcomer needs first (the two set-up commands, one example per use) and
links to docs/ for the rest; a moved section whose link breaks, or a README that grows back into
a manual, fails here. Anchors are checked against GitHub's heading slugs, as GitHub renders them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
INSTALL = 'pip install . && localspec complete "'
TESTS = 'pip install -e ".[test]" && pytest'

_FENCE = re.compile(r"^(```|~~~)")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE_SPAN = re.compile(r"`[^`]*`")


def _prose(text: str) -> list[str]:
    """The lines outside fenced code blocks, inline code removed: links live only there."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            lines.append(_CODE_SPAN.sub("", line))
    return lines


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor, repeats numbered `-1`, `-2`, ... as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in page.read_text().splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not heading:
            continue
        slug = github_slug(heading[1])
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    """Links to files of this repository: not URLs, not mail addresses."""
    targets = [m[1] for line in _prose(page.read_text()) for m in _LINK.finditer(line)]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.IGNORECASE)]


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of `page` whose file (inside `root`), or anchor in it, does not exist."""
    wrong = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_file() or not file.is_relative_to(root):
            wrong.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            wrong.append(f"{target}: no heading with this anchor in {file.name}")
    return wrong


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken(page) == []


def test_every_page_in_docs_is_linked_from_the_readme() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in relative_links(README)}
    assert [p.name for p in PAGES if p.resolve() not in linked] == []


def test_the_readme_fits_a_screen_and_starts_with_both_commands() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250
    first_screen = lines[:60]
    assert any(line.startswith(INSTALL) for line in first_screen)
    assert TESTS in first_screen


def test_ci_runs_the_readmes_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    (command,) = re.findall(r"bash -c '([^']*)'", ci)
    assert command == TESTS


def test_a_broken_link_and_a_wrong_anchor_are_found(tmp_path: Path) -> None:
    """The checker itself: a page whose links do not resolve is reported, link by link."""
    (tmp_path / "other.md").write_text("# Other page\n\n## How `auto` decides: why\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[fine](other.md#how-auto-decides-why) [gone](missing.md)\n"
        "[wrong](other.md#no-such-heading) [web](https://example.com/x.md)\n"
        "```\n[in code](also-missing.md)\n```\n"
    )
    assert broken(page, tmp_path) == [
        "missing.md: no such file",
        "other.md#no-such-heading: no heading with this anchor in other.md",
    ]


def test_github_slugs() -> None:
    assert github_slug("Editors: llama.vim's requests, against llama-server") == (
        "editors-llamavims-requests-against-llama-server"
    )
    assert github_slug("What-if: the same answers on other machines") == (
        "what-if-the-same-answers-on-other-machines"
    )
    assert github_slug("`complete` in a pipe") == "complete-in-a-pipe"
