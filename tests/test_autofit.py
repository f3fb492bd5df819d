"""Auto-fit and the out-of-memory retry: same effective batch, the epoch finishes, the result is the same."""

from __future__ import annotations

import copy

import numpy as np
import torch
from tinymodel import tiny_classifier
from transformers import XLMRobertaForSequenceClassification

from pipeline import loop, memory
from pipeline.config import TrainConfig
from pipeline.tokens import Ragged


def tiny_model() -> XLMRobertaForSequenceClassification:
    return tiny_classifier()


class OutOfMemoryAbove(torch.nn.Module):
    """Raises torch.OutOfMemoryError for any batch of more than `limit` rows, as a small card would."""

    def __init__(self, inner: torch.nn.Module, limit: int) -> None:
        super().__init__()
        self.inner, self.limit, self.sizes, self.raised = inner, limit, [], 0

    def forward(self, **batch):
        n = batch["input_ids"].shape[0]
        if n > self.limit:
            self.raised += 1
            raise torch.OutOfMemoryError(f"simulated: {n} rows > {self.limit}")
        self.sizes.append(n)
        return self.inner(**batch)


def train(model, plan, data, labels, cfg):
    opt = loop.make_optimizer(model, cfg, torch.device("cpu"))
    sched = loop.make_scheduler(opt, 0.0, 10)
    scaler = loop.make_scaler("fp32", torch.device("cpu"))
    return loop.train_epoch(
        model, plan, data, labels, opt, sched, scaler, cfg, "fp32", torch.device("cpu"), pad_id=1, progress=False
    )


def test_out_of_memory_halves_and_keeps_the_result(capsys) -> None:
    rng = np.random.default_rng(0)
    data = Ragged.from_lists([[0, *rng.integers(5, 200, int(n)).tolist(), 2] for n in rng.integers(3, 20, 26)])
    labels = rng.integers(0, 2, 26).astype(np.float32)
    cfg = TrainConfig(micro_batch=4, accumulation=2, lr=1e-3, max_grad_norm=1.0)
    batches = loop.length_grouped_batches(data.lengths, cfg.micro_batch, seed=0, epoch=0)
    plan = loop.micro_steps(batches, 1)  # 7 micro-batches (the last of 2 rows): 4 windows, the last short

    reference = tiny_model()
    wrapped = OutOfMemoryAbove(copy.deepcopy(reference), limit=2)
    ref_state = train(reference, plan, data, labels, cfg)
    state = train(wrapped, plan, data, labels, cfg)

    assert wrapped.raised == 1 and state.halvings == 1  # the first window failed once, then ran halved
    assert max(wrapped.sizes) == 2 and sum(wrapped.sizes) == 26  # every row exactly once: the epoch finished
    assert state.window == ref_state.window == 4 and state.examples == 26  # same windows: same effective batch
    assert "out of memory" in capsys.readouterr().err
    # each window's gradient is still the mean over its rows: the weights match the run that never ran out
    for p, q in zip(wrapped.inner.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    assert abs(state.loss_sum - ref_state.loss_sum) < 1e-3


def test_halve_window_keeps_rows() -> None:
    window = [[np.arange(5)], [np.arange(5, 6)]]
    halved = loop.halve_window(window)
    assert [b.tolist() for ms in halved for b in ms] == [[0, 1, 2], [3, 4], [5]]


def test_fit_micro_batch_cpu_estimate() -> None:
    model = tiny_model()
    micro, note = memory.fit_micro_batch(model, 8, 16, 64.0, "fp32", torch.device("cpu"))
    assert micro == 8 and "estimate" in note  # a generous cap: no accumulation needed
    micro, note = memory.fit_micro_batch(model, 8, 16, 0.001, "fp32", torch.device("cpu"))
    assert micro == 1  # nothing fits: the smallest, said so
    assert memory.divisors_down(12) == [12, 6, 4, 3, 2, 1]
