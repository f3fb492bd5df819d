"""A submission: the folds' test predictions ensembled, checked against sample_submission.csv before it is written.

The check: at least one row, the same id set as sample_submission (returned in its order), no NaN, every
value in [0, 1].
A failed check is an error and leaves no file.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.errors import PipelineError


class SubmissionError(PipelineError):
    pass


def ensemble(preds: list[np.ndarray], how: str = "mean") -> np.ndarray:
    """Mean of the folds' probabilities, or mean of their ranks scaled to [0, 1] (AUC only sees order)."""
    if not preds:
        raise SubmissionError("nothing to ensemble")
    stack = np.vstack([np.asarray(p, dtype=np.float64) for p in preds])
    if how == "mean":
        return stack.mean(axis=0)
    if how == "rank":
        ranks = np.vstack([pd.Series(row).rank(method="average").to_numpy() for row in stack])
        n = stack.shape[1]
        return (ranks.mean(axis=0) - 1) / max(n - 1, 1)
    raise SubmissionError(f"predict.ensemble: unknown method {how!r} (mean or rank)")


def align(frames: list[pd.DataFrame]) -> list[np.ndarray]:
    """The folds' predictions in the first frame's id order; every frame must hold the same ids once."""
    ids = frames[0]["id"]
    out = []
    for i, f in enumerate(frames):
        if f["id"].duplicated().any() or set(f["id"]) != set(ids):
            raise SubmissionError(f"fold predictions {i} do not cover the same test ids as the first")
        out.append(f.set_index("id").loc[ids, "toxic"].to_numpy())
    return out


def check_submission(sub: pd.DataFrame, sample: pd.DataFrame) -> pd.DataFrame:
    """Same id set as sample_submission (returned in its order), no NaN, every value in [0, 1]."""
    if list(sub.columns) != ["id", "toxic"]:
        raise SubmissionError(f"submission columns are {list(sub.columns)}, expected ['id', 'toxic']")
    if sub.empty:
        raise SubmissionError("submission has no rows (an empty test set?)")
    if sub["id"].duplicated().any():
        raise SubmissionError(f"submission has duplicate ids, e.g. {sub['id'][sub['id'].duplicated()].iloc[0]!r}")
    missing = set(sample["id"]) - set(sub["id"])
    extra = set(sub["id"]) - set(sample["id"])
    if missing or extra:
        raise SubmissionError(
            f"submission ids differ from sample_submission.csv: {len(missing)} missing, {len(extra)} unknown"
        )
    values = pd.to_numeric(sub["toxic"], errors="coerce")
    if values.isna().any():
        raise SubmissionError(f"submission has {int(values.isna().sum())} NaN prediction(s)")
    if ((values < 0) | (values > 1)).any():
        raise SubmissionError("submission has predictions outside [0, 1]")
    return sub.set_index("id").loc[sample["id"]].reset_index()
