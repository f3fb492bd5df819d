"""The optimizer's groups: layer-wise learning-rate decay for every encoder family, and nothing changed without it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pipeline import config
from pipeline.core import modeling, optim
from pipeline.errors import PipelineError
from tests.helpers.tinymodel import FAMILIES, family_config

CPU = torch.device("cpu")


def train_cfg(**kw):
    return dataclasses.replace(config.load("sample", []).train, **{"lr": 1.0, "warmup": 0.0, **kw})


def family_model(family: str) -> modeling.Classifier:
    torch.manual_seed(0)
    return modeling.Classifier(modeling.encoder_from_config(family_config(family)), modeling.HeadSpec("mean", 0.0))


def rate_of_each_parameter(opt) -> dict[int, float]:
    return {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_layer_gets_its_decayed_rate_in_every_family(family) -> None:
    """2 layers, decay 0.5: the head at lr, the top layer at lr/2, the first at lr/4, the embeddings at lr/8."""
    model = family_model(family)
    opt, sched = optim.make_training(model, train_cfg(layer_decay=0.5), CPU, total_steps=4)
    rates = rate_of_each_parameter(opt)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert len(rates) == len(trainable)  # every parameter in exactly one group
    # `layer.N.` (BERT-like, DistilBERT), `layers.N.` (ModernBERT)
    expected = {"embeddings": 0.125, "layer.0.": 0.25, "layers.0.": 0.25, "layer.1.": 0.5, "layers.1.": 0.5}
    seen = set()
    for name, p in trainable:
        want = next((r for key, r in expected.items() if key in name), None)
        if want is None:
            want = 1.0 if name.startswith("head") or "LayerNorm" in name or "final_norm" in name else None
        assert want is not None, name
        assert rates[id(p)] == pytest.approx(want), name
        seen.add(want)
    assert seen >= {0.125, 0.25, 0.5, 1.0}  # every depth was found
    logged = optim.learning_rates(opt)
    assert logged == pytest.approx({"embeddings": 0.125, "layer0": 0.25, "layer1": 0.5, "top": 1.0})
    for _ in range(2):
        opt.step()
        sched.step()  # the schedule scales every depth alike: the ratios stay
    logged = optim.learning_rates(opt)
    assert logged["embeddings"] / logged["top"] == pytest.approx(0.125)
    assert logged["layer1"] == pytest.approx(0.25)  # 0.5 x the linear decay's 2 of 4 steps left


def test_decay_one_leaves_the_optimizer_as_it_was() -> None:
    """train.layer_decay=1: the two groups of before, the same parameters in the same order (resume states load)."""
    model = family_model("xlm-roberta")
    opt, _ = optim.make_training(model, train_cfg(weight_decay=0.01), CPU, total_steps=4)
    params = [p for p in model.parameters() if p.requires_grad]
    assert [g["name"] for g in opt.param_groups] == ["decay", "no_decay"]
    assert [id(p) for p in opt.param_groups[0]["params"]] == [id(p) for p in params if p.ndim >= 2]
    assert [id(p) for p in opt.param_groups[1]["params"]] == [id(p) for p in params if p.ndim < 2]
    assert [g["lr"] for g in opt.param_groups] == [1.0, 1.0]
    assert "lr" not in optim.param_groups(model, train_cfg())[0]  # the group takes the optimizer's lr, as before


def test_weight_decay_stays_on_matrices_only_under_layer_decay() -> None:
    model = family_model("bert")
    groups = optim.param_groups(model, train_cfg(layer_decay=0.9, weight_decay=0.01))
    for g in groups:
        assert all((p.ndim >= 2) == (g["weight_decay"] > 0) for p in g["params"]), g["name"]


def test_a_model_without_numbered_layers_is_refused_in_one_line() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    with pytest.raises(PipelineError, match="layer_decay=0.8.*no numbered encoder layers.*layer_decay=1"):
        optim.param_groups(model, train_cfg(layer_decay=0.8))


def test_depth_reads_each_familys_parameter_names() -> None:
    assert optim.depth("encoder.embeddings.word_embeddings.weight", 12) == 0
    assert optim.depth("encoder.encoder.rel_embeddings.weight", 12) == 0  # DeBERTa's, shared by every layer
    assert optim.depth("encoder.encoder.layer.0.attention.self.query.weight", 12) == 1
    assert optim.depth("encoder.transformer.layer.11.ffn.lin1.weight", 12) == 12  # DistilBERT
    assert optim.depth("head.weight", 12) == 13
    assert optim.layer_rates(1.0, 0.5, 2) == [0.125, 0.25, 0.5, 1.0]
