"""AUC, overall and per language (pipeline.scoring.metrics)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.files import read_json, write_json
from pipeline.scoring import buckets, metrics

# ---------------------------------------------------------------- metrics


def test_auc_nan_on_one_class() -> None:
    assert math.isnan(metrics.auc([0, 0, 0], [0.1, 0.5, 0.9]))
    assert math.isnan(metrics.auc([1], [0.3]))
    assert metrics.auc([0, 1, 0, 1], [0.1, 0.9, 0.2, 0.8]) == 1.0
    assert metrics.auc([0, 1, 0, 1], [0.9, 0.1, 0.8, 0.2]) == 0.0
    assert metrics.auc([0, 1, 1, 0], [0.1, 0.4, 0.35, 0.8]) == 0.5


@pytest.mark.parametrize("weighted", [False, True])
def test_auc_is_sklearns_with_ties_and_weights(weighted: bool) -> None:
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(5)
    for rows in (7, 300, 5000):
        y = rng.integers(0, 2, rows)
        p = np.round(rng.random(rows) + 0.3 * y, 1)  # one decimal: many ties
        w = rng.random(rows) * 3 if weighted else None
        assert metrics.auc(y, p, w) == pytest.approx(roc_auc_score(y, p, sample_weight=w), abs=1e-12)
    with pytest.raises(ValueError):
        metrics.auc([0, 1, 0], [0.1, float("nan"), 0.3])  # refused as sklearn refuses it


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


def test_test_labels_that_are_not_labels_are_refused_naming_the_row(tmp_path) -> None:
    import pytest

    from pipeline.errors import DataError

    test = pd.DataFrame({"id": ["a", "b", "c"], "lang": ["es", "fr", "tr"]})
    preds = pd.DataFrame({"id": ["a", "b", "c"], "toxic": [0.1, 0.9, 0.4]})
    pd.DataFrame({"id": ["a", "b", "c"], "toxic": ["0", "1", "x"]}).to_csv(tmp_path / "test_labels.csv", index=False)
    with pytest.raises(DataError, match=r"test_labels.csv: column toxic has 1 value.*data row 3: 'x'"):
        metrics.test_score(tmp_path, test, preds)
    pd.DataFrame({"id": ["a", "b", "c"], "toxic": [0, 1, -1]}).to_csv(tmp_path / "test_labels.csv", index=False)
    assert metrics.test_score(tmp_path, test, preds)["rows"] == 2  # -1: left out of scoring


def test_the_fold_table_names_a_fold_judged_by_its_valid_auc_where_the_oof_has_a_six_language_one() -> None:
    """fr's held-out rows are clean in fold 1: the OOF has a 6-lang AUC, fold 1 none, and its evaluations were
    judged by its valid AUC (metrics.fold_score); the table says so, not only by a '-' in its column."""
    import numpy as np

    from pipeline.scoring import report

    rng, i = np.random.default_rng(0), np.arange(40)
    frames = []
    for lang, source in (("es", "validation"), ("it", "validation"), ("fr", "translated-train")):
        y = (i % 4 == 0) if lang == "fr" else (i % 3 == 0)  # fr's toxic rows: all in fold 0 (i % 2 == 0)
        frames.append(pd.DataFrame({"id": [f"{lang}{n}" for n in i], "lang": lang, "toxic": y.astype(int),
                                    "fold": i % 2, "source": source, "pred": y + rng.normal(0, 1, 40)}))  # fmt: skip
    oof = pd.concat(frames, ignore_index=True)
    mix = {"es": 0.3, "fr": 0.4, "it": 0.3}
    profile = {"mix": mix, "rates": dict.fromkeys(mix, 0.2), "rate_from": dict.fromkeys(mix, "validation.csv")}
    summary = report.cv_summary(oof, {0: {"metric": "six"}, 1: {"metric": "valid_auc"}}, profile)
    assert not math.isnan(summary["metrics"]["six"]) and math.isnan(summary["folds"][1]["six"])
    assert metrics.fold_score(oof[oof["fold"] == 1], oof.loc[oof["fold"] == 1, "pred"], profile)[0] == "valid_auc"
    lines = report.fold_table(summary).splitlines()
    assert (
        "best steps chosen by 6-lang AUC (fold 0); valid AUC (fold 1, no stand-in rows of both classes for fr)" in lines
    )
    # folds made before done.json named the metric: said so; every fold judged by the 6-lang AUC: nothing said
    old = report.fold_table({**summary, "fold_details": {0: {}, 1: {}}})
    assert "best steps chosen by AUC (folds 0, 1); AUC: made before folds named it" in old
    alike = report.fold_table({**summary, "fold_details": {0: {"metric": "six"}, 1: {"metric": "six"}}})
    assert "best steps chosen by" not in alike


def test_the_fold_table_of_a_cv_json_read_back_is_the_one_it_was_written_with(tmp_path) -> None:
    """fr's stand-in rows are all of one class: its AUC is NaN in memory, null in cv.json; both tables read '-'."""
    from pipeline.scoring import report

    rng, i = np.random.default_rng(0), np.arange(40)
    frames = [pd.DataFrame({"id": [f"{lang}{n}" for n in i], "lang": lang, "toxic": y.astype(int), "fold": i % 2,
                            "source": source, "pred": y + rng.normal(0, 1, 40)})
              for lang, source, y in (("es", "validation", i % 3 == 0), ("it", "validation", i % 3 == 0),
                                      ("fr", "translated-train", i < 0))]  # fmt: skip
    mix = {"es": 0.3, "fr": 0.4, "it": 0.3}
    profile = {"mix": mix, "rates": dict.fromkeys(mix, 0.2), "rate_from": dict.fromkeys(mix, "validation.csv")}
    summary = report.cv_summary(pd.concat(frames, ignore_index=True), {0: {}, 1: {}}, profile)
    write_json(tmp_path / "cv.json", summary)
    table = report.fold_table(summary)
    assert "(es 0.7857 fr - it 0.6923)" in table and report.fold_table(read_json(tmp_path / "cv.json")) == table


def six_language_oof(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    """Validation rows of es, it, tr and held-out translated rows of fr, pt, ru, predictions of varied quality."""
    rng = np.random.default_rng(seed)
    lang = np.array(["es", "it", "tr", "fr", "pt", "ru"])[rng.integers(0, 6, n)]
    source = np.where(np.isin(lang, ["es", "it", "tr"]), "validation", "translated-train")
    rate = np.where(source == "validation", 0.15, 0.5)
    y = (rng.random(n) < rate).astype(int)
    skill = pd.Series({"es": 2.0, "it": 1.5, "tr": 1.0, "fr": 2.5, "pt": 0.5, "ru": 1.0})[lang].to_numpy()
    return pd.DataFrame({"id": [f"r{i}" for i in range(n)], "lang": lang, "toxic": y, "fold": 0, "source": source,
                         "pred": 1 / (1 + np.exp(-(skill * y + rng.normal(size=n))))})  # fmt: skip


def test_the_estimates_range_moves_the_languages_without_validation_rows_over_plausible_rates() -> None:
    oof = six_language_oof()
    valid = oof[oof["source"] == "validation"].assign(toxic=lambda f: (f["lang"] == "it") * 1 | f["toxic"])
    profile = metrics.test_profile(valid, oof["lang"])
    guessed, low, high = metrics.prior_span(profile)
    assert guessed == ["fr", "pt", "ru"] and (low, high) == metrics.PRIOR_RATES
    spans = metrics.rate_spans(profile)
    assert sorted(spans) == ["es", "fr", "pt", "ru", "tr"]  # it: all toxic here, a rate without a standard error
    corners = metrics.six_corners(oof, profile)
    point = metrics.six_language(oof, profile)["auc"]
    assert len(corners) == 2**5 and min(corners) < point < max(corners)
    moved = {**profile, "rates": {**profile["rates"], "fr": high, "pt": low, "ru": low}}
    assert min(corners) <= metrics.six_language(oof, moved)["auc"] <= max(corners)
    every = {**profile, "rate_from": {g: metrics.FROM_VALIDATION for g in profile["mix"]}}
    assert metrics.six_corners(oof, every) is None  # nothing assumed, nothing to range over


def test_the_range_under_the_validation_rate_assumption_holds_the_estimate_at_other_plausible_rates() -> None:
    """OOFs whose languages differ in skill: the estimate with fr, pt, ru at rates outside validation.csv's
    languages' (0.107-0.195) and es, tr a standard error off their own stays inside the range it shows."""
    outside = 0
    for seed in range(4):
        oof = six_language_oof(seed=seed)
        valid = oof[oof["source"] == "validation"]
        profile = metrics.test_profile(valid, oof["lang"])
        corners = metrics.six_corners(oof, profile)
        se = profile["rate_se"]
        for fr, pt, ru in ((0.30, 0.07, 0.07), (0.07, 0.30, 0.30), (0.25, 0.25, 0.06)):
            rates = {**profile["rates"], "fr": fr, "pt": pt, "ru": ru,
                     "es": profile["rates"]["es"] + se["es"], "tr": profile["rates"]["tr"] - se["tr"]}  # fmt: skip
            value = metrics.six_language(oof, {**profile, "rates": rates})["auc"]
            outside += not min(corners) - 1e-12 <= value <= max(corners) + 1e-12
    assert outside == 0


def test_the_fold_table_shows_the_estimates_range_and_what_the_best_steps_would_read() -> None:
    from pipeline.scoring import report

    oof = six_language_oof()
    oof["fold"] = np.arange(len(oof)) % 2
    oof["best"] = np.clip(oof["pred"] + 0.05 * oof["toxic"], 0, 1)  # the step chosen on these rows reads higher
    valid = oof[oof["source"] == "validation"]
    profile = metrics.test_profile(valid, oof["lang"])
    summary = report.cv_summary(oof, {0: {"epochs": 1}, 1: {"epochs": 1}}, profile)
    low, high = summary["six"]["range"]
    six, best = summary["metrics"][metrics.SIX.key], summary["best_step"][metrics.SIX.key]
    assert low < six < high and best > six
    table = report.fold_table(summary)
    _, lo_rate, hi_rate = metrics.prior_span(profile)
    assert (f"  from {low:.4f} to {high:.4f}: the range under the validation-rate assumption (fr, pt, ru at any "
            f"toxic rate from {lo_rate:.3f} to {hi_rate:.3f}, es, it, tr within 2 standard errors of their "
            "validation.csv rate); the test's own rates are not known") in table  # fmt: skip
    assert (
        f"6-lang AUC {best:.4f} with each fold's best step, chosen on the rows it is scored on "
        f"({best - six:+.4f}); the folds and the OOF above take each half of a fold at the step its other half chose"
    ) in table


# ---------------------------------------------------------------- length in the weights


def test_length_weights_keep_the_class_margins_and_take_the_tests_length_margins() -> None:
    from tests.helpers import lengths

    oof, test = lengths.oof_and_test(0, test_rows=20_000)
    profile = metrics.test_profile(oof[oof["source"] == "validation"], test["lang"], test["tokens"])
    w = metrics.row_weights(oof, profile)
    bucket = buckets.length_buckets(oof["tokens"])
    for lang, share in profile["mix"].items():
        at = (oof["lang"] == lang).to_numpy()
        toxic = at & (oof["toxic"] == 1).to_numpy()
        assert w[toxic].sum() == pytest.approx(share * profile["rates"][lang], rel=1e-6)
        assert w[at & ~toxic].sum() == pytest.approx(share * (1 - profile["rates"][lang]), rel=1e-6)
        got = np.bincount(bucket[at], weights=w[at], minlength=5) / share
        assert got == pytest.approx(profile["lengths"][lang], abs=1e-6)  # every bucket holds 10 rows a class here
    # rows without counts (folds, tables prepared before lengths.csv): the language and class weights of before
    plain = metrics.row_weights(oof.drop(columns="tokens"), profile)
    assert np.allclose(plain, metrics.row_weights(oof, metrics.without_lengths(profile)))
    assert not np.allclose(plain, w)


def test_a_length_bucket_with_too_few_rows_of_a_class_merges_into_its_neighbour() -> None:
    counts = np.array([[50, 40, 30, 20, 3], [200, 150, 100, 60, 5]])  # 3 toxic rows over 128 tokens
    assert buckets.merged_buckets(counts).tolist() == [0, 1, 2, 3, 3]
    thin_start = np.array([[2, 40, 30, 20, 30], [9, 150, 100, 60, 50]])
    assert buckets.merged_buckets(thin_start).tolist() == [0, 0, 1, 2, 3]
    assert buckets.merged_buckets(np.array([[1, 2, 1, 0, 1], [5, 5, 5, 5, 5]])).tolist() == [0] * 5
    # the merged bucket takes the test's share of both: its rows carry 0.2 + 0.3 of the language
    y = np.r_[np.ones(60), np.zeros(200)].astype(bool)
    b = np.r_[np.repeat([0, 1, 2, 3], 15), np.repeat([0, 1, 2, 3], 48), np.full(8, 4)]
    b[56:60] = 4  # 4 toxic rows over 128 tokens
    w = buckets.language_weights(y, b, 1.0, 0.2, [0.2, 0.2, 0.1, 0.2, 0.3])
    assert w[(b == 3) | (b == 4)].sum() == pytest.approx(0.5) and w[y].sum() == pytest.approx(0.2)


def test_the_estimate_with_length_reads_near_the_truth_where_the_class_weights_read_high() -> None:
    """Stand-ins far shorter than the test, a model worse on the long rows: the language and class weights
    read high, the length-aware ones near the true pooled AUC."""
    from tests.helpers import lengths

    errors = np.array([lengths.errors(seed)[1:] for seed in range(6)])
    without, with_length = errors.mean(axis=0)
    assert without > 0.015
    assert abs(with_length) < 0.006


def test_cv_json_and_the_fold_table_show_what_length_did() -> None:
    from pipeline.scoring import report
    from tests.helpers import lengths

    oof, test = lengths.oof_and_test(1, test_rows=30_000)
    profile = metrics.test_profile(oof[oof["source"] == "validation"], test["lang"], test["tokens"])
    summary = report.cv_summary(oof, {k: {"epochs": 1, "metric": "six"} for k in range(5)}, profile)
    got = summary["six"]["lengths"]
    assert got["without"] == pytest.approx(metrics.six_language(oof, metrics.without_lengths(profile))["auc"])
    assert summary["metrics"]["six"] < got["without"]  # the long rows the stand-ins lack are the hard ones
    assert got["rows"]["fr"][-1] < 0.05 < got["test"]["fr"][-1]
    assert got["ess"]["ru"]["toxic"] < got["ess_without"]["ru"]["toxic"] == (oof[oof["lang"] == "ru"]["toxic"]).sum()
    assert list(got["valid_by_bucket"]) == ["<=32", "33-64", "65-96", "97-128", ">128"]
    assert got["valid_by_bucket"][">128"] < got["valid_by_bucket"]["<=32"]
    table = report.fold_table(summary)
    assert f"  without length {got['without']:.4f} (" in table
    assert "  valid AUC per token bucket (validation.csv's rows): <=32 " in table
    ess = got["ess"]["ru"]
    assert f"    ru {' '.join(f'{v:.3f}' for v in got['test']['ru'])} / " in table
    assert f"; {ess['toxic']:.0f}, {ess['clean']:.0f} (" in table


def test_the_synthetic_stand_ins_fill_every_length_bucket_of_the_test() -> None:
    """Every bucket holds 10 rows of a class of every language's stand-ins: the test's length mix matched whole."""
    from pipeline.scoring import report
    from tests.helpers import lengths

    oof, test = lengths.oof_and_test(1, test_rows=30_000)
    profile = metrics.test_profile(oof[oof["source"] == "validation"], test["lang"], test["tokens"])
    summary = report.cv_summary(oof, {k: {"epochs": 1, "metric": "six"} for k in range(5)}, profile)
    assert summary["six"]["lengths"]["unmatched"] == pytest.approx(dict.fromkeys(profile["mix"], 0.0), abs=1e-4)
    table = report.fold_table(summary)
    assert "its toxic rate there and its length mix" in table and "not matched" not in table


def test_cv_says_which_languages_test_length_mix_has_no_stand_ins_and_records_it(tmp_path: Path, capsys) -> None:
    """es's stand-ins (validation.csv's rows) are all at most 64 tokens long, while half its test rows are over
    128: no weighting gives those rows' share to rows of their length, and `make cv` says so, naming es and the
    share of its test rows left unmatched, in cv.json too, rather than claiming the length mix. it and tr, their
    stand-ins as long as their test rows, are matched."""
    from pipeline import cv, layout
    from tests.helpers.experiments import Competition, write_lengths

    comp = Competition(tmp_path, 600)
    three = {"mix": {"es": 0.5, "it": 0.3, "tr": 0.2}, "rates": {"es": 0.3, "it": 0.1, "tr": 0.2},
             "rate_from": dict.fromkeys(("es", "it", "tr"), metrics.FROM_VALIDATION)}  # fmt: skip
    y = comp.rows["toxic"].to_numpy()
    comp.experiment("x", y + np.random.default_rng(1).normal(0, 1.0, len(y)), None, profile=three)

    def count(split: str, rows: pd.DataFrame) -> np.ndarray:
        every_other = rows.groupby("lang").cumcount().to_numpy() % 2  # of each language's rows
        es = np.where(every_other, 50, 20 if split == "train" else 150)  # 33-64, and <=32 or >128
        return np.where(rows["lang"] == "es", es, 40)

    cfg = comp.config("name=x")
    write_lengths(layout.prepared_dir(cfg), count)
    test = pd.read_csv(layout.prepared_dir(cfg) / layout.TEST_TABLE, dtype={"id": str}, keep_default_na=False)
    long = float((count("test", test)[test["lang"] == "es"] > 128).mean())  # the share of es's test rows over 128
    cv.run(cfg)
    out = capsys.readouterr().out
    got = read_json(layout.experiment_dir(cfg) / layout.CV_JSON)["six"]["lengths"]["unmatched"]
    assert got["es"] == pytest.approx(long, abs=1e-4) and 0.4 < long < 0.6
    assert got["it"] == pytest.approx(0.0, abs=1e-4) and got["tr"] == pytest.approx(0.0, abs=1e-4)
    assert "its toxic rate there and, in part, its length mix (not matched: below)" in out
    assert f"  length mix not matched for es ({long:.3f} of its test rows): token buckets with no stand-in" in out
    assert "its toxic rate there and its length mix" not in out


def test_the_brier_score_is_of_the_kept_models_probabilities_not_the_halves_of_two_steps() -> None:
    rows = pd.DataFrame({"toxic": [0, 1, 0, 1], "source": "validation", "pred": [0.9, 0.1, 0.2, 0.8],
                         "best": [0.1, 0.9, 0.2, 0.8]})  # fmt: skip
    assert metrics.valid_brier(rows) == pytest.approx(np.mean([0.01, 0.01, 0.04, 0.04]))
    assert metrics.valid_brier(rows.drop(columns="best")) == pytest.approx(np.mean([0.81, 0.81, 0.04, 0.04]))


# ---------------------------------------------------------------- the class x length link of the translated rows


def linked_profile(seed: int = 1, test_rows: int = 30_000):
    from tests.helpers import lengths

    oof, test = lengths.oof_and_test(seed, test_rows=test_rows, linked=True)
    valid = oof[oof["source"] == "validation"]
    return oof, metrics.test_profile(valid, test["lang"], test["tokens"], valid["tokens"])


def test_the_translated_languages_are_seeded_with_validation_csvs_link_the_real_ones_with_their_own() -> None:
    oof, profile = linked_profile()
    assert profile["valid_lengths"] == buckets.class_length_counts(
        oof.loc[oof["source"] == "validation", "toxic"], oof.loc[oof["source"] == "validation", "tokens"]
    )
    seeded, own = metrics.row_weights(oof, profile), metrics.row_weights(oof, {**profile, "valid_lengths": None})
    real = (oof["source"] == "validation").to_numpy()
    assert np.allclose(seeded[real], own[real])
    for lang in ("fr", "pt", "ru"):
        at = (oof["lang"] == lang).to_numpy()
        assert not np.allclose(seeded[at], own[at])
        assert seeded[at].sum() == pytest.approx(own[at].sum())


def test_validation_csvs_link_shrinks_the_error_where_the_translations_link_class_and_length_otherwise() -> None:
    """The test's and validation.csv's toxic rows are a little shorter than their clean ones, the translated
    stand-ins' longer (tests/helpers/lengths.py, linked): seeded with their own link, the long toxic rows the
    model is worst on weigh too much and the estimate reads low; with validation.csv's, near the truth."""
    from tests.helpers import lengths

    errors = np.array([lengths.seed_errors(seed) for seed in range(10)])
    own, seeded = errors.mean(axis=0)
    rmse_own, rmse_seeded = np.sqrt((errors**2).mean(axis=0))
    assert own < -0.005 and abs(seeded) < 0.7 * abs(own)  # measured: -0.0075 and +0.0047
    assert rmse_seeded < 0.75 * rmse_own  # measured: 0.0102 and 0.0061


def test_the_fold_table_says_where_the_translated_languages_link_came_from() -> None:
    from pipeline.scoring import report

    oof, profile = linked_profile()
    done = {k: {"epochs": 1, "metric": "six"} for k in range(5)}
    summary = report.cv_summary(oof, done, profile)
    assert summary["six"]["lengths"]["translated"] == ["fr", "pt", "ru"]
    assert "  fr, pt, ru: class x length link of validation.csv's comments, not their translated rows'" in (
        report.fold_table(summary)
    )
    old = report.cv_summary(oof, done, {k: v for k, v in profile.items() if k != "valid_lengths"})
    assert "  fr, pt, ru: class x length link of their own translated rows, as before validation.csv's rows were " in (
        report.fold_table(old)
    )
    assert old["metrics"]["six"] != summary["metrics"]["six"]


def test_a_language_weighted_without_length_is_named_with_why() -> None:
    """A stand-in row of pt without a token count: pt's rows keep the class weights alone, and `make cv`'s table
    and cv.json say so rather than claim pt's length mix."""
    from pipeline.scoring import report

    oof, profile = linked_profile()
    pt = np.flatnonzero((oof["lang"] == "pt").to_numpy())
    oof.loc[pt[:3], "tokens"] = np.nan
    assert metrics.length_gaps(oof, profile) == {"pt": "3 of its 2000 stand-in rows have no token count"}
    summary = report.cv_summary(oof, {k: {"epochs": 1, "metric": "six"} for k in range(5)}, profile)
    assert summary["six"]["lengths"]["without_length"] == {"pt": "3 of its 2000 stand-in rows have no token count"}
    assert ("  weighted without length (language and class only): pt (3 of its 2000 stand-in rows have no token "
            "count)") in report.fold_table(summary)  # fmt: skip
    assert metrics.length_gaps(oof, {**profile, "lengths": {g: v for g, v in profile["lengths"].items() if g != "ru"}}
                               ) == {"pt": "3 of its 2000 stand-in rows have no token count",
                                     "ru": "its test rows have no token counts"}  # fmt: skip
    whole, _ = linked_profile()
    assert metrics.length_gaps(whole, profile) == {}
    assert "weighted without length" not in report.fold_table(report.cv_summary(whole, {0: {}}, profile))


def test_a_prepared_folders_profile_carries_validation_csvs_class_x_length_counts(tmp_path: Path) -> None:
    """lengths.csv's counts of validation.csv's rows, with folds.csv's labels: in the profile every stage reads,
    and added to one recorded before they were counted (as the test's length mix is)."""
    from pipeline import layout
    from tests.helpers.experiments import Competition, write_lengths

    comp = Competition(tmp_path, 300)
    prepared = layout.prepared_dir(comp.cfg)

    def count(split: str, rows: pd.DataFrame) -> np.ndarray:  # 10 to 213 tokens, by the row's id
        return 10 + 7 * (rows["id"].str[1:].astype(int).to_numpy() % 30)

    write_lengths(prepared, count)
    table = pd.read_csv(prepared / layout.TABLE, dtype={"id": str}, keep_default_na=False)
    valid = table[(table["source"] == "validation") & (table["fold"] >= 0)]  # the rows lengths.csv counts
    want = buckets.class_length_counts(valid["toxic"], count("train", valid))
    got = metrics.read_profile(comp.cfg)["valid_lengths"]
    assert got == want and sum(got["toxic"]) == valid["toxic"].sum() and sum(got["clean"]) > 0
    recorded = {k: v for k, v in metrics.read_profile(comp.cfg).items() if k != "valid_lengths"}
    assert metrics.with_test_lengths(recorded, prepared)["valid_lengths"] == want


def oof_of_two_sources() -> pd.DataFrame:
    """es and it rows of validation.csv and es rows of held-out translated-train, each ordered differently."""
    rng, i = np.random.default_rng(4), np.arange(60)
    frames = []
    for lang, source, noise in (("es", "validation", 0.5), ("it", "validation", 1.0), ("es", "translated-train", 3.0)):
        y = (i % 3 == 0).astype(int)
        frames.append(pd.DataFrame({"lang": lang, "toxic": y, "source": source, "pred": y + rng.normal(0, noise, 60)}))
    return pd.concat(frames, ignore_index=True)


def test_per_language_without_a_profile_reads_validation_rows_only() -> None:
    oof = oof_of_two_sources()
    valid = oof[oof["source"] == "validation"]
    expected = metrics.auc_by_lang(valid["toxic"], valid["pred"], valid["lang"])
    assert metrics.per_language(oof, None) == expected
    assert expected["es"] != metrics.auc_by_lang(oof["toxic"], oof["pred"], oof["lang"])["es"]
    # an OOF written before held-out rows existed has no source: every row is validation.csv's
    alone = oof.drop(columns="source")
    assert metrics.on_validation(alone).dtype == bool and metrics.on_validation(alone).all()
    assert metrics.per_language(alone, None) == metrics.auc_by_lang(oof["toxic"], oof["pred"], oof["lang"])


def test_figures_are_of_the_profile_and_the_scale_they_are_given() -> None:
    """The six-language AUC weighs languages as the profile says; on a rank scale the probability metrics are
    not there."""
    oof = oof_of_two_sources()
    mix = {"es": 0.5, "it": 0.5}
    profile = {"mix": mix, "rates": dict.fromkeys(mix, 0.3), "rate_from": dict.fromkeys(mix, "validation.csv")}
    tilted = {**profile, "mix": {"es": 0.9, "it": 0.1}}
    probs = oof.assign(pred=1 / (1 + np.exp(-oof["pred"])))
    even, other = metrics.figures(probs, profile, "probability"), metrics.figures(probs, tilted, "probability")
    assert even["six"] != other["six"] and even["per_lang"] == metrics.six_language(probs, profile)["per_lang"]
    ranked = metrics.figures(probs, profile, "rank")
    nans = {k for k, v in ranked.items() if isinstance(v, float) and math.isnan(v)}
    assert nans and not {k for k in nans if isinstance(even[k], float) and math.isnan(even[k])}


def test_the_test_score_is_the_auc_of_the_labelled_rows_overall_and_per_language(tmp_path) -> None:
    from pipeline.errors import PipelineError

    test = pd.DataFrame({"id": list("abcdef"), "lang": ["es", "es", "es", "fr", "fr", "fr"]})
    preds = pd.DataFrame({"id": list("fedcba"), "toxic": [0.9, 0.2, 0.6, 0.3, 0.8, 0.1]})
    pd.DataFrame({"id": list("abcdef"), "toxic": [0, 1, 0, 1, 0, 1]}).to_csv(tmp_path / "test_labels.csv", index=False)
    score = metrics.test_score(tmp_path, test, preds)
    p = preds.set_index("id").loc[list("abcdef"), "toxic"].to_numpy()  # each id's own prediction
    assert score["auc"] == metrics.auc([0, 1, 0, 1, 0, 1], p)
    assert score["per_lang"] == metrics.auc_by_lang([0, 1, 0, 1, 0, 1], p, test["lang"])
    assert score["rows"] == 6
    with pytest.raises(PipelineError, match=r"test_labels.csv: no id in common with the test table$"):
        metrics.test_score(tmp_path, test.assign(id=list("uvwxyz")), preds)


def test_a_class_whose_rows_all_weigh_nothing_has_no_auc() -> None:
    """As sklearn says it (NaN): the weights leave no positive (or no negative) row to rank."""
    y, p = np.array([0, 1, 0, 1]), np.array([0.1, 0.9, 0.3, 0.2])
    with pytest.warns(Warning):
        assert math.isnan(metrics.auc(y, p, np.array([1.0, 0.0, 1.0, 0.0])))
    with pytest.warns(Warning):
        assert math.isnan(metrics.auc(y, p, np.array([0.0, 1.0, 0.0, 1.0])))


def test_a_language_stands_in_with_its_validation_rows_where_it_has_them_else_its_held_out_rows() -> None:
    oof = pd.concat(
        [
            oof_of_two_sources(),
            pd.DataFrame({"lang": "fr", "toxic": [0, 1], "source": "translated-train", "pred": 0.5}),
        ],
        ignore_index=True,
    )
    keep = metrics.stand_in_mask(oof, ["es", "fr"])
    expected = ((oof["lang"] == "es") & (oof["source"] == "validation")) | (oof["lang"] == "fr")
    np.testing.assert_array_equal(keep, expected.to_numpy())


def test_a_folds_own_figure_names_its_metric_and_says_its_step_was_chosen_on_its_rows() -> None:
    own = "with its best step, chosen on the rows it is scored on"
    assert metrics.fold_own({"metric": "six", "auc": 0.912345}) == f"6-lang AUC 0.9123 {own}"
    assert metrics.fold_own({"auc": 0.8}) == f"AUC 0.8000 {own}"  # a record made before it named its metric
    halves = metrics.fold_own({"metric": "valid_auc", "auc": 0.8, "held_out_steps": [3, 5]})
    assert halves == f"valid AUC 0.8000 {own}; the fold table's takes each half at the step its other half chose"
    assert metrics.fold_own({"metric": "valid_auc", "auc": 0.8, "held_out_steps": []}) == f"valid AUC 0.8000 {own}"


def test_a_cv_jsons_figures_are_its_metrics_or_what_it_recorded_under_the_old_keys() -> None:
    assert metrics.saved_figures(None) == {} and metrics.saved_figures([0.9]) == {}
    assert metrics.saved_figures({"metrics": {"six": 0.9}, "oof_auc": 0.7}) == {"six": 0.9}
    old = {"six": {"auc": 0.9, "missing": []}, "oof_auc": 0.8}
    assert metrics.saved_figures(old) == {"six": 0.9, "valid_auc": 0.8}
    # the old estimate over fewer languages than the test's is not the six-language AUC
    assert metrics.saved_figures({**old, "six": {"auc": 0.9, "missing": ["fr"]}}) == {"valid_auc": 0.8}
    assert metrics.saved_figures({**old, "six": {"auc": 0.9}}) == {"valid_auc": 0.8}
    assert metrics.saved_figures({"six": 0.9, "oof_auc": None, "metrics": [1]}) == {}


def test_an_experiment_is_ranked_by_the_first_figure_it_has() -> None:
    six, valid = metrics.SIX, metrics.BY_KEY["valid_auc"]
    assert metrics.headline({"six": 0.9, "valid_auc": 0.8}) == (six, 0.9)
    assert metrics.headline({"six": math.nan, "valid_auc": 0.8}) == (valid, 0.8)
    assert metrics.headline({"six": None, "valid_auc": 1}) == (valid, 1.0)
    assert type(metrics.headline({"valid_auc": 1})[1]) is float
    assert metrics.headline({"brier": 0.1}) is None and metrics.headline(None) is None


def test_a_prepared_folders_profile_is_of_its_validation_rows_and_its_test_languages(tmp_path: Path) -> None:
    from pipeline import layout

    table = pd.DataFrame(
        {
            "id": [f"v{i}" for i in range(8)],
            "lang": ["es", "es", "es", "es", "tr", "tr", "en", "en"],
            "toxic": [1, 0, 0, 0, 1, 1, 1, 1],
            "source": ["validation"] * 6 + ["translated-train"] * 2,
        }
    )
    test = pd.DataFrame({"id": ["t0", "t1", "t2", "t3"], "lang": ["es", "es", "tr", "fr"]})
    assert metrics.folder_profile(tmp_path) is None  # no tables
    table.to_csv(tmp_path / layout.TABLE, index=False)
    assert metrics.folder_profile(tmp_path) is None  # no test table
    test.to_csv(tmp_path / layout.TEST_TABLE, index=False)
    profile = metrics.folder_profile(tmp_path)
    assert profile == metrics.test_profile(table[table["source"] == "validation"], test["lang"])
    assert profile["rates"] == {"es": 0.25, "fr": 0.5, "tr": 1.0}  # fr: the prior, of validation.csv's rows only
    assert "lengths" not in profile and "valid_lengths" not in profile  # no lengths.csv


def test_the_estimates_range_takes_in_ems_rate_of_each_test_language_and_of_no_other() -> None:
    profile = {
        "mix": {"es": 0.4, "it": 0.3, "fr": 0.3},
        "rates": {"es": 0.2, "it": 0.1, "fr": 0.15},
        "rate_from": {"es": "validation.csv", "it": "validation.csv", "fr": "prior"},
        "rate_se": {"es": 0.01, "fr": 0.0},  # it: none recorded, its span is its rate alone
        "em": {"rates": {"es": 0.3, "it": 0.05, "fr": 0.5, "pt": 0.1, "tr": math.nan}},
    }
    spans = metrics.rate_spans(profile)
    assert spans == {"fr": (0.05, 0.5), "es": (pytest.approx(0.18), 0.3), "it": (0.05, 0.1)}
    inside = {**profile, "em": {"rates": {"es": 0.2}}}  # EM's rate inside the span: the span as it was
    assert metrics.rate_spans(inside)["es"] == (pytest.approx(0.18), pytest.approx(0.22))


def test_the_estimate_of_no_stand_in_rows_is_nan() -> None:
    oof = pd.DataFrame({"lang": "de", "toxic": [0, 1], "source": "validation", "pred": [0.2, 0.8]})
    six = metrics.six_language(oof, {"mix": {"es": 1.0}, "rates": {"es": 0.2}})
    assert math.isnan(six["auc"]) and six["rows"] == 0 and six["missing"] == ["es"]


def test_effective_sizes_are_of_the_rows_weights_to_one_decimal(monkeypatch) -> None:
    oof = pd.DataFrame({"lang": "es", "toxic": [1, 1, 1, 0], "source": "validation", "pred": 0.5})
    monkeypatch.setattr(metrics, "row_weights", lambda rows, profile: np.array([1.0, 2.0, 2.0, 0.0]))
    # toxic: 5^2 / 9 = 2.78; the clean row weighs nothing
    assert metrics.effective_sizes(oof, {"mix": {"es": 1.0}}) == {"es": {"toxic": 2.8, "clean": 0.0}}


def test_no_language_lacks_lengths_where_the_profile_has_no_test_lengths() -> None:
    oof = oof_of_two_sources().assign(tokens=np.nan)
    profile = {"mix": {"es": 0.5, "it": 0.5}, "rates": {"es": 0.3, "it": 0.3}}
    assert metrics.length_gaps(oof, profile) == {}
    assert metrics.length_gaps(oof, {**profile, "lengths": {"es": [1.0]}}) != {}


def test_a_fold_is_judged_by_the_six_language_auc_where_its_rows_stand_for_every_test_language() -> None:
    oof = oof_of_two_sources()
    rows, preds = oof.drop(columns="pred"), oof["pred"].to_numpy()
    mix = {"es": 0.5, "it": 0.5}
    profile = {"mix": mix, "rates": dict.fromkeys(mix, 0.3)}
    six = metrics.six_language(oof, profile)
    assert metrics.fold_score(rows, preds, profile) == ("six", six["auc"], six["per_lang"])
    # fr's held-out rows of one class: fr is missing, the fold is judged by its validation AUC
    fr = pd.DataFrame({"lang": "fr", "toxic": [0, 0], "source": "translated-train", "pred": [0.1, 0.2]})
    more = pd.concat([oof, fr], ignore_index=True)
    wider = {"mix": {**mix, "fr": 0.2}, "rates": dict.fromkeys([*mix, "fr"], 0.3)}
    key, value, per_lang = metrics.fold_score(more.drop(columns="pred"), more["pred"].to_numpy(), wider)
    assert (key, value) == ("valid_auc", metrics.valid_auc(more))
    want = metrics.six_language(more, wider)["per_lang"]  # fr's NaN, which equals nothing: compared apart
    assert list(per_lang) == ["es", "fr", "it"] and math.isnan(per_lang.pop("fr"))
    assert per_lang == {k: v for k, v in want.items() if k != "fr"}
    assert metrics.fold_score(rows, preds, None) == (
        "valid_auc",
        metrics.valid_auc(oof),
        metrics.per_language(oof, None),
    )
    # a fr specialist's fold: held-out translations alone, no validation.csv row to take a valid AUC of
    fr = pd.DataFrame({"lang": "fr", "toxic": [0, 1, 0, 1], "source": "translated-train", "pred": [0.1, 0.7, 0.3, 0.2]})
    key, value, _ = metrics.fold_score(fr.drop(columns="pred"), fr["pred"].to_numpy(), wider)
    assert (key, value) == ("auc", 0.75)


def test_a_prepared_folders_validation_counts_are_of_its_validation_rows_by_their_ids(tmp_path: Path) -> None:
    from pipeline import layout

    ids = ["001", "002", "003", "004", "005"]  # ids that read as numbers lose their zeros unless read as text
    table = pd.DataFrame(
        {"id": ids, "lang": "es", "toxic": [1, 0, 0, 1, 1], "source": ["validation"] * 4 + ["translated-train"]}
    )
    table.to_csv(tmp_path / layout.TABLE, index=False)
    lengths = pd.DataFrame(
        {
            "split": ["train"] * 6,
            "id": [*ids, "001"],  # a second count of one row: its first is the one read
            "source": ["validation"] * 4 + ["translated-train", "validation"],
            "lang": "es",
            "tokens": [20, 300, 40, 500, 20, 700],
        }
    )
    got = metrics.valid_counts(tmp_path, lengths)
    assert got == buckets.class_length_counts([1, 0, 0, 1], [20, 300, 40, 500])
    assert metrics.valid_counts(tmp_path, lengths[lengths["source"] != "validation"]) is None


def test_a_profiles_own_test_lengths_are_kept_over_lengths_csvs(tmp_path: Path) -> None:
    from pipeline import layout

    pd.DataFrame({"split": "test", "id": ["t1", "t2"], "source": "test", "lang": "es", "tokens": [10, 900]}).to_csv(
        tmp_path / layout.LENGTHS, index=False
    )
    recorded = {"mix": {"es": 1.0}, "rates": {"es": 0.2}, "lengths": {"es": [1.0]}}
    assert metrics.with_test_lengths(recorded, tmp_path)["lengths"] == {"es": [1.0]}
    bare = {"mix": {"es": 1.0}, "rates": {"es": 0.2}}
    assert metrics.with_test_lengths(bare, tmp_path)["lengths"] == buckets.length_mix(["es", "es"], [10, 900])


def test_a_languages_toxic_rate_is_counted_in_float64_whatever_the_labels_dtype() -> None:
    valid = pd.DataFrame({"lang": "es", "toxic": np.array([1, 0, 0], dtype=np.float32)})
    assert metrics.test_profile(valid, ["es"])["rates"] == {"es": 1 / 3}  # float32's 1/3 is 0.33333334
