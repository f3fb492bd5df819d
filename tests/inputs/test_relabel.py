"""Relabelled training rows: fold k mixes only its teacher fold's predictions into the training-only rows' targets."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from pipeline import data, fingerprint, layout, validity
from pipeline.core import distributed
from pipeline.core.fold import FoldInputs, FoldRun
from pipeline.errors import ConfigError, DataError
from pipeline.files import file_record, write_csv, write_json
from pipeline.inputs import relabel, tables
from tests.helpers.experiments import Competition
from tests.helpers.folds import StopAt

WEIGHT = 0.3
STUDENT = ("name=s", "data.relabel_from=t", "data.soft_labels=true", f"data.relabel_weight={WEIGHT}")


def predicted(comp: Competition, name: str, probs: dict[int, np.ndarray], drop: int = 0) -> None:
    """fold<k>/training.csv and training.json of `name` as `make predict ARGS="predict.training_rows=true"` leaves
    them: `probs[k]` for the training-only rows of comp's table (in another order), less the last `drop` rows."""
    table = tables.load_table(comp.cfg)[0]
    rows = table[tables.training_only(table)]
    for k, p in probs.items():
        folder = comp.models / name / f"fold{k}"
        frame = pd.DataFrame({"id": rows["id"], "source": rows["source"], "prob": p}).iloc[::-1]
        write_csv(folder / layout.TRAINING_PREDS, frame.iloc[: len(frame) - drop])
        stamp = {"key": {"weights": "-"}, "file": file_record(folder / layout.TRAINING_PREDS)}
        write_json(folder / layout.TRAINING_KEY, stamp)


def taught(tmp_path: Path) -> tuple[Competition, dict[int, np.ndarray]]:
    """A competition with a teacher `t` of every fold whose folds predicted the training-only rows, each fold
    other probabilities."""
    comp = Competition(tmp_path, 200)
    comp.experiment("t", np.full(len(comp.rows), 0.5), None)
    table = tables.load_table(comp.cfg)[0]
    rng = np.random.default_rng(0)
    probs = {k: rng.random(int(tables.training_only(table).sum())) for k in range(comp.cfg.data.folds)}
    predicted(comp, "t", probs)
    return comp, probs


def test_each_fold_mixes_its_own_teacher_folds_predictions_into_training_only_rows(tmp_path) -> None:
    comp, probs = taught(tmp_path)
    student, said = comp.config(*STUDENT), []
    data.prepare(student, log=said.append)
    table = tables.load_table(student)[0]
    only = tables.training_only(table)
    labels = table["toxic"].to_numpy(np.float64)
    assert only.sum() == 20 and set(labels[only]) == {0.0, 1.0}
    for k in range(student.data.folds):  # the formula, with fold k's predictions and no other fold's
        got = tables.fold_targets(student, table, k)
        np.testing.assert_allclose(got[only], (1 - WEIGHT) * labels[only] + WEIGHT * probs[k], rtol=1e-6)
        np.testing.assert_array_equal(got[~only], labels[~only])  # scored rows never change
    after = np.mean([((1 - WEIGHT) * labels[only] + WEIGHT * p).mean() for p in probs.values()])
    line = "20 training-only rows relabelled by t's folds [0, 1, 2, 3, 4], each fold's by its own"
    assert any(line in s and f"mean target {labels[only].mean():.3f} -> {after:.3f}" in s for s in said), said
    with pytest.raises(DataError, match="a stage-1 model .fold -1. has no teacher fold"):
        tables.fold_targets(student, table, layout.STAGE1)


def test_without_relabel_from_the_targets_are_the_labels(tmp_path) -> None:
    comp, _ = taught(tmp_path)
    table = tables.load_table(comp.cfg)[0]
    np.testing.assert_array_equal(tables.fold_targets(comp.cfg, table, 0), table["toxic"].to_numpy(np.float32))
    assert relabel.check(comp.cfg, table, np.flatnonzero(tables.training_only(table))) == []


def test_a_teacher_of_other_folds_other_rows_or_no_predictions_is_refused(tmp_path) -> None:
    comp, probs = taught(tmp_path)
    student = comp.config(*STUDENT)
    table = tables.load_table(comp.cfg)[0]
    rows = np.flatnonzero(tables.training_only(table))
    k = student.data.folds
    moved = table.assign(fold=np.where(table["fold"] >= 0, (table["fold"] + 1) % k, table["fold"]))
    with pytest.raises(DataError, match="data.relabel_from=t: only 0% of the validation rows are in the same fold"):
        relabel.check(student, moved, rows)
    predicted(comp, "t", {0: probs[0]}, drop=1)  # fold 0 predicted other rows
    with pytest.raises(DataError, match="training.csv predicts 19 rows, not this experiment's 20 training-only"):
        relabel.check(student, table, rows)
    comp.experiment("u", np.full(len(comp.rows), 0.5), None)  # trained, never asked for its training rows
    with pytest.raises(DataError, match=r"data.relabel_from=u: .*no training-row predictions .run `make predict "
                       r'ARGS="predict.training_rows=true"`'):  # fmt: skip
        data.prepare(comp.config("name=s", "data.relabel_from=u", "data.soft_labels=true"), log=lambda *_: None)
    with pytest.raises(ConfigError, match="data.relabel_from=t: a relabelled target is fractional.*soft_labels=true"):
        comp.config("name=s", "data.relabel_from=t")
    with pytest.raises(ConfigError, match="cannot relabel its own training rows"):
        comp.config("name=t", "data.relabel_from=t", "data.soft_labels=true")


def test_relabelling_is_in_the_fold_fingerprint_and_the_default_changes_none(tmp_path) -> None:
    comp, probs = taught(tmp_path)
    assert set(validity.current_made_from(comp.cfg)) == {"table", "model", "settings"}  # as before relabelling
    assert not {"relabel_from", "relabel_weight"} & set(validity.data_settings(comp.cfg))
    alone = comp.config("data.relabel_weight=0.3")  # a weight without a teacher mixes nothing
    assert validity.data_settings(alone) == validity.data_settings(comp.cfg)
    student = comp.config(*STUDENT)
    data.prepare(student, log=lambda *_: None)
    made = validity.current_made_from(student)
    teacher = {str(k): layout.relabel_files(student)[k] for k in probs}
    assert made["relabel"] == {"weight": WEIGHT, "teacher": {k: file_record(p)["sha256"] for k, p in teacher.items()}}
    digest = validity.current_fingerprint(student)
    assert digest != fingerprint.fold_fingerprint({k: v for k, v in made.items() if k != "relabel"})

    probs[0] = probs[0][::-1].copy()  # the teacher predicted again: the student's tables and folds are stale
    predicted(comp, "t", probs)
    with pytest.raises(DataError, match="the teacher's training-row predictions .data.relabel_from. changed"):
        validity.current_meta(student)
    data.prepare(student, log=lambda *_: None)
    assert validity.current_fingerprint(student) != digest


def test_a_fold_trains_on_its_mixed_targets(tmp_path, monkeypatch) -> None:
    """What FoldRun trains towards is fold_targets' (the rows and targets chosen, the model never built)."""
    comp, _ = taught(tmp_path)
    student = comp.config(*STUDENT)
    data.prepare(student, log=lambda *_: None)
    table = tables.load_table(student)[0]
    monkeypatch.setattr(FoldRun, "build", lambda self, state: setattr(self, "fresh", True))
    inputs = FoldInputs(student, 2, table, None, SimpleNamespace(pad_token_id=1), "x")
    run = FoldRun(inputs, distributed.Dist(), StopAt(1))
    np.testing.assert_array_equal(run.labels, tables.fold_targets(student, table, 2))
    assert not np.array_equal(run.labels, table["toxic"].to_numpy(np.float32))


def test_a_student_of_some_folds_needs_those_folds_of_its_teacher_alone(tmp_path) -> None:
    import shutil

    comp, probs = taught(tmp_path)
    for k in range(1, comp.cfg.data.folds):
        shutil.rmtree(comp.models / "t" / f"fold{k}")  # a teacher of fold 0 alone
    with pytest.raises(DataError, match="data.relabel_from=t: t: fold1, fold2, fold3, fold4: not trained"):
        data.prepare(comp.config(*STUDENT), log=lambda *_: None)
    student = comp.config(*STUDENT, "train.folds=[0]")
    data.prepare(student, log=lambda *_: None)
    table = tables.load_table(student)[0]
    only = tables.training_only(table)
    labels = table["toxic"].to_numpy(np.float64)
    got = tables.fold_targets(student, table, 0)
    np.testing.assert_allclose(got[only], (1 - WEIGHT) * labels[only] + WEIGHT * probs[0], rtol=1e-6)
