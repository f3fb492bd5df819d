"""`make blend`: rank-average weights fit on OOF, nested so that fold k's weights never see fold k."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import SCALE, make_cfg
from experiments import ids_of_test, sample_submission, validation, write_experiment

from pipeline import baseline, blend, config, data, metrics, predict
from pipeline.blend import BlendError
from pipeline.io import read_json

ROOT = Path(__file__).resolve().parents[1]


def cfg_for(tmp_path: Path, *overrides: str) -> config.Config:
    """A blend config whose models/, submissions/ and sample_submission.csv live under tmp_path."""
    sample_submission(tmp_path / "raw")
    return config.load(
        "sample",
        [
            f"models_dir={tmp_path / 'models'}",
            f"submissions_dir={tmp_path / 'subs'}",
            "data.source=dir",
            f"data.dir={tmp_path / 'raw'}",
            *overrides,
        ],
    )


def two_members(tmp_path: Path, n: int = 600) -> tuple[pd.DataFrame, dict]:
    """Members a and b: the label plus independent noise each (so their blend beats both), 90 test rows."""
    rows = validation(n)
    y = rows["toxic"].to_numpy()
    rng = np.random.default_rng(3)
    preds, tests = {}, {}
    for name in ("a", "b"):
        preds[name] = 1 / (1 + np.exp(-(2 * y - 1 + rng.normal(0, 1.3, n))))
        tests[name] = {k: rng.random(90) for k in range(5)}
        write_experiment(tmp_path / "models", name, rows, preds[name], tests[name])
    return rows, {"pred": preds, "test": tests}


# ---------------------------------------------------------------- weights


def test_fit_weights_on_the_simplex_and_better_than_each() -> None:
    rows = validation(900)
    y = rows["toxic"].to_numpy()
    rng = np.random.default_rng(0)
    ranks = np.column_stack([blend.rank01(y + rng.normal(0, 1, len(y))) for _ in range(3)])
    w = blend.fit_weights(ranks, y, 0.05)
    assert w.min() >= 0 and w.sum() == pytest.approx(1.0)
    assert metrics.auc(y, ranks @ w) > max(metrics.auc(y, ranks[:, j]) for j in range(3))
    assert blend.fit_weights(ranks[:, :1], y).tolist() == [1.0]  # one member: all the weight
    noise = np.column_stack([ranks[:, 0], blend.rank01(rng.random(len(y)))])
    assert blend.fit_weights(noise, y, 0.05)[1] < 0.2  # a member that is pure noise gets little


def test_rank01_scale() -> None:
    np.testing.assert_allclose(blend.rank01([0.3, 10.0, -1.0]), [0.5, 1.0, 0.0])


def test_fold_weights_do_not_depend_on_fold_k() -> None:
    """Leak test: scramble fold 2's labels and predictions; fold 2's weights stay, the others' change."""
    rows = validation(1000)
    y, folds = rows["toxic"].to_numpy(), rows["fold"].to_numpy()
    rng = np.random.default_rng(5)
    ranks = np.column_stack([blend.rank01(y + rng.normal(0, s, len(y))) for s in (0.8, 1.5)])
    before = blend.nested_weights(ranks, y, folds, 0.05)
    y2, ranks2 = y.copy(), ranks.copy()
    in2 = folds == 2
    y2[in2] = 1 - y2[in2]  # fold 2 now rewards the opposite order
    ranks2[in2, 1] = y2[in2]  # and member 1 is a perfect oracle there
    after = blend.nested_weights(ranks2, y2, folds, 0.05)
    np.testing.assert_array_equal(before[2], after[2])
    assert any(not np.array_equal(before[k], after[k]) for k in (0, 1, 3, 4))


def test_oracle_on_one_fold_gets_no_credit_for_it() -> None:
    """Leak test: member b is an oracle on fold 0 only (noise elsewhere). Weights fit on all OOF would
    count fold 0's rows and score clearly higher; the nested OOF must not."""
    rows = validation(1000)
    y, folds = rows["toxic"].to_numpy(), rows["fold"].to_numpy()
    rng = np.random.default_rng(1)
    a = y + rng.normal(0, 1.2, len(y))
    b = rng.random(len(y))
    b[folds == 0] = y[folds == 0] + 0.01 * rng.random(int((folds == 0).sum()))
    ranks = np.column_stack([blend.rank01(a), blend.rank01(b)])
    nested = blend.apply_weights(ranks, folds, blend.nested_weights(ranks, y, folds, 0.05))
    everywhere = ranks @ blend.fit_weights(ranks, y, 0.05)
    honest, leaky = metrics.auc(y, nested), metrics.auc(y, everywhere)
    assert leaky - honest > 0.04, (honest, leaky)
    fold0 = folds == 0
    assert metrics.auc(y[fold0], nested[fold0]) < metrics.auc(y[fold0], everywhere[fold0]) - 0.05


# ---------------------------------------------------------------- the stage


def test_blend_of_two_experiments(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rows, made = two_members(tmp_path)
    cfg = cfg_for(tmp_path, "blend.members=[a,b]")
    labels = pd.DataFrame({"id": ids_of_test(), "toxic": np.arange(90) % 3 - 1})  # -1: not scored
    labels.to_csv(tmp_path / "raw" / "test_labels.csv", index=False)
    summary = blend.run(cfg)
    out = capsys.readouterr().out
    exp = tmp_path / "models" / "a+b"
    cv = read_json(exp / "cv.json")
    y, folds = rows["toxic"].to_numpy(), rows["fold"].to_numpy()

    # the reported OOF is the nested one, recomputed here from the members' files and cv.json's fold weights
    ranks = np.column_stack([blend.rank01(made["pred"][n]) for n in ("a", "b")])
    fold_w = {int(k): np.array([w["a"], w["b"]]) for k, w in cv["blend"]["fold_weights"].items()}
    assert sorted(fold_w) == [0, 1, 2, 3, 4]
    expect = blend.apply_weights(ranks, folds, fold_w)
    assert cv["oof_auc"] == pytest.approx(metrics.auc(y, expect), abs=1e-3)  # weights are stored rounded
    assert cv["oof_auc"] == summary["oof_auc"] > max(cv["blend"]["member_oof_auc"].values())
    assert cv["oof_auc"] <= cv["blend"]["oof_auc_in_sample"]
    assert set(cv["per_lang"]) == {"es", "it", "tr"} and cv["rows"] == len(rows)
    assert cv["blend"]["members"] == ["a", "b"]
    assert sum(cv["blend"]["weights"].values()) == pytest.approx(1.0)
    assert cv["blend"]["member_digests"]["a"]["0"] == "a-digest"
    assert (exp / "cv.png").stat().st_size > 0

    # per fold: the blended OOF rows, the fold-k weights on the members' fold-k test predictions, done.json
    for k in range(5):
        done = read_json(exp / f"fold{k}" / "done.json")
        assert done["members"] == ["a", "b"] and done["weights"] == pytest.approx(fold_w[k].tolist())
        fold_test = pd.read_csv(exp / f"fold{k}" / "test.csv", dtype={"id": str})
        want = fold_w[k] @ np.vstack([blend.rank01(made["test"][n][k]) for n in ("a", "b")])
        np.testing.assert_allclose(fold_test["toxic"], want, atol=1e-4)
        assert len(pd.read_csv(exp / f"fold{k}" / "oof.csv")) == int((folds == k).sum())

    # the submission: all-OOF weights on each member's fold-ensembled test predictions, sample's order
    sub = pd.read_csv(tmp_path / "subs" / "a+b.csv", dtype={"id": str})
    assert list(sub["id"]) == list(ids_of_test()[::-1])
    w = np.array([cv["blend"]["weights"]["a"], cv["blend"]["weights"]["b"]])
    tests = [blend.rank01(predict.ensemble(list(made["test"][n].values()))) for n in ("a", "b")]
    np.testing.assert_allclose(sub.set_index("id").loc[ids_of_test(), "toxic"], w @ np.vstack(tests), atol=1e-4)
    scored = labels[labels["toxic"] >= 0].merge(sub, on="id")
    assert cv["test_auc"]["auc"] == pytest.approx(metrics.auc(scored["toxic_x"], scored["toxic_y"]))

    # printed: each member beside the blend, per language
    assert "OOF AUC" in out and all(f" {lg}" in out for lg in ("es", "it", "tr"))
    assert "\na " in out and "\nb " in out and "blend, nested (honest)" in out


def test_blend_name_and_refusals(tmp_path: Path) -> None:
    rows, _ = two_members(tmp_path)
    blend.run(cfg_for(tmp_path, "blend.members=[a,b]", "blend.name=mine"))
    assert (tmp_path / "models" / "mine" / "cv.json").exists() and (tmp_path / "subs" / "mine.csv").exists()

    with pytest.raises(BlendError, match="two or more"):
        blend.run(cfg_for(tmp_path, "blend.members=[a]"))
    with pytest.raises(BlendError, match="blend.step=0"):
        blend.run(cfg_for(tmp_path, "blend.members=[a,b]", "blend.step=0"))
    with pytest.raises(BlendError, match="member's name"):
        blend.run(cfg_for(tmp_path, "blend.members=[a,b]", "blend.name=a"))
    write_experiment(tmp_path / "models", "other", rows, rows["toxic"].to_numpy(), None)
    with pytest.raises(BlendError, match="holds an experiment"):  # its folder would be replaced
        blend.run(cfg_for(tmp_path, "blend.members=[a,b]", "blend.name=other"))
    assert (tmp_path / "models" / "other" / "fold0" / "oof.csv").exists()
    with pytest.raises(BlendError, match="'nope'.*make train"):
        blend.run(cfg_for(tmp_path, "blend.members=[a,nope]"))

    # a member whose folds cover other rows (another folds table, or folds missing)
    short = rows[rows["fold"] != 4]
    write_experiment(tmp_path / "models", "c", short, np.random.default_rng(0).random(len(short)), None)
    for k in range(4):
        (tmp_path / "models" / "c" / f"fold{k}" / "test.csv").write_text("id,toxic\n")
    with pytest.raises(BlendError, match="'c'.*OOF rows differ"):
        blend.run(cfg_for(tmp_path, "blend.members=[a,c]"))

    # a member without test predictions: the command that makes them
    write_experiment(tmp_path / "models", "d", rows, np.random.default_rng(0).random(len(rows)), None)
    with pytest.raises(BlendError, match=r"'d'.*test\.csv.*make predict"):
        blend.run(cfg_for(tmp_path, "blend.members=[a,d]"))
    write_experiment(tmp_path / "models", "e", rows, np.random.default_rng(0).random(len(rows)), None, model="tfidf+lr")
    with pytest.raises(BlendError, match=r"'e'.*make baseline"):
        blend.run(cfg_for(tmp_path, "blend.members=[e,a]"))


def test_main_reports_a_refusal_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    two_members(tmp_path)
    sample_submission(tmp_path / "raw")
    args = [f"models_dir={tmp_path / 'models'}", "data.source=dir", f"data.dir={tmp_path / 'raw'}"]
    assert blend.main([*args, "blend.members=a,missing"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: blend member 'missing'") and err.count("\n") == 1


def test_make_blend_passes_the_members() -> None:
    out = subprocess.run(
        ["make", "-n", "blend", "BLEND= exp1  exp2 ", "ARGS=blend.step=0.1"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    assert "-m pipeline.blend --config sample blend.members=exp1,exp2 blend.step=0.1" in out


def test_blend_of_two_baselines_on_the_sample(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """End to end on the stages' own files: two TF-IDF experiments on the sample, blended through main()."""
    common = [f"models_dir={tmp_path / 'models'}", f"submissions_dir={tmp_path / 'subs'}"]
    for name, negatives in (("wide", 300), ("narrow", 30)):
        cfg = make_cfg(tmp_path, f"name={name}", f"data.english_negatives={negatives}", *common)
        data.prepare(cfg, log=lambda *_: None)
        baseline.run(cfg)
    capsys.readouterr()
    args = [f"input_dir={tmp_path / 'input'}", f"data.sample_scale={SCALE}"]
    assert blend.main([*args, *common, "blend.members=wide-tfidf,narrow-tfidf"]) == 0
    out = capsys.readouterr().out
    assert "wide-tfidf" in out and "narrow-tfidf" in out and "blend, nested (honest)" in out
    sub = pd.read_csv(tmp_path / "subs" / "wide-tfidf+narrow-tfidf.csv", dtype={"id": str}, keep_default_na=False)
    sample = pd.read_csv(data.raw_dir(cfg) / data.SUBMISSION, dtype={"id": str}, keep_default_na=False)
    assert list(sub["id"]) == list(sample["id"]) and sub["toxic"].between(0, 1).all()
    cv = read_json(tmp_path / "models" / "wide-tfidf+narrow-tfidf" / "cv.json")
    assert cv["rows"] == len(data.load_table(cfg)[0].query("fold >= 0"))
