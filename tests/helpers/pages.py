"""The fenced blocks of README.md and docs/*.md, and the markers that say how a test treats one: an HTML comment on
a line of its own just before the block. `<!-- not run: why -->` leaves a block out of the runs (its reason said);
`<!-- continues the block above -->` runs a Python block after the page's previous one (tests/test_doc_blocks.py).
The shell blocks' runs and checks are in tests/test_doc_shell_blocks.py; docs/testing.md says both."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from tests.helpers import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONTINUES = "<!-- continues the block above -->"
NOT_RUN = re.compile(r"<!-- not run: (\S.*?) -->")
PYTHON = ("python",)
SHELL = ("bash", "sh", "console", "shell")


class Block(NamedTuple):
    where: str  # page:line of the fence, from the repository root
    before: str  # the line just before the fence, stripped
    body: str

    @property
    def not_run(self) -> str | None:
        """Why the block is not run, or None where it runs."""
        m = NOT_RUN.fullmatch(self.before)
        return m.group(1) if m else None


def blocks(page: Path, languages: tuple[str, ...]) -> list[Block]:
    """The page's blocks fenced as one of `languages` (```bash, ```python ...), in order."""
    text = page.read_text(encoding="utf-8")
    fence = re.compile(rf"^```(?:{'|'.join(languages)})[ \t]*\n(.*?)^```", re.S | re.M)
    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name  # a test's own page: its name
    found = []
    for m in fence.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        where = f"{name}:{text[: m.start()].count(chr(10)) + 1}"
        found.append(Block(where, before, m.group(1)))
    return found
