"""A docs page's generated part (pipeline/docpage.py): spliced between its markers, the rest of the page kept."""

from __future__ import annotations

from pipeline import docpage


def test_between_replaces_only_what_stands_between_the_first_markers() -> None:
    text = "head <!-- a --> old <!-- /a --> tail <!-- /a -->"
    assert docpage.between(text, "<!-- a -->", "<!-- /a -->", "\nnew\n") == (
        "head <!-- a -->\nnew\n<!-- /a --> tail <!-- /a -->"
    )


def test_rewrite_writes_the_one_page_it_is_given_and_says_how_to_call_it_otherwise(tmp_path, capsys) -> None:
    page = tmp_path / "page.md"
    page.write_text("x [old] y", encoding="utf-8")
    assert docpage.rewrite([str(page)], "python -m somewhere PAGE", lambda t: t.replace("old", "new")) == 0
    assert page.read_text(encoding="utf-8") == "x [new] y"
    assert docpage.rewrite([], "python -m somewhere PAGE", str.upper) == 2
    assert "usage: python -m somewhere PAGE" in capsys.readouterr().err
    assert page.read_text(encoding="utf-8") == "x [new] y"
