"""The training core's sharp edges: precision on emulating GPUs, fp32 master weights from half-precision
folders, fp16 with a GradScaler, sparse embedding gradients, a stop at an epoch's last step, the
out-of-memory retry around the optimizer step, checkpointing in the real stage, and DDP world padding."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import make_cfg
from test_loop import CPU, PAD, tiny_model, toy_data, train_cfg
from tinymodel import tiny_classifier

from pipeline import config, distributed, fingerprint, loop, metrics, modeling, train
from pipeline import data as data_mod
from pipeline.errors import PipelineError

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def sgd_epoch(model, steps, data, labels, cfg, precision="fp32", scaler=None, optimizer=None):
    """One epoch with plain SGD (weights move by exactly lr x gradient), unless another optimizer is given."""
    opt = optimizer or torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    scaler = scaler or loop.make_scaler(precision, CPU)
    state = loop.train_epoch(
        model, steps, data, labels, opt, sched, scaler, cfg, precision, CPU, pad_id=PAD, progress=False
    )
    return state, sched


def assert_same_weights(a, b, **tol) -> None:
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=lambda m, n=name: f"{n}: {m}", **tol)


# ---------------------------------------------------------------- precision


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
    assert loop.resolve_precision("auto", gpu) == auto
    assert loop.resolve_precision("fp16", gpu) == "fp16"
    if native:
        assert loop.resolve_precision("bf16", gpu) == "bf16"
    else:
        with pytest.raises(PipelineError, match=r"only emulates bf16.*fp16"):
            loop.resolve_precision("bf16", gpu)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_folder_loads_fp32_master_weights(tmp_path, dtype) -> None:
    stored = tiny_classifier(vocab=120, hidden=32).to(dtype)
    stored.save_pretrained(tmp_path / "weights")
    cfg = config.load("sample", [f"model.name={tmp_path / 'weights'}", "model.dropout=0.0"])
    model = modeling.build_model(cfg, tokenizer=None)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    for p, q in zip(model.parameters(), stored.parameters(), strict=True):
        assert torch.equal(p, q.float())  # the stored values, widened
    again = modeling.build_model(cfg, tokenizer=None, source=tmp_path / "weights")  # a trained fold's folder too
    assert {p.dtype for p in again.parameters()} == {torch.float32}

    # and it trains in fp16 with a GradScaler (fp16 trainable weights make unscale_ refuse)
    data, labels = toy_data(8)
    state, _ = sgd_epoch(model, [[np.arange(4)], [np.arange(4, 8)]], data, labels, train_cfg(), precision="fp16")
    assert state.window == 1 and state.skipped == 0


def test_fp16_grad_scaler_skips_overflowed_steps_and_recovers() -> None:
    data, labels = toy_data(24)
    model = tiny_model(seed=3)
    steps = [[np.arange(i, i + 4)] for i in range(0, 24, 4)]  # 6 micro-batches, 3 windows of 2
    cfg = train_cfg(accumulation=2, max_grad_norm=1.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    poisoned = {"left": 2}
    weight = model.classifier.out_proj.weight

    def overflow(grad):  # the first two windows' gradients overflow, as fp16 does with too large a scale
        if poisoned["left"] > 0:
            poisoned["left"] -= 1
            return torch.full_like(grad, float("inf"))
        return grad

    weight.register_hook(overflow)
    snapshots = []
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)

    def after(state):
        snapshots.append((state.window, scaler.get_scale(), weight.detach().clone()))
        return False

    before = weight.detach().clone()
    state = loop.train_epoch(
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
    dense = tiny_model(seed=7)
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
    reference = tiny_model(seed=2)
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
    model = tiny_model(seed=2)
    steps = [[np.arange(i, i + 4)] for i in range(0, 16, 4)]
    flaky = OutOfMemoryAtStep(model.parameters())
    # fp16's scaler has already unscaled the gradients when the step fails: the retry must not be refused
    state, _ = sgd_epoch(model, steps, data, labels, train_cfg(accumulation=2), precision="fp16", optimizer=flaky)
    assert flaky.raised == 1 and state.window == 2 and state.skipped == 0


# ---------------------------------------------------------------- auto-fit probes the whole step


def test_probe_runs_a_whole_step_and_leaves_the_weights() -> None:
    model = tiny_classifier(vocab=300, hidden=32)
    modeling.sparse_embedding_grad(model)
    before = copy.deepcopy(model.state_dict())
    steps = []
    real = loop.optimizer_step

    def spy(*a, **k):
        steps.append(1)
        return real(*a, **k)

    loop.optimizer_step, saved = spy, loop.optimizer_step
    try:
        from pipeline import memory

        memory.probe(model, model, 2, 16, "fp32", CPU, "adamw")
    finally:
        loop.optimizer_step = saved
    assert steps == [1]  # densify, clip and the optimizer step are part of what is measured
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k  # learning rate 0: the probe moved nothing
    assert all(p.grad is None for p in model.parameters())


# ---------------------------------------------------------------- DDP world padding


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("n", [1, 7, 33, 64, 101])
def test_world_padding_gives_every_rank_the_same_steps_and_every_row(world: int, n: int) -> None:
    lengths = np.random.default_rng(n).integers(3, 40, n)
    batches = loop.length_grouped_batches(lengths, 8, seed=1, epoch=0, world=world)
    steps = loop.micro_steps(batches, world)
    assert all(len(s) == world for s in steps)  # no rank waits alone at an all-reduce
    rows = np.concatenate(batches)
    assert set(rows) == set(range(n))  # every row trains
    plain = loop.length_grouped_batches(lengths, 8, seed=1, epoch=0, world=1)
    padding = len(batches) - len(plain)
    assert 0 <= padding < world
    tail = batches[len(plain) :]
    assert all(np.array_equal(a, b) for a, b in zip(tail, plain[:padding]))  # the padding repeats whole batches


# ---------------------------------------------------------------- the train stage


@pytest.fixture
def prepared(tmp_path):
    cfg = make_cfg(
        tmp_path,
        f"models_dir={tmp_path / 'models'}",
        "data.folds=2",
        "train.epochs=1",
        "train.precision=fp32",
        "model.tiny.hidden=32",
        "model.tiny.intermediate=64",
        "model.max_length=32",
    )
    from pipeline import tokens

    data_mod.prepare(cfg, log=lambda *a: None)
    tokens.prepare(cfg)
    return cfg


class StopAt:
    """A stop flag raised when the loop asks for the `at`-th time (once per optimizer step)."""

    def __init__(self, at: int) -> None:
        self.at, self.asked = at, 0

    @property
    def raised(self) -> bool:
        self.asked += 1
        return self.asked >= self.at


def fold_run(cfg, stop, fold=0) -> train.FoldRun:
    from pipeline import tokens

    table, _, meta = data_mod.load_table(cfg)
    splits, _ = tokens.load(cfg, meta)
    tokenizer = modeling.load_tokenizer(tokens.tokenizer_source(cfg))
    d = distributed.Dist()
    return train.FoldRun(cfg, fold, table, splits["train"], tokenizer, d, stop, fingerprint.current(cfg))


def test_stop_at_an_epochs_last_step_resumes_into_its_evaluation(prepared, tmp_path) -> None:
    cfg = prepared
    reference = dataclasses.replace(cfg, models_dir=str(tmp_path / "reference"))
    want = fold_run(reference, StopAt(10**9)).run()

    run = fold_run(cfg, StopAt(10**9))
    run.stop = StopAt(run.windows)  # Ctrl-C during the epoch's last optimizer step
    with pytest.raises(train.Interrupted):
        run.run()
    fold_dir = metrics.experiment_dir(cfg) / "fold0"
    state = torch.load(fold_dir / train.RESUME, weights_only=False)
    assert state["step"]["window"] == run.windows and state["history"] == []  # trained, not yet evaluated
    assert not (fold_dir / "done.json").exists()

    # a kill during the evaluation leaves exactly this state; the rerun evaluates and finishes
    got = fold_run(cfg, StopAt(10**9)).run()
    assert got["auc"] == pytest.approx(want["auc"], abs=1e-9)
    history = [json.loads(line) for line in (fold_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == 1 and history[0]["steps_run"] == 0  # nothing trained twice
    assert (fold_dir / "done.json").exists() and not (fold_dir / train.RESUME).exists()


def test_the_train_stage_runs_with_checkpointing(prepared) -> None:
    """Checkpointing recomputes each layer's forward in backward: two forwards per micro-batch, not one."""
    counts = {}
    for on in (True, False):
        cfg = dataclasses.replace(prepared, train=dataclasses.replace(prepared.train, checkpointing=on))
        run = fold_run(cfg, StopAt(10**9))  # the model as the stage builds it
        calls = []
        for layer in run.model.roberta.encoder.layer:
            layer.intermediate.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        run.train_epoch(0)
        counts[on] = len(calls)
    layers = prepared.model.tiny.layers
    micro_batches = len(run.epoch_plan(0))
    assert counts[False] == layers * micro_batches
    assert counts[True] == 2 * layers * micro_batches


def test_a_fold_with_one_class_is_refused(prepared) -> None:
    table, _, _ = data_mod.load_table(prepared)
    table.loc[table["fold"] == 1, "toxic"] = 0
    with pytest.raises(PipelineError, match="fold 1: its validation rows hold one class"):
        train.FoldRun(prepared, 1, table, None, None, distributed.Dist(), StopAt(1), "x")


def test_a_resumed_fold_keeps_the_micro_batch_auto_fit_chose(prepared, monkeypatch) -> None:
    """The saved steps count windows of the fitted plan: a resume must not fit again (memory may differ now)."""
    from pipeline import memory

    picks = iter([8, 2])  # the second fit would choose another micro-batch
    monkeypatch.setattr(memory, "fit_micro_batch", lambda *a, **k: (next(picks), "fake"))
    cfg = dataclasses.replace(prepared, train=dataclasses.replace(prepared.train, max_memory_gb=1.0))
    with pytest.raises(train.Interrupted):
        fold_run(cfg, StopAt(3)).run()
    resumed = fold_run(cfg, StopAt(10**9))
    assert (resumed.cfg.train.micro_batch, resumed.cfg.train.accumulation) == (8, 4)  # 16 x 2 fitted to 8 x 4
    assert resumed.progress.step.window == 3
    resumed.run()


@pytest.mark.parametrize("world", ["1", "2"])
def test_exit_process_keeps_the_code_and_the_output(world: str) -> None:
    """A torchrun worker leaves with os._exit (no interpreter teardown): its exit code and its printed lines
    must come through as with sys.exit."""
    code = "from pipeline import distributed; print('last line', end=''); distributed.exit_process(3)"
    env = {**os.environ, "WORLD_SIZE": world}
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (3, "last line")
