"""`make blend`: rank-average weights fit on OOF, nested so that fold k's weights never see fold k, written like
an experiment. The weights themselves (pipeline.scoring.blending) are tested in tests/scoring/test_blending.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import baseline, blend, config, data, layout
from pipeline.blend import BlendError
from pipeline.files import read_json
from pipeline.inputs import competition, tables
from pipeline.scoring import blending, metrics
from pipeline.scoring.submission import ensemble
from tests.helpers import SCALE, make_cfg
from tests.helpers.experiments import ids_of_test, sample_submission, validation, write_experiment

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
    ranks = np.column_stack([blending.rank01(made["pred"][n]) for n in ("a", "b")])
    fold_w = {int(k): np.array([w["a"], w["b"]]) for k, w in cv["blend"]["fold_weights"].items()}
    assert sorted(fold_w) == [0, 1, 2, 3, 4]
    expect = blending.apply_weights(ranks, folds, fold_w)
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
        want = fold_w[k] @ np.vstack([blending.rank01(made["test"][n][k]) for n in ("a", "b")])
        np.testing.assert_allclose(fold_test["toxic"], want, atol=1e-4)
        assert len(pd.read_csv(exp / f"fold{k}" / "oof.csv")) == int((folds == k).sum())

    # the submission: all-OOF weights on each member's fold-ensembled test predictions, sample's order
    sub = pd.read_csv(tmp_path / "subs" / "a+b.csv", dtype={"id": str})
    assert list(sub["id"]) == list(ids_of_test()[::-1])
    w = np.array([cv["blend"]["weights"]["a"], cv["blend"]["weights"]["b"]])
    tests = [blending.rank01(ensemble(list(made["test"][n].values()))) for n in ("a", "b")]
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
    sample = pd.read_csv(layout.raw_dir(cfg) / competition.SUBMISSION, dtype={"id": str}, keep_default_na=False)
    assert list(sub["id"]) == list(sample["id"]) and sub["toxic"].between(0, 1).all()
    cv = read_json(tmp_path / "models" / "wide-tfidf+narrow-tfidf" / "cv.json")
    assert cv["rows"] == len(tables.load_table(cfg)[0].query("fold >= 0"))
