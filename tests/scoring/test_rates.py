"""The test's toxic rate by EM on the unlabelled test predictions (pipeline.scoring.rates), and where `make cv`
shows it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.files import read_json
from pipeline.scoring import calibration, metrics, rates
from tests.scoring.test_metrics import six_language_oof


def calibrated(rng, n: int, rate: float, at: float, separation: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """n rows toxic at `rate`, scored N(+-separation, 1) by class, and a model's probabilities calibrated for a
    class balance of `at`: the likelihood ratio of the score times the prior odds of `at`."""
    y = rng.random(n) < rate
    score = rng.normal(np.where(y, separation, -separation), 1.0)
    return 1 / (1 + np.exp(-(2 * separation * score + np.log(at / (1 - at))))), y


def test_em_recovers_a_rate_of_0_08_from_a_model_calibrated_at_0_5_where_the_mean_prediction_does_not() -> None:
    rng = np.random.default_rng(0)
    for separation in (0.75, 1.0, 1.5):
        p, _ = calibrated(rng, 20_000, 0.08, 0.5, separation)
        found, converged = calibration.test_prior(p, 0.5)
        assert converged and found == pytest.approx(0.08, abs=0.02)
        assert p.mean() > 0.08 + 0.05  # the mean of probabilities calibrated at 0.5 keeps far from the rate


def test_the_prior_is_the_one_the_model_is_calibrated_at_read_on_its_labelled_stand_ins() -> None:
    """Stand-ins half toxic, a model calibrated for 0.3: EM from their own rate would misread the test; the prior
    that reads their rate back is 0.3, and from it EM reads a test at 0.12 right."""
    rng = np.random.default_rng(1)
    p, y = calibrated(rng, 4000, 0.5, 0.3)
    prior = rates.calibrated_prior(p, y)
    assert prior == pytest.approx(0.3, abs=0.03)
    test, _ = calibrated(rng, 20_000, 0.12, 0.3)
    assert calibration.test_prior(test, prior)[0] == pytest.approx(0.12, abs=0.02)
    assert abs(calibration.test_prior(test, 0.5)[0] - 0.12) > 0.03  # the stand-ins' rate as the prior: off
    assert np.isnan(rates.calibrated_prior([0.2, 0.7], [1, 1]))


def test_each_languages_rate_is_the_mean_over_the_folds_test_predictions() -> None:
    rng = np.random.default_rng(2)
    truth = {"es": 0.15, "fr": 0.08, "tr": 0.25}
    stand, test, folds = [], [], [[], []]
    for lang, rate in truth.items():
        p, y = calibrated(rng, 3000, 0.5 if lang == "fr" else rate, 0.5 if lang == "fr" else rate)
        stand.append(pd.DataFrame({"lang": lang, "toxic": y.astype(int), "pred": p}))
        ids = [f"{lang}{i}" for i in range(8000)]
        test.append(pd.DataFrame({"id": ids, "lang": lang}))
        for k in range(2):  # two folds' models: alike here
            folds[k].append(pd.DataFrame({"id": ids, "toxic": calibrated(rng, 8000, rate, 0.5 if lang == "fr" else
                                                                             rate)[0]}))  # fmt: skip
    got = rates.test_rates(pd.concat(stand), [pd.concat(f) for f in folds], pd.concat(test))
    assert got["rates"] == pytest.approx(truth, abs=0.02) and got["folds"] == 2
    assert got["priors"]["fr"] == pytest.approx(0.5, abs=0.04)
    assert rates.test_rates(pd.concat(stand), [], pd.concat(test)) is None
    # one fold that calls every tr row clean: EM's answer at the boundary, no tr rate from any fold (and said)
    folds[1][2] = folds[1][2].assign(toxic=1e-9)
    got = rates.test_rates(pd.concat(stand), [pd.concat(f) for f in folds], pd.concat(test))
    assert sorted(got["rates"]) == ["es", "fr"] and got["unusable"] == ["tr"]
    from pipeline.scoring import report

    profile = {"rates": dict.fromkeys(truth, 0.15), "em": got}
    es, fr = got["rates"]["es"], got["rates"]["fr"]
    assert report.em_line({"scale": "probability", "six": {"profile": profile}}).endswith(
        f"es {es:.3f} (0.150) fr {fr:.3f} (0.150); none for tr: a fold's EM answer at a boundary or not converged"
    )


def test_the_estimates_range_takes_in_each_languages_em_rate() -> None:
    mix = {"es": 0.3, "fr": 0.4, "tr": 0.3}
    profile = {"mix": mix, "rates": {"es": 0.15, "fr": 0.15, "tr": 0.2}, "rate_se": {"es": 0.01, "fr": 0.0,
               "tr": 0.01}, "rate_from": {"es": "validation.csv", "fr": "prior", "tr": "validation.csv"}}  # fmt: skip

    def spans(p: dict) -> dict:
        return {g: pytest.approx(v) for g, v in metrics.rate_spans(p).items()}

    assert spans(profile) == {"fr": (0.05, 0.35), "es": (0.13, 0.17), "tr": (0.18, 0.22)}
    em = {"rates": {"es": 0.10, "fr": 0.2, "tr": 0.21}, "priors": {}, "folds": 5}
    assert spans({**profile, "em": em}) == {"fr": (0.05, 0.35), "es": (0.10, 0.17), "tr": (0.18, 0.22)}
    oof = six_language_oof()
    profile = metrics.test_profile(oof[oof["source"] == "validation"], oof["lang"])
    far = {"rates": dict.fromkeys(profile["mix"], 0.45), "priors": {}, "folds": 5}  # outside every span
    assert len(metrics.six_corners(oof, {**profile, "em": far})) == len(metrics.six_corners(oof, profile))
    assert min(metrics.six_corners(oof, {**profile, "em": far})) < min(metrics.six_corners(oof, profile))


def test_cv_and_the_board_range_over_the_em_rate_or_cv_says_it_needs_predict(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    from pipeline import board, cv, layout
    from pipeline.scoring import report
    from tests.helpers.experiments import Competition, ids_of_test

    comp = Competition(tmp_path, 600, n_test=600)
    y = comp.rows["toxic"].to_numpy()
    pred = 1 / (1 + np.exp(-(2 * y - 1 + np.random.default_rng(1).normal(0, 1.0, len(y)))))
    comp.experiment("x", pred, None)
    cv.run(comp.config("name=x"))
    need = (
        "  toxic rate by EM on the test predictions: needs `make predict`, then `make cv` (no fold's test predictions"
    )
    assert need in capsys.readouterr().out
    rng = np.random.default_rng(2)
    test_y = rng.random(len(ids_of_test(600))) < 0.2  # the test's comments drawn as the OOF's, at another rate
    tests = {k: 1 / (1 + np.exp(-(2 * test_y - 1 + rng.normal(0, 1.0, len(test_y))))) for k in range(5)}
    comp.experiment("x", pred, tests)
    cv.run(comp.config("name=x"))
    out = capsys.readouterr().out
    em = read_json(layout.experiment_dir(comp.config("name=x")) / layout.CV_JSON)["six"]["profile"]["em"]
    assert em["folds"] == 5 and sorted(em["rates"]) == ["es", "it", "tr"]  # fr, pt, ru: no stand-ins here
    assert all(0.1 < r < 0.3 for r in em["rates"].values()), em  # the test's 0.2, from 100 rows a language
    assert "  toxic rate by EM on the test predictions (Saerens et al. 2002; mean of 5 folds" in out
    assert f"es {em['rates']['es']:.3f} (" in out
    # the board scores the experiment as `make cv` does: with the EM rates in its profile (their range's corners)
    seen = []
    real = report.cv_summary
    monkeypatch.setattr(
        report, "cv_summary", lambda oof, done, profile=None: seen.append(profile) or real(oof, done, profile)
    )
    board.rows(comp.config("name=x"))
    assert [p["em"]["rates"] for p in seen if p and "em" in p] == [pytest.approx(em["rates"])]


def test_a_folds_test_predictions_count_only_as_made_by_its_kept_weights_and_intact(tmp_path: Path) -> None:
    from pipeline import layout
    from pipeline.files import file_record, write_csv, write_json
    from pipeline.scoring import report

    write_csv(tmp_path / layout.TEST_PREDS, pd.DataFrame({"id": ["a", "b"], "toxic": [0.1, 0.7]}))
    record = file_record(tmp_path / layout.TEST_PREDS)
    write_json(tmp_path / layout.DONE, {"digest": "d", "files": {layout.WEIGHTS: {"sha256": "w1"}}})
    write_json(tmp_path / layout.TEST_KEY, {"key": {"weights": "w1"}, "file": record})
    assert report.fold_test(tmp_path)["toxic"].tolist() == [0.1, 0.7]
    write_json(tmp_path / layout.TEST_KEY, {"key": {"weights": "w0"}, "file": record})  # trained again since
    assert report.fold_test(tmp_path) is None
    write_json(tmp_path / layout.TEST_KEY, {"key": {"weights": "w1"}, "file": record})
    write_csv(tmp_path / layout.TEST_PREDS, pd.DataFrame({"id": ["a", "b"], "toxic": [0.9, 0.7]}))  # edited
    assert report.fold_test(tmp_path) is None
    (tmp_path / layout.TEST_KEY).unlink()  # no record of it anywhere: not trusted
    assert report.fold_test(tmp_path) is None
