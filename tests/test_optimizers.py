"""Every optimizer and every loss is one record (pipeline/optimizers.py, pipeline/losses.py): training, the memory
probe, the bench's rows (its Trainer row too), the Kaggle plans and checks, and the settings' choices and docs
are all made from it. Each test adds a record of its own and watches every reader take it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from pipeline import config, kernel, losses, optimizers, schema
from pipeline.benchmark import runner
from pipeline.benchmark import trainer as bench_trainer
from pipeline.core import memory, optim
from pipeline.errors import PipelineError
from pipeline.inputs.tokens import Ragged
from pipeline.kaggle import disk
from pipeline.kaggle import memory as kaggle_memory
from pipeline.kaggle.plan import KernelError
from pipeline.schema import TrainConfig
from tests.helpers.tinymodel import tiny_classifier
from tests.helpers.training import train_parts

pytestmark = pytest.mark.usefixtures("torch_one_thread")
CPU = torch.device("cpu")


def sgd(groups, lr, device):
    return torch.optim.SGD(groups, lr=lr)


# an optimizer without state that Trainer knows by another name and that needs a module nobody has
SGD = optimizers.Optimizer("sgd", "plain SGD", sgd, state_bytes=0, trainer_optim="sgd")
NEEDY = optimizers.Optimizer("needy", "needs a module", sgd, state_bytes=4, needs="no_such_module_here")
CALLS: list[str] = []


def doubled(logits, targets):
    CALLS.append("doubled")
    return 2 * losses.bce(logits, targets)


DOUBLED = losses.Loss("doubled", "twice the binary cross-entropy", doubled)


@pytest.fixture
def records(monkeypatch):
    for record in (SGD, NEEDY):
        monkeypatch.setitem(optimizers.OPTIMIZERS, record.name, record)
    monkeypatch.setitem(losses.LOSSES, DOUBLED.name, DOUBLED)
    CALLS.clear()


def test_the_settings_choices_and_docs_are_the_records_() -> None:
    assert schema.CHOICES["train.optimizer"] == tuple(optimizers.OPTIMIZERS)
    assert schema.CHOICES["train.loss"] == tuple(losses.LOSSES)
    doc = schema.of("train.optimizer").doc
    assert all(f"`{name}` ({o.doc})" in doc for name, o in optimizers.OPTIMIZERS.items())
    assert all(f"`{name}` ({x.doc})" in schema.of("train.loss").doc for name, x in losses.LOSSES.items())


def test_training_builds_the_named_optimizer_and_refuses_what_it_needs(records) -> None:
    model = tiny_classifier()
    assert isinstance(optim.make_optimizer(model, TrainConfig(optimizer="sgd"), CPU), torch.optim.SGD)
    assert isinstance(optim.make_optimizer(model, TrainConfig(), CPU), torch.optim.AdamW)
    with pytest.raises(PipelineError, match="train.optimizer=needy needs no_such_module_here"):
        optim.make_optimizer(model, TrainConfig(optimizer="needy"), CPU)
    with pytest.raises(PipelineError, match="adamw8bit runs only on a CUDA GPU"):
        optim.check_optimizer(TrainConfig(optimizer="adamw8bit"), CPU)


def test_the_bench_trainer_row_asks_trainer_for_the_records_optimizer(records, tmp_path) -> None:
    args = bench_trainer.trainer_arguments(TrainConfig(optimizer="sgd"), "fp32", CPU, 1, str(tmp_path))
    assert str(args.optim.value if hasattr(args.optim, "value") else args.optim) == "sgd"
    default = bench_trainer.trainer_arguments(TrainConfig(), "fp32", CPU, 1, str(tmp_path))
    assert "sgd" not in str(default.optim)


def test_the_kaggle_plans_price_and_check_the_records_optimizer(records, tmp_path) -> None:
    cfg = config.with_overrides(config.load("xlmr-large"), ["kaggle.dry_run=true"], device=False)
    arch = disk.model_architecture(cfg)
    trained = disk.trained_parameters(cfg, arch)

    def state_item(c) -> float:
        return next(b for what, b in kaggle_memory.plan_memory(c).items if what.startswith("the optimizer's state"))

    plain = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, optimizer="sgd"))
    assert state_item(cfg) == 8 * trained and state_item(plain) == 0
    assert disk.resume_bytes(cfg, trained) == 12 * trained and disk.resume_bytes(plain, trained) == 4 * trained
    needy = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, optimizer="needy"))
    with pytest.raises(KernelError, match="train.optimizer=needy needs no_such_module_here in the Kaggle image"):
        kernel.check_image(needy)
    kernel.check_image(plain)


def test_training_the_memory_probe_and_the_bench_take_the_records_loss(records) -> None:
    """A loss twice BCE: the loop's reported loss doubles, and the probe and the bench's warm-up call it."""
    rng = np.random.default_rng(0)
    data = Ragged.from_lists([[0, *rng.integers(5, 200, 6).tolist(), 2] for _ in range(8)])
    labels = rng.integers(0, 2, 8).astype(np.float32)
    got = {}
    for name in ("bce", "doubled"):
        torch.manual_seed(0)
        model = tiny_classifier()
        cfg = TrainConfig(micro_batch=4, accumulation=2, loss=name)
        opt = optim.make_optimizer(model, cfg, CPU)
        sched, scaler = optim.make_scheduler(opt, 0, 4), torch.amp.GradScaler("cpu", enabled=False)
        steps = [[np.arange(4)], [np.arange(4, 8)]]
        state = train_parts(model, steps, data, labels, opt, sched, scaler, cfg, "fp32", CPU, pad_id=1, progress=False)
        got[name] = state.loss_sum
    assert got["doubled"] == pytest.approx(2 * got["bce"], rel=1e-5)
    CALLS.clear()
    model = tiny_classifier()
    memory.probe(model, model, 2, 8, "fp32", CPU, TrainConfig(loss="doubled"))
    assert CALLS == ["doubled"]
    runner.warm_up(model, np.array([[0, 7, 9, 2]]), "fp32", CPU, "doubled")
    assert CALLS == ["doubled", "doubled"]
