"""The estimate of the pooled test AUC (metrics.six_language) and scores on one scale across languages
(pipeline.scoring.calibration): what each is measured on, and that each does what it says on rows whose
answer is known."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from pipeline import board, layout
from pipeline.errors import PipelineError
from pipeline.scoring import calibration, metrics, publish, ranking
from pipeline.scoring.submission import ensemble

MIX = {"es": 0.2, "fr": 0.3, "it": 0.5}
PROFILE = {"mix": MIX, "rates": {"es": 0.1, "fr": 0.2, "it": 0.3}, "rate_from": dict.fromkeys(MIX, "validation.csv")}


def oof_rows(seed: int = 0, offsets: dict | None = None, n: int = 400) -> pd.DataFrame:
    """es and it validation rows and fr held-out translated rows (half toxic, as translations are), 5 folds;
    scores rank well inside each language but sit on a scale of their own (`offsets` added to the logit)."""
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


# six languages: (share of the test, toxic rate in the test, offset of the language's scores)
SIX = {"es": (0.13, 0.17, 0.8), "fr": (0.17, 0.15, -0.6), "it": (0.13, 0.20, 0.3), "pt": (0.18, 0.15, -0.3),
       "ru": (0.17, 0.15, -1.0), "tr": (0.22, 0.11, 0.6)}  # fmt: skip
TRANSLATED_RATES = {"fr": 0.60, "pt": 0.61, "ru": 0.72}  # the held-out translations' rates on the slice


def draw(rng, lang: str, n: int, rate: float) -> tuple[np.ndarray, np.ndarray]:
    y = (rng.random(n) < rate).astype(int)
    return y, SIX[lang][2] + 1.5 * y + rng.normal(0, 1, n)


def test_the_estimate_is_the_pooled_test_auc_whatever_the_stand_ins_toxic_rates() -> None:
    """A test of six languages whose pooled AUC is known (400k rows drawn), and OOF stand-ins of the same
    score distributions: validation rows at the test's rates, translations at 60-72% toxic. Weighting each
    language to its test share alone (ignoring its classes) said 0.70 here; the estimate must say 0.81."""
    rng = np.random.default_rng(0)
    test = [draw(rng, lang, int(400_000 * share), rate) for lang, (share, rate, _) in SIX.items()]
    truth = roc_auc_score(np.concatenate([y for y, _ in test]), np.concatenate([p for _, p in test]))
    frames = []
    for lang, (_, rate, _) in SIX.items():
        y, p = draw(rng, lang, 3000, TRANSLATED_RATES.get(lang, rate))
        source = "translated-train" if lang in TRANSLATED_RATES else "validation"
        frames.append(pd.DataFrame({"lang": lang, "toxic": y, "source": source, "pred": p}))
    oof = pd.concat(frames, ignore_index=True)
    langs = np.repeat(list(SIX), [int(1000 * share) for share, _, _ in SIX.values()])
    profile = metrics.test_profile(oof[oof["source"] == "validation"], langs)
    assert profile["rate_from"] == {g: "prior" if g in TRANSLATED_RATES else "validation.csv" for g in SIX}
    assert profile["rates"]["fr"] == pytest.approx(oof.loc[oof["source"] == "validation", "toxic"].mean())
    estimate = metrics.six_language(oof, profile)
    assert estimate["auc"] == pytest.approx(truth, abs=0.01) and estimate["missing"] == []
    rates = {**profile, "rates": {g: rate for g, (_, rate, _) in SIX.items()}}  # with the true rates: closer
    assert metrics.six_language(oof, rates)["auc"] == pytest.approx(truth, abs=0.004)


def test_each_language_brings_its_test_share_of_toxic_and_clean_rows() -> None:
    oof = oof_rows()
    extra = oof[oof["lang"] == "es"].assign(source="translated-train", pred=0.99, id=lambda f: "x" + f["id"])
    both = pd.concat([oof, extra], ignore_index=True)
    with_pt = {**PROFILE, "mix": {**MIX, "pt": 0.0}, "rates": {**PROFILE["rates"], "pt": 0.2}}
    w = metrics.row_weights(both, with_pt)
    assert (w[len(oof) :] == 0).all()  # es has validation rows: its translated rows stand for nothing
    frame = both.assign(w=w)[: len(oof)]
    for lang in MIX:
        own = frame[frame["lang"] == lang]
        assert own["w"].sum() == pytest.approx(MIX[lang])  # its share of the test
        assert own.loc[own["toxic"] == 1, "w"].sum() == pytest.approx(MIX[lang] * PROFILE["rates"][lang])
    six = metrics.six_language(both, with_pt)
    assert six["auc"] == pytest.approx(roc_auc_score(oof["toxic"], oof["pred"], sample_weight=frame["w"]))
    assert six["missing"] == ["pt"] and set(six["per_lang"]) == {"es", "fr", "it"}


def test_fold_score_is_the_estimate_given_the_profile() -> None:
    oof = oof_rows()
    six = metrics.six_language(oof, PROFILE)
    assert not six["missing"] and metrics.fold_score(oof, oof["pred"], PROFILE)[:2] == (
        "six",
        pytest.approx(six["auc"]),
    )
    valid = oof[oof["source"] == "validation"]
    want = ("valid_auc", pytest.approx(metrics.auc(valid["toxic"], valid["pred"])))
    assert metrics.fold_score(oof, oof["pred"], None)[:2] == want
    # without rows for a test language, not an estimate of this test: judged by the validation AUC, named so
    assert metrics.fold_score(valid, valid["pred"], PROFILE)[:2] == want
    assert math.isnan(metrics.scores(valid, PROFILE, "probability")["six"])


def test_calibration_puts_languages_on_one_scale() -> None:
    oof, test = oof_rows(0), oof_rows(1)  # the same languages, new rows
    before = metrics.six_language(test, PROFILE)["auc"]
    fitted = calibration.fit(oof, PROFILE, 1.0)
    scaled, _ = calibration.apply(test["pred"].to_numpy(), test["lang"].to_numpy(), fitted, prior=False)
    after = metrics.six_language(test.assign(pred=scaled), PROFILE)["auc"]
    assert after > before + 0.03  # the offsets cost pooled AUC; the scaling gives it back
    for lang in MIX:  # inside a language the order is kept: a monotone map
        at = (test["lang"] == lang).to_numpy()
        assert metrics.auc(test["toxic"][at], scaled[at]) == pytest.approx(
            metrics.auc(test["toxic"][at], test["pred"][at])
        )


def test_a_language_is_moved_from_its_stand_ins_toxic_rate_to_the_tests() -> None:
    oof = oof_rows()
    fitted = calibration.fit(oof, PROFILE, 1.0)
    fr = oof[oof["lang"] == "fr"]
    scaled, rates = calibration.apply(fr["pred"].to_numpy(), fr["lang"].to_numpy(), fitted, prior=False)
    assert fitted["fr"]["prior"] == pytest.approx(fr["toxic"].mean()) and rates["fr"]["rate"] == 0.2
    y = fr["toxic"].to_numpy() == 1  # over rows toxic at the test's 20%, the probabilities average 20%
    assert 0.2 * scaled[y].mean() + 0.8 * scaled[~y].mean() == pytest.approx(0.2, abs=0.03)


def test_a_language_with_few_positives_or_a_reversed_fit_gets_the_pooled_scaling() -> None:
    oof = oof_rows(n=300)
    at = (oof["lang"] == "es").to_numpy()
    oof.loc[at, "toxic"] = 0
    oof.loc[np.flatnonzero(at)[:3], "toxic"] = 1  # 3 positives in 300 rows
    fitted = calibration.fit(oof, PROFILE, 1e4)
    assert not fitted["es"]["own_fit"] and fitted["fr"]["own_fit"]
    reversed_ = oof.copy()
    it = (oof["lang"] == "it").to_numpy()
    reversed_.loc[it, "pred"] = 1 - oof.loc[it, "pred"]  # higher scores less toxic: a negative slope
    fitted = calibration.fit(reversed_, PROFILE, 1e4)
    assert not fitted["it"]["own_fit"] and fitted["it"]["ab"][0] > 0  # never a fit that reverses its order


@pytest.mark.parametrize(("toxic", "before", "after"), [(5, 0.8135, 0.8465), (0, 0.7582, 0.8465)])
def test_a_language_with_the_pooled_fit_is_moved_from_the_pooled_rows_toxic_rate(toxic, before, after) -> None:
    """Six languages; ru's 200 held-out translations hold `toxic` toxic rows, too few for a fit of its own.
    Its pooled-fit probabilities are made under the pooled stand-ins' rate, not ru's: moved from ru's own
    2.5% (or 0%) to the test's 15%, every ru row rose (odds x7, or x10^5) and the pooled test AUC, 0.8107
    uncalibrated, was `before` calibrated; moved from the pooled rate it is `after`."""
    rng = np.random.default_rng(0)
    frames = []
    for lang, (_, rate, _) in SIX.items():
        n = 200 if lang == "ru" else 1000
        y, p = draw(rng, lang, n, TRANSLATED_RATES.get(lang, rate))
        y = np.arange(n) < toxic if lang == "ru" else y  # ru's scores drawn as usual, its labels almost all clean
        source = "translated-train" if lang in TRANSLATED_RATES else "validation"
        pred = 1 / (1 + np.exp(-p))
        frames.append(pd.DataFrame({"lang": lang, "toxic": y.astype(int), "source": source, "pred": pred}))
    oof = pd.concat(frames, ignore_index=True)
    profile = {"mix": {g: share for g, (share, _, _) in SIX.items()}, "rates": {g: r for g, (_, r, _) in SIX.items()}}
    test = [(g, *draw(rng, g, int(50_000 * share), rate)) for g, (share, rate, _) in SIX.items()]
    langs = np.concatenate([[g] * len(y) for g, y, _ in test])
    y, p = np.concatenate([y for _, y, _ in test]), 1 / (1 + np.exp(-np.concatenate([p for _, _, p in test])))
    fitted = calibration.fit(oof, profile, 1.0)
    assert not fitted["ru"]["own_fit"] and fitted["ru"]["prior"] == pytest.approx(oof["toxic"].mean())
    assert roc_auc_score(y, p) == pytest.approx(0.8107, abs=5e-4)
    scaled, _ = calibration.apply(p, langs, fitted, prior=False)
    assert roc_auc_score(y, scaled) == pytest.approx(after, abs=5e-4) and after > before + 0.03


def test_the_regularisation_is_chosen_by_the_nested_estimate() -> None:
    oof = oof_rows()
    c, tried = calibration.choose_c(oof, PROFILE)
    assert set(tried) == set(calibration.C_GRID) and tried[c] == max(tried.values())


def test_the_test_toxic_rate_is_estimated_without_labels() -> None:
    rng = np.random.default_rng(2)
    for rate in (0.1, 0.3):
        y = rng.random(20000) < rate
        x = np.where(y, 1.5, -1.5) + rng.normal(0, 1.5, len(y))
        p = 1 / (1 + np.exp(-x * 3 / 1.5**2))  # the log-likelihood ratio: calibrated where the rate is 0.5
        found, converged = calibration.test_prior(p, 0.5)
        assert converged and found == pytest.approx(rate, abs=0.02)


def test_an_em_rate_at_a_boundary_is_not_used() -> None:
    """A language whose scaled probabilities all sit near 1: EM runs to a toxic rate of 1, which is no
    estimate; the language keeps the profile's rate and the run says why."""
    fitted = {"fr": {"ab": (1.0, 0.0), "prior": 0.5, "target": 0.2, "own_fit": True, "rows": 100}}
    p = np.full(200, 0.999)
    out, rates = calibration.apply(p, np.array(["fr"] * 200), fitted, prior=True)
    assert rates["fr"]["em"] > 0.99 and not rates["fr"]["used"] and rates["fr"]["rate"] == 0.2
    expect, _ = calibration.apply(p, np.array(["fr"] * 200), fitted, prior=False)
    np.testing.assert_allclose(out, expect)
    assert "EM's 1.000 is at a boundary: not used" in publish.calibration_words(fitted, rates)


def test_nested_calibration_never_uses_a_folds_own_labels() -> None:
    oof = oof_rows()
    flipped = oof.copy()
    at = (oof["fold"] == 0).to_numpy()
    flipped.loc[at, "toxic"] = 1 - flipped.loc[at, "toxic"]
    a, b = calibration.nested(oof, PROFILE, 1.0), calibration.nested(flipped, PROFILE, 1.0)
    assert np.allclose(a.loc[at, "pred"], b.loc[at, "pred"])  # fold 0 scaled by the other folds alone
    assert not np.allclose(a.loc[~at, "pred"], b.loc[~at, "pred"])


def test_a_folds_c_is_chosen_without_its_rows() -> None:
    """Fold 0's labels flipped: the C chosen on every row changes (0.1 to 0.01), and with it fold 0's rows
    scaled nested with that C; with each fold's C chosen on the other folds alone, fold 0's rows are scaled
    the same whatever their labels."""
    oof = oof_rows(3, n=100)
    flipped = oof.copy()
    at = (oof["fold"] == 0).to_numpy()
    flipped.loc[at, "toxic"] = 1 - flipped.loc[at, "toxic"]
    (a, a_c), (b, b_c) = calibration.nested_choice(oof, PROFILE), calibration.nested_choice(flipped, PROFILE)
    assert a_c[0] == b_c[0] and np.allclose(a.loc[at, "pred"], b.loc[at, "pred"])
    assert a_c == {0: 1.0, 1: 1.0, 2: 0.1, 3: 0.1, 4: 1.0}
    old = [calibration.nested(x, PROFILE, calibration.choose_c(x, PROFILE)[0]) for x in (oof, flipped)]
    assert not np.allclose(old[0].loc[at, "pred"], old[1].loc[at, "pred"])  # C chosen with fold 0's rows
    two = oof[oof["fold"] < 2]  # one other fold to choose on: each C judged on it scaled by its own fit
    scaled, chose = calibration.nested_choice(two, PROFILE)
    assert set(chose) == {0, 1} and not math.isnan(metrics.six_language(scaled, PROFILE)["auc"])


def test_the_calibrated_estimate_is_of_rows_that_chose_neither_the_fit_nor_its_c(monkeypatch, capsys) -> None:
    """The figure the board ranks a calibrated submission by: here 0.9087, where the best of the four C's
    nested estimates, picked by the rows it scores, says 0.9210."""
    from pipeline import config

    oof = oof_rows(3, n=100)
    monkeypatch.setattr(publish.report, "read_oof", lambda dirs, prepared=None: oof)
    cfg = config.load("sample", ["predict.calibration=lang"])
    _, info, _ = publish.on_one_scale(cfg, [oof["pred"].to_numpy()], oof, ["fold0"], PROFILE, layout.PROBABILITY)
    assert info["c"] == 0.1 and max(info["c_tried"].values()) == pytest.approx(0.9210, abs=5e-5)
    assert info["oof_after"] == pytest.approx(0.9087, abs=5e-5) and info["c_by_fold"][2] == 0.1
    assert "(nested, each fold's C chosen on the other folds: 1 1 0.1 0.1 1; the submission's C=0.1)" in (
        capsys.readouterr().out
    )


def test_a_calibration_of_one_folds_predictions_is_one_line(monkeypatch) -> None:
    """One fold (a specialist route of fold 0): no other fold to fit the nested scaling on, said before any NaN."""
    from pipeline import config

    oof = oof_rows(3, n=100)
    one = oof[oof["fold"] == 0]
    monkeypatch.setattr(publish.report, "read_oof", lambda dirs, prepared=None: one)
    cfg = config.load("sample", ["predict.calibration=lang"])
    with pytest.raises(PipelineError, match="predictions are of one fold: train another, or use predict.calibration"):
        publish.on_one_scale(cfg, [one["pred"].to_numpy()], one, ["fold0"], PROFILE, layout.PROBABILITY)


def test_calibration_is_applied_to_each_folds_probabilities_before_a_rank_ensemble(monkeypatch) -> None:
    """predict.ensemble=rank with a calibration: each fold's probabilities are calibrated, then ranked; a
    calibration fit on probabilities and applied to ranks would give another submission."""
    from pipeline import config

    oof, test = oof_rows(0), oof_rows(1)
    folds = [test["pred"].to_numpy(), np.clip(test["pred"].to_numpy() * 0.9 + 0.05, 0, 1)]
    monkeypatch.setattr(publish.report, "read_oof", lambda dirs, prepared=None: oof)
    cfg = config.load("sample", ["predict.ensemble=rank", "predict.calibration=lang"])
    out, info, each = publish.on_one_scale(cfg, folds, test, ["fold0"], PROFILE, layout.PROBABILITY)
    fitted = calibration.fit(oof, PROFILE, info["c"])
    langs = test["lang"].to_numpy()
    want = ensemble([calibration.apply(p, langs, fitted, False)[0] for p in folds], "rank")
    np.testing.assert_allclose(out, want)
    wrong = calibration.apply(ensemble(folds, "rank"), langs, fitted, False)[0]
    assert metrics.six_language(test.assign(pred=out), PROFILE)["auc"] != pytest.approx(
        metrics.six_language(test.assign(pred=wrong), PROFILE)["auc"]
    )
    np.testing.assert_allclose(each["none"], ensemble(folds, "rank"))
    with pytest.raises(
        PipelineError, match="predict.calibration=lang maps probabilities and these predictions are ranks"
    ):
        publish.on_one_scale(cfg, folds[:1], test, ["fold0"], PROFILE, layout.RANK)


def test_the_calibration_line_names_an_estimate_without_every_language_as_what_it_is(monkeypatch, capsys) -> None:
    """With stand-in rows of es and it only, the estimate before and after calibration is of those two: the
    line says so rather than call it a 6-lang AUC, which every table shows as '-'."""
    from pipeline import config

    oof = oof_rows(0)
    oof = oof[oof["lang"] != "fr"]
    monkeypatch.setattr(publish.report, "read_oof", lambda dirs, prepared=None: oof)
    cfg = config.load("sample", ["predict.calibration=lang"])
    publish.on_one_scale(cfg, [oof["pred"].to_numpy()], oof, ["fold0"], PROFILE, layout.PROBABILITY)
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("calibration lang: AUC of es, it (no 6-lang AUC) ") and " -> " in line
    monkeypatch.setattr(publish.report, "read_oof", lambda dirs, prepared=None: oof_rows(0))
    publish.on_one_scale(cfg, [oof_rows(1)["pred"].to_numpy()], oof_rows(1), ["fold0"], PROFILE, layout.PROBABILITY)
    assert capsys.readouterr().out.startswith(f"calibration lang: {metrics.SIX.header} 0.")


def entry(name: str, oof: float, oof6: float, test: float | None) -> dict:
    return {"name": name, "metrics": {"valid_auc": oof, "six": oof6}, "test": test}


def test_board_ranks_by_the_six_language_oof_and_marks_a_rise_that_fell() -> None:
    nan = float("nan")
    rows = [entry("plain", 0.95, nan, 0.80), entry("six-low", 0.90, 0.85, 0.86), entry("six-high", 0.88, 0.87, 0.85),
            entry("none", nan, nan, None)]  # fmt: skip
    ranked = ranking.mark_disagreements(sorted(rows, key=ranking.rank))
    assert [r["name"] for r in ranked] == ["six-high", "six-low", "plain", "none"]
    marks = {r["name"]: r["below"] for r in ranked}
    assert marks == {"six-high": "six-low", "six-low": "", "plain": "six-low", "none": ""}
    text = board.stale_notes(ranked)
    assert "- plain (!): valid AUC 0.9500 above six-low's 0.9000, test AUC 0.8000 below its 0.8600" in text
    assert "- six-high (!): 6-lang AUC 0.8700 above six-low's 0.8500, test AUC 0.8500 below its 0.8600" in text


nan_ = float("nan")


def test_experiments_scored_on_other_tests_are_not_compared() -> None:
    """The sample's test and the real slice's are other tests: a higher OOF with a lower test AUC across them
    says nothing."""
    rows = [
        {**entry("real", 0.89, nan_, 0.84), "test_of": "real"},
        {**entry("sample", 0.83, nan_, 0.85), "test_of": "s"},
    ]
    assert [r["below"] for r in ranking.mark_disagreements(sorted(rows, key=ranking.rank))] == ["", ""]
    same = [{**r, "test_of": "real"} for r in rows]
    assert [r["below"] for r in ranking.mark_disagreements(sorted(same, key=ranking.rank))] == ["sample", ""]
