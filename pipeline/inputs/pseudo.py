"""Pseudo-labels: test rows labelled by a teacher experiment, added to the training table fold-safe.

`data.pseudo_from=<teacher>` (an experiment or a blend with fold<k>/test.csv for every fold) adds each test
row once per fold k, labelled by the teacher's fold-k predictions and marked `pseudo_for = k`: only the
student's fold k trains on it (pipeline.inputs.tables.training_rows). The teacher's fold-k model never saw fold
k's validation rows, so no fold's own labels reach its training through the test predictions.

Labels are the teacher's probabilities (`data.pseudo_labels=soft`), or 0/1 (`hard`) for predictions at
most `data.pseudo_low` or at least `data.pseudo_high`, the uncertain middle dropped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import layout
from pipeline.config import Config
from pipeline.errors import DataError
from pipeline.files import file_digest

SOURCE = "pseudo"


def teacher_files(cfg: Config) -> dict[int, Path]:
    """fold -> the teacher's fold-k test predictions; an error names what is missing and the command."""
    teacher = cfg.data.pseudo_from
    folders = {k: layout.fold_dir(cfg, k, teacher) for k in range(cfg.data.folds)}
    missing = [k for k, folder in folders.items() if layout.fold_status(folder, needs=(layout.TEST_PREDS,))]
    if missing:
        raise DataError(
            f"data.pseudo_from={teacher}: {folders[missing[0]]} has no complete model with test predictions; "
            f'make them first: `make train predict ARGS="name={teacher}"` (or `make blend` for a blend), '
            f"with the same data.folds={cfg.data.folds}"
        )
    return {k: folder / layout.TEST_PREDS for k, folder in folders.items()}


def signature(cfg: Config) -> dict:
    """The teacher's predictions by content: a retrained teacher rebuilds the student's table."""
    if not cfg.data.pseudo_from:
        return {}
    return {str(k): file_digest(p) for k, p in teacher_files(cfg).items()}


def labels(pred: np.ndarray, mode: str, low: float, high: float) -> tuple[np.ndarray, np.ndarray]:
    """(kept rows, their labels): soft keeps every probability; hard keeps the confident ends as 0/1."""
    if mode == "soft":
        return np.ones(len(pred), bool), pred.astype(np.float64)
    keep = (pred <= low) | (pred >= high)
    return keep, (pred[keep] >= high).astype(np.float64)


def pseudo_rows(cfg: Config, test: pd.DataFrame) -> pd.DataFrame:
    """The test rows labelled by each teacher fold, one block per fold (columns of the table + pseudo_for)."""
    d = cfg.data
    blocks = []
    for k, path in teacher_files(cfg).items():
        preds = pd.read_csv(path, dtype={"id": str}, keep_default_na=False)
        if preds["id"].duplicated().any() or set(preds["id"]) != set(test["id"]):
            raise DataError(f"{path}: its ids are not this test table's; predict again with the current data")
        pred = preds.set_index("id").loc[test["id"], "toxic"].to_numpy(np.float64)
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


def add(cfg: Config, table: pd.DataFrame, test: pd.DataFrame) -> pd.DataFrame:
    """The table with the teacher's pseudo-labelled test rows (unchanged without data.pseudo_from)."""
    if not cfg.data.pseudo_from:
        return table
    return pd.concat([table.assign(pseudo_for=-1), pseudo_rows(cfg, test)], ignore_index=True)
