"""`make baseline`: TF-IDF character n-grams + logistic regression on the same folds and rows.

Reads   input/prepared/<name>/folds.csv and test.csv
Writes  models/<name>-tfidf/fold<k>/oof.csv    the fold's validation rows with their predictions
        models/<name>-tfidf/fold<k>/test.csv   that fold's model on the test table (id, toxic)
        models/<name>-tfidf/fold<k>/done.json  written last; fields as a trained fold's where they apply
        models/<name>-tfidf/cv.json, cv.png, oof.csv   the same report as `make train`
        models/<name>-tfidf/pipeline.yaml      the config whose prepared tables it was fit on
        submissions/<name>-tfidf.csv           its folds ensembled, as `make predict` writes (test AUC in cv.json)

A yardstick for the transformer: the same training rows (other folds and fold -1) and the same
validation rows, so the two OOF AUCs compare directly. Printed side by side with models/<name>/cv.json
when that exists. Its folders are laid out like a trained experiment's, so `make blend` can use it as a
member. A fold complete with the same tables and settings (its done.json digest) is not fitted again. It holds
the lock of experiment <name>-tfidf while it runs: a second `make baseline` of it stops at once, naming the first.

With train.langs=[es] it is a specialist as `make train` makes one, written to models/<name>-tfidf-es/ on the
same tables: each fold fit on the es rows of those it fits on otherwise, its OOF the es rows of its fold, its
test.csv the es test rows, and no submission: a route (blend.route=[es:<name>-tfidf-es]) takes its rows.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from pipeline import config as config_mod
from pipeline import experiments, fingerprint, layout, validity
from pipeline.errors import PipelineError, run_stage
from pipeline.files import file_record, write_csv, write_json
from pipeline.inputs import tables
from pipeline.scoring import metrics, report, routing
from pipeline.scoring.publish import publish
from pipeline.scoring.submission import align

MODEL = fingerprint.TFIDF["model"]  # the `model` field of its done.json: what `make board` shows


def fit_predict(train_text, train_y, predict_texts, seed: int) -> list[np.ndarray]:
    """Fit on the training texts; the probability of toxic for each of `predict_texts` (a list of text columns)."""
    vectorizer = TfidfVectorizer(**fingerprint.TFIDF["vectorizer"], dtype=np.float32)
    x_train = vectorizer.fit_transform(train_text)
    model = LogisticRegression(**fingerprint.TFIDF["classifier"], random_state=seed)
    model.fit(x_train, train_y)
    return [model.predict_proba(vectorizer.transform(texts))[:, 1] for texts in predict_texts]


def run_fold(table: pd.DataFrame, test: pd.DataFrame, fold: int, fold_dir: Path, digest: str, seed: int,
             profile: dict, langs: tuple[str, ...] = ()) -> dict:  # fmt: skip
    """Fit on every row outside `fold`; write the fold's OOF and test predictions, then done.json (`profile`:
    the test's, which the fold is scored by). With `langs` (train.langs) a specialist, as `make train` makes one:
    those languages' rows alone, to fit, to score and to predict (`test` is cut to them by the caller)."""
    start = time.perf_counter()
    # the other folds, training-only and own pseudo rows: the rows `make train` picks, by the same function
    train = table.iloc[tables.training_rows(table, fold, langs=langs)]
    valid = table.iloc[tables.scored_rows(table, fold, langs)]
    if train.empty or valid.empty:  # a language the table lacks: one line, before a fit on nothing
        raise PipelineError(f"fold {fold}: train.langs={list(langs)}: no training or validation rows of them "
                            "in the prepared tables")  # fmt: skip
    oof, on_test = fit_predict(train["text"], train["toxic"], [valid["text"], test["text"]], seed)
    write_csv(fold_dir / layout.OOF, valid[layout.OOF_COLUMNS].assign(pred=oof))
    write_csv(fold_dir / layout.TEST_PREDS, pd.DataFrame({"id": test["id"], "toxic": on_test}))
    by, score, per_lang = metrics.fold_score(valid, oof, profile)  # as a trained fold's
    result = {
        "fold": fold,
        "digest": digest,
        "model": MODEL,
        "scale": layout.PROBABILITY,  # of oof.csv's pred and test.csv's toxic
        "epochs": 1,
        "best_epoch": 1,
        "auc": score,
        "metric": by,
        "auc_per_lang": per_lang,
        "profile": profile,
        "minutes": round((time.perf_counter() - start) / 60, 2),
        "files": {name: file_record(fold_dir / name) for name in (layout.OOF, layout.TEST_PREDS)},
    }
    write_json(fold_dir / layout.DONE, result)  # last: its presence means the fold is complete
    return result


def compare(cfg, summary: dict) -> None:
    """The transformer's OOF beside the baseline's, when models/<name>/cv.json exists ('-' for a figure it
    lacks; one that cannot be read is named)."""
    xlmr = layout.experiment_dir(cfg) / layout.CV_JSON
    if not xlmr.exists():
        return
    other = report.read_cv(xlmr)
    if not other:
        print(f"\n{xlmr} cannot be read: `make cv` writes it again, to compare the two")
        return
    langs = list(summary["per_lang"])
    print("\n" + report.figures_head(f"{'model':<12}", langs))
    for name, s in ((cfg.model.name, other), (MODEL, summary)):
        details = s.get("fold_details") if isinstance(s.get("fold_details"), dict) else {}
        minutes = sum((d or {}).get("minutes", 0) for d in details.values()) if details else math.nan  # "-"
        per = s.get("per_lang") if isinstance(s.get("per_lang"), dict) else {}
        print(report.figures_line(f"{name:<12}", {**metrics.saved_figures(s), "per_lang": per}, langs, minutes))


def run(cfg) -> dict:
    base = replace(cfg, name=layout.baseline_name(cfg))
    experiments.preflight(base, "baseline")
    with experiments.experiment_lock(base, "baseline"):  # a second baseline of the experiment stops at once, naming it
        return fit_folds(cfg, base)


def fit_folds(cfg, base) -> dict:
    """Every fold of `cfg`'s tables fitted (or reused) into `base`'s folder, reported and submitted."""
    exp = layout.experiment_dir(base)
    table, test, meta = tables.load_table(cfg)
    langs = cfg.train.langs
    test = test[tables.of_langs(test, langs)].reset_index(drop=True)  # a specialist predicts its languages' rows
    k = cfg.data.folds
    folds = list(cfg.train.folds) or list(range(k))
    bad = [f for f in folds if not 0 <= f < k]
    if bad:
        raise PipelineError(f"train.folds: fold {bad[0]} does not exist (data.folds={k})")
    digest = validity.current_tfidf_fingerprint(cfg, meta)
    prepared = layout.prepared_dir(cfg)  # the tables it is fit on: cfg's, not base's
    profile = metrics.with_test_lengths(metrics.test_profile(table[metrics.on_validation(table)], test["lang"]),
                                        prepared)  # fmt: skip
    exp.mkdir(parents=True, exist_ok=True)
    config_mod.save(cfg, exp / layout.RUN_CONFIG)  # the prepared tables it was fit on: those of cfg.name
    for fold in folds:
        fold_dir = layout.fold_dir(base, fold)
        if validity.is_complete(fold_dir, digest, needs=(layout.OOF, layout.TEST_PREDS)):
            done = validity.read_done(fold_dir)
            print(f"tfidf fold {fold}: complete with these settings ({metrics.judged_by(done)} {done['auc']:.4f}); "
                  "skipped")  # fmt: skip
            continue
        result = run_fold(table, test, fold, fold_dir, digest, cfg.train.seed, profile, langs)
        print(f"tfidf fold {fold}: {metrics.judged_by(result)} {result['auc']:.4f} ({result['minutes']:.1f} min)")
    summary = report.cv_report(base, digest, prepared)
    print(report.fold_table(summary))
    if langs:  # some test rows only: no submission, and no comparison with figures of every language
        print(routing.specialist_line("baseline", langs, base.name, len(test)))
        return summary
    path = write_submission(base, digest, test, Path(meta["raw"]), profile, prepared)
    print(f"wrote {exp}/cv.json, cv.png, oof.csv, fold<k>/test.csv and {path}")
    compare(cfg, summary)
    return summary


def write_submission(base, digest: str, test: pd.DataFrame, raw: Path, profile: dict, prepared: Path) -> Path:
    """The folds' test predictions ensembled into submissions/<name>-tfidf.csv, as `make predict` writes an
    experiment's (on one scale across languages with predict.calibration, its nested figure weighted by the
    lengths of `prepared`, the experiment's tables), with its test AUC."""
    dirs = validity.usable_folds(base, digest, "baseline")
    frames = [pd.read_csv(d / layout.TEST_PREDS, dtype={"id": str}, keep_default_na=False) for d in dirs]
    return publish(base, raw, base.name, frames[0]["id"], align(frames), test, dirs, profile, prepared=prepared)[0]


def main(argv=None) -> int:
    args = config_mod.parser("TF-IDF + logistic regression on the same folds, for comparison.").parse_args(argv)
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
