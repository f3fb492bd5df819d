"""Predictions as a trained encoder gives them, through every step that averages, ranks or writes them: most clean
rows below 0.01, probabilities such as 1e-9 and 1 - 1e-9, and runs of near-ties at both ends that a float32 or a
6-digit CSV would make ties. predict's fold ensemble (mean and rank), a blend of two experiments and the submission
CSV keep every value and so every rank, and the test AUC they report is the AUC of the arrays themselves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import rankdata
from sklearn.metrics import roc_auc_score

from pipeline import blend, layout, predict
from pipeline.files import read_json
from pipeline.inputs import tables
from tests.helpers.experiments import Competition, ids_of_test

N_TEST = 300


def encoder_logits(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Logits as a trained encoder's: clean rows far below 0.01, toxic ones near 1, a tenth of each class on the
    other side, and a run of near-ties at each end (logits 1e-3 apart: probabilities 1e-12 apart near 1, which
    float32 rounds to one value, and 1e-10 apart near 0, which 6 decimals write as one)."""
    logits = np.where(y == 1, rng.normal(9.0, 4.0, len(y)), rng.normal(-11.0, 3.0, len(y)))
    flip = rng.random(len(y)) < 0.1
    logits[flip] = -logits[flip]
    ends = rng.permutation(len(y))[:60]
    logits[ends[:30]] = 21.0 + 1e-3 * rng.random(30)
    logits[ends[30:]] = -16.0 + 1e-3 * rng.random(30)
    return logits


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def ranks01(p: np.ndarray) -> np.ndarray:
    return (rankdata(p) - 1) / (len(p) - 1)


def ensembled(folds: list[np.ndarray], how: str) -> np.ndarray:
    """The folds' ensemble computed here, apart from the pipeline's: the mean, or the mean rank scaled to [0, 1]."""
    if how == "mean":
        return np.mean(folds, axis=0)
    return (np.mean([rankdata(p) for p in folds], axis=0) - 1) / (len(folds[0]) - 1)


@pytest.fixture
def competition(tmp_path):
    """Two experiments, a and b, of encoder-like OOF and test predictions (5 folds each, every fold its own), and
    the competition's test labels."""
    comp = Competition(tmp_path, n_test=N_TEST)
    rng = np.random.default_rng(11)
    y_test = (rng.random(N_TEST) < 0.3).astype(int)
    y_test[:2] = [0, 1]
    pd.DataFrame({"id": ids_of_test(N_TEST), "toxic": y_test}).to_csv(comp.raw / "test_labels.csv", index=False)
    made = {}
    for name in ("a", "b"):
        base = encoder_logits(y_test, rng)
        tests = {k: sigmoid(base + 1e-4 * rng.normal(size=N_TEST)) for k in range(5)}  # each fold its own
        comp.experiment(name, sigmoid(encoder_logits(comp.rows["toxic"].to_numpy(), rng)), tests)
        made[name] = [tests[k] for k in range(5)]
    return comp, made, y_test


def submitted(comp, name: str) -> pd.Series:
    sub = pd.read_csv(comp.raw.parent / "subs" / f"{name}.csv", dtype={"id": str})
    return sub.set_index("id").loc[ids_of_test(N_TEST), "toxic"]


def assert_kept(got: pd.Series, want: np.ndarray, atol: float = 1e-15) -> None:
    """Every value to float64's last digits (`atol`: a sum's rounding), every rank (ties only where `want` ties)."""
    np.testing.assert_allclose(got.to_numpy(), want, rtol=1e-12, atol=atol)
    assert np.array_equal(rankdata(got.to_numpy()), rankdata(want))


@pytest.mark.parametrize("how", ["mean", "rank"])
def test_predict_keeps_extreme_predictions_through_the_ensemble_and_the_csv(competition, monkeypatch, how) -> None:
    comp, made, y = competition
    cfg = comp.config("name=a", f"predict.ensemble={how}")
    _, test, meta = tables.load_table(cfg)
    dirs = [layout.fold_dir(cfg, k) for k in range(5)]

    def fold_test_preds(cfg, fold_dir, data, test, meta, device):  # the fold's cached test.csv, as predict reads it
        return pd.read_csv(fold_dir / layout.TEST_PREDS, dtype={"id": str}, keep_default_na=False)

    monkeypatch.setattr(predict, "fold_test_preds", fold_test_preds)
    predict.write_submission(cfg, dirs, {"test": None}, test, meta, torch.device("cpu"))
    fold = made["a"][0]
    assert (fold < 0.01).mean() > 0.5 and (fold < 1e-6).sum() > 30 and (fold > 1 - 1e-8).sum() > 30  # extremes
    want = ensembled(made["a"], how)
    assert_kept(submitted(comp, "a"), want)
    auc = read_json(layout.experiment_dir(cfg) / layout.CV_JSON)["test_auc"]["auc"]
    assert auc == pytest.approx(roc_auc_score(y, want), abs=1e-12)


@pytest.mark.parametrize("how", ["mean", "rank"])
def test_a_blend_keeps_extreme_predictions_through_its_ranks_and_the_csv(competition, how) -> None:
    comp, made, y = competition
    summary = blend.run(comp.config("blend.members=[a,b]", f"predict.ensemble={how}"))
    ranks = np.column_stack([ranks01(ensembled(made[n], how)) for n in ("a", "b")])
    got = submitted(comp, "a+b")
    # the weights cv.json shows are rounded: the blend's own are read back from its predictions (a line through
    # the members' ranks), then checked against the shown ones
    w, *_ = np.linalg.lstsq(ranks, got.to_numpy(), rcond=None)
    assert w == pytest.approx([summary["blend"]["weights"][n] for n in ("a", "b")], abs=1e-4)
    want = np.round(ranks @ w, 10)  # sums of ranks tie often: the blend rounds away float noise that would part them
    assert_kept(got, want, atol=1e-10)
    assert summary["test_auc"]["auc"] == pytest.approx(roc_auc_score(y, want), abs=1e-12)
