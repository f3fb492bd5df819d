"""Pseudo-labels: test rows labelled by a teacher experiment, added to the training table fold-safe.

`data.pseudo_from=<teacher>` (an experiment or a blend with fold<k>/test.csv for every fold) adds each test
row once per fold k, labelled by the teacher's fold-k predictions and marked `pseudo_for = k`: only the
student's fold k trains on it (pipeline.inputs.tables.training_rows). The teacher's fold-k model never saw fold
k's validation rows, so no fold's own labels reach its training through the test predictions.

Labels are the teacher's probabilities (`data.pseudo_labels=soft`), or 0/1 (`hard`) for probabilities at
most `data.pseudo_low` or at least `data.pseudo_high`, the uncertain middle dropped. A label must be a
probability: a model's test predictions are; a blend's `toxic` is a weighted mean of ranks, so its `prob`
column (the same weights on its members' probabilities) is read instead, and a teacher with neither is
refused.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import experiments, layout, validity
from pipeline.errors import DataError, PipelineError
from pipeline.schema import Config, value_of

SOURCE = "pseudo"


def teacher_folds(cfg: Config) -> dict[int, Path]:
    """The teacher's folds (those the student trains at least), each complete, intact and current for the
    teacher's own inputs and settings, with test predictions; else one line naming what is wrong and the command
    that makes it."""
    teacher = cfg.data.pseudo_from
    try:
        # a student of some folds (train.folds) is taught by those folds of its teacher alone, as relabelling is
        needs = (layout.OOF, layout.TEST_PREDS)
        return experiments.experiment_folds(cfg, teacher, needs=needs, folds=tuple(cfg.train.folds))
    except PipelineError as e:
        raise DataError(f"data.pseudo_from={teacher}: {e}") from None


def check_same_folds(
    cfg: Config, table: pd.DataFrame, folds: dict[int, Path], setting: str = "data.pseudo_from"
) -> None:
    """The teacher's fold k scored exactly the student's fold-k validation rows: its fold-k model never saw
    them, so its predictions (of the test rows; of the training-only rows for data.relabel_from) carry none of
    their labels. With other folds (data.seed, data.folds), a teacher's fold-k predictions would come from a model
    trained on some of the student's fold-k rows. A teacher of some folds (two of five) teaches those folds; every
    fold the student trains (train.folds) needs one. `setting`: the key that names the teacher."""
    teacher = value_of(cfg, setting)
    valid = table[table["fold"] >= 0]
    ours = dict(zip(valid["id"], valid["fold"]))
    theirs = {}
    for k, folder in folds.items():
        oof = pd.read_csv(folder / layout.OOF, dtype={"id": str}, usecols=["id"], keep_default_na=False)
        theirs.update(dict.fromkeys(oof["id"], k))
    if not set(theirs) <= set(ours):
        raise DataError(
            f"{setting}={teacher}: its validation rows are not this experiment's "
            f"({len(theirs)} against {len(ours)}); the teacher needs the same data"
        )
    same = sum(ours[i] == k for i, k in theirs.items())
    if same != len(theirs):
        raise DataError(
            f"{setting}={teacher}: only {same / max(len(theirs), 1):.0%} of the validation rows are in the same "
            "fold as in the teacher, whose fold-k predictions would then carry labels of this experiment's fold k; "
            "make the teacher with the same data.folds and data.seed"
        )
    held, scored = Counter(ours.values()), Counter(theirs.values())
    for k in folds:
        if held[k] != scored[k]:
            raise DataError(
                f"{setting}={teacher}: its fold {k} scored {scored[k]} rows where this experiment's fold {k} "
                f"holds {held[k]}; the teacher needs the same data"
            )
    wanted = cfg.train.folds or tuple(range(cfg.data.folds))
    missing = [k for k in wanted if k >= 0 and k not in folds]
    if missing:
        raise DataError(
            f"{setting}={teacher}: the teacher has no fold {', '.join(map(str, missing))}, which this "
            f"experiment trains; train those folds of {teacher}, or set train.folds={sorted(folds)}"
        )


def teacher_probabilities(cfg: Config, folder: Path, test: pd.DataFrame) -> np.ndarray:
    """A teacher fold's test probabilities in the order of the test table: a model's `toxic`, a blend's
    `prob`; else one line saying that its predictions are ranks."""
    path = folder / layout.TEST_PREDS
    preds = pd.read_csv(path, dtype={"id": str}, keep_default_na=False)
    if preds["id"].duplicated().any() or set(preds["id"]) != set(test["id"]):
        if set(preds["id"]) < set(test["id"]):  # a specialist's (train.langs): its languages' rows only
            raise DataError(f"{path}: {len(preds):,} of the test's {len(test):,} rows (a specialist's, train.langs); "
                            "teach from a route of it (blend.route) that covers every row")  # fmt: skip
        raise DataError(f"{path}: its ids are not this test table's; predict again with the current data")
    column = "toxic" if experiments.pred_scale(validity.read_done(folder) or {}) == layout.PROBABILITY else "prob"
    if column not in preds:
        raise DataError(
            f"data.pseudo_from={cfg.data.pseudo_from}: {path} holds ranks, not probabilities (a blend made by an "
            "older version); make the blend again, which writes its members' probabilities beside its ranks"
        )
    return preds.set_index("id").loc[test["id"], column].to_numpy(np.float64)


def describe(rows: pd.DataFrame, test: pd.DataFrame, cfg: Config) -> str:
    """`make data`'s line on the pseudo-labels: how many rows a fold and what their labels hold."""
    per_fold = len(rows) / max(rows["pseudo_for"].nunique(), 1)
    return (
        f"{per_fold:,.0f} of {len(test):,} test rows a fold pseudo-labelled by {cfg.data.pseudo_from} "
        f"({cfg.data.pseudo_labels}; mean label {rows['toxic'].mean():.3f})"
    )


def labels(pred: np.ndarray, mode: str, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """(kept rows, their labels): soft keeps every probability; hard keeps the confident ends as 0/1."""
    if mode == "soft":
        return np.ones(len(pred), bool), pred.astype(np.float64)
    keep = (pred <= low) | (pred >= high)
    return keep, (pred[keep] >= high).astype(np.float64)


def pseudo_rows(cfg: Config, test: pd.DataFrame, folds: dict[int, Path]) -> pd.DataFrame:
    """The test rows labelled by each teacher fold, one block per fold (columns of the table + pseudo_for)."""
    d = cfg.data
    blocks = []
    for k, folder in folds.items():
        pred = teacher_probabilities(cfg, folder, test)
        keep, y = labels(pred, d.pseudo_labels, d.pseudo_low, d.pseudo_high)
        if not keep.any():
            raise DataError(
                f"data.pseudo_from={d.pseudo_from}: hard labels kept no row of fold {k} (no prediction at most "
                f"data.pseudo_low={d.pseudo_low} or at least data.pseudo_high={d.pseudo_high}); widen them or use soft"
            )
        rows = test[keep]
        blocks.append(
            pd.DataFrame(
                {
                    "id": rows["id"].to_numpy(),
                    "text": rows["text"].to_numpy(),
                    "lang": rows["lang"].to_numpy(),
                    "toxic": y,
                    "source": SOURCE,
                    "fold": -1,  # training only: never scored
                    "pseudo_for": k,  # and only for the student's fold k
                }
            )
        )
    return pd.concat(blocks, ignore_index=True)


def add(cfg: Config, table: pd.DataFrame, test: pd.DataFrame, folds: dict[int, Path] | None = None) -> pd.DataFrame:
    """The table with the teacher's pseudo-labelled test rows (unchanged without data.pseudo_from); `folds`:
    the teacher's fold folders, by default those teacher_folds checks."""
    if not cfg.data.pseudo_from:
        return table
    folds = teacher_folds(cfg) if folds is None else folds
    check_same_folds(cfg, table, folds)
    rows = pseudo_rows(cfg, test, folds)
    out = pd.concat([table.assign(pseudo_for=-1), rows], ignore_index=True)
    out.attrs["pseudo"] = describe(rows, test, cfg)  # said by `make data`
    return out
