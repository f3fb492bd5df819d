"""Hand-made experiment folders (models/<name>/fold<k>/oof.csv, test.csv, done.json), for blend and board tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.files import write_csv, write_json
from pipeline.scoring import metrics

LANGS = np.array(["es", "it", "tr"])


def validation(n: int = 600, folds: int = 5, seed: int = 0) -> pd.DataFrame:
    """id, lang, toxic, fold: n validation rows, a quarter toxic, folds and languages interleaved."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "id": [f"v{i:05d}" for i in range(n)],
            "lang": LANGS[np.arange(n) % 3],
            "toxic": (rng.random(n) < 0.25).astype(int),
            "fold": np.arange(n) % folds,
        }
    )


def ids_of_test(n: int = 90) -> pd.Series:
    return pd.Series([f"t{i:04d}" for i in range(n)])


def write_experiment(
    models: Path,
    name: str,
    rows: pd.DataFrame,
    pred: np.ndarray,
    tests: dict[int, np.ndarray] | None,
    **done,
) -> Path:
    """A completed experiment: each fold's OOF rows with `pred`, its test predictions (if any) and done.json."""
    exp = models / name
    for k, g in rows.assign(pred=pred).groupby("fold"):
        k = int(k)
        write_csv(exp / f"fold{k}" / "oof.csv", g)
        if tests is not None:
            write_csv(
                exp / f"fold{k}" / "test.csv", pd.DataFrame({"id": ids_of_test(len(tests[k])), "toxic": tests[k]})
            )
        fields = {"fold": k, "digest": f"{name}-digest", "epochs": 1, "auc": metrics.auc(g["toxic"], g["pred"])}
        write_json(exp / f"fold{k}" / "done.json", {**fields, "minutes": 1.5, **done})
    return exp


def sample_submission(raw: Path, n: int = 90) -> Path:
    """The competition's sample_submission.csv for `ids_of_test`, in reversed order (the blend must follow it)."""
    write_csv(raw / "sample_submission.csv", pd.DataFrame({"id": ids_of_test(n)[::-1], "toxic": 0.5}))
    langs = np.resize(["es", "fr", "it", "pt", "ru", "tr"], n)
    write_csv(raw / "test.csv", pd.DataFrame({"id": ids_of_test(n), "content": "x", "lang": langs}))
    return raw
