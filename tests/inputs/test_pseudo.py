"""Pseudo-labels: fold k trains only on the labels of the teacher's fold-k model; a new teacher relabels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import config, predict, train, validity
from pipeline import data as data_mod
from pipeline.errors import ConfigError, PipelineError
from pipeline.inputs import pseudo, tables
from tests.helpers.experiments import Competition

pytestmark = pytest.mark.usefixtures("torch_one_thread")

TEST = pd.DataFrame({"id": ["a", "b", "c", "d"], "text": ["w", "x", "y", "z"], "lang": ["es", "fr", "ru", "tr"]})


def teacher(models: Path, name: str, preds: dict[int, list[float]]) -> dict[int, Path]:
    """A hand-made teacher's folds: fold<k>/oof.csv (validation row v<k>) and test.csv holding `preds[k]` for
    TEST's ids (reversed order)."""
    folds = {}
    for k, p in preds.items():
        d = folds[k] = models / name / f"fold{k}"
        d.mkdir(parents=True)
        pd.DataFrame({"id": [f"v{k}"], "lang": "es", "toxic": 1, "fold": k, "pred": 0.5}).to_csv(d / "oof.csv")
        pd.DataFrame({"id": TEST["id"][::-1], "toxic": p[::-1]}).to_csv(d / "test.csv", index=False)
    return folds


def cfg_for(tmp_path: Path, *more: str):
    return config.load("sample", [f"models_dir={tmp_path}", "data.folds=2", "data.pseudo_from=t", *more])


def test_each_fold_gets_only_its_own_teacher_folds_labels(tmp_path) -> None:
    folds = teacher(tmp_path, "t", {0: [0.05, 0.5, 0.2, 0.97], 1: [0.9, 0.1, 0.6, 0.3]})
    rows = pseudo.pseudo_rows(cfg_for(tmp_path), TEST, folds)
    assert rows["pseudo_for"].tolist() == [0] * 4 + [1] * 4 and set(rows["fold"]) == {-1}
    assert rows["toxic"].tolist() == [0.05, 0.5, 0.2, 0.97, 0.9, 0.1, 0.6, 0.3]  # in the test table's order
    assert set(rows["source"]) == {"pseudo"}

    table = pd.DataFrame({"id": ["v0", "v1", "t0"], "text": "", "lang": "es", "toxic": [0, 1, 1], "source": "x",
                          "fold": [0, 1, -1]})  # fmt: skip
    full = pseudo.add(cfg_for(tmp_path), table, TEST, folds)
    for k in (0, 1):  # the leak test: fold k's pseudo rows carry exactly the teacher's fold-k predictions
        used = full.iloc[tables.training_rows(full, k)]
        labelled = used[used["source"] == "pseudo"]
        assert (labelled["pseudo_for"] == k).all() and len(labelled) == 4
        assert labelled["toxic"].tolist() == rows[rows["pseudo_for"] == k]["toxic"].tolist()
    assert "pseudo" not in set(full.iloc[tables.training_rows(full, -1)]["source"])  # nor in a stage-1 model


def test_a_teacher_of_some_folds_teaches_those_and_refuses_the_others(tmp_path) -> None:
    """A blend of two folds of five labels the student's same folds; a fold it has no model of is refused, in
    `make data` where train.folds asks for it and in training where it would train without pseudo-labels."""
    folds = teacher(tmp_path, "t", {0: [0.05, 0.5, 0.2, 0.97]})
    table = pd.DataFrame({"id": ["v0", "v1", "t0"], "text": "", "lang": "es", "toxic": [0, 1, 1], "source": "x",
                          "fold": [0, 1, -1]})  # fmt: skip
    full = pseudo.add(cfg_for(tmp_path, "train.folds=[0]"), table, TEST, folds)
    used = full.iloc[tables.training_rows(full, 0)]
    assert (used["source"] == "pseudo").sum() == 4
    with pytest.raises(PipelineError, match="fold 1 has no pseudo-labelled rows.*teacher has no fold 1"):
        tables.training_rows(full, 1)
    with pytest.raises(PipelineError, match=r"the teacher has no fold 1, which this experiment trains.*\[0\]"):
        pseudo.add(cfg_for(tmp_path), table, TEST, folds)  # train.folds empty: every fold
    moved = table.assign(fold=[1, 0, -1])  # the teacher's fold-0 row is fold 1 here
    with pytest.raises(PipelineError, match="only 0% of the validation rows are in the same fold as in the teacher"):
        pseudo.add(cfg_for(tmp_path, "train.folds=[0]"), moved, TEST, folds)
    more = pd.concat([table, table.iloc[[0]].assign(id="v0b")], ignore_index=True)  # fold 0 holds a row it never scored
    with pytest.raises(PipelineError, match="its fold 0 scored 1 rows where this experiment's fold 0 holds 2"):
        pseudo.add(cfg_for(tmp_path, "train.folds=[0]"), more, TEST, folds)


def test_hard_labels_keep_the_confident_ends(tmp_path) -> None:
    folds = teacher(tmp_path, "t", {0: [0.05, 0.5, 0.2, 0.97], 1: [0.9, 0.1, 0.6, 0.3]})
    rows = pseudo.pseudo_rows(cfg_for(tmp_path, "data.pseudo_labels=hard", "data.pseudo_low=0.2"), TEST, folds)
    assert rows[["id", "toxic", "pseudo_for"]].values.tolist() == [
        ["a", 0.0, 0], ["c", 0.0, 0], ["d", 1.0, 0], ["a", 1.0, 1], ["b", 0.0, 1]
    ]  # fmt: skip


def test_hard_labels_that_keep_nothing_say_so(tmp_path) -> None:
    folds = teacher(tmp_path, "t", {0: [0.4, 0.5, 0.45, 0.6], 1: [0.9, 0.1, 0.6, 0.3]})
    with pytest.raises(PipelineError, match="kept no row of fold 0.*pseudo_low"):
        pseudo.pseudo_rows(cfg_for(tmp_path, "data.pseudo_labels=hard"), TEST, folds)


def test_a_missing_teacher_fold_names_the_command_unless_no_fold_needs_it(tmp_path) -> None:
    comp = Competition(tmp_path, 200)
    comp.experiment("t", np.full(len(comp.rows), 0.5), {0: np.full(90, 0.5)}, folds=(0,))
    with pytest.raises(PipelineError, match=r"data.pseudo_from=t: t: fold1, .*: not trained; make it again with"):
        pseudo.teacher_folds(comp.config("data.pseudo_from=t"))
    assert list(pseudo.teacher_folds(comp.config("data.pseudo_from=t", "train.folds=[0]"))) == [0]  # fold 0 alone
    with pytest.raises(ConfigError, match="pseudo_low"):
        cfg_for(tmp_path, "data.pseudo_low=0.95")


@pytest.mark.slow
def test_student_end_to_end_and_a_new_teacher_relabels(tmp_path) -> None:
    paths = [f"input_dir={tmp_path / 'input'}", f"models_dir={tmp_path / 'models'}", f"submissions_dir={tmp_path}/s"]
    small = ["data.folds=2", "data.sample_scale=0.2", "train.epochs=1", "model.tiny.hidden=32",
             "model.tiny.intermediate=64", "model.tiny.vocab=1000", "model.max_length=32"]  # fmt: skip
    teacher_args = ["--config", "sample", *paths, *small, "name=teacher"]
    for stage in (data_mod, train, predict):
        assert stage.main(teacher_args) == 0
    student_args = ["--config", "sample", *paths, *small, "name=student", "data.pseudo_from=teacher"]
    assert data_mod.main(student_args) == 0
    student = config.load("sample", student_args[2:])
    table, test, _ = tables.load_table(student)
    labelled = table[table["source"] == "pseudo"]
    assert labelled["pseudo_for"].value_counts().to_dict() == {0: len(test), 1: len(test)}
    for k in (0, 1):  # soft labels: the teacher's own fold-k predictions
        want = pd.read_csv(tmp_path / "models" / "teacher" / f"fold{k}" / "test.csv", dtype={"id": str})
        got = labelled[labelled["pseudo_for"] == k].merge(want, on="id", suffixes=("", "_teacher"))
        np.testing.assert_allclose(got["toxic"], got["toxic_teacher"], rtol=1e-12)
    assert train.main([*student_args, "train.folds=[0]"]) == 0
    digest = validity.current_fingerprint(student)

    # the teacher trained again (another seed): the student's table and folds are stale
    for stage in (train, predict):
        assert stage.main([*teacher_args, "train.seed=7"]) == 0
    assert data_mod.main(student_args) == 0
    assert validity.current_fingerprint(student) != digest
    assert not validity.is_complete(tmp_path / "models" / "student" / "fold0", validity.current_fingerprint(student))
