"""The submission an experiment writes (`make predict`, `make baseline`, `make blend`): its test predictions
put on one scale across languages (predict.calibration), checked against sample_submission.csv, written,
and scored against the public test labels where they are present, the score kept in cv.json with the
folds it belongs to.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import layout, schema, validity
from pipeline.errors import PipelineError
from pipeline.files import file_record, read_json, write_csv, write_json
from pipeline.schema import Config
from pipeline.scoring import calibration, metrics, report
from pipeline.scoring.submission import check_submission, ensemble

# predict.calibration's settings other than none: each is reported where test labels are present
CHOICES = tuple(c for c in schema.CHOICES["predict.calibration"] if c != "none")


class PublishError(PipelineError):
    pass


def combine(cfg: Config, preds: list[np.ndarray]) -> np.ndarray:
    """The folds' test predictions ensembled by predict.ensemble (one array: itself, as it is)."""
    return preds[0] if len(preds) == 1 else ensemble(preds, cfg.predict.ensemble)


def refuse_one_fold(how: str, folds: int) -> None:
    """predict.calibration's estimate scales each fold by the fit on the other folds: predictions of one fold
    (`folds`) have none, refused in one line (a route checks it before it writes anything)."""
    if how != "none" and folds < 2:
        raise PublishError(
            f"predict.calibration={how}: its estimate fits each fold's scaling on the other folds' rows, and these "
            "predictions are of one fold: train another, or use predict.calibration=none"
        )


def on_one_scale(cfg: Config, preds: list[np.ndarray], test: pd.DataFrame, dirs: list[Path], profile: dict,
                 scale: str, prepared: Path | None = None) -> tuple:  # fmt: skip
    """(the submission's predictions: each fold's test probabilities calibrated by predict.calibration, fit on
    the OOF probabilities of the folds `dirs`, then ensembled; what calibration did: None when `none` or
    without OOF rows; and the predictions under each calibration, for the report). `scale`: of `preds`;
    `prepared`: the folder of the tables the folds were made from (default cfg's: a baseline's are its
    experiment's)."""
    how = cfg.predict.calibration
    if how != "none" and scale != layout.PROBABILITY:
        raise PublishError(
            f"predict.calibration={how} maps probabilities and these predictions are {scale}s (a blend's are "
            "weighted means of its members' ranks); make them with predict.calibration=none"
        )
    # read only when it is used; with the rows' token counts, so that the nested figure weights by length
    oof = report.read_oof(dirs, prepared or layout.prepared_dir(cfg)) if how != "none" and dirs else None
    if oof is None or oof.empty:
        return combine(cfg, preds), None, {}
    refuse_one_fold(how, oof["fold"].nunique())
    c, tried = calibration.choose_c(oof, profile)  # the submission's C, chosen on every OOF row
    fitted, langs = calibration.fit(oof, profile, c), test["lang"].to_numpy()
    each, rates = {}, {}
    for v in CHOICES:
        scaled = [calibration.apply(p, langs, fitted, prior=v == "lang+prior") for p in preds]
        each[v], rates[v] = combine(cfg, [p for p, _ in scaled]), scaled[0][1]
    six = metrics.six_language(oof, profile)
    # judged on rows that chose neither the fit nor its C: `tried`'s best is the one these rows picked
    scaled_oof, by_fold = calibration.nested_choice(oof, profile)
    before, after = six["auc"], metrics.six_language(scaled_oof, profile)["auc"]
    info = {"how": how, "oof_before": before, "oof_after": after, "c": c, "c_tried": tried, "c_by_fold": by_fold,
            "own_fit": {g: f["own_fit"] for g, f in fitted.items()}, "test_rates": rates["lang+prior"],
            "oof_rates": {g: f["prior"] for g, f in fitted.items()}}  # fmt: skip
    # without stand-in rows for every test language, the estimate is of the languages there are: not a 6-lang AUC
    of = f"AUC of {', '.join(six['per_lang'])} (no {metrics.SIX.header})" if six["missing"] else metrics.SIX.header
    folds_c = " ".join(f"{v:g}" for v in by_fold.values())
    print(f"calibration {how}: {of} {before:.4f} -> {after:.4f} (nested, each fold's C chosen on the other folds: "
          f"{folds_c}; the submission's C={c:g}); " + calibration_words(fitted, rates[how]))  # fmt: skip
    return each[how], info, {"none": combine(cfg, preds), **each}


def calibration_words(fitted: dict, rates: dict) -> str:
    """Per language: the toxic rate it was moved to, and what stood in the way (no fit of its own, EM refused)."""
    words = []
    for g, r in rates.items():
        note = "" if fitted[g]["own_fit"] else ", the pooled fit"
        if "em" in r and not r["used"]:
            why = "did not converge" if not r["converged"] else "is at a boundary"
            note += f", EM's {r['em']:.3f} {why}: not used"
        words.append(f"{g} {r['rate']:.3f} (OOF {fitted[g]['prior']:.2f}{note})")
    return "test toxic rates " + " ".join(words)


def publish(
    cfg: Config,
    raw: Path,
    name: str,
    ids: pd.Series,
    preds: list[np.ndarray],
    test: pd.DataFrame,
    dirs: list[Path],
    profile: dict,
    common: bool = False,
    scale: str = layout.PROBABILITY,
    prepared: Path | None = None,
) -> tuple[Path, dict | None]:
    """Write submissions/<name>.csv (and submission.csv when `common`) from the folds' test predictions `preds`
    (each in the order of `ids`, on `scale`), calibrated and ensembled; `raw`: the competition's files
    (sample_submission.csv, test_labels.csv). Every check (the ids, the test labels' ids) passes before a file
    is written. The test score where labels are present is kept in models/<name>/cv.json with `dirs`, the
    folds used (whose OOF rows fit the calibration; `prepared`: the folder of their tables, for the rows' token
    counts the nested figure weights by, default cfg's)."""
    order = test.set_index("id").loc[ids].reset_index()  # test rows in the order of the predictions
    arrays = [np.asarray(p, dtype=np.float64) for p in preds]
    final, how, each = on_one_scale(cfg, arrays, order, dirs, profile, scale, prepared)
    sample = pd.read_csv(raw / layout.SAMPLE_SUBMISSION, dtype={"id": str}, keep_default_na=False)
    sub = check_submission(pd.DataFrame({"id": ids.to_numpy(), "toxic": final}), sample)
    score = metrics.test_score(raw, test, sub)
    if score is not None and how is not None:  # reported beside each other, never chosen by
        how["test_auc"] = {v: metrics.test_score(raw, test, sub.assign(toxic=aligned(sub, ids, p)))["auc"]
                           for v, p in each.items()}  # fmt: skip
    path = layout.submission_path(cfg, name)
    write_csv(path, sub)
    if common:
        was = common_holds(cfg)  # read before it is replaced: the line below names what the file held
        write_csv(layout.submission_csv(cfg), sub)
        held = {"name": name, "folds": [d.name for d in dirs], "of": cfg.data.folds}
        if cfg.train.max_steps:  # a smoke run's folds: a later smoke run may replace it, as it replaced nothing real
            held["smoke"] = cfg.train.max_steps
        if score is not None:
            held["test_auc"] = score["auc"]
        write_json(layout.submission_record(cfg), {**held, "file": file_record(layout.submission_csv(cfg))})
        print(f"{layout.submission_csv(cfg)} now holds {holding(held)} (was {holding(was)})")
    record(cfg, name, dirs, score, how)
    return path, score


def common_holds(cfg: Config) -> dict | None:
    """What submissions/submission.csv holds by the record `make predict` wrote with it ({name, folds, of}); None
    without a record of this very file (another stage, a download or an edit replaced it since)."""
    path = layout.submission_record(cfg)
    if not path.is_file():  # never written (or another stage's submission.csv): nothing to open
        return None
    try:
        held = read_json(path)
    except (OSError, ValueError):
        return None
    if not isinstance(held, dict) or not isinstance(held.get("folds"), list) or not isinstance(held.get("file"), dict):
        return None
    return None if validity.file_problem(path.parent, layout.SUBMISSION, held["file"]) else held


def holding(held: dict | None) -> str:
    """What a submission.csv holds, for one line: `smoke, 2 of 5 folds, test AUC 0.5451`."""
    if held is None:
        return "no submission of this pipeline"  # none yet, or a file no record describes
    said = f"{held.get('name')}, {len(held['folds'])} of {held.get('of')} folds"
    auc = held.get("test_auc")
    return said + (f", test AUC {auc:.4f}" if isinstance(auc, float) else "")


def replaces_common(cfg: Config, name: str, dirs: list[Path]) -> bool:
    """Whether an ensemble of the folds `dirs` of experiment `name` replaces submissions/submission.csv, the file
    a Kaggle user uploads: it says plainly when it holds fewer folds than the experiment has (data.folds), and it
    keeps a submission.csv of more folds of the same experiment unless predict.allow_fewer_folds, and a smoke run
    (train.max_steps) never replaces one that holds a run of every step."""
    n, k = len(dirs), cfg.data.folds
    if n < k:
        print(f"warning: this submission holds {n} of the experiment's {k} folds ({', '.join(d.name for d in dirs)})",
              file=sys.stderr)  # fmt: skip
    held = common_holds(cfg)
    if cfg.train.max_steps and held is not None and not held.get("smoke"):
        print(f"warning: {layout.submission_csv(cfg)} kept as it was: it holds {holding(held)}, and this is a smoke "
              f"run (train.max_steps={cfg.train.max_steps}): {layout.submission_path(cfg, name)} holds it",
              file=sys.stderr)  # fmt: skip
        return False
    if held is None or held.get("name") != name or len(held["folds"]) <= n or cfg.predict.allow_fewer_folds:
        return True
    print(f"warning: {layout.submission_csv(cfg)} kept as it was: it holds {len(held['folds'])} folds of {name} "
          f"({', '.join(held['folds'])}) and this ensemble {n}; predict.allow_fewer_folds=true replaces it",
          file=sys.stderr)  # fmt: skip
    return False


def aligned(sub: pd.DataFrame, ids: pd.Series, preds: np.ndarray) -> np.ndarray:
    """`preds`, made in the order of `ids`, in the order of the submission's rows."""
    return pd.Series(preds, index=ids.to_numpy()).loc[sub["id"]].to_numpy()


def record(cfg: Config, name: str, dirs: list[Path], score: dict | None, how: dict | None) -> None:
    """Print the test AUC and keep it (and what calibration did) in cv.json with the folds it belongs to; an
    uncalibrated submission drops an earlier calibration's record, whatever made it uncalibrated."""
    cv_path = layout.experiment_dir(cfg, name) / layout.CV_JSON
    cv = report.read_cv(cv_path)  # a damaged cv.json is rewritten by the next `make cv`
    if score is None and how is None and "calibration" not in cv:
        return  # nothing to keep, nothing gone stale
    if score is not None:
        per = " ".join(f"{k} {v:.4f}" for k, v in score["per_lang"].items())
        print(f"test AUC {score['auc']:.4f} ({per}) on {score['rows']:,} labelled rows")
        cv["test_auc"] = {**score, "folds": [d.name for d in dirs], "digests": validity.fold_digests(dirs)}
    if how is None:  # this submission is not calibrated: an earlier calibration's record no longer describes it
        cv.pop("calibration", None)
    else:
        cv["calibration"] = {**how, "folds": [d.name for d in dirs], "digests": validity.fold_digests(dirs)}
        if "test_auc" in how:
            print("test AUC by predict.calibration: " + ", ".join(f"{v} {a:.4f}" for v, a in how["test_auc"].items()))
    write_json(cv_path, cv)
