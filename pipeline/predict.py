"""Stage `make predict`: every complete fold's model on test, ensembled into a checked submission.

Reads   models/<name>/fold<k>/ (weights, done.json), the prepared test table and token cache,
        and the competition's sample_submission.csv for the ids and their order (test_labels.csv, where present)
Writes  models/<name>/fold<k>/test.csv     that fold's test predictions (id, toxic)
        submissions/<name>.csv             the ensemble, in sample_submission.csv's id order
        submissions/submission.csv         the same file, under the name Kaggle notebooks expect
        models/<name>/cv.json              key test_auc, where the competition's test_labels.csv is present

Only complete folds made from the current inputs and settings are used; the others are named with the
reason they are left out. Before anything is written the submission is checked: the same id set as
sample_submission, no NaN, every value in [0, 1]. A failed check is an error and leaves no file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipeline import config as config_mod
from pipeline import data as data_mod
from pipeline import distributed, fingerprint, io, loop, metrics, modeling, tokens, trim
from pipeline.config import Config
from pipeline.errors import PipelineError, run_stage
from pipeline.io import read_json, write_csv, write_json

TEST_LABELS = "test_labels.csv"  # id, toxic: the competition's test answers, published after it closed


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


def fold_test_preds(
    cfg: Config, fold_dir: Path, test_data: tokens.Ragged, test: pd.DataFrame, meta: dict, device: torch.device
) -> pd.DataFrame:
    """A fold's test predictions, cached in fold<k>/test.csv, keyed on what they depend on (test.json)."""
    out, stamp = fold_dir / "test.csv", fold_dir / "test.json"
    precision = loop.resolve_precision(cfg.train.precision, device)
    key = fingerprint.test_cache_key(fold_dir, meta, cfg, precision)
    if out.exists() and stamp.exists() and read_json(stamp) == key:
        return pd.read_csv(out, dtype={"id": str}, keep_default_na=False)
    tokenizer = modeling.load_tokenizer(fold_dir)
    model = modeling.build_model(cfg, tokenizer, source=fold_dir).to(device)
    vmap = trim.load_map(fold_dir, model)
    if vmap is not None:  # a trimmed model reads the cached ids through the map it was trained with
        test_data = trim.remap(test_data, vmap)
    p = loop.predict(
        model,
        test_data,
        np.arange(len(test)),
        cfg.train.eval_batch,
        precision,
        device,
        tokenizer.pad_token_id,
        progress=True,
        desc=f"test {fold_dir.name}",
    )
    frame = pd.DataFrame({"id": test["id"], "toxic": p})
    stamp.unlink(missing_ok=True)  # the key is written after the predictions it describes
    write_csv(out, frame)
    write_json(stamp, key)
    return frame


def test_score(raw: Path, test: pd.DataFrame, preds: pd.DataFrame) -> dict | None:
    """AUC overall and per language against the competition's test_labels.csv, where it is present."""
    path = raw / TEST_LABELS
    if not path.exists():
        return None
    labels = pd.read_csv(path, dtype={"id": str}, keep_default_na=False)
    labels = labels[labels["toxic"].isin([0, 1])]  # rows left out of scoring are marked -1
    rows = test[["id", "lang"]].merge(labels[["id", "toxic"]], on="id").merge(preds, on="id", suffixes=("", "_pred"))
    if rows.empty:
        raise SubmissionError(f"{path}: no id in common with the test table")
    return {
        "auc": metrics.auc(rows["toxic"], rows["toxic_pred"]),
        "per_lang": metrics.auc_by_lang(rows["toxic"], rows["toxic_pred"], rows["lang"]),
        "rows": len(rows),
    }


def record_test_score(cfg: Config, dirs: list[Path], score: dict) -> None:
    """Print the test AUC and keep it in cv.json with the folds it belongs to."""
    per = " ".join(f"{k} {v:.4f}" for k, v in score["per_lang"].items())
    print(f"test AUC {score['auc']:.4f} ({per}) on {score['rows']:,} labelled rows")
    path = metrics.experiment_dir(cfg) / "cv.json"
    cv = read_json(path) if path.exists() else {}
    cv["test_auc"] = {**score, "folds": [d.name for d in dirs], "digests": metrics.fold_digests(dirs)}
    write_json(path, cv)


def run(cfg: Config) -> Path:
    io.preflight(cfg, "predict")  # paths and permissions, before any fold runs
    io.hold_experiment_lock(cfg, "predict")  # a second run on this experiment stops at once
    _, test, meta = data_mod.load_table(cfg)
    digest = fingerprint.fold_fingerprint(cfg, meta, data_mod.prepared_dir(cfg))
    dirs = metrics.usable_folds(cfg, digest, what="predict")
    splits, _ = tokens.load(cfg, meta)
    device = distributed.pick_device(cfg.train.device)
    frames = [fold_test_preds(cfg, d, splits["test"], test, meta, device) for d in dirs]
    preds = ensemble(align(frames), cfg.predict.ensemble)
    raw = Path(meta["raw"])
    sample = pd.read_csv(raw / data_mod.SUBMISSION, dtype={"id": str}, keep_default_na=False)
    sub = check_submission(pd.DataFrame({"id": frames[0]["id"], "toxic": preds}), sample)
    subs = Path(cfg.submissions_dir)
    write_csv(subs / f"{cfg.name}.csv", sub)
    write_csv(subs / "submission.csv", sub)
    print(
        f"predict: {len(dirs)} fold(s) ({', '.join(d.name for d in dirs)}), {cfg.predict.ensemble} ensemble, "
        f"{len(sub):,} rows, mean {sub['toxic'].mean():.4f} -> {subs / (cfg.name + '.csv')}, {subs}/submission.csv"
    )
    score = test_score(raw, test, sub)
    if score is not None:
        record_test_score(cfg, dirs, score)
    return subs / "submission.csv"


def main(argv=None) -> int:
    args = config_mod.parser("Predict test with every trained fold and write the submission.").parse_args(argv)
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
