"""The training loop (pipeline.core.loop) and its parts: accumulation, checkpointing, mixed precision
(pipeline.core.precision), batching (pipeline.core.batching), the optimizer and schedule (pipeline.core.optim),
and the loop's sharp edges: fp32 master weights from half-precision folders, fp16 with a GradScaler, sparse
embedding gradients, the out-of-memory retry around the optimizer step, and DDP world padding.

Every equivalence test runs a tiny XLM-R (2 layers, hidden 32) in fp32 with dropout 0, so the loop's
result can be compared with the gradient of one big batch computed directly, to fp32 rounding.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pipeline import config
from pipeline.core import batching, loop, modeling, optim, precision
from pipeline.core.precision import make_scaler
from pipeline.errors import PipelineError
from pipeline.inputs.tokens import Ragged
from tests.helpers.tinymodel import SAMPLE_PAD, SAMPLE_VOCAB, sample_tiny, tiny_classifier
from tests.helpers.training import train_parts

pytestmark = pytest.mark.usefixtures("torch_one_thread")

CPU = torch.device("cpu")
VOCAB, PAD = SAMPLE_VOCAB, SAMPLE_PAD


def train_cfg(**kw):
    base = dict(micro_batch=3, accumulation=2, max_grad_norm=1e9, precision="fp32", lr=1e-2, warmup=0.0)
    return dataclasses.replace(config.load("sample", []).train, **{**base, **kw})


def toy_data(n: int, seed: int = 0, lo: int = 3, hi: int = 20) -> tuple[Ragged, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = [[0, *rng.integers(5, VOCAB, size=int(k) - 2).tolist(), 2] for k in rng.integers(lo, hi, size=n)]
    labels = rng.integers(0, 2, size=n).astype(np.float32)
    labels[:2] = [0, 1]  # both classes
    return Ragged.from_lists(rows), labels


def plan(rows: np.ndarray, micro: int) -> list[list[np.ndarray]]:
    """Micro-steps (world 1) over `rows` in this order: consecutive chunks of `micro`."""
    return [[rows[i : i + micro]] for i in range(0, len(rows), micro)]


class RecordingOptimizer:
    """Stands in for the optimizer: records each step's gradients (clones) and how many forwards preceded it."""

    def __init__(self, model: torch.nn.Module, forwards: list[int]):
        self.model = model
        self.forwards = forwards
        self.param_groups = [{"params": list(model.parameters()), "lr": 0.0}]
        self.grads: list[dict[str, torch.Tensor]] = []
        self.steps_at: list[int] = []
        self.zero_grads = 0

    def step(self):
        self.grads.append({n: p.grad.detach().clone() for n, p in self.model.named_parameters() if p.grad is not None})
        self.steps_at.append(self.forwards[0])

    def zero_grad(self, set_to_none: bool = True):
        self.zero_grads += 1
        for p in self.model.parameters():
            p.grad = None


class CountingScheduler:
    def __init__(self):
        self.steps = 0

    def step(self):
        self.steps += 1


def run_recorded(model, steps, data, labels, cfg, **kw):
    forwards = [0]
    hook = model.register_forward_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))
    opt, sched = RecordingOptimizer(model, forwards), CountingScheduler()
    try:
        state = train_parts(
            model,
            steps,
            data,
            labels,
            opt,
            sched,
            precision.make_scaler("fp32", CPU),
            cfg,
            "fp32",
            CPU,
            pad_id=PAD,
            progress=False,
            **kw,
        )
    finally:
        hook.remove()
    return state, opt, sched


def direct_grads(model, data: Ragged, labels: np.ndarray, rows: np.ndarray) -> dict[str, torch.Tensor]:
    """The gradient of one batch holding `rows`: mean BCE-with-logits, computed without the loop."""
    model.train()
    model.zero_grad(set_to_none=True)
    batch = batching.collate(data, rows, PAD, 1, labels)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    F.binary_cross_entropy_with_logits(logits, batch["labels"]).backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def assert_grads_close(got: dict, want: dict, atol=1e-6, rtol=1e-5) -> None:
    assert got.keys() == want.keys()
    assert any(float(g.abs().max()) > 1e-4 for g in want.values())  # not trivially zero
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=atol, rtol=rtol, msg=lambda m, n=name: f"{n}: {m}")


def sgd_epoch(model, steps, data, labels, cfg, precision="fp32", scaler=None, optimizer=None):
    """One epoch with plain SGD (weights move by exactly lr x gradient), unless another optimizer is given."""
    opt = optimizer or torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    scaler = scaler or make_scaler(precision, CPU)
    state = train_parts(model, steps, data, labels, opt, sched, scaler, cfg, precision, CPU, pad_id=PAD, progress=False)
    return state, sched


def assert_same_weights(a, b, **tol) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=lambda m, n=name: f"{n}: {m}", **tol)


# ---------------------------------------------------------------- accumulation schedule


@pytest.mark.parametrize("n,m", [(1, 1), (1, 4), (5, 1), (6, 2), (7, 2), (10, 3), (3, 5), (12, 4), (13, 4)])
def test_accumulation_windows(n: int, m: int) -> None:
    windows = batching.accumulation_windows(n, m)
    assert len(windows) == math.ceil(n / m)
    assert [k for w in windows for k in w] == list(range(n))  # every micro-step once, in order
    assert all(len(w) == m for w in windows[:-1])  # full windows, then the remainder
    assert 1 <= len(windows[-1]) <= m
    assert windows[0][-1] == min(m, n) - 1  # the first optimizer step comes after micro-step M-1, never at 0


@pytest.mark.parametrize("n_micro,m", [(7, 3), (6, 2), (4, 1), (2, 4)])
def test_train_epoch_steps_once_per_window(n_micro: int, m: int) -> None:
    data, labels = toy_data(n_micro * 2)
    model = sample_tiny()
    steps = plan(np.arange(n_micro * 2), 2)
    state, opt, sched = run_recorded(model, steps, data, labels, train_cfg(micro_batch=2, accumulation=m))
    windows = math.ceil(n_micro / m)
    assert len(opt.grads) == windows and sched.steps == windows and opt.zero_grads == windows
    # forwards seen at each step: M, 2M, ..., n (no step at micro-step 0 unless M == 1)
    assert opt.steps_at == [min((w + 1) * m, n_micro) for w in range(windows)]
    assert state.window == windows and state.examples == n_micro * 2 and state.skipped == 0


def test_train_epoch_resumes_at_window_and_stops_early() -> None:
    data, labels = toy_data(12)
    steps = plan(np.arange(12), 2)  # 6 micro-steps, windows of 2 -> 3 windows
    _, opt, sched = run_recorded(sample_tiny(), steps, data, labels, train_cfg(accumulation=2), state=loop.StepState(1))
    assert opt.steps_at == [2, 4] and sched.steps == 2  # the first window was done before: skipped
    seen = []
    state, opt, _ = run_recorded(
        sample_tiny(),
        steps,
        data,
        labels,
        train_cfg(accumulation=2),
        after_window=lambda s, w: seen.append(s.window) or True,
    )
    assert seen == [1] and state.window == 1 and len(opt.grads) == 1


# ---------------------------------------------------------------- gradient equivalence


@pytest.mark.parametrize(
    "n,micro,m",
    [
        (10, 3, 2),  # windows of 6 and 4 rows; the last micro-batch holds one row
        (12, 4, 3),  # one full window
        (9, 2, 2),  # windows of 4, 4 and 1
        (8, 4, 1),  # no accumulation
    ],
)
def test_accumulated_gradient_equals_big_batch(n: int, micro: int, m: int) -> None:
    data, labels = toy_data(n, seed=n)
    rows = np.random.default_rng(1).permutation(n)  # mixed lengths in every micro-batch
    steps = plan(rows, micro)
    model = sample_tiny(seed=3)
    _, opt, _ = run_recorded(model, steps, data, labels, train_cfg(micro_batch=micro, accumulation=m))
    windows = batching.accumulation_windows(len(steps), m)
    assert len(opt.grads) == len(windows)
    for w, got in zip(windows, opt.grads):
        window_rows = np.concatenate([steps[k][0] for k in w])
        assert_grads_close(got, direct_grads(model, data, labels, window_rows))


def test_accumulated_gradient_differs_from_unscaled_sum() -> None:
    """The check above can fail: the plain sum of micro-batch mean losses is a different gradient."""
    data, labels = toy_data(10, seed=10)
    steps = plan(np.arange(10), 3)
    model = sample_tiny(seed=3)
    _, opt, _ = run_recorded(model, steps, data, labels, train_cfg(micro_batch=3, accumulation=2))
    wrong = direct_grads(model, data, labels, np.arange(3))
    for name, g in direct_grads(model, data, labels, np.arange(3, 6)).items():
        wrong[name] = wrong[name] + g
    with pytest.raises(AssertionError):
        assert_grads_close(opt.grads[0], wrong)


def test_clipping_bounds_the_step_gradient() -> None:
    data, labels = toy_data(6)
    model = sample_tiny()
    _, opt, _ = run_recorded(model, plan(np.arange(6), 3), data, labels, train_cfg(max_grad_norm=1e-3))
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in opt.grads[0].values()]))
    assert float(norm) == pytest.approx(1e-3, rel=1e-3)


# ---------------------------------------------------------------- checkpointing


def is_checkpointing(model) -> bool:
    # transformers 5.x: is_activation_checkpointing; 4.x: is_gradient_checkpointing (deprecated in 5.x)
    if hasattr(type(model), "is_activation_checkpointing"):
        return model.is_activation_checkpointing
    return model.is_gradient_checkpointing


def test_checkpointing_same_gradients_non_reentrant(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.utils.checkpoint as tuc
    import transformers.modeling_utils as mu

    calls: list[dict] = []
    real = tuc.checkpoint

    def counting(function, *args, **kwargs):
        calls.append(kwargs)
        return real(function, *args, **kwargs)

    monkeypatch.setattr(tuc, "checkpoint", counting)
    if hasattr(mu, "checkpoint"):  # transformers binds the function when checkpointing is switched on
        monkeypatch.setattr(mu, "checkpoint", counting)

    data, labels = toy_data(8)
    rows = np.arange(8)
    plain = sample_tiny(seed=5)
    ckpt = copy.deepcopy(plain)
    modeling.enable_checkpointing(ckpt)
    assert is_checkpointing(ckpt) and not is_checkpointing(plain)

    want = direct_grads(plain, data, labels, rows)
    assert calls == []
    got = direct_grads(ckpt, data, labels, rows)
    assert len(calls) == 2  # one per layer, in train mode
    assert all(kw.get("use_reentrant") is False for kw in calls)  # non-reentrant: works under DDP
    assert_grads_close(got, want)

    calls.clear()
    ckpt.eval()
    with torch.no_grad():
        ckpt(**batching.collate(data, rows, PAD))
    assert calls == []  # checkpointing acts only in train mode


# ---------------------------------------------------------------- mixed precision


def test_bf16_step_on_cpu_is_finite_and_moves_weights() -> None:
    data, labels = toy_data(8)
    model = sample_tiny()
    cfg = train_cfg(micro_batch=4, accumulation=2, precision="bf16", lr=1e-2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = optim.make_optimizer(model, cfg, CPU)
    sched = optim.make_scheduler(opt, 0.0, 1)
    scaler = precision.make_scaler("bf16", CPU)
    state = train_parts(
        model, plan(np.arange(8), 4), data, labels, opt, sched, scaler, cfg, "bf16", CPU, pad_id=PAD, progress=False
    )
    assert state.window == 1 and state.skipped == 0 and state.examples == 8
    assert math.isfinite(state.loss_sum) and state.loss_sum > 0
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert len(changed) > len(before) // 2
    assert all(p.dtype == torch.float32 for p in model.parameters())  # autocast leaves the weights in fp32


def test_auto_precision_follows_native_bf16(monkeypatch) -> None:
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    assert precision.resolve_precision("auto", CPU) == "fp32"  # emulated bf16 would be slower than fp32
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    assert precision.resolve_precision("auto", CPU) == "bf16"


def test_scaler_and_precision_resolution() -> None:
    assert precision.make_scaler("fp16", CPU).is_enabled()
    assert not precision.make_scaler("bf16", CPU).is_enabled()
    assert not precision.make_scaler("fp32", CPU).is_enabled()
    assert precision.resolve_precision("fp32", CPU) == "fp32"
    with precision.autocast("bf16", CPU):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")
    with precision.autocast("fp32", CPU):
        assert not torch.is_autocast_enabled("cpu")


def test_predict_bf16_keeps_fp32_logits_and_row_order() -> None:
    """Close scores must not tie: a bf16 logit keeps ~3 digits, which would flatten an early model's AUC."""
    data, _ = toy_data(40, lo=3, hi=30)
    model = sample_tiny(seed=7)
    idx = np.random.default_rng(2).permutation(40)[:30]
    model.eval()
    with torch.no_grad():
        model.head.weight.mul_(100.0)  # spread the logits over a few hundredths
        model.head.bias.fill_(0.0)
        centre = float(model(**batching.collate(data, idx, PAD, 1)).mean())
        model.head.bias.fill_(3.0 - centre)  # around 3, where bf16 steps by 1/64
    with torch.no_grad(), precision.autocast("bf16", CPU):  # the naive way: the head's output in bf16
        batch = batching.collate(data, idx, PAD, 8)
        naive = model.head(model.encoder(**batch).last_hidden_state[:, 0]).float()
    assert len(torch.unique(naive)) < len(idx) // 2  # ties: the case this guards against
    p32 = loop.predict(model, data, idx, 7, "fp32", CPU, PAD)
    p16 = loop.predict(model, data, idx, 7, "bf16", CPU, PAD)
    one_by_one = np.array([loop.predict(model, data, [i], 1, "fp32", CPU, PAD)[0] for i in idx])
    np.testing.assert_allclose(p32, one_by_one, atol=1e-6)  # out[k] belongs to idx[k], whatever the batching
    assert len(np.unique(p32)) == len(idx)
    assert len(np.unique(p16)) >= len(idx) - 3 > 2 * len(torch.unique(naive))  # (bf16 encoder noise may tie a few)
    np.testing.assert_allclose(p16, p32, atol=0.02)


@pytest.mark.parametrize(
    "capability,native,auto",
    [((7, 5), False, "fp16"), ((6, 0), False, "fp16"), ((8, 0), True, "bf16"), ((9, 0), True, "bf16")],
)
def test_cuda_auto_precision_needs_native_bf16(monkeypatch, capability, native, auto) -> None:
    # torch.cuda.is_bf16_supported() says True on a T4 (it can make a bf16 tensor); only the emulation-free
    # answer and the compute capability tell native arithmetic
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation or native)
    gpu = torch.device("cuda:0")
    assert precision.resolve_precision("auto", gpu) == auto
    assert precision.resolve_precision("fp16", gpu) == "fp16"
    if native:
        assert precision.resolve_precision("bf16", gpu) == "bf16"
    else:
        with pytest.raises(PipelineError, match=r"only emulates bf16.*fp16"):
            precision.resolve_precision("bf16", gpu)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_folder_loads_fp32_master_weights(tmp_path, dtype) -> None:
    stored = tiny_classifier(vocab=120, hidden=32).to(dtype)
    stored.encoder.save_pretrained(tmp_path / "weights")  # a pretrained encoder's folder, in half precision
    cfg = config.load("sample", [f"model.name={tmp_path / 'weights'}", "model.dropout=0.0"])
    model = modeling.build_model(cfg, tokenizer=None)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    for p, q in zip(model.encoder.parameters(), stored.encoder.parameters(), strict=True):
        assert torch.equal(p, q.float())  # the stored values, widened
    modeling.save(stored, tmp_path / "fold")  # a trained fold's folder too
    again = modeling.build_model(cfg, tokenizer=None, source=tmp_path / "fold")
    assert {p.dtype for p in again.parameters()} == {torch.float32}
    for p, q in zip(again.parameters(), stored.parameters(), strict=True):
        assert torch.equal(p, q.float())

    # and it trains in fp16 with a GradScaler (fp16 trainable weights make unscale_ refuse)
    data, labels = toy_data(8)
    state, _ = sgd_epoch(model, [[np.arange(4)], [np.arange(4, 8)]], data, labels, train_cfg(), precision="fp16")
    assert state.window == 1 and state.skipped == 0


def test_fp16_grad_scaler_skips_overflowed_steps_and_recovers() -> None:
    data, labels = toy_data(24)
    model = sample_tiny(seed=3)
    steps = [[np.arange(i, i + 4)] for i in range(0, 24, 4)]  # 6 micro-batches, 3 windows of 2
    cfg = train_cfg(accumulation=2, max_grad_norm=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    poisoned = {"left": 2}
    weight = model.head.weight

    def overflow(grad):  # the first two windows' gradients overflow, as fp16 does with too large a scale
        if poisoned["left"] > 0:
            poisoned["left"] -= 1
            return torch.full_like(grad, float("inf"))
        return grad

    weight.register_hook(overflow)
    snapshots = []
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)

    def after(state, window):
        snapshots.append((state.window, scaler.get_scale(), weight.detach().clone()))
        return False

    before = weight.detach().clone()
    state = train_parts(
        model, steps, data, labels, opt, sched, scaler, cfg, "fp16", CPU, pad_id=PAD, progress=False, after_window=after
    )
    assert state.window == 3 and state.skipped == 1  # the first window's two poisoned micro-batches: one step
    (_, scale1, w1), (_, scale2, w2), (_, _, w3) = snapshots
    assert scale1 == 2.0**9  # an overflow halves the scale ...
    assert torch.equal(w1, before)  # ... and skips the update: the weights are untouched
    assert not torch.equal(w2, w1) and not torch.equal(w3, w2)  # then training goes on
    assert sched.last_epoch == 2  # the schedule counts the two steps that happened
    assert all(torch.isfinite(p).all() and p.dtype == torch.float32 for p in model.parameters())


# ---------------------------------------------------------------- sparse embedding gradients


def test_sparse_embedding_gradients_equal_dense_under_accumulation() -> None:
    data, labels = toy_data(20)
    dense = sample_tiny(seed=7)
    sparse = copy.deepcopy(dense)
    modeling.sparse_embedding_grad(sparse)
    steps = [[np.arange(i, i + 3)] for i in range(0, 18, 3)]
    cfg = train_cfg(accumulation=3)
    seen = []
    emb = sparse.get_input_embeddings().weight
    emb.register_hook(lambda g: seen.append(g.is_sparse))
    sgd_epoch(dense, steps, data, labels, cfg)
    sgd_epoch(sparse, steps, data, labels, cfg)
    assert seen and all(seen)  # the gradients really were sparse rows ...
    assert_same_weights(sparse, dense, rtol=1e-5, atol=1e-6)  # ... and summed to the dense gradient


# ---------------------------------------------------------------- out of memory at the optimizer step


class OutOfMemoryAtStep(torch.optim.SGD):
    """SGD whose first `fail` steps raise torch.OutOfMemoryError before any update."""

    def __init__(self, params, fail: int = 1) -> None:
        super().__init__(params, lr=0.1)
        self.fail, self.raised = fail, 0

    def step(self, closure=None):
        if self.raised < self.fail:
            self.raised += 1
            raise torch.OutOfMemoryError("simulated: no room for the dense embedding gradient")
        return super().step(closure)


def test_out_of_memory_at_the_optimizer_step_is_retried(capsys) -> None:
    data, labels = toy_data(16)
    reference = sample_tiny(seed=2)
    model = copy.deepcopy(reference)
    steps = [[np.arange(i, i + 4)] for i in range(0, 16, 4)]
    cfg = train_cfg(accumulation=2)
    sgd_epoch(reference, steps, data, labels, cfg)
    flaky = OutOfMemoryAtStep(model.parameters())
    state, sched = sgd_epoch(model, steps, data, labels, cfg, optimizer=flaky)
    assert flaky.raised == 1 and state.halvings == 1 and state.window == 2
    assert "out of memory at step 1" in capsys.readouterr().err
    assert_same_weights(model, reference, rtol=1e-4, atol=1e-6)  # the retried window has the same gradient


def test_out_of_memory_after_unscale_redoes_the_window_with_a_scaler() -> None:
    data, labels = toy_data(16)
    model = sample_tiny(seed=2)
    steps = [[np.arange(i, i + 4)] for i in range(0, 16, 4)]
    flaky = OutOfMemoryAtStep(model.parameters())
    # fp16's scaler has already unscaled the gradients when the step fails: the retry must not be refused
    state, _ = sgd_epoch(model, steps, data, labels, train_cfg(accumulation=2), precision="fp16", optimizer=flaky)
    assert flaky.raised == 1 and state.window == 2 and state.skipped == 0


# ---------------------------------------------------------------- batches


def test_length_grouped_batches_cover_group_and_shuffle() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 200, size=1000)
    batches = batching.length_grouped_batches(lengths, 16, seed=1, epoch=0)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1000))  # every row exactly once
    assert sum(len(b) != 16 for b in batches) <= 1  # 1000 = 62 x 16 + 8: one short batch
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    random_spread = np.mean([np.ptp(lengths[b]) for b in np.array_split(rng.permutation(1000), len(batches))])
    assert spread < random_spread / 5  # little padding
    again = batching.length_grouped_batches(lengths, 16, seed=1, epoch=0)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))  # deterministic
    other = batching.length_grouped_batches(lengths, 16, seed=1, epoch=1)
    assert not np.array_equal(np.concatenate(other), flat)  # a new order each epoch
    assert not np.array_equal(np.concatenate(batching.length_grouped_batches(lengths, 16, seed=2, epoch=0)), flat)


def test_length_grouped_batches_pad_to_world_and_micro_steps() -> None:
    lengths = np.arange(5 * 16) % 37 + 3  # 5 batches: odd
    one = batching.length_grouped_batches(lengths, 16, seed=0, epoch=0, world=1)
    assert len(one) == 5
    two = batching.length_grouped_batches(lengths, 16, seed=0, epoch=0, world=2)
    assert len(two) == 6
    assert np.array_equal(two[5], two[0])  # padded by repeating the first batch
    steps = batching.micro_steps(two, 2)
    assert len(steps) == 3 and all(len(s) == 2 for s in steps)
    assert [np.array_equal(s[r], two[2 * k + r]) for k, s in enumerate(steps) for r in range(2)] == [True] * 6
    assert len(batching.length_grouped_batches(lengths, 16, seed=0, epoch=0, world=3)) == 6
    assert len(batching.micro_steps(one, 1)) == 5


def test_collate_pads_to_multiple_with_mask() -> None:
    data = Ragged.from_lists([[0, 5, 2], [0, 5, 6, 7, 8, 9, 10, 11, 12, 2], [0, 9, 9, 2]])
    labels = np.array([1.0, 0.0, 1.0])
    b = batching.collate(data, np.array([2, 0, 1]), pad_id=PAD, multiple=8, labels=labels)
    assert b["input_ids"].shape == (3, 16) and b["attention_mask"].shape == (3, 16)
    assert b["attention_mask"].sum(1).tolist() == [4, 3, 10]
    assert b["input_ids"][0, :4].tolist() == [0, 9, 9, 2]
    assert (b["input_ids"][b["attention_mask"] == 0] == PAD).all()
    assert b["labels"].dtype == torch.float32 and b["labels"].tolist() == [1.0, 1.0, 0.0]
    b1 = batching.collate(data, np.array([0, 2]), pad_id=PAD)
    assert b1["input_ids"].shape == (2, 4) and "labels" not in b1


# ---------------------------------------------------------------- DDP world padding


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("n", [1, 7, 33, 64, 101])
def test_world_padding_gives_every_rank_the_same_steps_and_every_row(world: int, n: int) -> None:
    lengths = np.random.default_rng(n).integers(3, 40, n)
    batches = batching.length_grouped_batches(lengths, 8, seed=1, epoch=0, world=world)
    steps = batching.micro_steps(batches, world)
    assert all(len(s) == world for s in steps)  # no rank waits alone at an all-reduce
    rows = np.concatenate(batches)
    assert set(rows) == set(range(n))  # every row trains
    plain = batching.length_grouped_batches(lengths, 8, seed=1, epoch=0, world=1)
    padding = len(batches) - len(plain)
    assert 0 <= padding < world
    tail = batches[len(plain) :]
    assert all(np.array_equal(a, b) for a, b in zip(tail, plain[:padding]))  # the padding repeats whole batches


# ---------------------------------------------------------------- non-finite steps


def nan_labels(n: int, bad_windows: set[int], rows_per_window: int) -> tuple[Ragged, np.ndarray]:
    data, labels = toy_data(n)
    for w in bad_windows:
        labels[w * rows_per_window] = np.nan  # one NaN label poisons the whole window's gradient
    return data, labels


def real_step_setup(model, cfg):
    opt = optim.make_optimizer(model, cfg, CPU)
    return opt, optim.make_scheduler(opt, 0.0, 10), precision.make_scaler("fp32", CPU)


def test_non_finite_step_is_skipped_then_training_goes_on() -> None:
    data, labels = nan_labels(8, {0}, 4)  # window 0 bad, window 1 good
    model = sample_tiny()
    cfg = train_cfg(micro_batch=2, accumulation=2)
    opt, sched, scaler = real_step_setup(model, cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    seen = []

    def after(state, window):
        seen.append((state.window, state.bad_steps, {n: p.detach().clone() for n, p in model.named_parameters()}))
        return False

    state = train_parts(
        model, plan(np.arange(8), 2), data, labels, opt, sched, scaler, cfg, "fp32", CPU,
        pad_id=PAD, progress=False, after_window=after, max_bad_steps=2,
    )  # fmt: skip
    assert state.skipped == 1 and state.bad_steps == 0 and state.window == 2
    w1, bad1, weights1 = seen[0]
    assert bad1 == 1 and all(torch.equal(weights1[n], before[n]) for n in before)  # no step, weights untouched
    assert any(not torch.equal(seen[1][2][n], before[n]) for n in before)  # the good window stepped
    assert sched.last_epoch == 1  # the schedule counts only the step that happened
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_consecutive_non_finite_steps_raise() -> None:
    data, labels = nan_labels(12, {0, 1, 2}, 4)
    model = sample_tiny()
    cfg = train_cfg(micro_batch=2, accumulation=2)
    opt, sched, scaler = real_step_setup(model, cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(loop.NonFiniteError) as e:
        train_parts(
            model, plan(np.arange(12), 2), data, labels, opt, sched, scaler, cfg, "fp32", CPU,
            pad_id=PAD, progress=False, max_bad_steps=3, desc="fold 0",
        )  # fmt: skip
    msg = str(e.value)
    assert "step 3 of 3" in msg and "3 optimizer steps in a row" in msg
    assert "bf16" in msg and "lr" in msg
    assert all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())


def test_inf_weights_are_never_stepped() -> None:
    data, labels = toy_data(4)
    model = sample_tiny()
    with torch.no_grad():
        model.head.weight.fill_(float("inf"))
    cfg = train_cfg(micro_batch=2, accumulation=2)
    opt, sched, scaler = real_step_setup(model, cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = train_parts(
        model, plan(np.arange(4), 2), data, labels, opt, sched, scaler, cfg, "fp32", CPU, pad_id=PAD, progress=False
    )
    assert state.skipped == 1 and state.bad_steps == 1
    assert all(torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())


# ---------------------------------------------------------------- schedule


def lrs(warmup: float, total: int) -> list[float]:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=2.0)
    sched = optim.make_scheduler(opt, warmup, total)
    out = []
    for _ in range(total + 1):
        out.append(opt.param_groups[0]["lr"])  # the lr the next optimizer step uses
        opt.step()
        sched.step()
    return out


def test_scheduler_warms_up_then_decays_to_zero() -> None:
    lr = lrs(0.1, 100)  # 10 warm-up steps
    assert lr[0] == pytest.approx(2.0 / 10)  # the first step already learns
    assert lr[9] == pytest.approx(2.0) and lr[10] == pytest.approx(2.0)  # peak at the end of warm-up
    assert all(a < b for a, b in zip(lr[:10], lr[1:10]))  # rising
    assert all(a > b for a, b in zip(lr[10:100], lr[11:101]))  # then falling
    assert lr[55] == pytest.approx(2.0 * 45 / 90)  # linear
    assert lr[99] > 0 and lr[100] == pytest.approx(0.0)  # zero after the last step


def test_scheduler_without_warmup_and_short_runs() -> None:
    lr = lrs(0.0, 4)
    assert lr == pytest.approx([2.0, 1.5, 1.0, 0.5, 0.0])
    lr = lrs(0.1, 3)  # warm-up rounds to at least one step
    assert lr[0] == pytest.approx(2.0) and lr[3] == pytest.approx(0.0)


def test_one_factory_names_every_group_and_logs_each_group_s_rate() -> None:
    """optim.make_training builds the optimizer and schedule for training, auto-fit and the benchmark; what is
    logged is every group's rate by name, whatever the order of the groups."""
    model = sample_tiny()
    opt, sched = optim.make_training(model, train_cfg(lr=2.0, warmup=0.0, weight_decay=0.01), CPU, total_steps=4)
    assert [g["name"] for g in opt.param_groups] == ["decay", "no_decay"]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    assert optim.learning_rates(opt) == {"decay": 2.0, "no_decay": 2.0}
    opt.step()
    sched.step()
    assert optim.learning_rates(opt) == pytest.approx({"decay": 1.5, "no_decay": 1.5})  # the schedule moves both
    opt.param_groups[1]["lr"] = 0.25  # a group with a rate of its own (as layer-wise decay would give)
    opt.param_groups.reverse()  # the first group is no longer the one it was: the record is the same
    assert optim.learning_rates(opt) == pytest.approx({"decay": 1.5, "no_decay": 0.25})
