"""Stage `make predict`: every complete fold's model on test, ensembled into a checked submission.

Reads   models/<name>/fold<k>/ (weights, done.json), the prepared test table and token cache,
        and the competition's sample_submission.csv for the ids and their order (test_labels.csv, where present)
Writes  models/<name>/fold<k>/test.csv     that fold's test predictions (id, toxic)
        models/<name>/fold<k>/training.csv with predict.training_rows: that fold's predictions of the training-only
                                           rows (id, source, prob), a teacher's for data.relabel_from
        submissions/<name>.csv             the ensemble, in sample_submission.csv's id order
        submissions/submission.csv         the same file, under the name Kaggle notebooks expect
        models/<name>/cv.json              key test_auc, where the competition's test_labels.csv is present

Only complete folds made from the current inputs and settings are used; the others are named with the
reason they are left out; train.folds does not narrow them (it picks what `make train` trains), and predict
says so in one line when it is set. A fold kept without its weights (a Kaggle run with kaggle.keep_weights=false) is
used through its cached test predictions, made with the weights its done.json records; a fold trained with
train.eval_ensemble through the test predictions its training stored (the mean of its last evaluations'), said in
one line, never predicted again with its kept weights. Before anything is written the submission is checked: the
same id set as sample_submission, no NaN, every value in [0, 1]. A failed check is an error and leaves no file.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipeline import config as config_mod
from pipeline import experiments, fingerprint, layout, validity
from pipeline.core import distributed, loop, modeling, precision, trim
from pipeline.errors import PipelineError, run_stage
from pipeline.files import file_digest, file_record, read_json, write_csv, write_json
from pipeline.inputs import tables, tokens
from pipeline.inputs.tokenizer import load_tokenizer
from pipeline.schema import Config
from pipeline.scoring import metrics, routing, summary
from pipeline.scoring.publish import publish, replaces_common
from pipeline.scoring.submission import align


class PredictError(PipelineError):
    pass


def fold_test_preds(
    cfg: Config, fold_dir: Path, test_data: tokens.Ragged, test: pd.DataFrame, meta: dict, device: torch.device
) -> pd.DataFrame:
    """A fold's test predictions, cached in fold<k>/test.csv, keyed on what they depend on (test.json); a fold
    trained with train.eval_ensemble's, as its training stored them (ensembled)."""
    stored = ensembled(fold_dir, meta)
    if stored is not None:
        return stored
    prec = fold_precision(cfg, fold_dir, device)
    key = fingerprint.test_cache_key(checked_weights(fold_dir), meta["test_digest"], cfg, prec)
    found = cached(fold_dir, key)
    if found is not None:
        return found
    if not (fold_dir / layout.WEIGHTS).is_file():
        raise PredictError(
            f"{fold_dir}: kept without its weights (kaggle.keep_weights=false), and its test predictions were made "
            f"from another test table or at another precision than {prec}: retrain the fold to predict this test set"
        )
    rows = tables.test_rows(test, cfg.train.langs)  # a specialist: its languages' rows only
    p = predict_rows(cfg, fold_dir, test_data, rows, prec, device, f"test {fold_dir.name}")
    frame = pd.DataFrame({"id": test["id"].iloc[rows].to_numpy(), "toxic": p})
    write_cached(fold_dir, frame, key)
    return frame


def fold_training_preds(
    cfg: Config, fold_dir: Path, train_data: tokens.Ragged, table: pd.DataFrame, meta: dict, device: torch.device
) -> pd.DataFrame:
    """A fold's predictions of the training-only rows (predict.training_rows: a teacher's for data.relabel_from),
    cached in fold<k>/training.csv (id, source, prob), keyed on what they depend on (training.json)."""
    prec = fold_precision(cfg, fold_dir, device)
    key = fingerprint.training_cache_key(checked_weights(fold_dir), meta["table_digest"], cfg, prec)
    found = cached(fold_dir, key, layout.TRAINING_PREDS)
    if found is not None:
        return found
    if not (fold_dir / layout.WEIGHTS).is_file():
        raise PredictError(f"{fold_dir}: kept without its weights (kaggle.keep_weights=false): it cannot predict the "
                           "training-only rows (predict.training_rows); retrain the fold")  # fmt: skip
    rows = np.flatnonzero(tables.training_only(table))
    p = predict_rows(cfg, fold_dir, train_data, rows, prec, device, f"training rows {fold_dir.name}")
    kept = table.iloc[rows]
    frame = pd.DataFrame({"id": kept["id"].to_numpy(), "source": kept["source"].to_numpy(), "prob": p})
    write_cached(fold_dir, frame, key, layout.TRAINING_PREDS)
    return frame


def fold_precision(cfg: Config, fold_dir: Path, device: torch.device) -> str:
    """The precision a fold predicts in: train.precision's, or what the fold's start measured faster (its OOF was
    predicted in it too)."""
    prec = precision.resolve_precision(cfg.train.precision, device)
    done = validity.read_done(fold_dir) or {}
    if precision.measured_on(cfg.train.precision, device) and done.get("precision_rates"):
        prec = done["precision"]
    return prec


def predict_rows(cfg: Config, fold_dir: Path, data: tokens.Ragged, rows: np.ndarray, prec: str, device: torch.device,
                 desc: str) -> np.ndarray:  # fmt: skip
    """The fold's model's probabilities for `rows` of `data`, batched by length, with a progress bar."""
    tokenizer = load_tokenizer(fold_dir)
    # a LoRA fold's base is built again in this precision's dtype, read from model.path wherever predict runs
    model = modeling.build_model(cfg, tokenizer, source=fold_dir, precision=prec, device=device).to(device)
    vmap = trim.load_map(fold_dir, model)
    if vmap is not None:  # a trimmed model reads the cached ids through the map it was trained with
        data = trim.remap(data, vmap)
    return loop.predict(
        model, data, rows, cfg.train.eval_batch, prec, device, tokenizer.pad_token_id, progress=True, desc=desc
    )


def write_cached(fold_dir: Path, frame: pd.DataFrame, key: dict, name: str = layout.TEST_PREDS) -> None:
    """A fold's predictions and, after them, the stamp (CACHE_KEYS) that records their key and file."""
    out, stamp = fold_dir / name, fold_dir / layout.CACHE_KEYS[name]
    stamp.unlink(missing_ok=True)  # the key is written after the predictions it describes
    write_csv(out, frame)
    write_json(stamp, {"key": key, "file": file_record(out)})


def ensembled(fold_dir: Path, meta: dict) -> pd.DataFrame | None:
    """A fold trained with train.eval_ensemble: the test predictions its training stored, the mean of its last
    evaluations' (its kept weights, the best evaluation's, would predict other ones); None for another fold. Made
    from another test table (or damaged) they are refused: no weights kept can give them again."""
    done = validity.read_done(fold_dir) or {}
    if not done.get("eval_ensemble"):
        return None
    why = validity.test_preds_problem(fold_dir, done, meta["test_digest"])
    if why:
        raise PredictError(
            f"{fold_dir}: trained with train.eval_ensemble={done['eval_ensemble']}, its stored test predictions "
            f"cannot be used ({why.split(' (run')[0]}): retrain the fold with `make train` for this test set"
        )
    return pd.read_csv(fold_dir / layout.TEST_PREDS, dtype={"id": str}, keep_default_na=False)


def ensembled_line(fold_dir: Path) -> str:
    """What predict says of a fold whose test predictions its training stored (train.eval_ensemble), '' for
    another: the fold-level options of predict apply to them as to any fold's, a fold's own prediction does not."""
    done = validity.read_done(fold_dir) or {}
    if not done.get("eval_ensemble"):
        return ""
    steps = done.get("ensemble_steps") or []
    return (
        f"predict: {fold_dir.name}: the mean of its last {len(steps)} evaluations' test predictions (steps "
        f"{', '.join(map(str, steps))}; train.eval_ensemble={done['eval_ensemble']}), as training stored them, "
        "not predicted again with its kept weights; predict.ensemble and predict.calibration apply to them"
    )


def cached(fold_dir: Path, key: dict, name: str = layout.TEST_PREDS) -> pd.DataFrame | None:
    """The fold's cached predictions `name`, where their stamp (CACHE_KEYS) records them for this key and they are
    intact."""
    try:
        stamp = read_json(fold_dir / layout.CACHE_KEYS[name])
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("key") != key:
        return None
    if validity.file_problem(fold_dir, name, stamp.get("file") or {}):  # {}: no record, no trust
        return None
    return pd.read_csv(fold_dir / name, dtype={"id": str, "source": str}, keep_default_na=False)


def checked_weights(fold_dir: Path) -> str:
    """The sha256 of a fold's weights, checked against the one its done.json records."""
    recorded = ((validity.read_done(fold_dir) or {}).get("files") or {}).get(layout.WEIGHTS)
    if recorded is not None and not (fold_dir / layout.WEIGHTS).is_file():  # kept without them: its cached test
        return str(recorded.get("sha256"))  # predictions, made with these very weights, stand for them
    digest = file_digest(fold_dir / layout.WEIGHTS)
    if recorded is not None and recorded.get("sha256") != digest:
        raise PredictError(
            f"{fold_dir / layout.WEIGHTS}: differs from the weights its done.json records (damaged?); "
            "retrain the fold with `make train`"
        )
    return digest


def run(cfg: Config) -> Path | None:
    """Every usable fold on test, ensembled and checked into the submission. Under torchrun (the Kaggle notebook
    on two GPUs) each process predicts its share of the folds on its own GPU, and rank 0 ensembles them."""
    start = time.perf_counter()
    experiments.preflight(cfg, "predict")  # paths and permissions, before any fold runs
    experiments.hold_experiment_lock(cfg, "predict")  # a second run on this experiment stops at once
    table, test, meta = tables.load_table(cfg)
    digest = validity.current_fingerprint(cfg, meta)
    d = distributed.setup(cfg.train.device)
    try:
        dirs = validity.usable_folds(cfg, digest, "predict") if d.is_main else []
        dirs = distributed.broadcast_object(d, dirs)
        splits, _ = tokens.load_cache(cfg, meta)
        mine = dirs[d.rank :: d.world]  # each process its folds, cached in fold<k>/test.csv
        if d.world > 1:
            print(f"predict: process {d.rank} of {d.world} on {d.device}: {', '.join(f.name for f in mine) or '-'}")
        for fold_dir in mine:
            if ensembled_line(fold_dir):
                print(ensembled_line(fold_dir))
            fold_test_preds(cfg, fold_dir, splits["test"], test, meta, d.device)
            if cfg.predict.training_rows:  # a teacher's, for a student's data.relabel_from
                fold_training_preds(cfg, fold_dir, splits["train"], table, meta, d.device)
        distributed.barrier(d)
        path = write_submission(cfg, dirs, splits, test, meta, d.device) if d.is_main else None
    except BaseException:
        distributed.teardown(d, clean=False)
        raise
    distributed.teardown(d)
    if d.is_main:
        print()
        print(summary.block(cfg, "predict", time.perf_counter() - start, submission=f"({len(dirs)} of "
                            f"{cfg.data.folds} folds)"))  # fmt: skip
    return path


def write_submission(cfg: Config, dirs: list[Path], splits, test: pd.DataFrame, meta: dict, device) -> Path | None:
    """The folds' test predictions (cached by now) ensembled, put on one scale across languages
    (predict.calibration, fit on the folds' OOF), checked and written; the test AUC where known."""
    frames = [fold_test_preds(cfg, d, splits["test"], test, meta, device) for d in dirs]
    if cfg.train.langs:  # some test rows only: no submission of its own, a route's part (blend.route)
        print(routing.specialist_line("predict", cfg.train.langs, cfg.name, len(frames[0])))
        return None
    profile = metrics.read_profile(cfg)
    common = replaces_common(cfg, cfg.name, dirs)  # said before the files, so that a kept one is said once
    path, _ = publish(
        cfg, Path(meta["raw"]), cfg.name, frames[0]["id"], align(frames), test, dirs, profile, common=common
    )
    also = f", {layout.submission_csv(cfg)}" if common else f" ({layout.submission_csv(cfg)} kept)"
    print(
        f"predict: {len(dirs)} fold(s) ({', '.join(d.name for d in dirs)}), {cfg.predict.ensemble} ensemble, "
        f"{len(frames[0]):,} rows -> {path}{also}"
    )
    return layout.submission_csv(cfg) if common else path


def main(argv=None) -> int:
    args = config_mod.parser("Predict test with every trained fold and write the submission.").parse_args(argv)
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    distributed.exit_process(main())  # under torchrun (the notebook on several GPUs): see exit_process
