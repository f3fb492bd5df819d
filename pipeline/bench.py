"""Stage `make bench`: peak memory and speed of each memory technique, ours beside Hugging Face Trainer.

Reads   nothing (random weights and token ids; no download)
Writes  models/bench/<model>.md     the table, the floor and the notes (also printed)
        models/bench/<model>.json   every row's raw measurements, per-step times included
        models/bench/<model>.png    bar chart: peak memory and samples per second per row

The model is XLM-R's architecture from a config (base or large sizes, the real 250,002-token
vocabulary, random weights); the data is random token ids at full length. Every row trains on the
same rows at the same effective batch: an untimed warm-up (one forward/backward on one row, and the
optimizer state created by a zero step), then `bench.steps` optimizer steps, each timed on its own;
pipeline.bench_report turns them into a median, a spread and ratios that call a tie a tie.

Each row runs in a fresh process (`python -m pipeline.bench --row ...`, which prints one JSON line)
so that no row inherits another's memory, ours first and then the same job through Trainer, so that
each ratio compares two runs made side by side. Trainer gets the TrainingArguments a user would write
for the job and its own defaults for the rest (its default optimizer included); `bench_trainer`
builds them and the table's notes print them back. Peak memory: on CUDA torch.cuda.max_memory_allocated
(and reserved); on CPU the process's peak resident memory minus its resident memory before the model.

`make bench-gpu` (config bench-gpu) is the XLM-R large run for one CUDA GPU; without CUDA it stops
with one line before building anything.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pipeline import bench_report as report
from pipeline import bench_trainer
from pipeline import config as config_mod
from pipeline.config import Config
from pipeline.errors import PipelineError, run_stage
from pipeline.io import atomic_write_text

VOCAB = 250002  # XLM-R's vocabulary
SPECIALS = (0, 1, 2, 3)  # <s> <pad> </s> <unk>: ids below and at the pad id stay put when trimming
PAD = 1
SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
ARCH = {"xlm-roberta-base": (768, 12, 12, 3072), "xlm-roberta-large": (1024, 24, 16, 4096)}  # published sizes
ROW_TAG = "BENCH_ROW "


# ---------------------------------------------------------------- the rows


def plan(cfg: Config) -> list[dict]:
    """Our rows, each a dict of switches; every row has the same effective batch and data."""
    b = cfg.bench
    if b.effective_batch % b.micro_batch:
        raise PipelineError(f"bench.micro_batch={b.micro_batch} must divide bench.effective_batch={b.effective_batch}")
    if b.steps < 3:
        raise PipelineError(f"bench.steps={b.steps}: a median and a spread need at least 3 timed steps per row")
    big, small = b.effective_batch, b.micro_batch
    base = {"precision": "auto", "micro": big, "checkpointing": False, "trim": False, "optimizer": "adamw"}
    # every row of ours has sparse word-embedding gradients, as `make train` in one process; bench.sparse=false
    # makes them dense, as Trainer's, to measure what that one switch is worth
    sparse = "sparse embedding grads" if b.sparse else "none (dense embedding grads)"
    base |= {"autofit": False, "sparse": b.sparse, "only_ours": sparse}
    all3 = {**base, "micro": small, "checkpointing": True}
    rows = [
        {**base, "key": "fp32", "label": f"fp32 baseline (batch {big} in one go)", "precision": "fp32"},
        {**base, "key": "mp", "label": "mixed precision"},
        {**base, "key": "mp_acc", "label": f"mixed precision + accumulation ({small} x {big // small})"}
        | {"micro": small},
        {**base, "key": "mp_ckpt", "label": "mixed precision + checkpointing", "checkpointing": True},
        {**all3, "key": "all3", "label": "all three"},
        {**all3, "key": "trim", "label": "all three + vocabulary trimming", "trim": True}
        | {"only_ours": f"{sparse}, trimming (Trainer: full vocabulary)"},
        {**all3, "key": "adamw8bit", "label": "all three + 8-bit AdamW", "optimizer": "adamw8bit"},
        {**all3, "key": "autofit", "label": f"all three + auto-fit (cap {b.max_memory_gb:g} GB)", "autofit": True}
        | {"only_ours": f"{sparse}, auto-fit (Trainer: the micro-batch ours picked)"},
    ]
    unknown = set(b.rows) - {r["key"] for r in rows}
    if unknown:
        raise PipelineError(f"bench.rows: no row {sorted(unknown)[0]!r} (known: {', '.join(r['key'] for r in rows)})")
    # the baseline always runs: every ratio is to it
    return [r for r in rows if not b.rows or r["key"] in b.rows or r["key"] == "fp32"]


def model_config(cfg: Config):
    """XLM-R base or large from its sizes, or the sample's tiny XLM-R (`bench.model=tiny`, for tests)."""
    from transformers import XLMRobertaConfig

    b = cfg.bench
    if b.model == "tiny":
        t = cfg.model.tiny
        sizes = {"hidden_size": t.hidden, "num_hidden_layers": t.layers, "num_attention_heads": t.heads}
        sizes.update(intermediate_size=t.intermediate, vocab_size=t.vocab)
    elif b.model in ARCH:
        sizes = {**dict(zip(SIZES, ARCH[b.model], strict=True)), "vocab_size": VOCAB}
    else:
        raise PipelineError(f"bench.model={b.model!r}: one of {', '.join([*ARCH, 'tiny'])}")
    if b.seq_len + PAD + 1 > 514:
        raise PipelineError(f"bench.seq_len={b.seq_len}: XLM-R has 512 positions")
    return XLMRobertaConfig(
        **sizes, max_position_embeddings=514, pad_token_id=PAD, bos_token_id=0, eos_token_id=2, num_labels=1
    )


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
    """Memory before the model exists (and reset the peak counter)."""
    import torch

    from pipeline import memory

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    memory.reset_peak_rss()
    return memory.rss_bytes()


def _memory_peak(device, start: int) -> dict:
    import torch

    from pipeline import memory

    if device.type == "cuda":
        return {
            "peak_mb": torch.cuda.max_memory_allocated(device) / 2**20,
            "reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20,
        }
    return {"peak_mb": (memory.rss_bytes("VmHWM") - start) / 2**20}


def _now(device) -> float:
    """The clock, once the device has finished what was queued (CUDA runs asynchronously)."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def warm_up(model, ids, precision: str, device) -> None:
    """One forward/backward on one row (kernels and allocator warmed), gradients dropped."""
    import torch
    import torch.nn.functional as F

    from pipeline import loop

    x = torch.as_tensor(ids[:1], dtype=torch.long, device=device)
    model.train()
    with loop.autocast(precision, device):
        logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits
    F.binary_cross_entropy_with_logits(logits.float().squeeze(-1), torch.zeros(1, device=device)).backward()
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


def run_row(cfg: Config, spec: dict) -> dict:
    """Build, warm up and time one row; returns its measurements (or `na` with the reason)."""
    import torch
    from transformers import XLMRobertaForSequenceClassification

    from pipeline import distributed, loop, memory, modeling, trim

    b = cfg.bench
    device = distributed.pick_device(cfg.train.device)
    precision = loop.resolve_precision(spec["precision"], device)
    out = {"key": spec["key"], "runner": spec["runner"], "device": str(device), "precision": precision}
    if device.type == "cpu":
        out["cpu_bf16_native"] = loop.cpu_has_bf16()  # without it CPU bf16 is emulated: slower than fp32
    if spec["optimizer"] == "adamw8bit" and device.type != "cuda":
        # the same refusal make_optimizer gives, without building a model for it
        return {**out, "na": "8-bit AdamW (bitsandbytes) runs only on a CUDA GPU"}
    mconf = model_config(cfg)
    ids, labels, vocab = bench_data(cfg, mconf.vocab_size)
    torch.manual_seed(cfg.train.seed)
    start = _memory_start(device)

    model = XLMRobertaForSequenceClassification(mconf)
    out["parameters"] = modeling.count_parameters(model)
    if spec["trim"]:
        vmap = trim.vocab_map(vocab, mconf.vocab_size, unk_id=3)  # before trimming changes the shared config
        trim.trim_model(model, vocab)
        ids = vmap[ids]  # the data in the trimmed model's ids
    out["trained_parameters"] = modeling.count_parameters(model)
    model.to(device)
    micro = spec["micro"]
    if spec["autofit"] and not spec.get("force_micro"):  # the Trainer's row takes the pick, not probes again
        if spec["checkpointing"]:
            modeling.enable_checkpointing(model)  # the probe must see the memory training will use
        micro, out["autofit"] = memory.fit_micro_batch(
            model, b.effective_batch, b.seq_len, b.max_memory_gb, precision, device, spec["optimizer"]
        )
    micro = spec.get("force_micro") or micro  # the Trainer's auto-fit row takes the micro-batch ours picked
    out["micro"], out["accumulation"] = micro, b.effective_batch // micro
    tcfg = dataclasses.replace(
        cfg.train,
        micro_batch=micro,
        accumulation=b.effective_batch // micro,
        checkpointing=spec["checkpointing"],
        optimizer=spec["optimizer"],
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
    """pipeline.loop.train_epoch over the timed rows: (seconds of each optimizer step, out-of-memory halvings)."""
    from pipeline import loop, modeling
    from pipeline.tokens import Ragged

    if tcfg.checkpointing and not spec["autofit"]:
        modeling.enable_checkpointing(model)
    if spec["sparse"]:
        modeling.sparse_embedding_grad(model)  # as make train does in one process
    optimizer = loop.make_optimizer(model, tcfg, device)
    steps = len(timed) // (tcfg.micro_batch * tcfg.accumulation)
    scheduler = loop.make_scheduler(optimizer, 0.0, steps)
    scaler = loop.make_scaler(precision, device)
    rows, width = ids.shape
    data = Ragged(ids.reshape(-1), np.arange(rows + 1, dtype=np.int64) * width)
    plan = [[timed[i : i + tcfg.micro_batch]] for i in range(0, len(timed), tcfg.micro_batch)]
    warm_up(model, ids, precision, device)
    init_state(optimizer)
    marks = [_now(device)]

    def tick(state) -> bool:
        marks.append(_now(device))  # one mark per optimizer step
        return False

    with profiler:
        state = loop.train_epoch(
            model, plan, data, labels, optimizer, scheduler, scaler, tcfg, precision, device,
            pad_id=PAD, progress=False, after_window=tick,
        )  # fmt: skip
    return list(np.diff(marks)), state.halvings


def _run_trainer(model, tcfg, ids, labels, timed, precision, device, profiler) -> tuple[list[float], dict]:
    """The same job through transformers.Trainer: (seconds of each optimizer step, its settings)."""
    import torch
    import torch.nn.functional as F
    from transformers import Trainer, TrainerCallback

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return len(timed)

        def __getitem__(self, i):
            x = torch.as_tensor(ids[timed[i]], dtype=torch.long)
            return {"input_ids": x, "attention_mask": torch.ones_like(x), "labels": torch.tensor(labels[timed[i]])}

    def bce(outputs, targets, num_items_in_batch=None):
        # the loss our loop uses: BCE on fp32 logits, summed and divided by the window's examples
        loss = F.binary_cross_entropy_with_logits(outputs.logits.float().squeeze(-1), targets.float(), reduction="sum")
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
        args = bench_trainer.trainer_arguments(tcfg, precision, device, steps, tmp)
        trainer = Trainer(model=model, args=args, train_dataset=Rows(), compute_loss_func=bce, callbacks=[clock])
        warm_up(model, ids, precision, device)
        init_state(trainer.create_optimizer())  # train() reuses this optimizer, state and all
        with profiler:
            trainer.train()
    return list(np.diff(clock.marks)), bench_trainer.trainer_settings(args)


# ---------------------------------------------------------------- the table


def run_subprocess(cfg_args: list[str], spec: dict) -> dict:
    """One row in a fresh Python process; its last JSON line is the result."""
    cmd = [sys.executable, "-m", "pipeline.bench", *cfg_args, "--row", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(ROW_TAG):
            return json.loads(line[len(ROW_TAG) :])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    # a row killed for memory (exit -9) is a result too: it did not fit
    return {"key": spec["key"], "runner": spec["runner"], "failed": f"exit {proc.returncode}: {tail[:200]}"}


def trainer_spec(spec: dict, ours: dict) -> dict:
    """The Trainer row for one of ours: the same job, without the switches Trainer lacks."""
    # trimming is ours only: a Trainer user trains the full vocabulary; auto-fit is ours only: Trainer
    # gets the micro-batch ours picked (the one it ended with, after any out-of-memory halving)
    micro = ours["micro"]
    return {**spec, "runner": "trainer", "trim": False, "autofit": False, "micro": micro, "force_micro": micro}


def _same_job(a: dict) -> tuple:
    return tuple(a[k] for k in ("precision", "force_micro", "checkpointing", "trim", "optimizer"))


def measure(cfg: Config, runner, log=print) -> list[dict]:
    """Each row ours, then the same job through Trainer: a list of {spec, ours, trainer}."""
    results, done = [], {}
    for spec in plan(cfg):
        t0 = time.perf_counter()
        ours = runner({**spec, "runner": "ours"})
        log(f"bench: {spec['label']} (ours): {_brief(ours)} [{time.perf_counter() - t0:.0f} s]")
        trainer = None
        if cfg.bench.trainer and "na" not in ours and "failed" not in ours:
            tspec = trainer_spec(spec, ours)
            if _same_job(tspec) in done:  # e.g. the trimming row's Trainer run is the all-three row's
                trainer = done[_same_job(tspec)]
                log(f"bench: {spec['label']} (Trainer): the same job as a row above, not run again")
            else:
                t0 = time.perf_counter()
                trainer = done[_same_job(tspec)] = runner(tspec)
                log(f"bench: {spec['label']} (Trainer): {_brief(trainer)} [{time.perf_counter() - t0:.0f} s]")
        results.append({"spec": spec, "ours": ours, "trainer": trainer})
    return results


def _brief(r: dict) -> str:
    if "na" in r:
        return f"n/a ({r['na']})"
    if "failed" in r:
        return f"failed ({r['failed']})"
    return f"peak {r['peak_mb']:,.0f} MB, {report.speed_cell(r)} samples/s"


def run(cfg: Config, runner, log=print) -> dict:
    """Measure every row with `runner(spec) -> result` (a fresh process each), print and write the table."""
    summary = report.summarize(measure(cfg, runner, log))
    table = report.format_table(cfg.bench, summary, explain=[])
    out = Path(cfg.models_dir) / "bench"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{cfg.bench.model}.md", table)
    atomic_write_text(out / f"{cfg.bench.model}.json", json.dumps(summary, indent=1, default=str))
    report.plot(summary, out / f"{cfg.bench.model}.png", f"{cfg.bench.model}, seq {cfg.bench.seq_len}")
    if cfg.bench.profile:
        atomic_write_text(out / f"{cfg.bench.model}.profile.md", report.format_profiles(summary))
    log("\n" + table)
    log(f"wrote {out}/{cfg.bench.model}.md, .json, .png")
    return summary


def main(argv=None) -> int:
    p = config_mod.parser("Peak memory and speed of each memory technique, ours beside HF Trainer.")
    p.add_argument("--row", help=argparse.SUPPRESS)  # internal: run one row and print its JSON line
    args = p.parse_args(argv)
    if args.row:
        print(ROW_TAG + json.dumps(run_row(config_mod.from_args(args), json.loads(args.row))), flush=True)
        return 0

    def stage() -> None:
        cfg = config_mod.from_args(args)  # a CUDA device that is not there stops here (config.check_device)
        # every row's process gets the same resolved settings
        cfg_args = ["--config", args.config, *args.overrides, f"bench.seq_len={cfg.bench.seq_len}"]
        run(cfg, lambda spec: run_subprocess(cfg_args, spec))

    return run_stage(stage)


if __name__ == "__main__":
    sys.exit(main())
