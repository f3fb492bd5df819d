"""One bench row, run in a process of its own: the model built, warmed up and timed, ours or through Trainer.

The model is XLM-R's architecture from a config (base, large or XL sizes, the real vocabulary, random weights) or
a pretrained encoder's folder, under the pipeline's head, its attention the one model.attn_implementation picks
(pipeline.core.attention, as `make train` picks it); a LoRA row freezes it in half precision and trains
adapters (pipeline.core.lora) as `make train` does. The data is random token ids at full length. Every row
trains on the same rows at the same effective batch: an untimed warm-up (one forward/backward on one row, and
the optimizer state created by a zero step), then `bench.steps` optimizer steps, each timed on its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from pipeline import optimizers
from pipeline.benchmark import report, trainer
from pipeline.config import Config
from pipeline.errors import PipelineError
from pipeline.losses import LOSSES

VOCAB = 250002  # XLM-R's vocabulary
XL_VOCAB = 250880  # XLM-R XL's and XXL's (facebook/xlm-roberta-xl's config.json)
SPECIALS = (0, 1, 2, 3)  # <s> <pad> </s> <unk>: ids below and at the pad id stay put when trimming
PAD = 1
SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
ARCH = {  # published sizes
    "xlm-roberta-base": (768, 12, 12, 3072),
    "xlm-roberta-large": (1024, 24, 16, 4096),
    "xlm-roberta-xl": (2560, 36, 32, 10240),  # 3.5B parameters, pre-LayerNorm layers (XLMRobertaXLConfig)
}
ROW_TAG = "BENCH_ROW "
CLS = ("xlm-roberta", "roberta", "camembert")  # families whose position ids start after the pad id


def model_config(cfg: Config):
    """XLM-R base, large or XL from its sizes, the sample's tiny XLM-R (`bench.model=tiny`, for tests), or the
    config of a pretrained encoder's folder (`bench.model=<folder>`: its own weights are timed)."""
    from transformers import AutoConfig, XLMRobertaConfig, XLMRobertaXLConfig

    b = cfg.bench
    if Path(b.model).is_dir():
        config = AutoConfig.from_pretrained(b.model, trust_remote_code=False)  # never the folder's own code
        offset = PAD + 1 if config.model_type in CLS else 0  # RoBERTa's position ids start after the pad id
        if b.seq_len + offset > getattr(config, "max_position_embeddings", b.seq_len + offset):
            raise PipelineError(f"bench.seq_len={b.seq_len}: {b.model} has {config.max_position_embeddings} positions")
        return config
    if b.model == "tiny":
        t = cfg.model.tiny
        sizes = {"hidden_size": t.hidden, "num_hidden_layers": t.layers, "num_attention_heads": t.heads}
        sizes.update(intermediate_size=t.intermediate, vocab_size=t.vocab)
    elif b.model in ARCH:
        sizes = {**dict(zip(SIZES, ARCH[b.model], strict=True)), "vocab_size": XL_VOCAB if "xl" in b.model else VOCAB}
    else:
        raise PipelineError(f"bench.model={b.model!r}: one of {', '.join([*ARCH, 'tiny'])} or a model folder")
    if b.seq_len + PAD + 1 > 514:
        raise PipelineError(f"bench.seq_len={b.seq_len}: XLM-R has 512 positions")
    kind = XLMRobertaXLConfig if b.model == "xlm-roberta-xl" else XLMRobertaConfig
    return kind(**sizes, max_position_embeddings=514, pad_token_id=PAD, bos_token_id=0, eos_token_id=2)


def bench_model(cfg: Config, mconf, dtype=None):
    """The Classifier a row trains: the pretrained encoder of a folder, else the architecture with random
    weights, under the pipeline's head (pipeline.core.modeling: the same forward path as `make train`); a
    LoRA row's encoder in its frozen `dtype` from the start."""
    import torch

    from pipeline.core import modeling

    if Path(cfg.bench.model).is_dir():
        encoder = modeling.pretrained_encoder(cfg.bench.model, cfg.model.dropout, dtype or torch.float32)
    else:
        encoder = modeling.encoder_from_config(mconf, dtype)
    return modeling.Classifier(encoder, modeling.HeadSpec.of(cfg))


def row_model(cfg: Config, spec: dict, mconf, vocab, ids, precision: str, out: dict):
    """(the row's model, its data): built, trimmed for a trimming row (the data in the kept ids), LoRA's adapters
    on its frozen base for a LoRA row; `out` gets the parameters, trained ones and FLOPs a token."""
    from pipeline.core import lora, modeling, trim

    frozen = lora.base_dtype(precision) if spec["lora"] else None
    model = bench_model(cfg, mconf, frozen)
    out["parameters"] = sum(p.numel() for p in model.parameters())
    # a LoRA row computes no weight gradient of the frozen matrices: two forwards a token, not three
    out["flops_per_token"] = report.train_flops_per_token(mconf, cfg.bench.seq_len, frozen=bool(spec["lora"]))
    if spec["trim"]:
        vmap = trim.vocab_map(vocab, mconf.vocab_size, unk_id=3)  # before trimming changes the shared config
        trim.trim_model(model, vocab)
        ids = vmap[ids]  # the data in the trimmed model's ids
    if spec["lora"]:  # as `make train` puts them on: after trimming, the trimmed embedding frozen too
        settings = dataclasses.replace(cfg.model.lora, r=spec["lora"], quantize="none")
        lora.attach(model, lora.spec(settings, model.encoder, {"from": "bench"}), frozen)
    out["trained_parameters"] = modeling.count_parameters(model)
    return model, ids


def matmul_peak(device, precision: str, n: int = 2048, repeats: int = 10) -> float:
    """This machine's measured matmul throughput: the FLOP/s of the fastest of `repeats` n x n matrix products
    in `precision` (fp32, or bf16/fp16 operands). What one large product reached here, not the hardware's
    peak (benchmark.peaks has that, where it is known), which it can fall far below."""
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    a @ b  # warmed up: kernels chosen, memory touched
    best = float("inf")
    for _ in range(repeats):
        start = _now(device)
        a @ b
        best = min(best, _now(device) - start)
    return 2 * n**3 / best


def bench_data(cfg: Config, vocab_size: int):
    """(ids [rows, seq_len], labels, vocabulary): the same for every row, drawn from `vocab_used` ids.

    The vocabulary stands for the ids the competition's texts use; trimming keeps exactly it.
    """
    b = cfg.bench
    if not len(SPECIALS) < b.vocab_used <= vocab_size:
        raise PipelineError(f"bench.vocab_used={b.vocab_used} must lie in ({len(SPECIALS)}, {vocab_size}]")
    rng = np.random.default_rng(cfg.train.seed)
    words = np.sort(rng.choice(np.arange(len(SPECIALS), vocab_size), b.vocab_used - len(SPECIALS), replace=False))
    vocab = np.union1d(words, SPECIALS)
    rows = 1 + b.effective_batch * b.steps  # one warm-up row, then the timed rows
    ids = rng.choice(words, size=(rows, b.seq_len)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 0, 2  # <s> ... </s>, full length: every row costs the same
    labels = rng.integers(0, 2, rows).astype(np.float32)
    return ids, labels, vocab


# ---------------------------------------------------------------- one row, in its own process


def _memory_start(device) -> int:
    """Memory before the model exists, with a new peak started (pipeline.core.memory's one definition)."""
    from pipeline.core import memory

    memory.reset_peak(device)
    return memory.current_bytes(device)


def _memory_peak(device, start: int) -> dict:
    """The row's peak: allocated GPU memory on CUDA (and the allocator's reserved peak), on CPU the resident
    peak above what the process held before the model existed."""
    import torch

    from pipeline.core import memory

    if device.type == "cuda":
        return {"peak_mb": memory.peak_memory_mb(device), "reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20}
    return {"peak_mb": (memory.peak_bytes(device) - start) / 2**20}


def _now(device) -> float:
    """The clock, once the device has finished what was queued (CUDA runs asynchronously)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def warm_up(model, ids, precision: str, device, loss: str) -> None:
    """One forward/backward of `loss` on one row (kernels and allocator warmed), gradients dropped."""
    import torch

    from pipeline.core.precision import autocast

    x = torch.as_tensor(ids[:1], dtype=torch.long, device=device)
    model.train()
    with autocast(precision, device):
        logits = model(input_ids=x, attention_mask=torch.ones_like(x))
    LOSSES[loss].summed(logits, torch.zeros(1, device=device)).backward()
    model.zero_grad(set_to_none=True)


def init_state(optimizer) -> None:
    """Create the optimizer's state with a step of zero gradients at learning rate 0 (weights unchanged)."""
    import torch

    lrs = [g["lr"] for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        g["lr"] = 0.0
        for p in g["params"]:
            p.grad = torch.zeros_like(p)
    optimizer.step()
    for g, lr in zip(optimizer.param_groups, lrs, strict=True):
        g["lr"] = lr
    optimizer.zero_grad(set_to_none=True)


def _device_facts(device) -> dict:
    """The device, and what its figures depend on: a GPU's name (the Kaggle time plan takes a figure measured
    on a T4 only), whether a CPU computes bf16 natively (without it bf16 is emulated: slower than fp32)."""
    import torch

    from pipeline.core.precision import cpu_has_bf16

    facts = {"device": str(device)}
    if device.type == "cuda":
        facts["gpu"] = torch.cuda.get_device_name(device)
    if device.type == "cpu":
        facts["cpu_bf16_native"] = cpu_has_bf16()
    return facts


def run_row(cfg: Config, spec: dict) -> dict:
    """Build, warm up and time one row; returns its measurements (or `na` with the reason)."""
    import torch

    from pipeline.core import attention, distributed, memory, modeling
    from pipeline.core.precision import resolve_precision

    b = cfg.bench
    device = distributed.pick_device(cfg.train.device)
    precision = resolve_precision(spec["precision"], device)
    out = {"key": spec["key"], "runner": spec["runner"], **_device_facts(device), "precision": precision}
    why = optimizers.refusal(spec["optimizer"], device.type, lambda module: True)
    if why:  # the refusal make_training gives on this device, without building a model for it
        return {**out, "na": why}
    mconf = model_config(cfg)
    ids, labels, vocab = bench_data(cfg, mconf.vocab_size)
    torch.manual_seed(cfg.train.seed)
    start = _memory_start(device)

    model, ids = row_model(cfg, spec, mconf, vocab, ids, precision, out)
    attention.apply(model.encoder, cfg.model.attn_implementation, device)  # as make train does: after the adapters
    out["attention"] = model.encoder.config._attn_implementation  # what ran: `auto` is transformers' own choice
    model.to(device)
    micro = spec["micro"]
    if spec["autofit"] and not spec.get("force_micro"):  # the Trainer's row takes the pick, not probes again
        if spec["checkpointing"]:
            modeling.enable_checkpointing(model)  # the probe must see the memory training will use
        micro, out["autofit"] = memory.fit_micro_batch(
            model,
            b.effective_batch,
            b.seq_len,
            b.max_memory_gb,
            precision,
            device,
            dataclasses.replace(cfg.train, optimizer=spec["optimizer"]),
        )
    micro = spec.get("force_micro") or micro  # the Trainer's auto-fit row takes the micro-batch ours picked
    out["micro"], out["accumulation"] = micro, b.effective_batch // micro
    tcfg = dataclasses.replace(
        cfg.train,
        micro_batch=micro,
        accumulation=b.effective_batch // micro,
        checkpointing=spec["checkpointing"],
        optimizer=spec["optimizer"],
        warmup=0.0,  # both runners: every timed step at a learning rate above zero
    )
    timed = np.arange(1, len(ids))
    profiler = Profiler(device) if b.profile else contextlib.nullcontext()
    if spec["runner"] == "ours":
        step_seconds, halvings = _run_ours(model, tcfg, spec, ids, labels, timed, precision, device, profiler)
        if halvings:  # out of memory: train_epoch halved the micro-batches until a window fit
            out["halvings"], out["micro"] = halvings, -(-micro // 2**halvings)
            out["accumulation"] = b.effective_batch // out["micro"]
    else:
        step_seconds, out["trainer_args"] = _run_trainer(model, tcfg, ids, labels, timed, precision, device, profiler)
    if b.profile:
        out["profile"] = profiler.top
    out.update(_memory_peak(device, start))
    out.update(report.step_stats(step_seconds, b.effective_batch))
    return out


class Profiler:
    """torch.profiler around the timed steps (`bench.profile=true`); `top` is the ops that took the most time."""

    def __init__(self, device, n: int = 15):
        self.device, self.n, self.top = device, n, []

    def __enter__(self):
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        self.prof = profile(activities=acts)
        self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        self.prof.__exit__(*exc)
        # on CUDA the kernels' own time is what the GPU spends; on CPU the ops' self time
        key = "self_device_time_total" if self.device.type == "cuda" else "self_cpu_time_total"
        ops = sorted(self.prof.key_averages(), key=lambda e: getattr(e, key), reverse=True)[: self.n]
        self.top = [{"op": e.key, "self_ms": getattr(e, key) / 1e3, "calls": e.count} for e in ops]
        return False


def _run_ours(model, tcfg, spec, ids, labels, timed, precision, device, profiler) -> tuple[list[float], int]:
    """pipeline.core.loop.train_epoch over the timed rows: (seconds of each optimizer step, out-of-memory halvings)."""
    from pipeline.core import loop, modeling, optim
    from pipeline.core.precision import make_scaler
    from pipeline.inputs.tokens import Ragged

    if tcfg.checkpointing and not spec["autofit"]:
        modeling.enable_checkpointing(model)
    if spec["sparse"] and not spec["lora"]:  # a LoRA row's embedding is frozen: no gradient to keep sparse
        modeling.sparse_embedding_grad(model)  # as make train does in one process
    steps = len(timed) // (tcfg.micro_batch * tcfg.accumulation)
    optimizer, scheduler = optim.make_training(model, tcfg, device, steps)  # as training builds them
    scaler = make_scaler(precision, device)
    rows, width = ids.shape
    data = Ragged(ids.reshape(-1), np.arange(rows + 1, dtype=np.int64) * width)
    plan = [[timed[i : i + tcfg.micro_batch]] for i in range(0, len(timed), tcfg.micro_batch)]
    warm_up(model, ids, precision, device, tcfg.loss)
    init_state(optimizer)
    marks = [_now(device)]

    def tick(state, window) -> bool:
        marks.append(_now(device))  # one mark per optimizer step
        return False

    with profiler:
        job = loop.Job(model, data, labels, optimizer, scaler, tcfg, precision, device, PAD, rank=0, world=1)
        state = loop.train_epoch(job, plan, scheduler, progress=False, after_window=tick)
    return list(np.diff(marks)), state.halvings


def _run_trainer(model, tcfg, ids, labels, timed, precision, device, profiler) -> tuple[list[float], dict]:
    """The same job through transformers.Trainer: (seconds of each optimizer step, its settings)."""
    import torch
    from transformers import Trainer, TrainerCallback

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return len(timed)

        def __getitem__(self, i):
            x = torch.as_tensor(ids[timed[i]], dtype=torch.long)
            return {"input_ids": x, "attention_mask": torch.ones_like(x), "labels": torch.tensor(labels[timed[i]])}

    def summed_loss(outputs, targets, num_items_in_batch=None):
        # the loss our loop uses, summed and divided by the window's examples
        loss = LOSSES[tcfg.loss].summed(outputs, targets)
        return loss / (num_items_in_batch if num_items_in_batch is not None else len(targets))

    class Clock(TrainerCallback):
        marks: list[float] = []

        def on_train_begin(self, *a, **k):
            self.marks = [_now(device)]

        def on_step_end(self, *a, **k):  # after each optimizer step, as ours is marked
            self.marks.append(_now(device))

    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        steps = len(timed) // (tcfg.micro_batch * tcfg.accumulation)
        args = trainer.trainer_arguments(tcfg, precision, device, steps, tmp)
        hf = Trainer(model=model, args=args, train_dataset=Rows(), compute_loss_func=summed_loss, callbacks=[clock])
        warm_up(model, ids, precision, device, tcfg.loss)
        init_state(hf.create_optimizer())  # train() reuses this optimizer, state and all
        with profiler:
            hf.train()
    return list(np.diff(clock.marks)), trainer.trainer_settings(args)


def one_gpu(cfg_args: list[str], device, environ: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The settings and environment of a row's process: on CUDA it sees only the GPU it is measured on.

    Trainer wraps the model in nn.DataParallel over every GPU it sees (and puts it on cuda:0 whatever
    train.device says): on a machine with several, its rows would train n_gpu times the rows ours trains on one,
    and every ratio would be wrong. CUDA_VISIBLE_DEVICES is narrowed to the row's device, which the process then
    sees as `cuda`; a CUDA_VISIBLE_DEVICES of one device the user set is kept as it is.
    """
    env = dict(environ)
    if device.type != "cuda":
        return list(cfg_args), env
    visible = [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if "CUDA_VISIBLE_DEVICES" in env and len(visible) == 1:
        return list(cfg_args), env
    index = device.index or 0
    env["CUDA_VISIBLE_DEVICES"] = visible[index] if visible else str(index)  # an entry may be a GPU's UUID
    return [*cfg_args, "train.device=cuda"], env  # the last override wins: the one GPU the process sees


def run_subprocess(cfg_args: list[str], spec: dict, env: Mapping[str, str] | None = None) -> dict:
    """One row in a fresh Python process (its environment `env`, else this one's); its last JSON line is the
    result."""
    cmd = [sys.executable, "-m", "pipeline.bench", *cfg_args, "--row", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=None if env is None else dict(env))
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(ROW_TAG):
            return json.loads(line[len(ROW_TAG) :])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    # a row killed for memory (exit -9) is a result too: it did not fit
    return {"key": spec["key"], "runner": spec["runner"], "failed": f"exit {proc.returncode}: {tail[:200]}"}
