"""Ensembling, id alignment and the submission checks (pipeline.predict), and AUC (pipeline.metrics)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import config, metrics, predict
from pipeline.predict import SubmissionError

# ---------------------------------------------------------------- ensemble


def test_ensemble_mean() -> None:
    out = predict.ensemble([np.array([0.1, 0.9, 0.5]), np.array([0.3, 0.7, 0.5])], "mean")
    np.testing.assert_allclose(out, [0.2, 0.8, 0.5])
    np.testing.assert_allclose(predict.ensemble([[0.25, 0.75]]), [0.25, 0.75])  # mean is the default


def test_ensemble_rank() -> None:
    np.testing.assert_allclose(predict.ensemble([np.array([0.1, 0.9, 0.5])], "rank"), [0.0, 1.0, 0.5])
    # a fold on another scale counts as much as the first: ranks, not probabilities
    out = predict.ensemble([np.array([0.1, 0.9, 0.5, 0.2]), np.array([0.001, 0.002, 0.003, 0.0])], "rank")
    np.testing.assert_allclose(out, [1 / 6, 5 / 6, 5 / 6, 1 / 6])  # ranks (1,4,3,2)+(2,3,4,1), scaled
    assert out.min() >= 0 and out.max() <= 1
    rng = np.random.default_rng(0)
    p = rng.random(50)
    same = predict.ensemble([p, p**3, np.sqrt(p)], "rank")  # monotone transforms: order preserved
    assert np.array_equal(np.argsort(same), np.argsort(p))
    assert same.min() == 0.0 and same.max() == 1.0
    ties = predict.ensemble([np.array([0.2, 0.2, 0.9])], "rank")
    np.testing.assert_allclose(ties, [0.25, 0.25, 1.0])  # average rank for ties


def test_ensemble_errors() -> None:
    with pytest.raises(SubmissionError):
        predict.ensemble([])
    with pytest.raises(SubmissionError, match="unknown"):
        predict.ensemble([np.array([0.5])], "median")


# ---------------------------------------------------------------- align


def frame(ids, values) -> pd.DataFrame:
    return pd.DataFrame({"id": [str(i) for i in ids], "toxic": values})


def test_align_reorders_to_first_frame() -> None:
    a = frame([1, 2, 3], [0.1, 0.2, 0.3])
    b = frame([3, 1, 2], [0.33, 0.11, 0.22])
    out = predict.align([a, b])
    np.testing.assert_allclose(out[0], [0.1, 0.2, 0.3])
    np.testing.assert_allclose(out[1], [0.11, 0.22, 0.33])


@pytest.mark.parametrize(
    "other",
    [
        frame([1, 2, 4], [0.1, 0.2, 0.3]),  # a different id
        frame([1, 2], [0.1, 0.2]),  # one missing
        frame([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4]),  # one extra
        frame([1, 2, 2, 3], [0.1, 0.2, 0.2, 0.3]),  # a duplicate
    ],
)
def test_align_id_mismatch_raises(other: pd.DataFrame) -> None:
    with pytest.raises(SubmissionError, match="same test ids"):
        predict.align([frame([1, 2, 3], [0.1, 0.2, 0.3]), other])


# ---------------------------------------------------------------- check_submission

SAMPLE = frame(["b", "a", "c", "d"], [0.5] * 4)


def test_check_submission_ok_in_sample_order() -> None:
    sub = frame(["a", "b", "c", "d"], [0.0, 0.25, 1.0, 0.5])
    out = predict.check_submission(sub, SAMPLE)
    assert list(out.columns) == ["id", "toxic"]
    assert out["id"].tolist() == ["b", "a", "c", "d"]
    assert out["toxic"].tolist() == [0.25, 0.0, 1.0, 0.5]


@pytest.mark.parametrize(
    "sub,match",
    [
        (frame(["a", "b", "c"], [0.1, 0.2, 0.3]), "1 missing"),
        (frame(["a", "b", "c", "d", "e"], [0.1] * 5), "1 unknown"),
        (frame(["a", "b", "c", "d", "d"], [0.1] * 5), "duplicate"),
        (frame(["a", "b", "c", "x"], [0.1] * 4), "1 missing, 1 unknown"),
        (frame(["a", "b", "c", "d"], [0.1, np.nan, 0.3, 0.4]), "NaN"),
        (frame(["a", "b", "c", "d"], [0.1, "oops", 0.3, 0.4]), "NaN"),
        (frame(["a", "b", "c", "d"], [0.1, 1.2, 0.3, 0.4]), r"outside \[0, 1\]"),
        (frame(["a", "b", "c", "d"], [0.1, -0.01, 0.3, 0.4]), r"outside \[0, 1\]"),
        (pd.DataFrame({"id": list("abcd"), "prediction": [0.1] * 4}), "columns"),
        (pd.DataFrame({"toxic": [0.1] * 4, "id": list("abcd")}), "columns"),
        (pd.DataFrame({"id": list("abcd"), "toxic": [0.1] * 4, "lang": ["es"] * 4}), "columns"),
    ],
)
def test_check_submission_rejects(sub: pd.DataFrame, match: str) -> None:
    with pytest.raises(SubmissionError, match=match):
        predict.check_submission(sub, SAMPLE)


# ---------------------------------------------------------------- run: a failed check writes nothing


def test_run_with_failing_check_writes_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    SAMPLE.to_csv(raw / "sample_submission.csv", index=False)
    folds = [tmp_path / "models" / "sample" / f"fold{k}" for k in range(2)]
    test = pd.DataFrame({"id": ["a", "b", "c", "d"], "text": ["x"] * 4, "lang": ["es"] * 4})
    good = frame(["a", "b", "c", "d"], [0.1, 0.2, 0.3, 0.4])

    monkeypatch.setattr(predict.metrics, "usable_folds", lambda cfg, digest, what: folds)
    monkeypatch.setattr(predict.fingerprint, "fold_fingerprint", lambda cfg, meta, prepared: "x")
    monkeypatch.setattr(predict.data_mod, "load_table", lambda cfg: (None, test, {"raw": str(raw)}))
    monkeypatch.setattr(predict.tokens, "load", lambda cfg, meta: ({"test": None}, {}))
    monkeypatch.setattr(predict, "fold_test_preds", lambda cfg, d, data, test, meta, device: good)
    cfg = config.load("sample", [f"models_dir={tmp_path / 'models'}", f"submissions_dir={tmp_path / 'subs'}"])

    path = predict.run(cfg)  # the plumbing works: this is the check's control
    assert path == tmp_path / "subs" / "submission.csv"
    written = pd.read_csv(path, dtype={"id": str})
    assert written["id"].tolist() == ["b", "a", "c", "d"]
    np.testing.assert_allclose(written["toxic"], [0.2, 0.1, 0.3, 0.4])
    assert (tmp_path / "subs" / "sample.csv").exists()

    subs = tmp_path / "subs2"
    cfg = config.load("sample", [f"models_dir={tmp_path / 'models'}", f"submissions_dir={subs}"])
    monkeypatch.setattr(predict, "ensemble", lambda preds, how="mean": np.full(len(preds[0]), np.nan))
    with pytest.raises(SubmissionError, match="NaN"):
        predict.run(cfg)
    assert not subs.exists() or list(subs.glob("*.csv")) == []


def test_run_without_prepared_data_says_so(tmp_path: Path) -> None:
    paths = [f"input_dir={tmp_path / 'input'}", f"models_dir={tmp_path / 'models'}", f"submissions_dir={tmp_path}/s"]
    cfg = config.load("sample", paths)
    with pytest.raises(predict.PipelineError, match="make data"):
        predict.run(cfg)
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------- metrics


def test_auc_nan_on_one_class() -> None:
    assert math.isnan(metrics.auc([0, 0, 0], [0.1, 0.5, 0.9]))
    assert math.isnan(metrics.auc([1], [0.3]))
    assert metrics.auc([0, 1, 0, 1], [0.1, 0.9, 0.2, 0.8]) == 1.0
    assert metrics.auc([0, 1, 0, 1], [0.9, 0.1, 0.8, 0.2]) == 0.0
    assert metrics.auc([0, 1, 1, 0], [0.1, 0.4, 0.35, 0.8]) == 0.5


def test_auc_by_lang() -> None:
    y = [0, 1, 0, 1, 0, 0, 0, 1]
    p = [0.1, 0.9, 0.8, 0.2, 0.5, 0.3, 0.6, 0.95]
    lang = ["es", "es", "it", "it", "tr", "tr", "es", "it"]
    out = metrics.auc_by_lang(y, p, lang)
    assert list(out) == ["es", "it", "tr"]  # sorted
    assert out["es"] == 1.0  # y (0,1,0) p (0.1,0.9,0.6)
    assert out["it"] == 0.5  # y (0,1,1) p (0.8,0.2,0.95): 1 of 2 pairs right
    assert math.isnan(out["tr"])  # only non-toxic rows
    assert all(isinstance(k, str) for k in out)
    series = metrics.auc_by_lang(pd.Series(y), pd.Series(p), pd.Series(lang))
    assert series.keys() == out.keys()
