"""Relabelled training rows: the training-only rows' targets mixed with a teacher experiment's fold-safe predictions.

`data.relabel_from=<teacher>` (an experiment whose folds predicted the training-only rows: `make predict
ARGS="predict.training_rows=true"`, pipeline.predict) and `data.relabel_weight=w`: the student's fold k trains each
training-only row on `(1 - w) * label + w * p`, p the teacher's fold-k probability of the row. The teacher's fold k
never saw fold k's validation rows (the same folds are checked, as for pseudo-labels: pipeline.inputs.pseudo), so no
fold's own labels reach its targets. Scored rows (validation and held-out rows) keep their 0/1 labels.

The prepared table is shared by every fold and keeps the labels: a fold mixes its own targets where it picks its rows
(pipeline.inputs.tables.fold_targets); `make data` checks the teacher and says what the mix does. A mixed target is
fractional: data.relabel_from needs data.soft_labels=true (pipeline.validation), whose soft targets it extends.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import experiments, layout
from pipeline.errors import DataError, PipelineError
from pipeline.inputs import pseudo
from pipeline.schema import Config

SETTING = "data.relabel_from"
MAKE = '`make predict CONFIG=<its config> ARGS="predict.training_rows=true"`'  # what writes a teacher's predictions


def teacher_folds(cfg: Config) -> dict[int, Path]:
    """The teacher's folds, each complete, intact and current for its own inputs and settings, with predictions of
    the training-only rows; else one line naming what is wrong and the command that makes it."""
    teacher = cfg.data.relabel_from
    try:
        # a student of some folds (train.folds) is taught by those folds of its teacher alone
        needs = (layout.OOF, layout.TRAINING_PREDS)
        return experiments.experiment_folds(cfg, teacher, needs=needs, folds=tuple(cfg.train.folds))
    except PipelineError as e:
        raise DataError(f"{SETTING}={teacher}: {e}") from None


def mix(labels: np.ndarray, probs: np.ndarray, weight: float) -> np.ndarray:
    """The relabelled targets: (1 - weight) * label + weight * the teacher's probability."""
    return (1.0 - weight) * np.asarray(labels, np.float64) + weight * np.asarray(probs, np.float64)


def teacher_probabilities(cfg: Config, path: Path, rows: pd.DataFrame) -> np.ndarray:
    """A teacher fold's probabilities of `rows` (the training-only rows), in their order, from its training.csv;
    else one line saying that the teacher predicted other rows (other data)."""
    preds = pd.read_csv(path, dtype={"id": str, "source": str}, keep_default_na=False)
    ours = pd.MultiIndex.from_arrays([rows["source"].astype(str), rows["id"].astype(str)])
    theirs = pd.MultiIndex.from_arrays([preds["source"], preds["id"]])
    if theirs.has_duplicates or ours.has_duplicates or not theirs.sort_values().equals(ours.sort_values()):
        raise DataError(
            f"{SETTING}={cfg.data.relabel_from}: {path} predicts {len(preds):,} rows, not this experiment's "
            f"{len(rows):,} training-only rows; the teacher needs the same data (its data settings and files)"
        )
    return pd.Series(preds["prob"].to_numpy(np.float64), index=theirs).loc[ours].to_numpy()


def fold_targets(cfg: Config, table: pd.DataFrame, fold: int, rows: np.ndarray) -> np.ndarray:
    """Each row's target as fold `fold` trains on it: `toxic`, the training-only `rows` (positions) mixed with the
    teacher's fold-`fold` predictions under data.relabel_from. Float32, the loss's dtype."""
    targets = table["toxic"].to_numpy(np.float64).copy()
    if not cfg.data.relabel_from:
        return targets.astype(np.float32)
    if fold == layout.STAGE1:  # every fold of the teacher saw some validation rows: none may teach a stage-1 model
        raise DataError(f"{SETTING}={cfg.data.relabel_from}: a stage-1 model (fold -1) has no teacher fold that "
                        f"never saw a validation row; train it without {SETTING}")  # fmt: skip
    path = layout.relabel_files(cfg)[fold]
    if not path.is_file():
        raise DataError(
            f"{SETTING}={cfg.data.relabel_from}: no {path} (fold {fold}'s predictions of the training-only rows); "
            f"make them with {MAKE} and run `make data` again, or leave fold {fold} out of train.folds"
        )
    targets[rows] = mix(targets[rows], teacher_probabilities(cfg, path, table.iloc[rows]), cfg.data.relabel_weight)
    return targets.astype(np.float32)


def check(cfg: Config, table: pd.DataFrame, rows: np.ndarray) -> list[str]:
    """For `make data`: the teacher's folds checked (complete, the same folds, predictions of these very `rows`,
    the training-only rows) and one line of what the mix does ([] without data.relabel_from)."""
    if not cfg.data.relabel_from:
        return []
    if not len(rows):
        return [f"{SETTING}={cfg.data.relabel_from}: the table has no training-only rows; none is relabelled"]
    folds = teacher_folds(cfg)
    pseudo.check_same_folds(cfg, table, folds, SETTING)
    labels = table["toxic"].to_numpy(np.float64)[rows]
    after = [mix(labels, teacher_probabilities(cfg, folder / layout.TRAINING_PREDS, table.iloc[rows]),
                 cfg.data.relabel_weight).mean() for folder in folds.values()]  # fmt: skip
    return [
        f"{len(rows):,} training-only rows relabelled by {cfg.data.relabel_from}'s folds {sorted(folds)}, each "
        f"fold's by its own (data.relabel_weight={cfg.data.relabel_weight:g}): mean target {labels.mean():.3f} -> "
        f"{np.mean(after):.3f} (the folds' mean)"
    ]
