"""Every link of README.md and docs/*.md to another page or to a section (`[x](page.md#section)`, `[x](#section)`)
lands: the page exists and has a heading of that anchor, as GitHub makes anchors of headings. A section moved to
another page (docs/recipes.md's record to docs/results.md) or a heading renamed breaks the links here first."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.helpers.pages import PAGES

LINK = re.compile(r"\]\(([^()\s#]*)#([^()\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]+`")  # inline code: a link written there is an example, not a link


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, each space a `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))  # a `# comment` in a shell block is no heading
    return {anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def broken(page: Path) -> list[str]:
    """The links of a page to a section that its target page does not have (or to a page that does not exist)."""
    found = []
    for target, section in LINK.findall(CODE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))):
        if target and not target.endswith(".md"):
            continue  # a web address, a file that is not a page
        dest = (page.parent / target).resolve() if target else page
        if not dest.is_file():
            found.append(f"{target}#{section}: no such page")
        elif section not in anchors(dest):
            where = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest.name
            found.append(f"{target}#{section}: no such section in {where}")
    return found


def test_anchor_is_github_s() -> None:
    assert anchor("Six languages: a validation that looks like the test") == (
        "six-languages-a-validation-that-looks-like-the-test"
    )
    assert anchor("The chain as one command (`make recipe`)") == "the-chain-as-one-command-make-recipe"
    assert anchor("The e5 recipe, step by step: what each choice is worth") == (
        "the-e5-recipe-step-by-step-what-each-choice-is-worth"
    )


def test_a_link_to_a_missing_section_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A\n\n## Kept\n\n```bash\n# not a heading\n```\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[k](a.md#kept) [g](a.md#gone) [n](a.md#not-a-heading) [p](c.md#x) [w](https://x.org/#y) `[e](a.md#e)`\n"
    )
    assert broken(page) == [
        "a.md#gone: no such section in a.md",
        "a.md#not-a-heading: no such section in a.md",
        "c.md#x: no such page",
    ]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_link_to_a_section_lands(page: Path) -> None:
    assert not broken(page), f"{page.relative_to(ROOT)}: {broken(page)}"
