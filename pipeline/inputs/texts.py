"""Whitespace and talk-page markup made alike for every source (data.normalise_text), so that how a comment is
laid out does not tell which file it came from.

The test's and validation.csv's comments come flattened: no newline in any row, and wiki markup in 1-4% of
them. The English training file and its translations keep the talk page's layout: over half their rows hold a
newline (often with non-breaking spaces after it), a tenth a `==` heading. Those translated rows are half
toxic and the validation rows a sixth, so a layout only they have is a cue to the source, not to toxicity, and
one the test never shows. `normalise` removes what the test (almost) never holds and keeps what it holds as
often as the training rows do:

- every run of whitespace (newlines, tabs, non-breaking and other Unicode spaces) becomes one space;
- the indentation and list markers that open a talk-page line (`:`, `*`, `#`), which exist only with newlines;
- heading runs (`==`), bold and italic quotes (`''`, `'''`) and magic words (`__NOTOC__`): layout, not words.

Links and templates (`[[...]]`, `{{...}}`) and signatures (`~~~~`) stay: the test holds them as often as the
training rows (about 0.5% each on the real slice), and a link's words are the comment's.
"""

from __future__ import annotations

import re

import pandas as pd

# a marker opening a talk-page line, matched before the lines are joined; not an emoticon's eyes (":)", ":D")
# nor a number ("#1")
_LINE_MARKERS = re.compile(r"^[^\S\n]*[:*#]+(?![)(DPpO0-9/|\\])", re.MULTILINE)
_LAYOUT = re.compile(r"={2,}|'{2,}|__[A-Z]+__")
_SPACE = re.compile(r"\s+")  # a str pattern: \s is every Unicode space, the non-breaking one included


def normalise(text: str) -> str:
    """`text` on one line, its talk-page layout (line markers, headings, bold and italic quotes, magic words)
    removed, every run of whitespace one space, none at either end."""
    text = _LINE_MARKERS.sub(" ", str(text))
    return _SPACE.sub(" ", _LAYOUT.sub(" ", text)).strip()


def normalise_all(texts: pd.Series) -> pd.Series:
    return texts.astype(str).map(normalise)


def layout_shares(texts: pd.Series) -> tuple[float, float]:
    """(share of `texts` holding a newline, share holding a layout mark `normalise` removes)."""
    texts = texts.astype(str)
    layout = texts.map(lambda t: bool(_LAYOUT.search(t) or _LINE_MARKERS.search(t)))
    return float(texts.str.contains("\n", regex=False).mean()), float(layout.mean())
