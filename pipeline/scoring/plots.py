"""The report's pictures, each drawn as a matplotlib Figure (what tests read) and then written as a PNG.

Writes  models/<name>/cv.png      ROC curves per language, AUC per fold, titled with the experiment
        models/<name>/curves.png  each fold's training loss (and learning rate) above its validation AUC
        models/<name>/search/history.png  `make search`: each trial's figure, pruned ones apart, and the best so far
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from sklearn.metrics import roc_curve

from pipeline import layout, validity
from pipeline.files import atomic_path
from pipeline.scoring import metrics
from pipeline.scoring.metrics import auc, on_validation, stand_ins

AUC_FLOOR = 0.5  # AUC axes start at chance, not just under the lowest bar: a cut axis makes 0.01 look like 0.3
BELOW = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.18), "fontsize": 8}  # a legend under its axes


def figure(width: float, height: float) -> Figure:
    """A Figure on its own Agg canvas: no pyplot, so no global state and nothing to close."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: Path, dpi: int) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png")


def cv_figure(oof: pd.DataFrame, summary: dict, name: str) -> Figure:
    """ROC per language on the left, AUC per fold on the right, under the experiment's name: the CV at a glance."""
    fig = figure(11, 5.5)
    left, right = fig.subplots(1, 2)
    valid = oof[on_validation(oof)]
    # each test language's stand-ins where the OOF has held-out translated rows (dashed), else validation's
    shown = stand_ins(oof, summary["six"]["profile"]["mix"]) if "six" in summary else valid
    for lang, g in shown.groupby("lang"):
        if g["toxic"].nunique() == 2:
            held = not on_validation(g).any()
            fpr, tpr, _ = roc_curve(g["toxic"], g["pred"])
            what = f"{lang}{' held-out translated' if held else ''} (AUC {auc(g['toxic'], g['pred']):.3f}, n={len(g)})"
            left.plot(fpr, tpr, ls="--" if held else "-", label=what)
    if valid["toxic"].nunique() == 2:  # none for a specialist of fr, pt or ru: its held-out translations alone
        fpr, tpr, _ = roc_curve(valid["toxic"], valid["pred"])
        left.plot(fpr, tpr, color="black", lw=2, label=f"validation.csv (AUC {summary['metrics']['valid_auc']:.3f})")
    left.plot([0, 1], [0, 1], ls=":", color="grey")
    left.set(xlabel="false positive rate", ylabel="true positive rate", title="Out-of-fold ROC by language")
    left.legend(ncol=2, **BELOW)
    by = metrics.headline(summary["metrics"])  # the figure the experiment is ranked by
    fold_bars(right, summary, by[0] if by else metrics.BY_KEY["valid_auc"])
    fig.suptitle(f"{name}: cross-validation")
    return fig


def plot_cv(oof: pd.DataFrame, summary: dict, path: Path, name: str) -> None:
    save(cv_figure(oof, summary, name), path, dpi=110)


def fold_bars(ax, summary: dict, metric: metrics.Metric) -> None:
    """One metric per fold as bars, the OOF's as a line: a fold far from the others shows at once. A fold
    without the figure says why where its bar would be; a chart that is not of the 6-lang AUC says why not."""
    folds = list(summary["folds"])
    values = [summary["folds"][k].get(metric.key) for k in folds]
    values = [float(v) if metrics.defined(v) else math.nan for v in values]
    bars = ax.bar([str(k) for k in folds], values, color="tab:blue")
    ax.bar_label(bars, fmt="%.3f", fontsize=8)
    pooled = summary["metrics"][metric.key]
    ax.axhline(pooled, color="black", ls="--", label=f"OOF {pooled:.3f}")
    low = min(AUC_FLOOR, round(float(np.nanmin([*values, pooled])) - 0.02, 2))  # below chance: shown, not cut
    for x, (k, v) in enumerate(zip(folds, values)):
        if math.isnan(v):
            ax.text(x, low + 0.02, missing_note(summary, k, metric), rotation=90, ha="center", va="bottom", fontsize=8)
    title = f"{metric.header} per fold"
    if metric is not metrics.SIX:
        lacking = (summary.get("six") or {}).get("missing")
        title += f"\n(no 6-lang AUC: no OOF rows of both classes for {', '.join(lacking)})" if lacking else ""
    ax.set(xlabel="fold", ylabel=f"{metric.header} (axis from {low:g}; {AUC_FLOOR:g} is chance)", title=title)
    ax.set_ylim(low, 1.0)
    ax.legend(**BELOW)


def missing_note(summary: dict, fold, metric: metrics.Metric) -> str:
    """What stands where a fold has no figure: the test languages it has no stand-in rows of, else 'not computed'."""
    per = summary["folds"][fold].get("per_lang") or {}
    lacking = [lg for lg, v in per.items() if not metrics.defined(v)]
    if lacking:
        return f"no {metric.header}: no rows of both classes for {', '.join(lacking)}"
    return f"{metric.header} not computed"


def read_jsonl(path: Path) -> list[dict]:
    """The records of a .jsonl log that can be read (a line a crash cut short is left out); [] without it."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            out.append(record)
    return out


def smooth(values: list[float], weight: float = 0.8) -> list[float]:
    """An exponential moving average, debiased at the start (TensorBoard's smoothing)."""
    out, avg = [], 0.0
    for i, v in enumerate(values, 1):
        avg = weight * avg + (1 - weight) * v
        out.append(avg / (1 - weight**i))
    return out


def fold_curves(loss_ax, auc_ax, fold: int, steps: list[dict], evals: list[dict], best_step: int | None) -> None:
    """One fold, two panels: training loss (raw faint, smoothed) with the learning rate on a right axis above,
    validation AUC below, each quantity on an axis of its own, named."""
    losses = [(r["step"], r["loss"]) for r in steps if r.get("loss") is not None and math.isfinite(r["loss"])]
    if losses:
        x, y = zip(*losses)
        loss_ax.plot(x, y, color="tab:blue", alpha=0.25, lw=1, label="training loss")
        loss_ax.plot(x, smooth(list(y)), color="tab:blue", lw=1.5, label="training loss (smoothed)")
    loss_ax.set(ylabel="training loss", title=f"fold {fold}")
    name = metrics.judged_by(evals[-1]) if evals else "valid AUC"  # as the evaluation lines name it
    scored = [(r["step"], r["auc"]) for r in evals if r.get("auc") is not None]
    if scored:
        x, y = zip(*scored)
        auc_ax.plot(x, y, color="tab:orange", marker="o", ms=3, lw=1.2, label=f"{name} of the fold's rows")
        best = [(s, a) for s, a in scored if s == best_step] or [max(scored, key=lambda p: p[1])]
        auc_ax.plot(*best[0], marker="*", ms=14, color="tab:red", ls="", label="best step (chosen on these rows)")
        auc_ax.set_title(f"fold {fold}: best step's own {name} {best[0][1]:.4f}", fontsize=9)
        auc_ax.set_ylim(min(AUC_FLOOR, round(min(y) - 0.02, 2)), 1.0)
    auc_ax.set(xlabel="optimizer step", ylabel=f"{name} (axis from {auc_ax.get_ylim()[0]:g})")
    # every group's rate by name (a record made before groups were named holds one number)
    rates = [(r["step"], r["lr"] if isinstance(r["lr"], dict) else {"": r["lr"]}) for r in steps
             if r.get("lr") is not None]  # fmt: skip
    if rates:
        right = loss_ax.twinx()
        for group in dict.fromkeys(n for _, lrs in rates for n in lrs):
            points = [(s, lrs[group]) for s, lrs in rates if group in lrs]
            right.plot(*zip(*points), color="grey", ls="--", lw=1, label="learning rate")
        right.set_ylabel("learning rate", color="grey", fontsize=8)
        right.tick_params(axis="y", labelsize=7, colors="grey")


def curves_figure(dirs: list[Path], name: str) -> Figure:
    """Every fold's learning curves under the experiment's name, one legend under them all (none covers a curve)."""
    cols = min(len(dirs), 3)
    rows = math.ceil(len(dirs) / cols)
    fig = figure(5 * cols, 5.6 * rows + 0.6)
    axes = fig.subplots(2 * rows, cols, squeeze=False, sharex="col")
    for i, folder in enumerate(dirs):
        loss_ax, auc_ax = axes[2 * (i // cols), i % cols], axes[2 * (i // cols) + 1, i % cols]
        done = validity.read_done(folder) or {}
        steps, evals = read_jsonl(folder / layout.STEPS), read_jsonl(folder / layout.METRICS)
        fold_curves(loss_ax, auc_ax, layout.fold_index(folder), steps, evals, done.get("best_step"))
    for i in range(len(dirs), rows * cols):
        axes[2 * (i // cols), i % cols].axis("off")
        axes[2 * (i // cols) + 1, i % cols].axis("off")
    labels = {}  # each label once, from whichever panel has it
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            labels.setdefault(label, handle)
    fig.legend(list(labels.values()), list(labels), loc="outside lower center", ncol=len(labels), fontsize=8)
    fig.suptitle(f"{name}: training loss and valid AUC per fold")
    return fig


def plot_curves(dirs: list[Path], path: Path, name: str) -> list[str]:
    """Every fold's learning curves in one picture: overfitting, a diverging fold or a schedule gone wrong
    show at a glance. Returns the folds' titles."""
    fig = curves_figure(dirs, name)
    save(fig, path, dpi=100)
    return [ax.get_title() for ax in fig.axes if ax.get_ylabel() == "training loss"]


def search_figure(trials: list[tuple[int, float | None, bool]], metric: str, name: str) -> Figure:
    """`make search`'s history: each trial's figure by its number (`trials`: number, figure or None, complete),
    a pruned trial's (its last evaluation's) hollow, and the best complete figure so far as a step line."""
    fig = figure(7, 4)
    ax = fig.add_subplot()
    done = [(n, v) for n, v, complete in trials if complete and v is not None]
    cut = [(n, v) for n, v, complete in trials if not complete and v is not None]
    if done:
        ax.plot(*zip(*done), "o", color="tab:blue", label="complete")
        best = np.maximum.accumulate([v for _, v in done])
        ax.step([n for n, _ in done], best, where="post", color="tab:green", label="best so far")
    if cut:
        ax.plot(*zip(*cut), "o", mfc="none", color="tab:gray", label="pruned (last evaluation)")
    ax.set(xlabel="trial", ylabel=metric, title=f"{name}: search")
    if done or cut:
        ax.legend(**BELOW, ncols=3)
    return fig


def plot_search(trials: list[tuple[int, float | None, bool]], path: Path, metric: str, name: str) -> None:
    save(search_figure(trials, metric, name), path, dpi=100)
