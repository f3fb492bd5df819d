"""One fold trained in process (pipeline.core.fold.FoldRun): a stop at an epoch's last step, checkpointing in
the real fold, a fold with one class, and a resumed fold that keeps the plan auto-fit chose."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from pipeline import layout
from pipeline.core import distributed
from pipeline.core.fold import FoldInputs, FoldRun
from pipeline.core.resume import Interrupted
from pipeline.errors import PipelineError
from pipeline.inputs import tables
from tests.helpers.folds import StopAt, fold_run

pytestmark = pytest.mark.usefixtures("torch_one_thread")

# the `prepared` fixture (a tiny two-fold experiment, tables and tokens built) is in tests/conftest.py


def test_stop_at_an_epochs_last_step_resumes_into_its_evaluation(prepared, tmp_path) -> None:
    cfg = prepared
    reference = dataclasses.replace(cfg, models_dir=str(tmp_path / "reference"))
    want = fold_run(reference, StopAt(10**9)).run()

    run = fold_run(cfg, StopAt(10**9))
    run.stop = StopAt(run.windows)  # Ctrl-C during the epoch's last optimizer step
    with pytest.raises(Interrupted):
        run.run()
    fold_dir = layout.experiment_dir(cfg) / "fold0"
    state = torch.load(fold_dir / layout.RESUME, weights_only=False)
    assert state["step"]["window"] == run.windows and state["history"] == []  # trained, not yet evaluated
    assert not (fold_dir / "done.json").exists()

    # a kill during the evaluation leaves exactly this state; the rerun evaluates and finishes
    got = fold_run(cfg, StopAt(10**9)).run()
    assert got["auc"] == pytest.approx(want["auc"], abs=1e-9)
    history = [json.loads(line) for line in (fold_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == 1 and history[0]["steps_run"] == 0  # nothing trained twice
    assert (fold_dir / "done.json").exists() and not (fold_dir / layout.RESUME).exists()


def test_the_train_stage_runs_with_checkpointing(prepared) -> None:
    """Checkpointing recomputes each layer's forward in backward: two forwards per micro-batch, not one."""
    counts = {}
    for on in (True, False):
        cfg = dataclasses.replace(prepared, train=dataclasses.replace(prepared.train, checkpointing=on))
        run = fold_run(cfg, StopAt(10**9))  # the model as the stage builds it
        calls = []
        for layer in run.model.encoder.encoder.layer:
            layer.intermediate.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        run.train_epoch(0)
        counts[on] = len(calls)
    layers = prepared.model.tiny.layers
    micro_batches = len(run.epoch_plan(0))
    assert counts[False] == layers * micro_batches
    assert counts[True] == 2 * layers * micro_batches


def test_a_fold_with_one_class_is_refused(prepared) -> None:
    table, _, _ = tables.load_table(prepared)
    table.loc[table["fold"] == 1, "toxic"] = 0
    with pytest.raises(PipelineError, match="fold 1: its validation rows hold one class"):
        FoldRun(FoldInputs(prepared, 1, table, None, None, "x"), distributed.Dist(), StopAt(1))


def test_a_resumed_fold_keeps_the_micro_batch_auto_fit_chose(prepared, monkeypatch) -> None:
    """The saved steps count windows of the fitted plan: a resume must not fit again (memory may differ now)."""
    from pipeline.core import memory

    picks = iter([8, 2])  # the second fit would choose another micro-batch
    monkeypatch.setattr(memory, "fit_micro_batch", lambda *a, **k: (next(picks), "fake"))
    cfg = dataclasses.replace(prepared, train=dataclasses.replace(prepared.train, max_memory_gb=1.0))
    with pytest.raises(Interrupted):
        fold_run(cfg, StopAt(3)).run()
    resumed = fold_run(cfg, StopAt(10**9))
    assert (resumed.cfg.train.micro_batch, resumed.cfg.train.accumulation) == (8, 4)  # 16 x 2 fitted to 8 x 4
    assert resumed.progress.step.window == 3
    resumed.run()
