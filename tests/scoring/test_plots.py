"""The report's pictures (pipeline.scoring.plots), read as matplotlib Figures: titles, axes, notes, legends."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import layout
from pipeline.scoring import metrics, plots


def oof_rows(folds: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 40 * folds
    toxic = np.tile([0, 1], n // 2)
    return pd.DataFrame({
        "id": [str(i) for i in range(n)], "lang": np.tile(["es", "it", "tr", "es"], n // 4),
        "toxic": toxic, "pred": toxic * 0.3 + rng.random(n), "fold": np.repeat(range(folds), 40),
        "source": layout.VALID_SOURCE,
    })  # fmt: skip


def summary_of(six_per_fold: list[float], six: float = math.nan, missing=("fr", "pt", "ru")) -> dict:
    langs = {"es": 0.8, "fr": math.nan, "it": 0.7, "pt": math.nan, "ru": math.nan, "tr": 0.75}
    folds = {}
    for k, v in enumerate(six_per_fold):
        per = {**langs, "fr": 0.7} if not math.isnan(v) else langs
        folds[k] = {"six": v, "valid_auc": 0.72 + k / 100, "brier": 0.2, "per_lang": per}
    return {
        "metrics": {"six": six, "valid_auc": 0.73, "brier": 0.2},
        "folds": folds,
        "six": {"profile": {"mix": dict.fromkeys(langs, 1 / 6)}, "missing": list(missing)},
    }


def notes(ax) -> list[str]:
    """The words written on an axes (not the bars' values)."""
    return [t.get_text() for t in ax.texts if any(c.isalpha() for c in t.get_text())]


def overlaps(legend, ax) -> bool:
    """Whether a legend's box, as drawn, covers any of the axes' plotting area."""
    box = legend.get_window_extent(legend.figure.canvas.get_renderer())
    return box.overlaps(ax.get_window_extent())


def test_cv_png_names_its_experiment_and_keeps_legends_off_the_data() -> None:
    fig = plots.cv_figure(oof_rows(), summary_of([0.8, 0.81, 0.79], six=0.8, missing=()), "xlmr-e5")
    fig.canvas.draw()
    assert fig.get_suptitle() == "xlmr-e5: cross-validation"
    left, right = fig.axes
    assert right.get_title() == "6-lang AUC per fold"
    for ax in fig.axes:
        assert ax.get_legend() is not None and not any(overlaps(ax.get_legend(), other) for other in fig.axes)


def test_the_fold_chart_starts_at_chance_and_says_so() -> None:
    fig = plots.cv_figure(oof_rows(), summary_of([0.8, 0.81, 0.79], six=0.8, missing=()), "xlmr-e5")
    right = fig.axes[1]
    assert right.get_ylim() == (0.5, 1.0)  # not cut just under the lowest bar (0.77): that makes 0.02 look large
    assert right.get_ylabel() == "6-lang AUC (axis from 0.5; 0.5 is chance)"


def test_a_fold_without_the_6_lang_auc_is_named_where_its_bar_would_be() -> None:
    fig = plots.cv_figure(oof_rows(), summary_of([0.8, math.nan, 0.79], six=0.8, missing=()), "xlmr-e5")
    assert notes(fig.axes[1]) == ["no 6-lang AUC: no rows of both classes for fr, pt, ru"]
    assert plots.missing_note({"folds": {0: {}}}, 0, metrics.SIX) == "6-lang AUC not computed"


def test_a_chart_of_the_valid_auc_says_why_there_is_no_6_lang_auc() -> None:
    fig = plots.cv_figure(oof_rows(), summary_of([math.nan] * 3), "sample")
    right = fig.axes[1]
    assert right.get_title() == "valid AUC per fold\n(no 6-lang AUC: no OOF rows of both classes for fr, pt, ru)"
    assert notes(right) == []  # every fold has its valid AUC


def fold_folder(base: Path, k: int) -> Path:
    folder = base / f"fold{k}"
    folder.mkdir(parents=True)
    steps = [{"step": s, "loss": 0.7 - s / 100, "lr": {"decay": 1e-3 * (1 - s / 20)}} for s in range(2, 21, 2)]
    evals = [{"step": s, "auc": 0.7 + s / 200, "metric": "valid_auc"} for s in range(4, 21, 4)]
    (folder / layout.STEPS).write_text("".join(json.dumps(r) + "\n" for r in steps))
    (folder / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in evals))
    return folder


def test_curves_png_gives_loss_and_auc_an_axis_each_under_the_experiments_name(tmp_path: Path) -> None:
    fig = plots.curves_figure([fold_folder(tmp_path, k) for k in range(2)], "xlmr-e5")
    fig.canvas.draw()
    assert fig.get_suptitle() == "xlmr-e5: training loss and valid AUC per fold"
    labels = [ax.get_ylabel() for ax in fig.axes if ax.get_visible() and ax.axison]
    # per fold: training loss, valid AUC (from chance), the learning rate on the loss panel's right axis
    assert sorted(labels) == sorted(["training loss", "valid AUC (axis from 0.5)", "learning rate"] * 2)
    assert [ax.get_title() for ax in fig.axes if ax.get_ylabel() == "training loss"] == ["fold 0", "fold 1"]
    (legend,) = fig.legends  # one, under every panel
    box = legend.get_window_extent()
    assert not any(overlaps(legend, ax) for ax in fig.axes)
    assert all(box.y1 < ax.get_window_extent().y0 for ax in fig.axes)
    assert not any(ax.get_legend() for ax in fig.axes)


def test_a_specialist_without_validation_rows_draws_its_held_out_curve_alone() -> None:
    """A fr specialist's OOF: held-out translations only, no validation.csv row to draw a curve of."""
    oof = oof_rows().assign(lang="fr", source="translated-train")
    summary = summary_of([0.8, 0.81, 0.79], six=0.8, missing=())
    summary["metrics"]["valid_auc"] = math.nan
    left = plots.cv_figure(oof, summary, "rs-fr").axes[0]
    labels = [line.get_label() for line in left.get_lines()]
    assert any(label.startswith("fr held-out translated") for label in labels)
    assert not any(label.startswith("validation.csv") for label in labels)
