"""Weight averaging in a fold (train.average=ema or swa, pipeline.core.average): the average is what evaluation
scores and what the fold keeps, it moves only on steps that updated the weights, a resumed fold averages on as an
uninterrupted one, and an average in host memory is the same average."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file

from pipeline import layout
from pipeline.core import average
from pipeline.core.resume import Interrupted
from tests.helpers.folds import StopAt, fold_run
from tests.helpers.tinymodel import tiny_classifier

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def test_the_average_is_an_ema_of_the_weights_and_applied_only_inside_its_block() -> None:
    model = tiny_classifier()
    head = model.head.weight
    first = head.detach().clone()
    avg = average.WeightAverage(model, decay=0.5)
    with torch.no_grad():
        head.add_(1.0)
    avg.update(1, 10)
    with torch.no_grad():
        head.add_(1.0)
    avg.update(2, 10)
    # 0.5 x (0.5 x first + 0.5 x (first + 1)) + 0.5 x (first + 2) = first + 1.25
    with avg.applied():
        torch.testing.assert_close(head.detach(), first + 1.25)
    torch.testing.assert_close(head.detach(), first + 2.0)  # the live weights back after the block
    again = average.WeightAverage(model, decay=0.5)
    again.load(avg.state())
    assert again.updates == 2 and all(torch.equal(a, b) for a, b in zip(again.average, avg.average))
    with pytest.raises(ValueError, match="does not fit"):
        average.WeightAverage(model, kind="swa").load(avg.state())  # an ema's state is not an swa's


def stepped(avg: average.WeightAverage, head: torch.Tensor, steps: int, total: int) -> None:
    """Steps 1..steps of a fold of `total`: the head's weights +1 before each, then the average updated."""
    for step in range(1, steps + 1):
        with torch.no_grad():
            head.add_(1.0)
        avg.update(step, total)


def test_swa_follows_the_weights_until_its_start_then_averages_equally() -> None:
    model = tiny_classifier()
    head = model.head.weight
    first = head.detach().clone()
    avg = average.WeightAverage(model, kind="swa", start=0.5)
    stepped(avg, head, 2, 6)  # steps 1, 2 of 6: the start is after step 3
    with avg.applied():
        torch.testing.assert_close(head.detach(), first + 2.0)  # the weights as they are
    avg = average.WeightAverage(model, kind="swa", start=0.5)
    head.data.copy_(first)
    stepped(avg, head, 6, 6)
    assert avg.updates == 3
    with avg.applied():
        torch.testing.assert_close(head.detach(), first + 5.0)  # the mean of steps 4, 5, 6: first + (4 + 5 + 6) / 3


@pytest.mark.parametrize("kind", ["ema", "swa"])
def test_an_average_in_host_memory_is_the_same_average(kind: str) -> None:
    torch.manual_seed(0)
    models = [tiny_classifier(), tiny_classifier()]
    models[1].load_state_dict(models[0].state_dict())
    averages = [average.WeightAverage(m, kind, 0.7, 0.25, device) for m, device in zip(models, ["weights", "cpu"])]
    for step in range(1, 5):
        for m in models:
            with torch.no_grad():
                for p in m.parameters():
                    p.mul_(1.1).add_(0.01 * step)
        for a in averages:
            a.update(step, 4)
    assert averages[1].host and all(a.device.type == "cpu" for a in averages[1].average)
    for a in averages:
        a.exchange()  # into the model, as an evaluation has it
    torch.testing.assert_close(models[0].state_dict(), models[1].state_dict(), rtol=0, atol=0)
    for a in averages:
        a.exchange()  # and the weights back
    torch.testing.assert_close(models[0].state_dict(), models[1].state_dict(), rtol=0, atol=0)
    assert not torch.equal(averages[1].average[0], models[1].head.weight)  # the host holds the average again


def with_average(cfg, kind: str = "ema", **more):
    train = dataclasses.replace(cfg.train, epochs=1, average=kind, average_decay=0.8, average_start=0.25, **more)
    return dataclasses.replace(cfg, train=train)


@pytest.mark.parametrize("kind", ["ema", "swa"])
def test_a_fold_keeps_and_scores_the_averaged_weights(prepared, kind: str) -> None:
    run = fold_run(with_average(prepared, kind), StopAt(10**9))
    run.run()
    averaged_steps = run.windows if kind == "ema" else run.windows - run.windows // 4
    assert run.average.updates == averaged_steps  # one update a step that updated the weights (swa: after start)
    saved = load_file(layout.experiment_dir(run.cfg) / "fold0" / layout.WEIGHTS)
    names = [n for n, p in run.model.named_parameters() if p.requires_grad]
    kept = dict(zip(names, run.average.average, strict=True))
    live = dict(run.model.named_parameters())
    assert all(torch.equal(saved[n], kept[n]) for n in names)  # one epoch, one evaluation: the end's average
    assert not all(torch.equal(saved[n], live[n].detach()) for n in names)


@pytest.mark.parametrize("kind", ["ema", "swa"])
def test_a_resumed_fold_averages_on_as_an_uninterrupted_one(prepared, tmp_path, kind: str) -> None:
    cfg = with_average(prepared, kind)
    reference = dataclasses.replace(cfg, models_dir=str(tmp_path / "reference"))
    fold_run(reference, StopAt(10**9)).run()
    run = fold_run(cfg, StopAt(10**9))
    run.stop = StopAt(2)  # Ctrl-C at the second optimizer step: a resume state is saved there
    with pytest.raises(Interrupted):
        run.run()
    fold_run(cfg, StopAt(10**9)).run()
    want = load_file(layout.experiment_dir(reference) / "fold0" / layout.WEIGHTS)
    got = load_file(layout.experiment_dir(cfg) / "fold0" / layout.WEIGHTS)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_the_kaggle_plans_count_the_average() -> None:
    from pipeline import config
    from pipeline.kaggle import disk
    from pipeline.kaggle import memory as kaggle_memory

    cfg = config.load("xlmr-large")
    trained = disk.trained_parameters(cfg, disk.model_architecture(cfg))
    averaged = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, average="ema"))
    item = [b for what, b in kaggle_memory.plan_memory(averaged).items if what.startswith("the weight average")]
    assert item == [4 * trained]
    assert not [w for w, _ in kaggle_memory.plan_memory(cfg).items if w.startswith("the weight average")]
    assert disk.resume_bytes(averaged, trained) == disk.resume_bytes(cfg, trained) + 4 * trained
    host = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, average="swa", average_device="cpu"))
    assert not [w for w, _ in kaggle_memory.plan_memory(host).items if w.startswith("the weight average")]


def test_the_average_is_on_the_device_before_the_memory_probes(prepared, monkeypatch) -> None:
    """auto-fit's and checkpointing's probes measure a step with the average beside the weights, as training has it."""
    from pipeline.core import fold as fold_mod

    events, make = [], average.make
    monkeypatch.setattr(average, "make", lambda *a: events.append("average") or make(*a))
    monkeypatch.setattr(fold_mod, "auto_fit", lambda cfg, *a: events.append("auto-fit") or cfg)
    fold_run(with_average(prepared, max_memory_gb=4.0), StopAt(2))
    assert events == ["average", "auto-fit"]


def test_under_lora_only_the_adapters_and_the_head_are_averaged() -> None:
    from tests.core.test_distributed import lora_model

    model = lora_model()
    avg = average.WeightAverage(model, decay=0.5)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert len(avg.average) == len(trained) and any("lora_B" in n for n in trained) and "head.weight" in trained
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(1.0)
    avg.update(1, 10)
    with avg.applied():
        assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)


def test_a_mixed_precision_fold_averages_in_fp32(prepared) -> None:
    cfg = with_average(prepared, "swa", precision="bf16")
    run = fold_run(cfg, StopAt(10**9))
    run.run()
    assert run.precision == "bf16" and run.average.updates > 0
    assert all(a.dtype == torch.float32 for a in run.average.average)
