"""`make baseline`: TF-IDF on the same folds, laid out like a trained experiment (OOF and test per fold)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import baseline, blend, data
from pipeline.errors import PipelineError
from pipeline.files import read_json
from pipeline.inputs import tables
from pipeline.scoring import metrics
from tests.helpers import make_cfg

# the fields a trained fold's done.json has that mean something for a model fitted once
TRAINED_FIELDS = {"fold", "digest", "epochs", "best_epoch", "auc", "auc_per_lang", "minutes"}


def quiet(*_args) -> None:
    pass


def cfg_at(tmp_path: Path, *overrides: str):
    return make_cfg(tmp_path, "data.english_negatives=60", f"models_dir={tmp_path / 'models'}",
                    f"submissions_dir={tmp_path / 'subs'}", *overrides)  # fmt: skip


@pytest.fixture
def prepared(tmp_path: Path) -> Path:
    data.prepare(cfg_at(tmp_path), log=quiet)
    return tmp_path


def test_baseline_writes_folds_like_an_experiment(prepared: Path, capsys: pytest.CaptureFixture) -> None:
    cfg = cfg_at(prepared)
    summary = baseline.run(cfg)
    table, test, _ = tables.load_table(cfg)
    exp = Path(cfg.models_dir) / f"{cfg.name}-tfidf"
    assert summary["oof_auc"] > 0.7  # the sample's toxic words are easy for character n-grams
    assert (exp / "cv.json").exists() and (exp / "cv.png").exists()
    for k in range(cfg.data.folds):
        fold = exp / f"fold{k}"
        done = read_json(fold / "done.json")
        assert TRAINED_FIELDS <= set(done) and done["fold"] == k and done["model"] == baseline.MODEL
        assert set(done["auc_per_lang"]) == set(table.loc[table["fold"] == k, "lang"])
        preds = pd.read_csv(fold / "test.csv", dtype={"id": str}, keep_default_na=False)
        assert list(preds.columns) == ["id", "toxic"] and list(preds["id"]) == list(test["id"])
        assert preds["toxic"].between(0, 1).all()
        oof = pd.read_csv(fold / "oof.csv")
        assert len(oof) == int((table["fold"] == k).sum())
    folds = [pd.read_csv(exp / f"fold{k}" / "test.csv")["toxic"] for k in range(cfg.data.folds)]
    assert not np.allclose(folds[0], folds[1])  # each fold's own model, not one copied

    # a submission like every experiment's: the folds' mean, scored on the public test labels
    sub = pd.read_csv(Path(cfg.submissions_dir) / f"{exp.name}.csv", dtype={"id": str}, keep_default_na=False)
    assert np.allclose(sub.set_index("id").loc[test["id"], "toxic"], np.mean(folds, axis=0))
    raw = Path(tables.load_table(cfg)[2]["raw"])
    assert read_json(exp / "cv.json")["test_auc"]["auc"] == metrics.test_score(raw, test, sub)["auc"] > 0.5

    # a member of a blend: what the blend needs is there
    member = blend.load_member(cfg, exp.name)
    assert sorted(member.tests) == list(range(cfg.data.folds)) and len(member.oof) == (table["fold"] >= 0).sum()

    # a rerun with the same tables and settings fits nothing; another seed refits
    capsys.readouterr()
    before = (exp / "fold0" / "test.csv").stat().st_mtime_ns
    baseline.run(cfg)
    assert capsys.readouterr().out.count("skipped") == cfg.data.folds
    assert (exp / "fold0" / "test.csv").stat().st_mtime_ns == before
    baseline.run(cfg_at(prepared, "train.seed=7", "train.folds=[0]"))
    assert read_json(exp / "fold0" / "done.json")["digest"] != read_json(exp / "fold1" / "done.json")["digest"]


def test_baseline_refuses_a_fold_that_does_not_exist(prepared: Path) -> None:
    with pytest.raises(PipelineError, match="fold 9 does not exist"):
        baseline.run(cfg_at(prepared, "train.folds=[9]"))
