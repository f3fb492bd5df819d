"""`make predict` (pipeline.predict): a failed check writes no file, a missing table or a folder in the way stops
in one line. Ensembling, id alignment and the submission checks are tested in tests/scoring/test_submission.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import config, export, files, layout, predict, train, validity
from pipeline.errors import PipelineError
from pipeline.inputs import tables
from pipeline.scoring import publish
from pipeline.scoring.submission import SubmissionError
from tests.helpers import one_line_error, prepare_tiny, stage_args, tiny_cfg


def frame(ids, values) -> pd.DataFrame:
    return pd.DataFrame({"id": [str(i) for i in ids], "toxic": values})


SAMPLE = frame(["b", "a", "c", "d"], [0.5] * 4)


# ---------------------------------------------------------------- run: a failed check writes nothing


def test_run_with_failing_check_writes_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    SAMPLE.to_csv(raw / "sample_submission.csv", index=False)
    folds = [tmp_path / "models" / "sample" / f"fold{k}" for k in range(2)]
    test = pd.DataFrame({"id": ["a", "b", "c", "d"], "text": ["x"] * 4, "lang": ["es"] * 4})
    # folds that differ, the second in another row order: no single fold equals their mean
    by_fold = {"fold0": frame(["a", "b", "c", "d"], [0.1, 0.2, 0.3, 0.4]),
               "fold1": frame(["d", "c", "b", "a"], [0.2, 0.5, 0.0, 0.3])}  # fmt: skip

    monkeypatch.setattr(predict.validity, "usable_folds", lambda cfg, digest, stage: folds)
    monkeypatch.setattr(predict.validity, "current_fingerprint", lambda cfg, meta: "x")
    monkeypatch.setattr(predict.tables, "load_table", lambda cfg: (None, test, {"raw": str(raw)}))
    monkeypatch.setattr(predict.tokens, "load_cache", lambda cfg, meta: ({"test": None}, {}))
    monkeypatch.setattr(predict, "fold_test_preds", lambda cfg, d, data, test, meta, device: by_fold[d.name])
    cfg = config.load(
        "sample",
        [
            f"input_dir={tmp_path / 'input'}",
            f"models_dir={tmp_path / 'models'}",
            f"submissions_dir={tmp_path / 'subs'}",
        ],
    )

    path = predict.run(cfg)  # the plumbing works: this is the check's control
    assert path == tmp_path / "subs" / "submission.csv"
    written = pd.read_csv(path, dtype={"id": str})
    assert written["id"].tolist() == ["b", "a", "c", "d"]
    np.testing.assert_allclose(written["toxic"], [0.1, 0.2, 0.4, 0.3])  # b, a, c, d: each id's mean over the folds
    assert (tmp_path / "subs" / "sample.csv").exists()

    subs = tmp_path / "subs2"
    cfg = config.load(
        "sample", [f"input_dir={tmp_path / 'input'}", f"models_dir={tmp_path / 'models'}", f"submissions_dir={subs}"]
    )
    monkeypatch.setattr(publish, "ensemble", lambda preds, how="mean": np.full(len(preds[0]), np.nan))
    with pytest.raises(SubmissionError, match="NaN"):
        predict.run(cfg)
    assert not subs.exists() or list(subs.glob("*.csv")) == []


def test_a_good_submission_is_never_replaced_by_a_failing_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every check comes before the first write: test_labels.csv with no id in common with the test table, or a
    full disk while the file is written, each leaves the good submission of the run before as it was."""
    raw = tmp_path / "raw"
    raw.mkdir()
    SAMPLE.to_csv(raw / "sample_submission.csv", index=False)
    test = pd.DataFrame({"id": ["a", "b", "c", "d"], "text": ["x"] * 4, "lang": ["es"] * 4})
    monkeypatch.setattr(predict.validity, "usable_folds", lambda cfg, digest, stage: [tmp_path / "fold0"])
    monkeypatch.setattr(predict.validity, "current_fingerprint", lambda cfg, meta: "x")
    monkeypatch.setattr(predict.tables, "load_table", lambda cfg: (None, test, {"raw": str(raw)}))
    monkeypatch.setattr(predict.tokens, "load_cache", lambda cfg, meta: ({"test": None}, {}))
    preds = [0.1, 0.2, 0.3, 0.4]  # the later runs predict other values: what they would write differs
    monkeypatch.setattr(predict, "fold_test_preds", lambda *a: frame(["a", "b", "c", "d"], preds))
    cfg = config.load(
        "sample",
        [
            f"input_dir={tmp_path / 'input'}",
            f"models_dir={tmp_path / 'models'}",
            f"submissions_dir={tmp_path / 'subs'}",
        ],
    )
    path = predict.run(cfg)
    good = {p.name: p.read_bytes() for p in path.parent.iterdir()}
    assert set(good) == {"submission.csv", "submission.json", "sample.csv"}

    preds[:] = [0.9, 0.8, 0.7, 0.6]
    frame(["x", "y"], [0, 1]).to_csv(raw / "test_labels.csv", index=False)  # the labels of another test set
    with pytest.raises(PipelineError, match="no id in common with the test table"):
        predict.run(cfg)
    assert {p.name: p.read_bytes() for p in path.parent.iterdir()} == good
    (raw / "test_labels.csv").unlink()

    def full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    words = f"the disk is full: sample.csv could not be written in {path.parent}"
    with pytest.raises(files.DiskFullError, match=words):
        predict.run(cfg)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in path.parent.iterdir()} == good


def fake_predict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folds: list[int], preds: list[float]) -> None:
    """predict.run over the folds `folds` of a five-fold experiment, each predicting `preds` (no model run)."""
    raw = tmp_path / "raw"
    raw.mkdir(exist_ok=True)
    SAMPLE.to_csv(raw / "sample_submission.csv", index=False)
    test = pd.DataFrame({"id": ["a", "b", "c", "d"], "text": ["x"] * 4, "lang": ["es"] * 4})
    dirs = [tmp_path / "models" / "sample" / f"fold{k}" for k in folds]
    monkeypatch.setattr(predict.validity, "usable_folds", lambda cfg, digest, stage: dirs)
    monkeypatch.setattr(predict.validity, "current_fingerprint", lambda cfg, meta: "x")
    monkeypatch.setattr(predict.tables, "load_table", lambda cfg: (None, test, {"raw": str(raw)}))
    monkeypatch.setattr(predict.tokens, "load_cache", lambda cfg, meta: ({"test": None}, {}))
    monkeypatch.setattr(predict, "fold_test_preds", lambda *a: frame(["a", "b", "c", "d"], preds))


def test_submission_csv_of_five_folds_is_kept_when_fewer_are_usable(tmp_path: Path, monkeypatch, capsys) -> None:
    """A fold gone stale: the next ensemble has 4 of the 5 folds. submissions/<name>.csv is the 4-fold one, said
    plainly; submission.csv (what a Kaggle user uploads) keeps the 5-fold one unless predict.allow_fewer_folds."""
    args = [f"input_dir={tmp_path / 'input'}", f"models_dir={tmp_path / 'models'}", f"submissions_dir={tmp_path}/s"]
    cfg = config.load("sample", args)
    fake_predict(tmp_path, monkeypatch, [0, 1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])
    assert predict.run(cfg) == tmp_path / "s" / "submission.csv"
    five = (tmp_path / "s" / "submission.csv").read_bytes()
    assert "folds" not in capsys.readouterr().err
    fake_predict(tmp_path, monkeypatch, [0, 1, 2, 4], [0.4, 0.3, 0.2, 0.1])
    assert predict.run(cfg) == tmp_path / "s" / "sample.csv"
    err = capsys.readouterr().err
    assert "warning: this submission holds 4 of the experiment's 5 folds (fold0, fold1, fold2, fold4)" in err
    assert f"warning: {tmp_path}/s/submission.csv kept as it was: it holds 5 folds of sample" in err
    assert (tmp_path / "s" / "submission.csv").read_bytes() == five
    assert (tmp_path / "s" / "sample.csv").read_bytes() != five
    fake_predict(tmp_path, monkeypatch, [0, 1, 2], [0.4, 0.3, 0.2, 0.1])
    assert predict.run(config.load("sample", [*args, "predict.allow_fewer_folds=true"])).name == "submission.csv"
    assert (tmp_path / "s" / "submission.csv").read_bytes() == (tmp_path / "s" / "sample.csv").read_bytes()
    assert "kept as it was" not in capsys.readouterr().err
    fake_predict(tmp_path, monkeypatch, [0, 1], [0.4, 0.3, 0.2, 0.1])  # the record says 3 folds, of another file
    (tmp_path / "s" / "submission.csv").write_text("id,toxic\n")  # no longer the file the record describes
    assert predict.run(cfg).name == "submission.csv"


def test_replaced_submission_csv_says_what_it_held(tmp_path: Path, monkeypatch, capsys) -> None:
    """A smoke run under another name replaces submission.csv (a file Kaggle users upload): one line says what it
    holds now and what it held before, test AUC included, so that a 0.85 submission is not lost without a word."""
    args = [f"input_dir={tmp_path / 'input'}", f"models_dir={tmp_path / 'models'}", f"submissions_dir={tmp_path}/s"]
    fake_predict(tmp_path, monkeypatch, [0, 1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])
    frame(["a", "b", "c", "d"], [0, 0, 1, 1]).to_csv(tmp_path / "raw" / "test_labels.csv", index=False)
    predict.run(config.load("sample", args))
    out = capsys.readouterr().out
    assert f"{tmp_path}/s/submission.csv now holds sample, 5 of 5 folds, test AUC 1.0000 (was no submission" in out
    fake_predict(tmp_path, monkeypatch, [0, 1], [0.4, 0.3, 0.2, 0.1])
    assert predict.run(config.load("sample", [*args, "name=smoke"])).name == "submission.csv"
    out = capsys.readouterr().out
    said = "now holds smoke, 2 of 5 folds, test AUC 0.0000 (was sample, 5 of 5 folds, test AUC 1.0000)"
    assert f"{tmp_path}/s/submission.csv {said}" in out


def test_a_smoke_run_keeps_a_submission_csv_of_every_step(tmp_path: Path, monkeypatch, capsys) -> None:
    """A smoke run (train.max_steps) writes its own <name>.csv and keeps the submission.csv of a real run, saying
    so; it replaces nothing real, so a second smoke run replaces the first's."""
    args = [f"input_dir={tmp_path / 'input'}", f"models_dir={tmp_path / 'models'}", f"submissions_dir={tmp_path}/s"]
    smoke = [*args, "name=smoke", "train.max_steps=5"]
    fake_predict(tmp_path, monkeypatch, [0, 1], [0.4, 0.3, 0.2, 0.1])
    assert predict.run(config.load("sample", smoke)).name == "submission.csv"  # no submission.csv yet: written
    fake_predict(tmp_path, monkeypatch, [0, 1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4])
    assert predict.run(config.load("sample", args)).name == "submission.csv"  # a real run replaces a smoke run's
    real = (tmp_path / "s" / "submission.csv").read_bytes()
    capsys.readouterr()
    fake_predict(tmp_path, monkeypatch, [0, 1], [0.4, 0.3, 0.2, 0.1])
    assert predict.run(config.load("sample", smoke)) == tmp_path / "s" / "smoke.csv"
    err = capsys.readouterr().err
    assert f"warning: {tmp_path}/s/submission.csv kept as it was: it holds sample, 5 of 5 folds" in err
    assert "this is a smoke run (train.max_steps=5)" in err
    assert (tmp_path / "s" / "submission.csv").read_bytes() == real != (tmp_path / "s" / "smoke.csv").read_bytes()


def test_run_without_prepared_data_says_so(tmp_path: Path) -> None:
    paths = [f"input_dir={tmp_path / 'input'}", f"models_dir={tmp_path / 'models'}", f"submissions_dir={tmp_path}/s"]
    cfg = config.load("sample", paths)
    with pytest.raises(PipelineError, match="make data"):
        predict.run(cfg)
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------- paths


def test_submission_csv_being_a_folder_stops_predict(tmp_path: Path, capsys) -> None:
    subs = tmp_path / "subs"
    (subs / "submission.csv").mkdir(parents=True)
    assert predict.main(stage_args(tmp_path, f"submissions_dir={subs}", f"models_dir={tmp_path / 'models'}")) == 2
    assert one_line_error(capsys).startswith(f"error: {subs / 'submission.csv'}: is a folder")


# ---------------------------------------------------------------- train.folds: said not to narrow predict or export


@pytest.mark.slow
@pytest.mark.usefixtures("torch_one_thread")
def test_train_folds_given_to_predict_and_export_is_said_not_to_narrow_them(tmp_path: Path, capsys) -> None:
    """`make train predict export ARGS="train.folds=[1]"` after a run of every fold: predict ensembles and export
    writes both folds, and each says in one line that train.folds chose only what `make train` trains."""

    train.run(prepare_tiny(tmp_path, "train.device=cpu", "train.max_steps=2"))
    capsys.readouterr()
    cfg = tiny_cfg(tmp_path, "train.device=cpu", "train.max_steps=2", "train.folds=[1]")
    predict.run(cfg)
    assert [p.name for p in export.run(cfg)] == ["fold0", "fold1"]
    err = capsys.readouterr().err
    for stage in ("predict", "export"):
        line = f"{stage}: uses every complete fold (fold0, fold1); train.folds=[1] chooses only the folds `make train`"
        assert err.count(line) == 1, err
    predict.run(tiny_cfg(tmp_path, "train.device=cpu", "train.max_steps=2"))  # train.folds empty: nothing said
    assert "train.folds" not in capsys.readouterr().err


# ---------------------------------------------------------------- predict.training_rows: a relabelling teacher's


@pytest.mark.slow
@pytest.mark.usefixtures("torch_one_thread")
def test_predict_writes_each_folds_training_row_predictions_once(tmp_path) -> None:
    more = ("train.device=cpu", "train.max_steps=2")
    train.run(prepare_tiny(tmp_path, *more))
    predict.run(tiny_cfg(tmp_path, *more))
    folders = [layout.fold_dir(tiny_cfg(tmp_path, *more), k) for k in (0, 1)]
    assert not any((f / layout.TRAINING_PREDS).exists() for f in folders)  # only when asked for
    cfg = tiny_cfg(tmp_path, *more, "predict.training_rows=true")
    predict.run(cfg)
    table = tables.load_table(cfg)[0]
    rows = table[tables.training_only(table)]
    made = []
    for folder in folders:
        preds = pd.read_csv(folder / layout.TRAINING_PREDS, dtype={"id": str}, keep_default_na=False)
        assert preds[["id", "source"]].values.tolist() == rows[["id", "source"]].values.tolist()
        assert preds["prob"].between(0, 1).all() and preds["prob"].nunique() > 1
        assert validity.fold_status(folder, needs=(layout.TRAINING_PREDS,)) == ""
        made.append((folder / layout.TRAINING_PREDS).stat().st_mtime_ns)
    assert not np.allclose(*(pd.read_csv(f / layout.TRAINING_PREDS)["prob"] for f in folders))  # each fold's own
    predict.run(cfg)  # cached: not predicted again
    assert [(f / layout.TRAINING_PREDS).stat().st_mtime_ns for f in folders] == made
    assert config.load("sample", []).predict.training_rows is False
