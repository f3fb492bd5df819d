"""The optimizer's groups: layer-wise learning-rate decay for every encoder family, and nothing changed without it;
weight decay where it belongs; the warm-up and decay schedule; the refusal of an optimizer the device cannot run."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from pipeline import config, optimizers
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
    with pytest.raises(
        PipelineError, match="layer_decay=0.8: Sequential has no numbered encoder layers.*layer_decay=1"
    ):
        optim.param_groups(model, train_cfg(layer_decay=0.8))


def test_depth_reads_each_familys_parameter_names() -> None:
    assert optim.depth("encoder.embeddings.word_embeddings.weight", 12) == 0
    assert optim.depth("encoder.encoder.rel_embeddings.weight", 12) == 0  # DeBERTa's, shared by every layer
    assert optim.depth("encoder.encoder.layer.0.attention.self.query.weight", 12) == 1
    assert optim.depth("encoder.transformer.layer.11.ffn.lin1.weight", 12) == 12  # DistilBERT
    assert optim.depth("head.weight", 12) == 13
    assert optim.layer_rates(1.0, 0.5, 2) == [0.125, 0.25, 0.5, 1.0]


def test_weight_decay_reaches_the_optimizer_on_matrices_and_never_on_the_rest() -> None:
    """AdamW's own default (0.01) must not stand in for either group's setting."""
    opt, _ = optim.make_training(family_model("xlm-roberta"), train_cfg(weight_decay=0.05), CPU, total_steps=4)
    assert [(g["name"], g["weight_decay"]) for g in opt.param_groups] == [("decay", 0.05), ("no_decay", 0.0)]


def test_a_group_without_a_name_is_logged_under_its_index() -> None:
    p, q = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([{"params": [p], "name": "head", "lr": 0.5}, {"params": [q]}], lr=0.25)
    assert optim.learning_rates(opt) == {"head": 0.5, "1": 0.25}


@pytest.mark.parametrize("warmup,total,steps", [(0.0, 100, 0), (0.1, 100, 10), (0.26, 10, 3), (0.001, 100, 1)])
def test_warmup_is_a_rounded_fraction_of_the_steps_and_at_least_one(warmup, total, steps) -> None:
    assert optim.warmup_steps(warmup, total) == steps


def test_the_schedule_warms_up_then_decays_to_zero_at_the_last_step() -> None:
    """Counted in optimizer steps: 2 of 10 to warm up (1/2, then 1), then down by 1/8 a step to 0 at step 10; the
    same factors as transformers' schedule of the name the bench's Trainer row is given."""
    from transformers import get_scheduler

    def factors(make) -> list[float]:
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched = make(opt)
        out = []
        for _ in range(11):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return out

    warm = 2
    ours = factors(lambda opt: optim.make_scheduler(opt, 0.2, 10))
    assert ours == pytest.approx([0.5, 1.0, 1.0, 7 / 8, 6 / 8, 5 / 8, 4 / 8, 3 / 8, 2 / 8, 1 / 8, 0.0])
    name = optim.trainer_schedule(train_cfg())
    theirs = factors(lambda opt: get_scheduler(name, opt, num_warmup_steps=warm, num_training_steps=10))
    # one step past the warm-up: the decay's last step divides by 1, not by less
    assert factors(lambda opt: optim.make_scheduler(opt, 0.5, 2))[:3] == [1.0, 1.0, 0.0]
    assert ours[warm:] == pytest.approx(theirs[warm:])  # the decay; the Trainer's warm-up starts at 0, ours at 1/warm


def test_an_optimizer_the_device_cannot_run_is_refused_in_one_line() -> None:
    with pytest.raises(PipelineError, match=r"^train.optimizer=adamw8bit runs only on a CUDA GPU"):
        optim.check_optimizer(train_cfg(optimizer="adamw8bit"), CPU)
    assert optimizers.installed("json") and not optimizers.installed("no_such_module_here")


def test_no_installed_module_is_refused_on_a_cuda_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(optimizers, "installed", lambda module: False)
    with pytest.raises(PipelineError, match=r"^train.optimizer=adamw8bit needs bitsandbytes, which is not installed"):
        optim.check_optimizer(train_cfg(optimizer="adamw8bit"), torch.device("cuda"))


def test_the_step_densifies_sparse_gradients_and_leaves_missing_ones() -> None:
    """A sparse embedding gradient becomes its dense equal; a parameter without a gradient keeps none."""
    model = torch.nn.ModuleDict({"emb": torch.nn.Embedding(5, 2, sparse=True), "unused": torch.nn.Linear(2, 1)})
    model["emb"](torch.tensor([1, 3, 3])).sum().backward()
    sparse = model["emb"].weight.grad
    assert sparse.is_sparse
    optim.densify_grads(model)
    assert not model["emb"].weight.grad.is_sparse
    torch.testing.assert_close(model["emb"].weight.grad, sparse.to_dense())
    assert model["unused"].weight.grad is None


def test_an_fp16_step_with_finite_gradients_counts_as_taken() -> None:
    """With its GradScaler on, a step whose scale stays (no overflow) updated the weights: it is not counted as
    skipped."""
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    scaler.scale(model(torch.ones(1, 2)).sum()).backward()
    before = model.weight.detach().clone()
    updated, norm = optim.optimizer_step(model, opt, scaler, max_grad_norm=100.0)
    assert updated and norm == pytest.approx(3**0.5)  # d/dw = (1, 1), d/db = 1, unscaled
    assert not torch.equal(model.weight, before)
