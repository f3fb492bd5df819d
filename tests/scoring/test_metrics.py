"""AUC, overall and per language (pipeline.scoring.metrics)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.scoring import metrics

# ---------------------------------------------------------------- metrics


def test_auc_nan_on_one_class() -> None:
    assert math.isnan(metrics.auc([0, 0, 0], [0.1, 0.5, 0.9]))
    assert math.isnan(metrics.auc([1], [0.3]))
    assert metrics.auc([0, 1, 0, 1], [0.1, 0.9, 0.2, 0.8]) == 1.0
    assert metrics.auc([0, 1, 0, 1], [0.9, 0.1, 0.8, 0.2]) == 0.0
    assert metrics.auc([0, 1, 1, 0], [0.1, 0.4, 0.35, 0.8]) == 0.5


def test_auc_by_lang() -> None:
    y = [0, 1, 0, 1, 0, 0, 0, 1]
    p = [0.1, 0.9, 0.8, 0.2, 0.5, 0.3, 0.6, 0.95]
    lang = ["es", "es", "it", "it", "tr", "tr", "es", "it"]
    out = metrics.auc_by_lang(y, p, lang)
    assert list(out) == ["es", "it", "tr"]  # sorted
    assert out["es"] == 1.0  # y (0,1,0) p (0.1,0.9,0.6)
    assert out["it"] == 0.5  # y (0,1,1) p (0.8,0.2,0.95): 1 of 2 pairs right
    assert math.isnan(out["tr"])  # only non-toxic rows
    assert all(isinstance(k, str) for k in out)
    series = metrics.auc_by_lang(pd.Series(y), pd.Series(p), pd.Series(lang))
    assert series.keys() == out.keys()


def test_test_labels_that_are_not_labels_are_refused_naming_the_row(tmp_path) -> None:
    import pytest

    from pipeline.errors import DataError

    test = pd.DataFrame({"id": ["a", "b", "c"], "lang": ["es", "fr", "tr"]})
    preds = pd.DataFrame({"id": ["a", "b", "c"], "toxic": [0.1, 0.9, 0.4]})
    pd.DataFrame({"id": ["a", "b", "c"], "toxic": ["0", "1", "x"]}).to_csv(tmp_path / "test_labels.csv", index=False)
    with pytest.raises(DataError, match=r"test_labels.csv: column toxic has 1 value.*data row 3: 'x'"):
        metrics.test_score(tmp_path, test, preds)
    pd.DataFrame({"id": ["a", "b", "c"], "toxic": [0, 1, -1]}).to_csv(tmp_path / "test_labels.csv", index=False)
    assert metrics.test_score(tmp_path, test, preds)["rows"] == 2  # -1: left out of scoring


def test_every_metric_is_in_the_docs_table_of_figures() -> None:
    """docs/recipes.md's table of figures names every metric of metrics.METRICS, as the reports show it."""
    text = (Path(__file__).parents[2] / "docs" / "recipes.md").read_text()
    rows = {line.split("|")[1].strip().strip("`") for line in text.splitlines() if line.startswith("| `")}
    assert {m.header for m in metrics.METRICS} <= rows


def test_the_fold_table_names_a_fold_judged_by_its_valid_auc_where_the_oof_has_a_six_language_one() -> None:
    """fr's held-out rows are clean in fold 1: the OOF has a 6-lang AUC, fold 1 none, and its evaluations were
    judged by its valid AUC (metrics.fold_score); the table says so, not only by a '-' in its column."""
    import numpy as np

    from pipeline.scoring import report

    rng, i = np.random.default_rng(0), np.arange(40)
    frames = []
    for lang, source in (("es", "validation"), ("it", "validation"), ("fr", "translated-train")):
        y = (i % 4 == 0) if lang == "fr" else (i % 3 == 0)  # fr's toxic rows: all in fold 0 (i % 2 == 0)
        frames.append(pd.DataFrame({"id": [f"{lang}{n}" for n in i], "lang": lang, "toxic": y.astype(int),
                                    "fold": i % 2, "source": source, "pred": y + rng.normal(0, 1, 40)}))  # fmt: skip
    oof = pd.concat(frames, ignore_index=True)
    mix = {"es": 0.3, "fr": 0.4, "it": 0.3}
    profile = {"mix": mix, "rates": dict.fromkeys(mix, 0.2), "rate_from": dict.fromkeys(mix, "validation.csv")}
    summary = report.cv_summary(oof, {0: {"metric": "six"}, 1: {"metric": "valid_auc"}}, profile)
    assert not math.isnan(summary["metrics"]["six"]) and math.isnan(summary["folds"][1]["six"])
    assert metrics.fold_score(oof[oof["fold"] == 1], oof.loc[oof["fold"] == 1, "pred"], profile)[0] == "valid_auc"
    lines = report.fold_table(summary).splitlines()
    assert (
        "best steps chosen by 6-lang AUC (fold 0); valid AUC (fold 1, no stand-in rows of both classes for fr)" in lines
    )
    # folds made before done.json named the metric: said so; every fold judged by the 6-lang AUC: nothing said
    old = report.fold_table({**summary, "fold_details": {0: {}, 1: {}}})
    assert "best steps chosen by AUC (folds 0, 1); AUC: made before folds named it" in old
    alike = report.fold_table({**summary, "fold_details": {0: {"metric": "six"}, 1: {"metric": "six"}}})
    assert "best steps chosen by" not in alike


def six_language_oof(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """Validation rows of es, it, tr and held-out translated rows of fr, pt, ru, predictions of varied quality."""
    rng = np.random.default_rng(seed)
    lang = np.array(["es", "it", "tr", "fr", "pt", "ru"])[rng.integers(0, 6, n)]
    source = np.where(np.isin(lang, ["es", "it", "tr"]), "validation", "translated-train")
    rate = np.where(source == "validation", 0.15, 0.5)
    y = (rng.random(n) < rate).astype(int)
    skill = pd.Series({"es": 2.0, "it": 1.5, "tr": 1.0, "fr": 2.5, "pt": 0.5, "ru": 1.0})[lang].to_numpy()
    return pd.DataFrame({"id": [f"r{i}" for i in range(n)], "lang": lang, "toxic": y, "fold": 0, "source": source,
                         "pred": 1 / (1 + np.exp(-(skill * y + rng.normal(size=n))))})  # fmt: skip


def test_the_estimates_range_moves_the_languages_without_validation_rows_over_plausible_rates() -> None:
    oof = six_language_oof()
    valid = oof[oof["source"] == "validation"].assign(toxic=lambda f: (f["lang"] == "it") * 1 | f["toxic"])
    profile = metrics.test_profile(valid, oof["lang"])
    guessed, low, high = metrics.prior_span(profile)
    assert guessed == ["fr", "pt", "ru"] and low < high
    corners = metrics.six_corners(oof, profile)
    point = metrics.six_language(oof, profile)["auc"]
    assert len(corners) == 8 and min(corners) < point < max(corners)
    # the corner with pt (the worst language) rare and fr (the best) common reads highest
    moved = {**profile, "rates": {**profile["rates"], "fr": high, "pt": low, "ru": low}}
    assert metrics.six_language(oof, moved)["auc"] == pytest.approx(max(corners))
    every = {**profile, "rate_from": {g: metrics.FROM_VALIDATION for g in profile["mix"]}}
    assert metrics.six_corners(oof, every) is None  # nothing assumed, nothing to range over


def test_the_fold_table_shows_the_estimates_range_and_what_the_best_steps_would_read() -> None:
    from pipeline.scoring import report

    oof = six_language_oof()
    oof["fold"] = np.arange(len(oof)) % 2
    oof["best"] = np.clip(oof["pred"] + 0.05 * oof["toxic"], 0, 1)  # the step chosen on these rows reads higher
    valid = oof[oof["source"] == "validation"]
    profile = metrics.test_profile(valid, oof["lang"])
    summary = report.cv_summary(oof, {0: {"epochs": 1}, 1: {"epochs": 1}}, profile)
    low, high = summary["six"]["range"]
    six, best = summary["metrics"][metrics.SIX.key], summary["best_step"][metrics.SIX.key]
    assert low < six < high and best > six
    table = report.fold_table(summary)
    _, lo_rate, hi_rate = metrics.prior_span(profile)
    assert (f"  from {low:.4f} to {high:.4f} as fr, pt, ru take any toxic rate from {lo_rate:.3f} to {hi_rate:.3f} "
            "(validation.csv's lowest and highest language's)") in table  # fmt: skip
    assert (
        f"6-lang AUC {best:.4f} with each fold's best step, chosen on the rows it is scored on "
        f"({best - six:+.4f}); the OOF above takes each half of a fold at the step its other half chose"
    ) in table
