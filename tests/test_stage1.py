"""Two stages: a stage-1 model on the training-only rows, then folds that start from it; no leak either way."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from pipeline import config as config_mod
from pipeline import data as data_mod
from pipeline import layout, train, validity
from pipeline.core import modeling
from pipeline.errors import PipelineError
from pipeline.inputs import tables
from tests.helpers import prepare_tokens
from tests.helpers.folds import StopAt, fold_run

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("torch_one_thread")]


def named(cfg, name: str, **train_kw):
    """The config under another experiment name, its data prepared (each experiment has its own)."""
    cfg = dataclasses.replace(cfg, name=name, train=dataclasses.replace(cfg.train, **train_kw))
    data_mod.prepare(cfg, log=lambda *a: None)
    prepare_tokens(cfg)
    return cfg


def with_init(cfg, name: str, init: str, **train_kw):
    cfg = named(cfg, name, **train_kw)
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, init_from=init))


def test_training_rows_never_leak() -> None:
    table = pd.DataFrame({"fold": [-1, -1, 0, 0, 1, 1, 2, -1, -1], "pseudo_for": [-1, -1, -1, -1, -1, -1, -1, 0, 1]})
    assert tables.training_rows(table, -1).tolist() == [0, 1]  # stage 1: training-only rows, no validation row
    assert tables.training_rows(table, 0).tolist() == [0, 1, 4, 5, 6, 7]  # fold 0's own pseudo rows only
    assert tables.training_rows(table, 1).tolist() == [0, 1, 2, 3, 6, 8]
    assert tables.training_rows(table, 1, training_only_rows=False).tolist() == [2, 3, 6, 8]
    for k in (0, 1):
        rows = tables.training_rows(table, k)
        assert not (table["fold"].to_numpy()[rows] == k).any()  # never a row of the fold it is scored on
    with pytest.raises(PipelineError, match="fold 2 has no pseudo-labelled rows"):  # the teacher had no fold 2
        tables.training_rows(table, 2)
    assert tables.training_rows(table.drop(columns="pseudo_for"), 2).tolist() == [0, 1, 2, 3, 4, 5, 7, 8]


def test_stage_one_then_stage_two(prepared) -> None:
    base = prepared
    # no stage-1 model yet: the error names the command that makes it
    with pytest.raises(PipelineError, match=r"make it first with `make stage1` \(this run's CONFIG and ARGS\)"):
        validity.current_fingerprint(with_init(base, "s2", "s1"))

    s1 = named(base, "s1")
    stage1 = fold_run(s1, StopAt(10**9), fold=-1)
    table, _, _ = tables.load_table(base)
    assert set(table["fold"].iloc[stage1.train_idx]) == {-1} and len(stage1.valid_idx) == 0  # never a validation row
    done = stage1.run()
    assert done["auc"] is None and done["epochs"] == 1
    s1_dir = layout.experiment_dir(s1) / "fold-1"
    assert (s1_dir / "model.safetensors").exists() and not (s1_dir / "oof.csv").exists()

    s2 = with_init(base, "s2", "s1", lr=3e-4, training_only_rows=False)
    run = fold_run(s2, StopAt(10**9), fold=0)
    saved = load_file(s1_dir / "model.safetensors")
    for name, value in run.model.state_dict().items():  # every fold starts from the stage-1 weights
        if name in saved:
            assert torch.equal(value, saved[name]), name
    assert not (table["fold"].iloc[run.train_idx] == -1).any()  # fine-tuned on the validation folds only
    digest = validity.current_fingerprint(s2)
    run.run()
    assert validity.is_complete(layout.experiment_dir(s2) / "fold0", digest)

    # retraining the stage-1 model makes the stage-2 folds stale
    fold_run(named(base, "s1", lr=5e-4), StopAt(10**9), fold=-1).run()
    assert validity.current_fingerprint(s2) != digest
    assert not validity.is_complete(layout.experiment_dir(s2) / "fold0", validity.current_fingerprint(s2))


def test_stage_one_is_not_a_cv_fold(prepared, capsys) -> None:
    cfg = named(prepared, "s1", folds=(-1,))
    assert train.run(cfg) is None
    assert "stage-1 model in" in capsys.readouterr().out
    use, left_out = validity.select_folds(layout.experiment_dir(cfg), validity.current_fingerprint(cfg), 2)
    assert use == [] and "fold-1" not in left_out


def test_init_from_itself_is_refused(prepared) -> None:
    with pytest.raises(PipelineError, match="cannot start from itself"):
        validity.init_dir(with_init(prepared, "same", "same"))


def test_empty_validation_never_scores(prepared) -> None:
    rows = tables.training_rows(tables.load_table(prepared)[0], -1)
    assert len(rows) > 0 and np.all(np.diff(rows) > 0)


def test_make_stage1_then_stage_two(tmp_path, capsys) -> None:
    """`make stage1` (data, then --train) makes the model model.init_from names, as model.init_args say;
    then the same CONFIG and ARGS train stage 2 from it."""
    from pipeline import stage1

    args = [
        "--config",
        "sample",
        f"input_dir={tmp_path / 'input'}",
        f"models_dir={tmp_path / 'models'}",
        f"submissions_dir={tmp_path / 'submissions'}",  # train's last block says where the submission is
        "data.sample_scale=0.2",
        "data.folds=2",
        "model.tiny.vocab=1000",
        "model.tiny.hidden=32",
        "model.tiny.intermediate=64",
        "model.max_length=32",
        "train.epochs=1",
        "train.precision=fp32",
    ]
    assert stage1.main(args) == 2
    assert "model.init_from is empty" in capsys.readouterr().err
    args += ["model.init_from=warm", "model.init_args=[train.lr=5e-3,train.epochs=2]"]
    assert data_mod.main(args) == 0
    assert train.main(args) == 2  # no stage-1 model yet
    assert "make it first with `make stage1`" in capsys.readouterr().err

    assert stage1.main(args) == 0 and stage1.main(["--train", *args]) == 0
    assert "stage1: warm, one model on the training-only rows (fold -1), with train.lr=5e-3" in capsys.readouterr().out
    warm = tmp_path / "models" / "warm" / "fold-1"
    saved = config_mod.load_file(warm / "pipeline.yaml")
    assert (saved.name, saved.train.folds, saved.train.lr, saved.train.epochs) == ("warm", (-1,), 5e-3, 2)
    assert saved.model.init_from == "" and (warm / "done.json").is_file()

    assert train.main(args) == 0
    for fold in (0, 1):
        fold_cfg = config_mod.load_file(tmp_path / "models" / "sample" / f"fold{fold}" / "pipeline.yaml")
        assert fold_cfg.model.init_from == "warm" and fold_cfg.train.lr != 5e-3


def test_a_stage_two_pooling_other_than_its_stage_one_models_is_refused_before_any_work(tmp_path, capsys) -> None:
    """A stage-2 fold is the stage-1 model with its head: it pools as that model does. Another model.pooling is
    refused in one line by `make train` (nothing trained) and, set through model.init_args, by `make stage1`."""
    from pipeline import stage1
    from tests.helpers import stage_args

    args = stage_args(tmp_path, "data.folds=2", "train.epochs=1", "train.precision=fp32", "model.tiny.hidden=32",
                      "model.tiny.intermediate=64", "model.max_length=32", "train.max_steps=2")  # fmt: skip
    warm = [*args, "name=warm", "train.folds=[-1]", "model.pooling=cls"]
    assert data_mod.main(warm) == 0 and train.main(warm) == 0  # a stage-1 model that pools by its first token
    stage2 = [*args, "model.init_from=warm"]
    assert data_mod.main(stage2) == 0
    capsys.readouterr()
    assert train.main(stage2) == 2
    assert capsys.readouterr().err == (
        "error: model.init_from=warm: its model pools by cls and a stage-2 fold pools as the model it starts from, "
        "not by model.pooling=mean; set model.pooling=cls, or train the stage-1 model with model.pooling=mean\n"
    )
    assert not (tmp_path / "models" / "sample").exists()
    assert train.main([*stage2, "model.pooling=cls"]) == 0
    assert modeling.read_head(tmp_path / "models" / "sample" / "fold0")["pooling"] == "cls"

    capsys.readouterr()
    assert stage1.main([*args, "model.init_from=cold", "model.init_args=[model.pooling=cls]"]) == 2
    assert capsys.readouterr().err.startswith(
        "error: model.init_args: model.pooling=cls for the stage-1 model cold, mean for stage 2: a stage-2 fold pools"
    )
    assert not (tmp_path / "input" / "prepared" / "cold").exists()
