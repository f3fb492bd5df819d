"""The part of a docs page that code makes: the text between two markers replaced, and the command line that
rewrites a page (`python -m pipeline.configdoc docs/configs.md`, `python -m pipeline.pooling docs/export.md`,
`python -m pipeline.scoring.metricdoc docs/recipes.md`); pipeline.stages splices its tables with `between` too.

Standard library only: pipeline.stages, which the Makefile reads before .venv exists, imports it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def between(text: str, begin: str, end: str, body: str) -> str:
    """`text` with what stands between the first `begin` and the first `end` after it made `body`."""
    head, rest = text.split(begin, 1)
    return f"{head}{begin}{body}{end}{rest.split(end, 1)[1]}"


def rewrite(argv: list[str] | None, usage: str, made: Callable[[str], str]) -> int:
    """A page generator's `main`: PAGE (the one argument) rewritten as `made` makes its text; 2 and `usage` on
    stderr without exactly one argument."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: {usage}", file=sys.stderr)
        return 2
    page = Path(argv[0])
    page.write_text(made(page.read_text(encoding="utf-8")), encoding="utf-8")
    return 0
