"""ROC AUC overall and per language, on the validation rows and, where the labels are known, on test.

The competition's metric is one ROC AUC over all test rows together, whatever their language.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

from pipeline.errors import PipelineError
from pipeline.inputs.csvfile import label_values, read_csv
from pipeline.layout import TEST_LABELS


def auc(y, p) -> float:
    """ROC AUC, or NaN where only one class is present."""
    y = np.asarray(y)
    if len(np.unique(y)) < 2:
        return float("nan")
    return float(roc_auc_score(y, p))


def auc_by_lang(y, p, lang) -> dict[str, float]:
    y, p, lang = np.asarray(y), np.asarray(p), np.asarray(lang)
    return {str(g): auc(y[lang == g], p[lang == g]) for g in sorted(set(lang))}


def test_score(raw: Path, test: pd.DataFrame, preds: pd.DataFrame) -> dict | None:
    """AUC overall and per language against the competition's test_labels.csv, where it is present."""
    path = raw / TEST_LABELS
    if not path.exists():
        return None
    labels = read_csv(path, ["id", "toxic"])
    labels["toxic"] = label_values(labels, "toxic", path, allowed=(-1,))
    labels = labels[labels["toxic"].isin([0, 1])]  # rows left out of scoring are marked -1
    rows = test[["id", "lang"]].merge(labels[["id", "toxic"]], on="id").merge(preds, on="id", suffixes=("", "_pred"))
    if rows.empty:
        raise PipelineError(f"{path}: no id in common with the test table")
    return {
        "auc": auc(rows["toxic"], rows["toxic_pred"]),
        "per_lang": auc_by_lang(rows["toxic"], rows["toxic_pred"], rows["lang"]),
        "rows": len(rows),
    }
