"""Memory (pipeline.core.memory): auto-fit and its whole-step probe, and the out-of-memory retry: same effective
batch, the epoch finishes, the result is the same."""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.core import batching, memory, modeling, optim, precision
from pipeline.inputs.tokens import Ragged
from pipeline.schema import TrainConfig
from tests.helpers.tinymodel import tiny_classifier
from tests.helpers.training import train_parts

ROOT = Path(__file__).resolve().parents[2]
MB = 2**20
CPU = torch.device("cpu")


def tiny_model() -> torch.nn.Module:
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
    opt = optim.make_optimizer(model, cfg, torch.device("cpu"))
    sched = optim.make_scheduler(opt, 0.0, 10)
    scaler = precision.make_scaler("fp32", torch.device("cpu"))
    return train_parts(
        model, plan, data, labels, opt, sched, scaler, cfg, "fp32", torch.device("cpu"), pad_id=1, progress=False
    )


def test_out_of_memory_halves_and_keeps_the_result(capsys) -> None:
    rng = np.random.default_rng(0)
    data = Ragged.from_lists([[0, *rng.integers(5, 200, int(n)).tolist(), 2] for n in rng.integers(3, 20, 26)])
    labels = rng.integers(0, 2, 26).astype(np.float32)
    cfg = TrainConfig(micro_batch=4, accumulation=2, lr=1e-3, max_grad_norm=1.0)
    batches = batching.length_grouped_batches(data.lengths, cfg.micro_batch, seed=0, epoch=0)
    plan = batching.micro_steps(batches, 1)  # 7 micro-batches (the last of 2 rows): 4 windows, the last short

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
    halved = batching.halve_window(window)
    assert [b.tolist() for ms in halved for b in ms] == [[0, 1, 2], [3, 4], [5]]


# A model whose embedding dominates (100k x 64): what the step adds (the dense embedding gradient, the AdamW
# moments) is most of the memory, so an estimate that leaves the step out misses by a third
MEASURE = """
import json, sys
import numpy as np, torch
from tests.helpers.tinymodel import tiny_classifier
from pipeline.core import loop, memory, modeling, optim, precision
from pipeline.schema import TrainConfig
from pipeline.inputs.tokens import Ragged

torch.set_num_threads(1)
model = tiny_classifier(vocab=100_000, hidden=64, layers=1, intermediate=128)
modeling.sparse_embedding_grad(model)
cpu = torch.device("cpu")
micro, seq = 4, 32
if sys.argv[1] == "estimate":
    memory.reset_peak_rss()
    base, p1, p2 = memory.cpu_probe_peaks(model, model, seq, "fp32", cpu, TrainConfig())
    print(json.dumps(memory.cpu_estimate(base, p1, p2, micro) - base))
else:
    rng = np.random.default_rng(0)
    data = Ragged.from_lists([rng.integers(5, 100_000, seq).tolist() for _ in range(micro)])
    cfg = TrainConfig(micro_batch=micro, accumulation=1)
    opt = optim.make_optimizer(model, cfg, cpu)
    sched, scaler = optim.make_scheduler(opt, 0.0, 1), precision.make_scaler("fp32", cpu)
    memory.reset_peak_rss()
    base = memory.rss_bytes()
    job = loop.Job(model, data, np.zeros(micro, np.float32), opt, scaler, cfg, "fp32", cpu, 1, 0, 1)
    loop.train_epoch(job, [[np.arange(micro)]], sched, progress=False)
    print(json.dumps(memory.rss_bytes("VmHWM") - base))
"""


def measured(what: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, what], cwd=ROOT, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.e2e  # measures a step in a process of its own
def test_cpu_estimate_matches_a_measured_training_step() -> None:
    """The estimate at micro-batch 4, against the peak of a real optimizer step at 4 (each in a fresh process)."""
    if not memory.reset_peak_rss():
        pytest.skip("the peak resident memory cannot be reset here (/proc/self/clear_refs)")
    estimate, step = measured("estimate"), measured("step")
    assert step > 40 * 2**20  # the dense gradient (25 MB) and the moments (51 MB) are really allocated
    print(f"estimate {estimate / MB:.1f} MB, measured {step / MB:.1f} MB")
    assert 0.8 < estimate / step < 1.25, (estimate / MB, step / MB)


def test_fit_picks_the_largest_micro_batch_under_the_cap(monkeypatch) -> None:
    # probes measured: 100 MB before, 30 MB at micro-batch 1, 40 MB at 2 (10 MB an example)
    monkeypatch.setattr(memory, "cpu_probe_peaks", lambda *a: (100 * MB, 30 * MB, 40 * MB))
    model = tiny_model()
    for cap_mb, want in [(1000, 8), (190, 4), (159, 2), (135, 1), (50, 1)]:
        micro, note = memory.fit_micro_batch(model, 8, 16, cap_mb * MB / memory.GB, "fp32", torch.device("cpu"))
        assert micro == want, (cap_mb, note)
    assert "estimate" in note and memory.divisors_down(12) == [12, 6, 4, 3, 2, 1]


def test_fit_under_a_token_budget_prices_the_rows_the_budget_holds(monkeypatch) -> None:
    """train.token_budget=32 at 16 tokens holds 2 rows whatever the micro-batch: 8 fits where 2 rows do."""
    monkeypatch.setattr(memory, "cpu_probe_peaks", lambda *a: (100 * MB, 30 * MB, 40 * MB))
    model, cpu = tiny_model(), torch.device("cpu")
    budget = TrainConfig(token_budget=32)
    assert [memory.probed_rows(m, 16, "fp32", budget) for m in (8, 2, 1)] == [2, 2, 1]
    assert memory.fit_micro_batch(model, 8, 16, 159 * MB / memory.GB, "fp32", cpu, budget)[0] == 8
    assert memory.fit_micro_batch(model, 8, 16, 159 * MB / memory.GB, "fp32", cpu)[0] == 2  # without: 2 rows of 16


# ---------------------------------------------------------------- auto-fit probes the whole step


@pytest.mark.usefixtures("torch_one_thread")
def test_probe_runs_a_whole_step_and_leaves_the_weights() -> None:
    model = tiny_classifier(vocab=300, hidden=32)
    modeling.sparse_embedding_grad(model)
    before = copy.deepcopy(model.state_dict())
    steps = []
    real = optim.optimizer_step

    def spy(*a, **k):
        steps.append(1)
        return real(*a, **k)

    optim.optimizer_step, saved = spy, optim.optimizer_step
    try:
        memory.probe(model, model, 2, 16, "fp32", CPU, TrainConfig())
    finally:
        optim.optimizer_step = saved
    assert steps == [1]  # densify, clip and the optimizer step are part of what is measured
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k  # learning rate 0: the probe moved nothing
    assert all(p.grad is None for p in model.parameters())


def auto_config(**train):
    from pipeline import config

    cfg = config.load("sample", ["train.checkpointing=auto", "model.max_length=32"])
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **train))


@pytest.mark.parametrize(
    ("cap_gb", "on", "says"),
    [(0.0, False, "a CPU without train.max_memory_gb"), (64.0, False, "cpu estimate"), (1e-4, True, "cpu estimate")],
)
def test_auto_checkpointing_is_on_only_where_the_micro_batch_would_not_fit_without_it(cap_gb, on, says) -> None:
    """train.checkpointing=auto: measured once the model is built; the fold's header says which and why."""
    from pipeline.core import distributed, foldmodel

    model = tiny_classifier(vocab=200, hidden=32, layers=2)
    cfg, why = foldmodel.checkpointing(auto_config(max_memory_gb=cap_gb), model, model, "fp32", distributed.Dist())
    assert cfg.train.checkpointing is on and model.is_activation_checkpointing is on
    assert why.startswith("auto: ") and says in why
    header = foldmodel.banner(cfg, distributed.Dist(), "fp32", 10, 5, 3, model, why)
    assert f"checkpointing {'on' if on else 'off'} (auto: " in header


@pytest.mark.parametrize("setting", [True, False])
def test_checkpointing_set_by_hand_is_left_as_it_is(setting) -> None:
    from pipeline.core import distributed, foldmodel

    model = tiny_classifier(vocab=200, hidden=32, layers=2)
    cfg, why = foldmodel.checkpointing(auto_config(checkpointing=setting, max_memory_gb=1e-4), model, model, "fp32",
                                       distributed.Dist())  # fmt: skip
    assert cfg.train.checkpointing is setting and why == "" and not model.is_activation_checkpointing


@pytest.mark.parametrize("device, emptied", [(torch.device("cuda:1"), True), (CPU, False)])
def test_release_collects_then_empties_the_cuda_cache(monkeypatch, device: torch.device, emptied: bool) -> None:
    """Between folds: the collector first (empty_cache gives back only blocks no live tensor holds), then, on
    CUDA, the allocator's cache."""
    import gc

    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append("collect"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    memory.release(device)
    assert calls == ["collect", "empty_cache"] if emptied else calls == ["collect"]


def test_ddp_broadcasts_no_buffers_so_the_probe_is_no_collective(monkeypatch) -> None:
    from pipeline.core import distributed, foldmodel

    made = {}
    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", lambda model, **kw: made.update(kw) or model)
    model = tiny_model()
    assert foldmodel.wrap(model, distributed.Dist(rank=0, world=2)) is model
    assert made["broadcast_buffers"] is False and made["gradient_as_bucket_view"] is True
    # what is not broadcast must not change: the model's buffers are constants, a training step leaves them
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    before = {n: b.clone() for n, b in model.named_buffers()}
    memory.probe(model, model, 2, 16, "fp32", CPU, TrainConfig())
    assert before and all(torch.equal(before[n], b) for n, b in model.named_buffers())


def on_fake_card(monkeypatch, total: int, peak: int) -> torch.device:
    """A CUDA card of `total` bytes whose probe peaks at `peak`, seen through memory's seams (no GPU here)."""
    import contextlib
    import types

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace(total_memory=total))
    monkeypatch.setattr(torch.random, "fork_rng", lambda devices=(): contextlib.nullcontext())
    monkeypatch.setattr(memory, "cuda_peak", lambda *a: peak)
    return torch.device("cuda:0")


@pytest.mark.parametrize(
    ("peak_gib", "cap_gb", "fit"),
    [(14.8, 0.0, True), (15.0, 0.0, False), (15.9, 0.0, False), (15.0, 40.0, False), (10.0, 9.0, False)],
)
def test_a_step_fits_a_card_only_with_a_margin_left(monkeypatch, peak_gib, cap_gb, fit) -> None:
    """16 GiB less max(1 GiB, 7%) = 14.88 GiB: a peak above it counts as out of memory, whatever max_memory_gb."""
    device = on_fake_card(monkeypatch, 16 * memory.GB, int(peak_gib * memory.GB))
    ok, how = memory.fits(None, None, 4, 16, cap_gb, "fp16", device, TrainConfig())
    assert ok is fit, how
    assert memory.cuda_cap(0, device) == int(16 * memory.GB * 0.93)
    assert memory.cuda_cap(0, on_fake_card(monkeypatch, 8 * memory.GB, 0)) == 7 * memory.GB  # 1 GiB > 7% of 8


@pytest.mark.parametrize(("fits", "refused"), [([True, True], False), ([True, False], True)])
def test_ddp_on_gpus_refuses_a_step_without_margin_up_front(monkeypatch, fits, refused) -> None:
    """Under DDP an out-of-memory error is not halved: a step that leaves any rank's card no margin is refused at
    the fold's start, on every rank together, with what to lower."""
    from pipeline.core import distributed, foldmodel
    from pipeline.errors import PipelineError

    monkeypatch.setattr(memory, "fits", lambda *a: (fits[0], "peak 14.0 GB of 14.9 GB on cuda:0"))
    monkeypatch.setattr(
        distributed, "gather_objects", lambda d, mine: [mine, (fits[1], "peak 15.2 GB of 14.9 GB on cuda:1")]
    )
    cfg = auto_config(checkpointing=False)
    gpus = distributed.Dist(rank=0, world=2, device=torch.device("cuda:0"))
    if not refused:
        foldmodel.ddp_headroom(cfg, None, None, "fp16", gpus)
        return
    with pytest.raises(PipelineError) as e:
        foldmodel.ddp_headroom(cfg, None, None, "fp16", gpus)
    assert "process 1 no memory margin (peak 15.2 GB of 14.9 GB on cuda:1)" in str(e.value)
    assert "stops the fold rather than halving" in str(e.value) and "train.checkpointing=true" in str(e.value)
    foldmodel.ddp_headroom(cfg, None, None, "fp16", distributed.Dist(rank=0, world=2))  # CPUs: nothing measured


def test_a_token_budget_checks_the_memory_of_the_longest_rows_it_holds(monkeypatch) -> None:
    """Under train.token_budget the fold's memory checks step the batch of the longest rows the budget holds (64
    tokens of rows 32 wide: 2 rows, not micro_batch's 16), and the banner gives the plan in tokens."""
    from pipeline.core import distributed, foldmodel

    asked = []
    monkeypatch.setattr(memory, "fits", lambda net, model, micro, seq, *a: asked.append((micro, seq)) or (True, "ok"))
    monkeypatch.setattr(distributed, "gather_objects", lambda d, mine: [mine])
    cfg = auto_config(max_memory_gb=1.0, micro_batch=16, token_budget=64)
    model = tiny_classifier(vocab=200, hidden=32, layers=2)
    cfg, why = foldmodel.checkpointing(cfg, model, model, "fp16", distributed.Dist())
    foldmodel.ddp_headroom(cfg, model, model, "fp16", distributed.Dist(rank=0, world=2, device=torch.device("cuda:0")))
    assert asked == [(2, 32), (2, 32)] and "micro-batch 2 x 32 tokens without it" in why
    header = foldmodel.banner(cfg, distributed.Dist(), "fp16", 10, 5, 3, model, why)
    assert "micro-batches of at most 64 tokens and 16 rows (train.token_budget)" in header
    assert "at most 32 rows, 128 tokens a step" in header  # accumulation 2, one process
