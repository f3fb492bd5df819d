"""docs/recipes.md's table of the figures is made from METRICS (pipeline.scoring.metricdoc)."""

from __future__ import annotations

from dataclasses import replace

from pipeline.scoring import metricdoc, metrics
from tests.helpers import ROOT

RECIPES_MD = ROOT / "docs" / "recipes.md"


def test_the_figures_table_is_made_from_metrics() -> None:
    text = RECIPES_MD.read_text(encoding="utf-8")
    assert metricdoc.BEGIN in text, "docs/recipes.md: the table of the figures is made by metricdoc"
    assert text == metricdoc.with_table(text), "run `.venv/bin/python -m pipeline.scoring.metricdoc docs/recipes.md`"
    for m in metrics.METRICS:
        assert f"| `{m.header}` | {m.doc}" in text, m.key


def test_a_metric_of_probabilities_says_a_blend_has_none() -> None:
    brier = metrics.BY_KEY["brier"]
    assert brier.probabilities and metricdoc.row(brier).endswith("; `-` for a blend, whose OOF holds ranks |")
    assert metricdoc.row(replace(brier, probabilities=False)) == f"| `Brier` | {brier.doc} |"


def test_the_writer_rewrites_only_the_table(tmp_path, capsys) -> None:
    page = tmp_path / "recipes.md"
    page.write_text(f"# Head\n\n{metricdoc.BEGIN}\nold\n{metricdoc.END}\n\nTail\n", encoding="utf-8")
    assert metricdoc.main([str(page)]) == 0
    assert page.read_text() == f"# Head\n\n{metricdoc.BEGIN}\n{metricdoc.table()}{metricdoc.END}\n\nTail\n"
    assert metricdoc.main([]) == 2
    assert "usage: python -m pipeline.scoring.metricdoc docs/recipes.md" in capsys.readouterr().err
