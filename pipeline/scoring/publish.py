"""The submission an experiment writes (`make predict`, `make baseline`, `make blend`): its test predictions
put on one scale across languages (predict.calibration), checked against sample_submission.csv, written,
and scored against the public test labels where they are present, the score kept in cv.json with the
folds it belongs to.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import config as config_mod
from pipeline import layout
from pipeline.config import Config
from pipeline.files import write_csv, write_json
from pipeline.scoring import calibration, metrics, report
from pipeline.scoring.submission import check_submission

# predict.calibration's settings other than none: each is reported where test labels are present
CHOICES = tuple(c for c in config_mod.CHOICES["predict.calibration"] if c != "none")


def on_one_scale(cfg: Config, preds: np.ndarray, test: pd.DataFrame, dirs: list[Path]) -> tuple:
    """(the predictions after predict.calibration, fit on the OOF rows of the folds `dirs`; what it did: None
    when `none` or without OOF rows; and the predictions under each calibration, for the report)."""
    how = cfg.predict.calibration
    oof = report.read_oof(dirs) if how != "none" and dirs else None  # read only when it is used
    if oof is None or oof.empty:
        return preds, None, {}
    langs = sorted(test["lang"].unique())
    fitted = calibration.fit(oof, langs)
    each = {v: calibration.apply(preds, test["lang"].to_numpy(), fitted, prior=v == "lang+prior") for v in CHOICES}
    mix = metrics.language_mix(test["lang"])
    before = metrics.six_language(oof, mix)["auc"]
    after = metrics.six_language(calibration.nested(oof, langs), mix)["auc"]
    rates = each["lang+prior"][1]
    info = {"how": how, "oof_before": before, "oof_after": after, "test_rates": rates,
            "oof_rates": {g: f["prior"] for g, f in fitted.items()}}  # fmt: skip
    said = " ".join(f"{g} {r:.2f} (OOF {info['oof_rates'][g]:.2f})" for g, r in rates.items())
    print(f"calibration {how}: six-language OOF {before:.4f} -> {after:.4f} (nested); test toxic rates "
          f"estimated {said}")  # fmt: skip
    return each[how][0], info, {"none": preds, **{v: p for v, (p, _) in each.items()}}


def publish(
    cfg: Config,
    raw: Path,
    name: str,
    ids: pd.Series,
    preds: np.ndarray,
    test: pd.DataFrame,
    dirs: list[Path],
    common: bool = False,
) -> tuple[Path, dict | None]:
    """Write submissions/<name>.csv (and submission.csv when `common`) from `preds` in the order of `ids`;
    `raw`: the competition's files (sample_submission.csv, test_labels.csv). The test score where labels are
    present is kept in models/<name>/cv.json with `dirs`, the folds used (whose OOF rows fit the calibration)."""
    order = test.set_index("id").loc[ids].reset_index()  # test rows in the order of the predictions
    preds, how, each = on_one_scale(cfg, np.asarray(preds, dtype=np.float64), order, dirs)
    sample = pd.read_csv(raw / layout.SAMPLE_SUBMISSION, dtype={"id": str}, keep_default_na=False)
    sub = check_submission(pd.DataFrame({"id": ids.to_numpy(), "toxic": preds}), sample)
    score = metrics.test_score(raw, test, sub)  # its checks (test_labels.csv's ids, labels) before any file is written
    path = layout.submission_path(cfg, name)
    write_csv(path, sub)
    if common:
        write_csv(layout.submission_csv(cfg), sub)
    if score is not None and how is not None:  # reported beside each other, never chosen by
        how["test_auc"] = {v: metrics.test_score(raw, test, sub.assign(toxic=aligned(sub, ids, p)))["auc"]
                           for v, p in each.items()}  # fmt: skip
    if score is not None or how is not None:
        record(cfg, name, dirs, score, how)
    return path, score


def aligned(sub: pd.DataFrame, ids: pd.Series, preds: np.ndarray) -> np.ndarray:
    """`preds`, made in the order of `ids`, in the order of the submission's rows."""
    return pd.Series(preds, index=ids.to_numpy()).loc[sub["id"]].to_numpy()


def record(cfg: Config, name: str, dirs: list[Path], score: dict | None, how: dict | None) -> None:
    """Print the test AUC and keep it (and what calibration did) in cv.json with the folds it belongs to."""
    cv_path = layout.experiment_dir(cfg, name) / layout.CV_JSON
    cv = report.read_cv(cv_path)  # a damaged cv.json is rewritten by the next `make cv`
    if score is not None:
        per = " ".join(f"{k} {v:.4f}" for k, v in score["per_lang"].items())
        print(f"test AUC {score['auc']:.4f} ({per}) on {score['rows']:,} labelled rows")
        cv["test_auc"] = {**score, "folds": [d.name for d in dirs], "digests": layout.fold_digests(dirs)}
    if how is not None:
        cv["calibration"] = {**how, "folds": [d.name for d in dirs], "digests": layout.fold_digests(dirs)}
        if "test_auc" in how:
            print("test AUC by predict.calibration: " + ", ".join(f"{v} {a:.4f}" for v, a in how["test_auc"].items()))
    write_json(cv_path, cv)
