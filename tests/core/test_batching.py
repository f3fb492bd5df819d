"""Micro-batches cut by a token budget (train.token_budget): within the budget, every row once, the same count on
every rank and every epoch, and a window of unequal micro-batches with the gradient of one big batch."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import config, fingerprint
from pipeline.core import batching
from tests.core.test_loop import assert_grads_close, direct_grads, run_recorded, toy_data, train_cfg
from tests.helpers.tinymodel import sample_tiny

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def lengths_of(n: int, seed: int = 0, hi: int = 800) -> np.ndarray:
    """Mostly short comments and a few long ones, as the competition's are."""
    rng = np.random.default_rng(seed)
    return np.minimum(rng.geometric(1 / 80, size=n) + 2, hi)


def budget_batches(lengths, budget=512, micro=32, multiple=8, seed=1, epoch=0, world=1):
    return batching.epoch_batches(lengths, train_cfg(micro_batch=micro, token_budget=budget), multiple, seed, epoch,
                                  world)  # fmt: skip


def test_batches_keep_to_the_budget_and_read_every_row_once() -> None:
    lengths = lengths_of(2000)
    batches = budget_batches(lengths)
    assert sorted(np.concatenate(batches).tolist()) == list(range(2000))  # every row exactly once
    for b in batches:
        padded = len(b) * int(batching.padded_width(lengths[b].max(), 8))  # as collate pads it
        assert len(b) <= 32 and (padded <= 512 or len(b) == 1), (len(b), padded)
    long = [b for b in batches if lengths[b].max() > 512]
    assert long and all(len(b) == 1 for b in long)  # a row longer than the budget alone, read whole
    rows_by_width = {int(batching.padded_width(lengths[b].max(), 8)): len(b) for b in batches}
    assert rows_by_width[16] == 32 and rows_by_width[256] == 2  # short comments many to a batch, long ones few


def test_the_same_count_every_epoch_a_new_order_reproducible_by_seed() -> None:
    lengths = lengths_of(1500, seed=3)
    first = budget_batches(lengths, epoch=0)
    assert len({len(b) for b in first}) > 2  # cut by the budget: rows a batch vary with their length
    again = budget_batches(lengths, epoch=0)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))  # reproducible
    for epoch in (1, 2, 3):  # the schedule and the resume state count windows of epoch 0
        other = budget_batches(lengths, epoch=epoch)
        assert len(other) == len(first)
        assert not np.array_equal(np.concatenate(other), np.concatenate(first))  # a new order
    assert not np.array_equal(np.concatenate(budget_batches(lengths, seed=2)), np.concatenate(first))


@pytest.mark.parametrize("world", [2, 3])
def test_every_rank_gets_the_same_number_of_budget_batches(world: int) -> None:
    lengths = lengths_of(301, seed=world)
    batches = budget_batches(lengths, world=world)
    steps = batching.micro_steps(batches, world)
    assert len(batches) % world == 0 and all(len(s) == world for s in steps)
    assert len({len(b) for b in batches}) > 2  # cut by the budget
    assert set(np.concatenate(batches).tolist()) == set(range(301))


def test_no_budget_cuts_the_batches_of_today() -> None:
    lengths = lengths_of(700, seed=5)
    got = batching.epoch_batches(lengths, train_cfg(micro_batch=16, token_budget=0), 8, seed=4, epoch=1, world=2)
    want = batching.length_grouped_batches(lengths, 16, seed=4, epoch=1, world=2)
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_a_window_of_unequal_micro_batches_has_the_gradient_of_one_batch() -> None:
    """fp32: the loss of each micro-batch is its sum over the examples of the whole window, so rows weigh the same
    whichever micro-batch holds them (a mean per micro-batch would weigh a lone long row as a whole batch)."""
    data, labels = toy_data(24, seed=7, lo=3, hi=30)
    cfg = train_cfg(micro_batch=8, token_budget=48, accumulation=3)
    steps = batching.micro_steps(batching.epoch_batches(data.lengths, cfg, 1, seed=0, epoch=0), 1)
    sizes = [len(s[0]) for s in steps]
    assert len(set(sizes[:3])) > 1, sizes  # the first window's micro-batches are of unequal rows
    model = sample_tiny(seed=3)
    _, opt, _ = run_recorded(model, steps, data, labels, cfg)
    windows = batching.accumulation_windows(len(steps), 3)
    assert len(opt.grads) == len(windows)
    for w, got in zip(windows, opt.grads):
        assert_grads_close(got, direct_grads(model, data, labels, np.concatenate([steps[k][0] for k in w])))


def test_halving_a_budget_window_keeps_its_rows() -> None:
    lengths = lengths_of(200, seed=9)
    steps = batching.micro_steps(budget_batches(lengths, world=2), 2)
    window = steps[:3]
    assert len({len(b) for ms in window for b in ms}) > 1  # unequal micro-batches
    halved = batching.halve_window(window)
    for r in range(2):
        assert sorted(np.concatenate([ms[r] for ms in halved]).tolist()) == sorted(
            np.concatenate([ms[r] for ms in window]).tolist()
        )
    assert max(len(b) for ms in halved for b in ms) < max(len(b) for ms in window for b in ms)  # rows are cut


def test_worst_batch_prices_the_budget_not_micro_batch_times_max_length() -> None:
    assert batching.worst_batch(8, 0, 512) == (512, 8 * 512)  # no budget: as today
    assert batching.worst_batch(8, 2048, 512) == (512, 2048)
    assert batching.worst_batch(8, 256, 1000) == (1000, 1000)  # a row past the budget is read alone, whole
    assert batching.worst_batch(2, 4096, 512) == (512, 1024)  # micro_batch still bounds the rows


def test_the_budget_counts_in_the_fingerprint_only_away_from_its_default() -> None:
    base = config.load("sample", [])
    assert "token_budget" not in fingerprint.settings(base)["train"]  # folds trained before the setting still count
    budget = config.with_overrides(base, ["train.token_budget=1024"])
    assert fingerprint.settings(budget)["train"]["token_budget"] == 1024
