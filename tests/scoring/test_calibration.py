"""The six-language OOF (metrics.six_language) and scores on one scale across languages
(pipeline.scoring.calibration): what each is measured on, and that each does what it says on rows whose
answer is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from pipeline import board
from pipeline.scoring import calibration, metrics

MIX = {"es": 0.2, "fr": 0.3, "it": 0.5}


def oof_rows(seed: int = 0, offsets: dict | None = None, n: int = 400) -> pd.DataFrame:
    """es and it validation rows and fr held-out translated rows, 5 folds; scores rank well inside each
    language but sit on a scale of their own (`offsets` added to the logit)."""
    offsets = offsets or {"es": 2.0, "fr": -2.0, "it": 0.0}
    rng = np.random.default_rng(seed)
    frames = []
    for lang, rate in (("es", 0.1), ("fr", 0.5), ("it", 0.3)):
        y = (rng.random(n) < rate).astype(int)
        score = 1 / (1 + np.exp(-(2.0 * (y - 0.5) + rng.normal(0, 1, n) + offsets[lang])))
        source = "translated-train" if lang == "fr" else "validation"
        frames.append(pd.DataFrame({"id": [f"{lang}{i}" for i in range(n)], "lang": lang, "toxic": y,
                                    "fold": np.arange(n) % 5, "source": source, "pred": score}))  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def test_six_language_weights_each_language_to_its_test_share() -> None:
    oof = oof_rows()
    extra = oof[oof["lang"] == "es"].assign(source="translated-train", pred=0.99, id=lambda f: "x" + f["id"])
    six = metrics.six_language(pd.concat([oof, extra]), {**MIX, "pt": 0.0})
    # es has validation rows: its translated rows are not its stand-ins
    counts = oof["lang"].value_counts()
    weights = oof["lang"].map(lambda g: MIX[g] / counts[g])
    assert six["auc"] == pytest.approx(roc_auc_score(oof["toxic"], oof["pred"], sample_weight=weights))
    assert six["rows"] == len(oof) and six["missing"] == ["pt"]
    assert set(six["per_lang"]) == {"es", "fr", "it"}


def test_fold_score_is_the_six_language_auc_only_with_held_out_rows() -> None:
    oof = oof_rows()
    assert metrics.fold_score(oof, oof["pred"], MIX)[0] == pytest.approx(metrics.six_language(oof, MIX)["auc"])
    valid = oof[oof["source"] == "validation"]
    assert metrics.fold_score(valid, valid["pred"], MIX)[0] == pytest.approx(metrics.auc(valid["toxic"], valid["pred"]))


def test_calibration_puts_languages_on_one_scale() -> None:
    oof, test = oof_rows(0), oof_rows(1)  # the same languages, new rows
    before = metrics.six_language(test, MIX)["auc"]
    fitted = calibration.fit(oof, sorted(MIX))
    scaled, _ = calibration.apply(test["pred"].to_numpy(), test["lang"].to_numpy(), fitted, prior=False)
    after = metrics.six_language(test.assign(pred=scaled), MIX)["auc"]
    assert after > before + 0.03  # the offsets cost pooled AUC; the scaling gives it back
    for lang in MIX:  # inside a language the order is kept: a monotone map
        at = (test["lang"] == lang).to_numpy()
        assert metrics.auc(test["toxic"][at], scaled[at]) == pytest.approx(
            metrics.auc(test["toxic"][at], test["pred"][at])
        )


def test_the_test_toxic_rate_is_estimated_without_labels() -> None:
    rng = np.random.default_rng(2)
    for rate in (0.1, 0.3):
        y = rng.random(20000) < rate
        x = np.where(y, 1.5, -1.5) + rng.normal(0, 1.5, len(y))
        p = 1 / (1 + np.exp(-x * 3 / 1.5**2))  # the log-likelihood ratio: calibrated where the rate is 0.5
        assert calibration.test_prior(p, 0.5) == pytest.approx(rate, abs=0.02)


def test_nested_calibration_never_uses_a_folds_own_labels() -> None:
    oof = oof_rows()
    flipped = oof.copy()
    at = (oof["fold"] == 0).to_numpy()
    flipped.loc[at, "toxic"] = 1 - flipped.loc[at, "toxic"]
    a, b = calibration.nested(oof, sorted(MIX)), calibration.nested(flipped, sorted(MIX))
    assert np.allclose(a.loc[at, "pred"], b.loc[at, "pred"])  # fold 0 scaled by the other folds alone
    assert not np.allclose(a.loc[~at, "pred"], b.loc[~at, "pred"])


def entry(name: str, oof: float, oof6: float, test: float | None) -> dict:
    return {"name": name, "oof": oof, "oof6": oof6, "test": test}


def test_board_ranks_by_the_six_language_oof_and_marks_a_rise_that_fell() -> None:
    nan = float("nan")
    rows = [entry("plain", 0.95, nan, 0.80), entry("six-low", 0.90, 0.85, 0.86), entry("six-high", 0.88, 0.87, 0.85),
            entry("none", nan, nan, None)]  # fmt: skip
    ranked = board.mark_disagreements(sorted(rows, key=board.rank))
    assert [r["name"] for r in ranked] == ["six-high", "six-low", "plain", "none"]
    marks = {r["name"]: r["below"] for r in ranked}
    assert marks == {"six-high": "six-low", "six-low": "", "plain": "six-low", "none": ""}
    text = board.stale_notes(ranked)
    assert "- plain (!): OOF AUC 0.9500 above six-low's 0.9000, test AUC 0.8000 below its 0.8600" in text
    assert "- six-high (!): six-language OOF 0.8700 above six-low's 0.8500, test AUC 0.8500 below its 0.8600" in text
