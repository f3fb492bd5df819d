"""Weight averaging in a fold (train.average=ema, pipeline.core.average): the average is what evaluation scores
and what the fold keeps, it moves only on steps that updated the weights, and a resumed fold averages on as an
uninterrupted one."""

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
    avg.update()
    with torch.no_grad():
        head.add_(1.0)
    avg.update()
    # 0.5 x (0.5 x first + 0.5 x (first + 1)) + 0.5 x (first + 2) = first + 1.25
    with avg.applied():
        torch.testing.assert_close(head.detach(), first + 1.25)
    torch.testing.assert_close(head.detach(), first + 2.0)  # the live weights back after the block
    again = average.WeightAverage(model, decay=0.5)
    again.load(avg.state())
    assert again.updates == 2 and all(torch.equal(a, b) for a, b in zip(again.average, avg.average))


def ema(cfg, decay: float = 0.8):
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, epochs=1, average="ema", average_decay=decay))


def test_a_fold_keeps_and_scores_the_averaged_weights(prepared) -> None:
    run = fold_run(ema(prepared), StopAt(10**9))
    run.run()
    assert run.average.updates == run.windows  # one update a step that updated the weights
    saved = load_file(layout.experiment_dir(run.cfg) / "fold0" / layout.WEIGHTS)
    names = [n for n, p in run.model.named_parameters() if p.requires_grad]
    kept = dict(zip(names, run.average.average, strict=True))
    live = dict(run.model.named_parameters())
    assert all(torch.equal(saved[n], kept[n]) for n in names)  # one epoch, one evaluation: the end's average
    assert not all(torch.equal(saved[n], live[n].detach()) for n in names)


def test_a_resumed_fold_averages_on_as_an_uninterrupted_one(prepared, tmp_path) -> None:
    cfg = ema(prepared)
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
