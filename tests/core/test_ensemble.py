"""Checkpoint ensembling (train.eval_ensemble): a fold's OOF and test predictions are the mean of its last N
evaluations', kept across a resume, used by `make predict` as stored, and off by default without a trace.

Each evaluation's predictions are captured as they happen (a wrapper around evaluation.predict_rows) and the fold's
files are compared with their means.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from pipeline import fingerprint, layout, predict, train
from pipeline.core import evaluation, fold
from pipeline.scoring import metrics
from tests.helpers.folds import StopAt, fold_run

pytestmark = pytest.mark.usefixtures("torch_one_thread")

# the `prepared` fixture (a tiny two-fold experiment, tables and tokens built) is in tests/conftest.py


def with_train(cfg, **changes):
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **changes))


def captured(monkeypatch) -> list[tuple[str, np.ndarray]]:
    """Every prediction a fold's evaluations make, in order: ("valid" or "test", the probabilities)."""
    seen: list[tuple[str, np.ndarray]] = []
    real = evaluation.predict_rows

    def predict_rows(*args, desc="valid", **kwargs):
        preds = real(*args, desc=desc, **kwargs)
        seen.append((desc, np.asarray(preds).copy()))
        return preds

    monkeypatch.setattr(evaluation, "predict_rows", predict_rows)
    return seen


def fold_files(cfg, k: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, dict, list[dict]]:
    """fold<k>'s oof.csv, test.csv, done.json and metrics.jsonl."""
    folder = layout.experiment_dir(cfg) / f"fold{k}"
    oof = pd.read_csv(folder / layout.OOF, dtype={"id": str}, keep_default_na=False)
    test = pd.read_csv(folder / layout.TEST_PREDS, dtype={"id": str}, keep_default_na=False)
    history = [json.loads(line) for line in (folder / layout.METRICS).read_text().splitlines()]
    return oof, test, json.loads((folder / layout.DONE).read_text()), history


def test_the_oof_and_test_predictions_are_the_mean_of_the_last_n_evaluations(prepared, monkeypatch, capsys) -> None:
    cfg = with_train(prepared, eval_every_steps=3, eval_ensemble=3)
    seen = captured(monkeypatch)
    done = fold_run(cfg, StopAt(10**9)).run()
    oof, test, written, history = fold_files(cfg)
    valid = [p for desc, p in seen if desc == "valid"]
    tests = [p for desc, p in seen if desc == "test"]
    assert len(valid) == len(tests) == len(history) >= 4  # every evaluation predicted the test rows too
    steps = [h["step"] for h in history][-3:]
    mean = np.mean(valid[-3:], axis=0)
    assert oof["pred"].to_numpy() == pytest.approx(mean, abs=1e-12)
    assert oof["best"].to_numpy() == pytest.approx(mean, abs=1e-12)  # what predicted the test: the mean too
    assert test["toxic"].to_numpy() == pytest.approx(np.mean(tests[-3:], axis=0), abs=1e-9)
    assert written == done and done["eval_ensemble"] == 3 and done["ensemble_steps"] == steps
    assert done["auc"] == pytest.approx(metrics.fold_score(oof, mean, done["profile"])[1], abs=1e-12)
    assert history[-1]["ensemble"]["steps"] == steps and history[-1]["ensemble"]["auc"] == done["auc"]
    assert "mean of the last 3 evaluations" in capsys.readouterr().out
    assert done["held_out_steps"] is None  # no step chosen


def test_predict_uses_the_folds_stored_ensembles_and_never_predicts_again(prepared, monkeypatch, capsys) -> None:
    cfg = with_train(prepared, eval_every_steps=2, max_steps=4, eval_ensemble=2)
    train.run(cfg)
    stored = [fold_files(cfg, k)[1] for k in range(2)]
    capsys.readouterr()

    def no_model(*args, **kwargs):
        raise AssertionError("a fold trained with train.eval_ensemble was predicted again")

    monkeypatch.setattr(predict.modeling, "build_model", no_model)
    path = predict.run(cfg)
    out = capsys.readouterr().out
    assert out.count("the mean of its last 2 evaluations' test predictions (steps 2, 4") == 2  # a line a fold
    sub = pd.read_csv(path, dtype={"id": str}, keep_default_na=False).set_index("id")["toxic"]
    mean = (stored[0].set_index("id")["toxic"] + stored[1].set_index("id")["toxic"]) / 2
    assert sub.loc[mean.index].to_numpy() == pytest.approx(mean.to_numpy(), abs=1e-6)
    assert all(fold_files(cfg, k)[1].equals(stored[k]) for k in range(2))  # used as stored
    stamp = layout.experiment_dir(cfg) / "fold1" / layout.TEST_KEY
    made = json.loads(stamp.read_text())
    stamp.write_text(json.dumps({**made, "key": {**made["key"], "test": "another test table"}}))
    with pytest.raises(predict.PredictError, match="eval_ensemble=2, its stored test predictions cannot be used"):
        predict.run(cfg)  # no weights kept can make them again: refused, never predicted with the kept ones


def test_a_killed_and_resumed_fold_ends_with_the_uninterrupted_ensemble(prepared, tmp_path) -> None:
    cfg = with_train(prepared, eval_every_steps=3, save_every_steps=4, eval_ensemble=3)
    reference = dataclasses.replace(cfg, models_dir=str(tmp_path / "reference"))
    want = fold_run(reference, StopAt(10**9)).run()
    with pytest.raises(fold.Interrupted):
        fold_run(cfg, StopAt(17)).run()  # evaluated at 3, ..., 15, saved at 17: 15's predictions in the state
    assert want["ensemble_steps"] == [15, 18, 19]  # one evaluation before the stop, two after
    got = fold_run(cfg, StopAt(10**9)).run()
    (oof_a, test_a, _, _), (oof_b, test_b, _, _) = fold_files(reference), fold_files(cfg)
    assert got["ensemble_steps"] == want["ensemble_steps"] and got["auc"] == pytest.approx(want["auc"], abs=1e-9)
    assert oof_b["pred"].to_numpy() == pytest.approx(oof_a["pred"].to_numpy(), abs=1e-9)
    assert test_b["toxic"].to_numpy() == pytest.approx(test_a["toxic"].to_numpy(), abs=1e-9)


def test_off_by_default_the_fingerprint_is_unchanged_and_no_test_rows_are_read(prepared) -> None:
    base = fingerprint.settings(prepared)
    assert prepared.train.eval_ensemble == 0 and "eval_ensemble" not in base["train"]
    assert fingerprint.settings(with_train(prepared, eval_ensemble=2))["train"]["eval_ensemble"] == 2
    from pipeline.core import distributed

    assert train.load_inputs(prepared, distributed.Dist())[-1] is None  # no test rows predicted at evaluations
    assert train.load_inputs(with_train(prepared, eval_ensemble=2), distributed.Dist())[-1] is not None
