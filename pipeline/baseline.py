"""`make baseline`: TF-IDF character n-grams + logistic regression on the same folds and rows.

Reads   input/prepared/<name>/folds.csv
Writes  models/<name>-tfidf/fold<k>/oof.csv, done.json and the same cv.json / cv.png as `make train`

A yardstick for the transformer: the same training rows (other folds and fold -1) and the same
validation rows, so the two OOF AUCs compare directly. Printed side by side with models/<name>/cv.json
when that exists.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from pipeline import config as config_mod
from pipeline import data as data_mod
from pipeline import fingerprint, metrics
from pipeline.errors import run_stage
from pipeline.io import read_json, write_csv, write_json

RECIPE = "char_wb 2-5 grams, min_df 2, sublinear tf, 400k features; liblinear logistic regression C=4"


def fit_predict(train_text, train_y, valid_text, seed: int) -> np.ndarray:
    vectorizer = TfidfVectorizer(
        analyzer="char_wb", ngram_range=(2, 5), min_df=2, sublinear_tf=True, max_features=400_000, dtype=np.float32
    )
    x_train = vectorizer.fit_transform(train_text)
    model = LogisticRegression(C=4.0, max_iter=2000, solver="liblinear", random_state=seed)
    model.fit(x_train, train_y)
    return model.predict_proba(vectorizer.transform(valid_text))[:, 1]


def run(cfg) -> dict:
    table, _, meta = data_mod.load_table(cfg)
    base = replace(cfg, name=f"{cfg.name}-tfidf")
    # the same table and the same recipe make the same folds (the recipe is this module's code)
    digest = fingerprint.fold_fingerprint(base, meta, data_mod.prepared_dir(cfg), model={"tfidf": RECIPE})
    exp = metrics.experiment_dir(base)
    for fold in list(cfg.train.folds) or range(cfg.data.folds):
        start = time.perf_counter()
        train = table[table["fold"] != fold]
        valid = table[table["fold"] == fold]
        preds = fit_predict(train["text"], train["toxic"], valid["text"], cfg.train.seed)
        fold_dir = exp / f"fold{fold}"
        write_csv(fold_dir / "oof.csv", valid[["id", "lang", "toxic", "fold"]].assign(pred=preds))
        a = metrics.auc(valid["toxic"], preds)
        minutes = (time.perf_counter() - start) / 60
        write_json(
            fold_dir / "done.json",
            {"fold": fold, "digest": digest, "epochs": 1, "auc": a, "minutes": round(minutes, 2)},
        )
        print(f"tfidf fold {fold}: AUC {a:.4f} ({minutes:.1f} min)")
    summary = metrics.cv_report(base, digest)
    print(metrics.format_table(summary))
    xlmr = Path(metrics.experiment_dir(cfg)) / "cv.json"
    if xlmr.exists():
        other = read_json(xlmr)
        langs = list(summary["per_lang"])
        minutes = sum(d.get("minutes", 0) for d in other["fold_details"].values())
        print(f"\n{'model':<12} {'OOF AUC':>8} " + " ".join(f"{lg:>6}" for lg in langs) + f" {'minutes':>8}")
        for name, s, m in (
            (cfg.model.name, other, minutes),
            ("tfidf+lr", summary, sum(d["minutes"] for d in summary["fold_details"].values())),
        ):
            print(
                f"{name:<12} {s['oof_auc']:>8.4f} "
                + " ".join(f"{s['per_lang'][lg]:>6.4f}" for lg in langs)
                + f" {m:>8.1f}"
            )
    return summary


def main(argv=None) -> int:
    args = config_mod.parser("TF-IDF + logistic regression on the same folds, for comparison.").parse_args(argv)
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
