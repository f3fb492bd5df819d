"""ROC AUC overall and per language, on the validation rows and, where the labels are known, on test.

The competition's metric is one ROC AUC over all test rows together, whatever their language. The OOF
that predicts it (`six_language`) pools the out-of-fold rows of every test language, each language
weighted to its share of the test: validation.csv's rows where the language has them (es, it, tr), else
the held-out translated rows (fr, pt, ru: data.held_out). The plain OOF AUC is validation.csv's rows only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

from pipeline import layout
from pipeline.config import Config
from pipeline.errors import PipelineError
from pipeline.inputs.csvfile import label_values, read_csv
from pipeline.layout import TEST_LABELS, VALID_SOURCE


def auc(y, p) -> float:
    """ROC AUC, or NaN where only one class is present."""
    y = np.asarray(y)
    if len(np.unique(y)) < 2:
        return float("nan")
    return float(roc_auc_score(y, p))


def auc_by_lang(y, p, lang) -> dict[str, float]:
    y, p, lang = np.asarray(y), np.asarray(p), np.asarray(lang)
    return {str(g): auc(y[lang == g], p[lang == g]) for g in sorted(set(lang))}


def language_mix(langs) -> dict[str, float]:
    """Each language's share of the rows (of the test table: what the OOF is weighted to)."""
    counts = pd.Series(np.asarray(langs)).value_counts()
    return {str(k): float(v / counts.sum()) for k, v in counts.sort_index().items()}


def on_validation(oof: pd.DataFrame) -> np.ndarray:
    """Which OOF rows are validation.csv's (all of them in a file written before held-out rows existed)."""
    return (oof["source"] == VALID_SOURCE).to_numpy() if "source" in oof else np.ones(len(oof), dtype=bool)


def stand_ins(oof: pd.DataFrame, mix: dict[str, float]) -> pd.DataFrame:
    """The OOF rows that stand for each test language: its validation.csv rows if it has any, else its
    held-out translated rows (and none for a language with neither)."""
    keep, valid = np.zeros(len(oof), dtype=bool), on_validation(oof)
    for lang in mix:
        own = (oof["lang"] == lang).to_numpy()
        real = own & valid
        keep |= real if real.any() else own
    return oof[keep]


def six_language(oof: pd.DataFrame, mix: dict[str, float]) -> dict:
    """One AUC over the stand-ins of every test language, each language weighted to its test share, and per
    language; `missing`: test languages the OOF has no row of (their weight goes to the others)."""
    rows = stand_ins(oof, mix)
    counts = rows["lang"].value_counts()
    weights = rows["lang"].map(lambda g: mix[g] / counts[g]).to_numpy()
    y = rows["toxic"].to_numpy()
    value = float(roc_auc_score(y, rows["pred"], sample_weight=weights)) if len(np.unique(y)) == 2 else float("nan")
    return {
        "auc": value,
        "per_lang": auc_by_lang(y, rows["pred"], rows["lang"]),
        "rows": len(rows),
        "missing": sorted(set(mix) - set(counts.index)),
    }


def test_mix(cfg: Config) -> dict[str, float] | None:
    """Each test language's share of the test table (prepared, else the raw test.csv); None without either."""
    for path in (layout.prepared_dir(cfg) / layout.TEST_TABLE, layout.raw_dir(cfg) / layout.TEST):
        try:
            return language_mix(pd.read_csv(path, usecols=["lang"], dtype=str, keep_default_na=False)["lang"])
        except (OSError, ValueError):
            continue
    return None


def fold_score(rows: pd.DataFrame, preds, mix: dict[str, float] | None) -> tuple[float, dict[str, float]]:
    """A fold's AUC and AUC per language: on validation.csv's rows; with held-out translated rows among them
    and the test's language mix, the six-language AUC (so the best step is chosen by what predicts the test)."""
    rows = rows.assign(pred=np.asarray(preds))
    if mix and not on_validation(rows).all():
        six = six_language(rows, mix)
        return six["auc"], six["per_lang"]
    return auc(rows["toxic"], rows["pred"]), auc_by_lang(rows["toxic"], rows["pred"], rows["lang"])


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
