"""Ensembling, id alignment and the submission checks (pipeline.scoring.submission)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.scoring import submission
from pipeline.scoring.submission import SubmissionError

# ---------------------------------------------------------------- ensemble


def test_ensemble_mean() -> None:
    out = submission.ensemble([np.array([0.1, 0.9, 0.5]), np.array([0.3, 0.7, 0.5])], "mean")
    np.testing.assert_allclose(out, [0.2, 0.8, 0.5])
    np.testing.assert_allclose(submission.ensemble([[0.25, 0.75]]), [0.25, 0.75])  # mean is the default


def test_ensemble_rank() -> None:
    np.testing.assert_allclose(submission.ensemble([np.array([0.1, 0.9, 0.5])], "rank"), [0.0, 1.0, 0.5])
    # a fold on another scale counts as much as the first: ranks, not probabilities
    out = submission.ensemble([np.array([0.1, 0.9, 0.5, 0.2]), np.array([0.001, 0.002, 0.003, 0.0])], "rank")
    np.testing.assert_allclose(out, [1 / 6, 5 / 6, 5 / 6, 1 / 6])  # ranks (1,4,3,2)+(2,3,4,1), scaled
    assert out.min() >= 0 and out.max() <= 1
    rng = np.random.default_rng(0)
    p = rng.random(50)
    same = submission.ensemble([p, p**3, np.sqrt(p)], "rank")  # monotone transforms: order preserved
    assert np.array_equal(np.argsort(same), np.argsort(p))
    assert same.min() == 0.0 and same.max() == 1.0
    ties = submission.ensemble([np.array([0.2, 0.2, 0.9])], "rank")
    np.testing.assert_allclose(ties, [0.25, 0.25, 1.0])  # average rank for ties


def test_ensemble_of_float32_folds_is_float64() -> None:
    """Folds saved as float32 are averaged in float64: float32 sums move values near 0 and 1 and make ties."""
    a, b = np.array([0.1, 1e-7, 0.3], dtype=np.float32), np.array([0.2, 3e-7, 0.3], dtype=np.float32)
    out = submission.ensemble([a, b])
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, (a.astype(np.float64) + b.astype(np.float64)) / 2)


def test_ensemble_rank_of_two_rows_spans_zero_to_one() -> None:
    np.testing.assert_array_equal(submission.ensemble([np.array([0.8, 0.2])], "rank"), [1.0, 0.0])
    np.testing.assert_array_equal(submission.ensemble([np.array([0.8])], "rank"), [0.0])  # one row: no division by 0


def test_ensemble_errors() -> None:
    with pytest.raises(SubmissionError, match="^nothing to ensemble$"):
        submission.ensemble([])
    with pytest.raises(SubmissionError, match="unknown"):
        submission.ensemble([np.array([0.5])], "median")


# ---------------------------------------------------------------- align


def frame(ids, values) -> pd.DataFrame:
    return pd.DataFrame({"id": [str(i) for i in ids], "toxic": values})


def test_align_reorders_to_first_frame() -> None:
    a = frame([1, 2, 3], [0.1, 0.2, 0.3])
    b = frame([3, 1, 2], [0.33, 0.11, 0.22])
    out = submission.align([a, b])
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
        submission.align([frame([1, 2, 3], [0.1, 0.2, 0.3]), other])


# ---------------------------------------------------------------- check_submission

SAMPLE = frame(["b", "a", "c", "d"], [0.5] * 4)


def test_check_submission_ok_in_sample_order() -> None:
    sub = frame(["a", "b", "c", "d"], [0.0, 0.25, 1.0, 0.5])
    out = submission.check_submission(sub, SAMPLE)
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
        (frame(["a", "b", "c", "d"], [0.1, 1.2, 0.3, 0.4]), r"^submission has predictions outside \[0, 1\]$"),
        (frame(["a", "b", "c", "d"], [0.1, -0.01, 0.3, 0.4]), r"outside \[0, 1\]"),
        (frame([], []), r"^submission has no rows \(an empty test set\?\)$"),
        (pd.DataFrame({"id": list("abcd"), "prediction": [0.1] * 4}), "columns"),
        (pd.DataFrame({"toxic": [0.1] * 4, "id": list("abcd")}), "columns"),
        (pd.DataFrame({"id": list("abcd"), "toxic": [0.1] * 4, "lang": ["es"] * 4}), "columns"),
    ],
)
def test_check_submission_rejects(sub: pd.DataFrame, match: str) -> None:
    with pytest.raises(SubmissionError, match=match):
        submission.check_submission(sub, SAMPLE)
