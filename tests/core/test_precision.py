"""Mixed precision on the real training paths (pipeline.core.precision, loop, optim, fold): fp16 with its GradScaler
run on the CPU (CPU autocast computes float16, and torch.amp.GradScaler("cpu") scales like CUDA's), and what trains
under bf16 and `auto`: fp32 weights, whatever runs under autocast."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from pipeline import config, layout
from pipeline.core import loop, precision
from pipeline.core.resume import Interrupted
from pipeline.inputs.tokens import Ragged
from tests.helpers.folds import StopAt, fold_run
from tests.helpers.tinymodel import SAMPLE_PAD, SAMPLE_VOCAB, sample_tiny

pytestmark = pytest.mark.usefixtures("torch_one_thread")

CPU = torch.device("cpu")


def with_train(cfg, **changes):
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **changes))


def fast_growing_scaler(monkeypatch) -> None:
    """The fold's GradScaler doubling its scale after every good step (torch's default waits 2,000): in a fold of a
    few steps the scale then moves, overflows and backs off, so a resume that lost it would train otherwise."""
    monkeypatch.setattr(precision, "make_scaler", lambda name, device: torch.amp.GradScaler(
        device.type, enabled=name == "fp16", growth_interval=1))  # fmt: skip


class Watch:
    """A stop flag that never stops: asked once per optimizer step, after it, it records `look(run)`."""

    def __init__(self, look) -> None:
        self.run, self.look, self.seen = None, look, []

    @property
    def raised(self) -> bool:
        self.seen.append(self.look(self.run))
        return False


def watched(cfg, look) -> tuple:
    """The fold of `cfg` (fold 0) with a Watch as its stop flag: (run, watch)."""
    watch = Watch(look)
    watch.run = run = fold_run(cfg, watch)
    return run, watch


def weights(run) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in run.model.parameters()])


def step_records(cfg) -> list[dict]:
    lines = (layout.fold_dir(cfg, 0) / layout.STEPS).read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_fp16_fold_skips_overflowed_steps_and_resumes_as_uninterrupted(prepared, tmp_path, monkeypatch) -> None:
    """The real fold in fp16: a step whose scaled gradients overflow is skipped (no update, no schedule step, the
    scale halved), and a fold stopped after such steps resumes with the scaler's state: the steps after the resume
    are the uninterrupted run's, scale and skips included, and so is the fold's AUC."""
    fast_growing_scaler(monkeypatch)
    cfg = with_train(prepared, precision="fp16", log_every_steps=1, save_every_steps=1)
    reference = dataclasses.replace(cfg, models_dir=str(tmp_path / "reference"))
    run, watch = watched(reference, weights)
    want = run.run()
    steps = step_records(reference)
    skipped = [r for r in steps if r["grad_norm"] is None]
    assert skipped and skipped[0]["step"] < 12, steps  # an overflow before the stop below
    assert len(watch.seen) == len(steps)
    for k, (before, r) in enumerate(zip(steps, steps[1:]), start=1):
        if r["grad_norm"] is None:  # skipped: no update, the scale backs off, the schedule does not move
            assert torch.equal(watch.seen[k], watch.seen[k - 1]), r
            assert r["loss_scale"] == before["loss_scale"] / 2 and r["lr"] == before["lr"] and r["skipped"] == 1
        else:
            assert not torch.equal(watch.seen[k], watch.seen[k - 1]), r

    run = fold_run(cfg, StopAt(12))
    with pytest.raises(Interrupted):
        run.run()
    state = torch.load(layout.fold_dir(cfg, 0) / layout.RESUME, weights_only=True)
    assert state["scaler"]["scale"] == steps[11]["loss_scale"] != 2.0**16  # saved: not the scaler's first scale
    got = fold_run(cfg, StopAt(10**9)).run()
    assert [strip(r) for r in step_records(cfg)] == [strip(r) for r in steps]
    assert got["auc"] == pytest.approx(want["auc"], abs=1e-9)


def strip(record: dict) -> dict:
    """A step record less its timings and memory, which differ from run to run."""
    return {k: v for k, v in record.items() if k not in ("examples_per_second", "tokens_per_second", "peak_memory_mb")}


def toy_data(n: int, seed: int = 0) -> tuple[Ragged, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = [[0, *rng.integers(5, SAMPLE_VOCAB, size=int(k)).tolist(), 2] for k in rng.integers(3, 18, size=n)]
    return Ragged.from_lists(rows), (np.arange(n) % 2).astype(np.float32)


def one_clipped_step(name: str, max_grad_norm: float) -> tuple[dict[str, torch.Tensor], float]:
    """One window (two micro-batches of 4) through the real loop and optimizer step, plain SGD (a weight moves by
    lr x its gradient): (each weight's change, the gradient norm the step reports)."""
    model = sample_tiny(seed=5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    data, labels = toy_data(8)
    cfg = dataclasses.replace(config.load("sample", []).train, micro_batch=4, accumulation=2,
                              max_grad_norm=max_grad_norm)  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    norms = []
    job = loop.Job(model, data, labels, opt, precision.make_scaler(name, CPU), cfg, name, CPU, SAMPLE_PAD, 0, 1)
    loop.train_epoch(job, [[np.arange(4)], [np.arange(4, 8)]], sched, progress=False,
                     after_window=lambda state, w: norms.append(w.grad_norm) and False)  # fmt: skip
    assert len(norms) == 1 and math.isfinite(norms[0])
    return {n: p.detach() - before[n] for n, p in model.named_parameters()}, norms[0]


def test_fp16_clips_the_unscaled_gradients() -> None:
    """GradScaler's gradients are the true ones times 65,536: clipped before unscale_, a step bound by max_grad_norm
    would be 65,536 times too short and the norm reported 65,536 times too large. fp16 clips as fp32 does."""
    free, free_norm = one_clipped_step("fp32", 1e9)
    clip = free_norm / 4  # binding: the step is a quarter of the free one
    want, want_norm = one_clipped_step("fp32", clip)
    got, got_norm = one_clipped_step("fp16", clip)
    assert got_norm == pytest.approx(want_norm, rel=2e-2)  # the true norm, to fp16's rounding
    moved = math.sqrt(sum(float(d.pow(2).sum()) for d in got.values()))
    assert moved == pytest.approx(0.1 * clip, rel=2e-2)  # lr x the clipped norm
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0.1, atol=2e-3 * 0.1 * clip)


def dtypes(run) -> set[torch.dtype]:
    """The dtypes of the parameters the fold's optimizer updates."""
    return {p.dtype for g in run.optimizer.param_groups for p in g["params"]}


@pytest.mark.parametrize("setting", ["bf16", "auto"])
def test_bf16_and_auto_train_fp32_weights(prepared, monkeypatch, setting) -> None:
    """bf16 is autocast's business: the weights the optimizer updates stay fp32 (bf16 weights would lose every
    update smaller than 1/256 of a weight). `auto` on a CPU with native bf16 that measured bf16 faster, too."""
    from pipeline.core import memory

    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)  # as on an AMX CPU
    monkeypatch.setattr(memory, "step_rates", lambda *a: {"bf16": 20.0, "fp32": 10.0})  # bf16 measured faster
    run, watch = watched(with_train(prepared, precision=setting), dtypes)
    assert run.precision == "bf16"
    run.run()
    assert len(watch.seen) >= run.windows and set().union(*watch.seen) == {torch.float32}
