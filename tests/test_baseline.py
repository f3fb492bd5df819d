"""`make baseline`: TF-IDF on the same folds, laid out like a trained experiment (OOF and test per fold)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import baseline, blend, data
from pipeline.errors import PipelineError
from pipeline.files import read_json, write_json
from pipeline.inputs import tables
from pipeline.scoring import metrics
from tests.helpers import make_cfg, one_line_error, stage_args, strict_json

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
    out = capsys.readouterr().out
    table, test, _ = tables.load_table(cfg)
    exp = Path(cfg.models_dir) / f"{cfg.name}-tfidf"
    assert summary["metrics"]["valid_auc"] > 0.7  # the sample's toxic words are easy for character n-grams
    assert (exp / "cv.json").exists() and (exp / "cv.png").exists()
    for k in range(cfg.data.folds):
        fold = exp / f"fold{k}"
        done = read_json(fold / "done.json")
        assert TRAINED_FIELDS <= set(done) and done["fold"] == k and done["model"] == baseline.MODEL
        assert done["metric"] == "valid_auc" and f"tfidf fold {k}: valid AUC {done['auc']:.4f}" in out
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


def test_a_cv_json_with_a_figure_the_folds_cannot_make_is_strict_json(prepared: Path) -> None:
    """The sample holds no translated rows out: no 6-lang AUC (NaN in memory). cv.json, written by the function
    `make cv` runs, holds null there, and parses with a JSON parser that refuses a bare NaN."""
    cfg = cfg_at(prepared)
    assert math.isnan(baseline.run(cfg)["metrics"][metrics.SIX.key])
    for path in (Path(cfg.models_dir) / f"{cfg.name}-tfidf").rglob("*.json"):
        strict_json(path.read_text())  # cv.json and every fold's done.json
    saved = strict_json((Path(cfg.models_dir) / f"{cfg.name}-tfidf" / "cv.json").read_text())
    assert saved["metrics"][metrics.SIX.key] is None and saved["metrics"]["valid_auc"] > 0.5


def test_baseline_refuses_a_fold_that_does_not_exist(prepared: Path) -> None:
    with pytest.raises(PipelineError, match="fold 9 does not exist"):
        baseline.run(cfg_at(prepared, "train.folds=[9]"))


def test_tables_with_an_empty_test_set_stop_the_baseline_in_one_line(tmp_path: Path, raw_sample: Path, monkeypatch,
                                                                     capsys) -> None:  # fmt: skip
    """Tables `make data` built before it refused a test set of no rows: every later stage refuses them in one line
    (the baseline fitted its folds, then failed with a scikit-learn traceback on 0 test rows)."""
    for name in ("test.csv", "sample_submission.csv"):
        pd.read_csv(raw_sample / name).head(0).to_csv(raw_sample / name, index=False)
    args = stage_args(tmp_path, "data.source=dir", f"data.dir={raw_sample}", f"models_dir={tmp_path / 'models'}",
                      f"submissions_dir={tmp_path / 'subs'}")  # fmt: skip
    assert data.main(args) == 2
    assert "test.csv: no rows (a header only)" in one_line_error(capsys)
    monkeypatch.setattr(tables, "check_rows", lambda *a: None)  # as `make data` built them before
    assert data.main(args) == 0
    monkeypatch.undo()
    capsys.readouterr()
    assert baseline.main(args) == 2
    line = one_line_error(capsys)
    assert line.startswith("error: ") and "prepared/sample/test.csv: no rows (a header only)" in line
    assert not (tmp_path / "models" / "sample-tfidf" / "fold0").exists()  # refused before any fold was fitted


def test_two_baselines_of_one_experiment_at_once_the_second_stops_naming_the_first(prepared: Path, capsys) -> None:
    import fcntl
    import os

    from pipeline import files, layout

    cfg = cfg_at(prepared)
    lock = layout.lock_path(make_cfg(prepared, "name=sample-tfidf"))
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)  # held through another open file, as another process holds it
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, b"pid 4242 (baseline: python -m pipeline baseline)\n")
    try:
        args = [f"input_dir={cfg.input_dir}", f"data.sample_scale={cfg.data.sample_scale}",
                "model.tiny.vocab=1000", "data.english_negatives=60", f"models_dir={cfg.models_dir}",
                f"submissions_dir={cfg.submissions_dir}"]  # fmt: skip
        assert baseline.main(args) == 2
        assert one_line_error(capsys).startswith("error: experiment 'sample-tfidf' is in use by pid 4242 (baseline: ")
        assert not (Path(cfg.models_dir) / "sample-tfidf" / "fold0").exists()
    finally:
        os.close(fd)
    assert baseline.main(args) == 0  # free again: the lock of a finished run is released
    assert str(lock.resolve()) not in files._held  # and not kept by this process after the stage


def test_the_comparison_reads_an_older_cv_json_and_names_a_damaged_one(tmp_path: Path, capsys) -> None:
    cfg = cfg_at(tmp_path)
    exp = Path(cfg.models_dir) / cfg.name
    exp.mkdir(parents=True)
    ours = {"metrics": {"six": math.nan, "valid_auc": 0.8, "brier": 0.2}, "per_lang": {"es": 0.7, "tr": 0.6},
            "fold_details": {0: {"minutes": 1.0}}}  # fmt: skip
    # written before cv.json had `metrics`: the validation AUC as oof_auc, a six-language AUC missing fr
    write_json(exp / "cv.json", {"oof_auc": 0.9123, "per_lang": {"es": 0.91}, "six": {"auc": 0.88, "missing": ["fr"]}})
    baseline.compare(cfg, ours)
    head, *lines = capsys.readouterr().out.strip().splitlines()
    # a row's figures by column: every metric of metrics.METRICS (by its key), then the languages and the minutes
    columns = [m.key for m in metrics.METRICS] + ["es", "tr", "minutes"]
    assert head.split() == ["model", *" ".join(m.header for m in metrics.METRICS).split(), "es", "tr", "minutes"]
    rows = {name: dict(zip(columns, figures, strict=True)) for name, *figures in map(str.split, lines)}
    blank = dict.fromkeys(columns, "-")  # a figure a row lacks (ours: a NaN 6-lang AUC; the older one missed fr)
    assert rows[cfg.model.name] == {**blank, "valid_auc": "0.9123", "es": "0.9100"}
    assert rows[baseline.MODEL] == {**blank, "valid_auc": "0.8000", "brier": "0.2000", "es": "0.7000", "tr": "0.6000",
                                    "minutes": "1.0"}  # fmt: skip
    (exp / "cv.json").write_text("{not json")
    baseline.compare(cfg, ours)  # after the baseline's own report: a line, not a traceback
    assert f"{exp / 'cv.json'} cannot be read" in capsys.readouterr().out


def test_a_calibrated_baselines_figures_weight_by_its_experiments_lengths(prepared: Path, monkeypatch) -> None:
    """The baseline's folds live under <name>-tfidf, its tables under <name>: the calibration's OOF (its before
    and after figures) carries the token counts of those tables, which the estimate weights by length."""
    from pipeline import layout
    from pipeline.scoring import publish, report

    cfg = cfg_at(prepared, "predict.calibration=lang")
    read, seen = report.read_oof, []

    def reading(dirs, where=None):
        seen.append(where)
        return read(dirs, where)

    monkeypatch.setattr(publish.report, "read_oof", reading)
    baseline.run(cfg)
    assert seen and seen[-1] == layout.prepared_dir(cfg)  # not prepared/<name>-tfidf, which does not exist


def test_a_tfidf_specialist_of_one_language_is_routed_like_a_trained_one(prepared: Path, monkeypatch, capsys) -> None:
    """train.langs=[es]: fit on the es rows `make train` would train on, scored on its fold's es rows, predicting the
    es test rows, no submission, in its own folder beside the baseline of every language; a route takes its rows."""
    from pipeline import layout

    cfg = cfg_at(prepared, "train.langs=[es]")
    table, test, _ = tables.load_table(cfg)
    fit, sizes = baseline.fit_predict, []
    monkeypatch.setattr(baseline, "fit_predict", lambda x, *a: sizes.append(len(x)) or fit(x, *a))
    baseline.run(cfg)
    assert capsys.readouterr().out.count("baseline: train.langs=[es]: ") == 1
    exp = Path(cfg.models_dir) / "sample-tfidf-es"
    for k in range(cfg.data.folds):
        assert sizes[k] == len(tables.training_rows(table, k, langs=("es",))) < len(tables.training_rows(table, k))
        oof = pd.read_csv(exp / f"fold{k}" / "oof.csv", dtype={"id": str}, keep_default_na=False)
        assert set(oof["id"]) == set(table.loc[(table["fold"] == k) & (table["lang"] == "es"), "id"])
        preds = pd.read_csv(exp / f"fold{k}" / "test.csv", dtype={"id": str}, keep_default_na=False)
        assert sorted(preds["id"]) == sorted(test.loc[test["lang"] == "es", "id"])
    assert not layout.submission_path(cfg, "sample-tfidf-es").exists()

    every = cfg_at(prepared)
    baseline.run(every)
    route = ("blend.members=[sample-tfidf]", "blend.route=[es:sample-tfidf-es]", "blend.route_scale=own")
    routed = blend.run(cfg_at(prepared, *route))
    oof = pd.read_csv(Path(cfg.models_dir) / "sample-tfidf+sample-tfidf-es" / "oof.csv", dtype={"id": str})
    theirs = pd.concat(pd.read_csv(exp / f"fold{k}" / "oof.csv", dtype={"id": str}) for k in range(cfg.data.folds))
    mine = oof.set_index("id").loc[theirs["id"], "pred"].to_numpy()
    assert np.allclose(mine, theirs["pred"]) and routed["metrics"]["valid_auc"] > 0.5
    with pytest.raises(PipelineError, match=r"train.langs=\['xx'\]: no training or validation rows"):
        baseline.run(cfg_at(prepared, "train.langs=[xx]"))
