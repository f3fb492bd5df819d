"""Per-language specialists: folds that start from the same fold of an earlier experiment (model.init_folds)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from pipeline import config as config_mod
from pipeline import data as data_mod
from pipeline import experiments, layout, validity
from pipeline.errors import ConfigError, PipelineError
from pipeline.inputs import tables
from tests.helpers import prepare_tokens
from tests.helpers.folds import StopAt, fold_run

pytestmark = [pytest.mark.usefixtures("torch_one_thread")]


def named(cfg, name: str, *overrides: str):
    """The config under another experiment name with `overrides`, its data prepared and its config saved as a
    trained experiment's (what another experiment reads of it)."""
    cfg = config_mod.with_overrides(cfg, [f"name={name}", *overrides])
    data_mod.prepare(cfg, log=lambda *a: None)
    prepare_tokens(cfg)
    config_mod.save(cfg, layout.experiment_dir(cfg) / layout.RUN_CONFIG)
    return cfg


def train_folds(cfg, *folds: int) -> None:
    for fold in folds:
        fold_run(cfg, StopAt(10**9), fold=fold).run()


def test_folds_digest_leaves_pseudo_rows_out() -> None:
    table = pd.DataFrame({c: ["x", "y"] for c in tables.TABLE_COLUMNS}).assign(toxic=[0, 1], fold=[0, 1], pseudo_for=-1)
    # as `make data` makes them: 0/1 labels, which the pseudo rows' probabilities turn into a float column
    with_pseudo = pd.concat([table, table.assign(fold=-1, pseudo_for=[0, 1], toxic=0.3)], ignore_index=True)
    assert with_pseudo["toxic"].dtype == float
    assert tables.folds_digest(with_pseudo) == tables.folds_digest(table)  # a teacher's labels are not the folds
    assert tables.folds_digest(table.assign(fold=[1, 0])) != tables.folds_digest(table)


def test_init_folds_settings_refused(prepared) -> None:
    for extra, match in (
        (["model.init_from=s1"], "a fold starts from one model"),
        (["train.folds=[-1]"], "a stage-1 model"),
        (["name=base"], "cannot start from itself"),
    ):
        with pytest.raises(ConfigError, match=match):
            config_mod.with_overrides(prepared, ["model.init_folds=base", *extra])


def test_a_specialist_of_a_later_fold_needs_no_fold_0(prepared) -> None:
    """Where only the architecture is read (pooling, size), the base's first trained fold stands for every fold."""
    base = named(prepared, "base")
    train_folds(base, 1)
    spec = named(prepared, "spec", "model.init_folds=base", "train.training_only_rows=false", "train.folds=[1]")
    assert validity.init_dir(spec) == validity.init_dir(spec, 1) == layout.fold_dir(base, 1)
    validity.current_fingerprint(spec)  # the specialist's fold 1 has a fingerprint: no fold 0 asked for


@pytest.mark.slow
def test_each_fold_starts_from_the_same_fold(prepared) -> None:
    base = named(prepared, "base")
    spec = named(prepared, "spec", "model.init_folds=base", "train.training_only_rows=false")
    train_folds(base, 0)
    with pytest.raises(PipelineError, match=r"model.init_folds=base: fold1: not trained; train those folds of base"):
        validity.current_fingerprint(spec)
    first = config_mod.with_overrides(spec, ["train.folds=[0]"])  # a specialist of fold 0 needs fold 0 alone
    assert validity.init_dir(first, 0) == layout.fold_dir(base, 0)
    with pytest.raises(PipelineError, match=r"model.init_folds=base: fold1 not trained"):
        validity.init_dir(first, 1)
    train_folds(base, 1)

    run = fold_run(spec, StopAt(10**9), fold=1)
    own = load_file(layout.fold_dir(base, 1) / layout.WEIGHTS)
    other = load_file(layout.fold_dir(base, 0) / layout.WEIGHTS)
    state = run.model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in own.items())  # fold 1 from fold 1: weights and head
    assert not all(torch.equal(state[k], v) for k, v in other.items())  # not from fold 0, which saw fold 1's rows

    digest = validity.current_fingerprint(spec)
    run.run()
    assert validity.is_complete(layout.fold_dir(spec, 1), digest)
    # the base retrained: what each fold starts from changed, so the specialist's folds no longer count
    base = named(prepared, "base", "train.lr=5e-4")
    train_folds(base, 0, 1)
    assert validity.current_fingerprint(spec) != digest
    assert not validity.is_complete(layout.fold_dir(spec, 1), validity.current_fingerprint(spec))


@pytest.mark.slow
def test_lora_folds_go_over_the_same_fold_merged(prepared) -> None:
    """LoRA with model.init_folds: fold k's adapters go over fold k of that experiment, its own adapters merged
    into the frozen base and its head kept; the fold records that base, so predict builds it again."""
    import copy

    from pipeline.core import lora, modeling

    on = ("model.lora.r=4", "model.lora.alpha=8")
    base = named(prepared, "lbase", *on)
    train_folds(base, 0, 1)
    spec = named(prepared, "lspec", "model.init_folds=lbase", "train.training_only_rows=false", *on)
    run = fold_run(spec, StopAt(10**9), fold=1)
    assert run.model.lora["base"]["from"] == "init_folds" and run.model.lora["base"]["fold"] == 1

    def merged(model) -> dict:
        model = copy.deepcopy(model)
        lora.merge(model)  # a new fold's adapters add nothing yet (lora_B starts at 0): the base and head alone
        return {k: v.float() for k, v in model.state_dict().items()}

    def fold_model(cfg, k: int):
        return modeling.load_fold_model(layout.fold_dir(cfg, k), cfg=cfg, tokenizer=run.tokenizer)

    state, own, other = merged(run.model), merged(fold_model(base, 1)), merged(fold_model(base, 0))
    assert set(state) == set(own) and all(torch.allclose(state[k], v) for k, v in own.items())  # fold 1 from fold 1
    assert not all(torch.allclose(state[k], v) for k, v in other.items())  # not from fold 0, which saw fold 1's rows
    run.run()
    again = fold_model(spec, 1)  # as predict reads it: over lbase's fold 1, whose digest head.json recorded
    assert again.lora["base"]["fold"] == 1 and not torch.equal(merged(again)["head.weight"], own["head.weight"])


@pytest.mark.slow
def test_init_folds_refuses_other_folds_or_data(prepared) -> None:
    named(prepared, "three", "data.folds=3")
    named(prepared, "reseeded", "data.seed=7")
    with pytest.raises(PipelineError, match=r"model.init_folds=three: its data.folds=3, this experiment's 2"):
        validity.init_digest(config_mod.with_overrides(prepared, ["model.init_folds=three"]))
    with pytest.raises(PipelineError, match=r"model.init_folds=reseeded: its prepared tables hold other rows"):
        validity.init_digest(config_mod.with_overrides(prepared, ["model.init_folds=reseeded"]))


def test_training_rows_of_one_language() -> None:
    table = pd.DataFrame(
        {
            "fold": [-1, -1, 0, 0, 1, 1, -1, -1, -1],
            "lang": ["es", "en", "es", "it", "es", "fr", "es", "it", "fr"],
            "pseudo_for": [-1, -1, -1, -1, -1, -1, 0, 0, 1],
        }
    )
    assert tables.training_rows(table, 0, langs=("es",)).tolist() == [0, 4, 6]  # training-only, fold 1, pseudo
    assert tables.training_rows(table, 0, False, ("es",)).tolist() == [4, 6]
    assert tables.training_rows(table, 1, langs=("fr", "it")).tolist() == [3, 8]
    assert tables.training_rows(table, -1, langs=("es",)).tolist() == [0]
    assert tables.scored_rows(table, 1, ("es",)).tolist() == [4]
    assert tables.scored_rows(table, 1).tolist() == [4, 5]
    assert tables.scored_rows(table, -1, ("es",)).tolist() == []


@pytest.mark.slow
def test_one_language_experiment(prepared, capsys) -> None:
    from pipeline import cv, predict

    cfg = named(prepared, "es", "train.langs=[es]")
    every = config_mod.with_overrides(cfg, ["train.langs=[]"])
    assert validity.current_fingerprint(cfg) != validity.current_fingerprint(every)  # other rows, other weights
    run = fold_run(cfg, StopAt(10**9), fold=0)
    table = run.table
    assert set(table["lang"].iloc[run.train_idx]) == {"es"} and set(table["lang"].iloc[run.valid_idx]) == {"es"}
    assert len(run.valid_idx) == ((table["fold"] == 0) & (table["lang"] == "es")).sum()
    run.run()
    oof = pd.read_csv(layout.fold_dir(cfg, 0) / layout.OOF)
    assert set(oof["lang"]) == {"es"}
    assert predict.run(cfg) is None  # no submission of es rows alone
    test = pd.read_csv(layout.prepared_dir(cfg) / layout.TEST_TABLE, dtype={"id": str}, keep_default_na=False)
    preds = pd.read_csv(layout.fold_dir(cfg, 0) / layout.TEST_PREDS, dtype={"id": str}, keep_default_na=False)
    assert sorted(preds["id"]) == sorted(test.loc[test["lang"] == "es", "id"])
    assert not layout.submission_path(cfg, cfg.name).exists()
    cv.run(cfg)
    out = capsys.readouterr().out
    assert "train.langs=[es]: the OOF holds es rows only" in out
    assert "submission  none of its own: train.langs=[es] (route it: blend.route=es:es)" in out
    with pytest.raises(PipelineError, match=r"train.langs=\['xx'\]: no training or validation rows"):
        fold_run(config_mod.with_overrides(cfg, ["train.langs=[xx]"]), StopAt(10**9), fold=0)


@pytest.mark.slow
def test_the_pseudo_label_loop_teaches_a_specialist_from_a_route(prepared, capsys) -> None:
    """The loop of docs/recipes.md: an es specialist from `base`, routed with it; the route's fold-k test
    probabilities teach the next es specialist, which still starts from `base` (its tables hold the pseudo-labelled
    rows, its folds are base's) and trains on the es test rows of its own fold's labels only."""
    from pipeline import blend, predict

    base = named(prepared, "base")
    spec = named(prepared, "es", "model.init_folds=base", "train.langs=[es]", "train.training_only_rows=false")
    for cfg in (base, spec):
        train_folds(cfg, 0, 1)
        predict.run(cfg)
    route = ["blend.members=[base]", "blend.route=[es:es]", "blend.name=r", "blend.route_scale=own"]
    blend.run(config_mod.with_overrides(prepared, route))
    # a blend of the route weights its rows by length as it does base's: the route's tables are its fallback's
    assert experiments.prepared_folder(prepared, layout.experiment_dir(prepared, "r")) == layout.prepared_dir(base)
    assert "tokens" in blend.load_member(prepared, "r").oof and "tokens" in blend.load_member(prepared, "base").oof
    student = named(prepared, "es2", "model.init_folds=base", "train.langs=[es]", "data.pseudo_from=r")
    run = fold_run(student, StopAt(10**9), fold=1)
    rows = run.table.iloc[run.train_idx]
    pseudo = rows[rows["source"] == "pseudo"]
    assert set(rows["lang"]) == {"es"} and set(pseudo["pseudo_for"]) == {1} and len(pseudo)
    taught = pd.read_csv(layout.fold_dir(spec, 1) / layout.TEST_PREDS, dtype={"id": str}).set_index("id")
    assert (pseudo.set_index("id")["toxic"].astype(float) - taught.loc[pseudo["id"], "toxic"]).abs().max() < 1e-6
    capsys.readouterr()
