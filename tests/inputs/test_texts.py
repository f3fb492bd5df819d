"""Texts made alike for every source (pipeline.inputs.texts): one line, whitespace collapsed, talk-page layout
removed, words and links kept."""

from __future__ import annotations

import pandas as pd

from pipeline.inputs import texts


def test_newlines_and_every_unicode_space_become_one_space() -> None:
    assert texts.normalise("  one\n\n\xa0two\r\n\tthree\u2003four  ") == "one two three four"


def test_talk_page_layout_goes_and_the_words_stay() -> None:
    page = "== Quick question ==\n\n:Why '''that''' edit?\n* first\n** second\n#third\n__NOTOC__ done"
    assert texts.normalise(page) == "Quick question Why that edit? first second third done"


def test_links_templates_signatures_and_emoticons_stay() -> None:
    kept = ":) see [[Talk:Page|here]] and {{unblock|reason}} ~~~~"
    assert texts.normalise(kept) == kept
    assert texts.normalise("#1 fan\n:D yes") == "#1 fan :D yes"


def test_layout_shares_count_rows_with_a_newline_and_with_layout() -> None:
    rows = pd.Series(["a\nb", "== h ==", "plain", "x\n:reply"])
    assert texts.layout_shares(rows) == (0.5, 0.5)
    assert texts.layout_shares(texts.normalise_all(rows)) == (0.0, 0.0)
