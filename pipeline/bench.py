"""Stage `make bench`: peak memory and speed of each memory technique, ours beside Hugging Face Trainer.

Writes  models/bench/<model>.md     the table, the floor and the notes (also printed)
        models/bench/<model>.json   every row's raw measurements
        models/bench/<model>.png    bar chart: peak memory and samples per second per row

The model is XLM-R's architecture from a config (base or large sizes, the real 250,002-token
vocabulary, random weights: no download); the data is random token ids at full length. Every row
trains on the same rows at the same effective batch: an untimed warm-up (one forward/backward on one
row, and the optimizer state created by a zero step), then `bench.steps` timed optimizer steps.

Each row runs in a fresh process (`python -m pipeline.bench --row ...`, which prints one JSON line)
so that no row inherits another's memory. Peak memory: on CUDA torch.cuda.max_memory_allocated (and
reserved); on CPU the process's peak resident memory minus its resident memory before the model exists.

The floor is what training cannot go below: weights + gradients + AdamW's two moments, 16 bytes per
trainable fp32 parameter.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pipeline import config as config_mod
from pipeline.config import Config
from pipeline.errors import PipelineError, run_stage
from pipeline.io import atomic_write_text

VOCAB = 250002  # XLM-R's vocabulary
SPECIALS = (0, 1, 2, 3)  # <s> <pad> </s> <unk>: ids below and at the pad id stay put when trimming
PAD = 1
SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
ARCH = {"xlm-roberta-base": (768, 12, 12, 3072), "xlm-roberta-large": (1024, 24, 16, 4096)}  # published sizes
FLOOR_BYTES = 16  # fp32 weight 4 + gradient 4 + AdamW exp_avg 4 + exp_avg_sq 4, per trainable parameter
ROW_TAG = "BENCH_ROW "


# ---------------------------------------------------------------- the rows


def plan(cfg: Config) -> list[dict]:
    """Our rows, each a dict of switches; every row has the same effective batch and data."""
    b = cfg.bench
    if b.effective_batch % b.micro_batch:
        raise PipelineError(f"bench.micro_batch={b.micro_batch} must divide bench.effective_batch={b.effective_batch}")
    big, small = b.effective_batch, b.micro_batch
    base = {"precision": "auto", "micro": big, "checkpointing": False, "trim": False, "optimizer": "adamw"}
    base["autofit"] = False
    all3 = {**base, "micro": small, "checkpointing": True}
    rows = [
        {**base, "key": "fp32", "label": f"fp32 baseline (batch {big} in one go)", "precision": "fp32"},
        {**base, "key": "mp", "label": "mixed precision"},
        {**base, "key": "mp_acc", "label": f"mixed precision + accumulation ({small} x {big // small})"}
        | {"micro": small},
        {**base, "key": "mp_ckpt", "label": "mixed precision + checkpointing", "checkpointing": True},
        {**all3, "key": "all3", "label": "all three"},
        {**all3, "key": "trim", "label": "all three + vocabulary trimming", "trim": True},
        {**all3, "key": "adamw8bit", "label": "all three + 8-bit AdamW", "optimizer": "adamw8bit"},
        {**all3, "key": "autofit", "label": f"all three + auto-fit (cap {b.max_memory_gb:g} GB)", "autofit": True},
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


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
    from pipeline.tokens import Ragged

    b = cfg.bench
    device = distributed.pick_device(cfg.train.device)
    precision = loop.resolve_precision(spec["precision"], device)
    out = {"key": spec["key"], "runner": spec["runner"], "device": str(device), "precision": precision}
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
    if spec["runner"] == "ours":
        seconds = _run_ours(model, tcfg, spec, ids, labels, timed, precision, device, Ragged)
    else:
        seconds = _run_trainer(model, tcfg, spec, ids, labels, timed, precision, device)
    out.update(_memory_peak(device, start))
    out["seconds"] = seconds
    out["samples_per_second"] = len(timed) / seconds
    return out


def _run_ours(model, tcfg, spec, ids, labels, timed, precision, device, Ragged) -> float:
    from pipeline import loop, modeling

    if tcfg.checkpointing and not spec["autofit"]:
        modeling.enable_checkpointing(model)
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
    _sync(device)
    t0 = time.perf_counter()
    loop.train_epoch(
        model, plan, data, labels, optimizer, scheduler, scaler, tcfg, precision, device, pad_id=PAD, progress=False
    )
    _sync(device)
    return time.perf_counter() - t0


def _run_trainer(model, tcfg, spec, ids, labels, timed, precision, device) -> float:
    """The same settings through transformers.Trainer; timed from its train begin to its train end."""
    import torch
    import torch.nn.functional as F
    from transformers import Trainer, TrainerCallback, TrainingArguments

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
        def on_train_begin(self, *a, **k):
            _sync(device)
            self.t0 = time.perf_counter()

        def on_train_end(self, *a, **k):
            _sync(device)
            self.seconds = time.perf_counter() - self.t0

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    # transformers 5 renamed gradient_checkpointing to activation_checkpointing (the old name is an alias)
    ckpt = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp,
            per_device_train_batch_size=tcfg.micro_batch,
            gradient_accumulation_steps=tcfg.accumulation,
            bf16=precision == "bf16",
            fp16=precision == "fp16",
            **{ckpt: tcfg.checkpointing, f"{ckpt}_kwargs": {"use_reentrant": False}},
            optim="adamw_bnb_8bit" if tcfg.optimizer == "adamw8bit" else "adamw_torch",
            learning_rate=tcfg.lr,
            weight_decay=tcfg.weight_decay,
            max_grad_norm=tcfg.max_grad_norm,
            lr_scheduler_type="linear",
            warmup_steps=0,
            max_steps=len(timed) // (tcfg.micro_batch * tcfg.accumulation),
            eval_strategy="no",
            save_strategy="no",
            logging_strategy="no",
            report_to="none",
            dataloader_num_workers=0,
            disable_tqdm=True,
            seed=tcfg.seed,
            use_cpu=device.type == "cpu",
        )
        trainer = Trainer(model=model, args=args, train_dataset=Rows(), compute_loss_func=bce, callbacks=[clock])
        warm_up(model, ids, precision, device)
        init_state(trainer.create_optimizer())  # train() reuses this optimizer, state and all
        trainer.train()
    return clock.seconds


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


def measure(cfg: Config, runner, log=print) -> list[dict]:
    """Each row ours, then the same settings through Trainer: a list of {spec, ours, trainer}."""
    results = []
    for spec in plan(cfg):
        t0 = time.perf_counter()
        ours = runner({**spec, "runner": "ours"})
        log(f"bench: {spec['label']} (ours): {_brief(ours)} [{time.perf_counter() - t0:.0f} s]")
        trainer = None
        if cfg.bench.trainer and "na" not in ours and "failed" not in ours:
            t0 = time.perf_counter()
            # the same micro-batch ours ended with (the auto-fit row's pick included)
            trainer = runner({**spec, "runner": "trainer", "force_micro": ours["micro"]})
            log(f"bench: {spec['label']} (Trainer): {_brief(trainer)} [{time.perf_counter() - t0:.0f} s]")
        results.append({"spec": spec, "ours": ours, "trainer": trainer})
    return results


def _brief(r: dict) -> str:
    if "na" in r:
        return f"n/a ({r['na']})"
    if "failed" in r:
        return f"failed ({r['failed']})"
    return f"peak {r['peak_mb']:,.0f} MB, {r['samples_per_second']:.2f} samples/s"


def _ok(r: dict | None) -> bool:
    return r is not None and "peak_mb" in r


def summarize(cfg: Config, results: list[dict]) -> dict:
    """Ratios to the baseline, to the floor and ours / Trainer, added to each row."""
    base = results[0]["ours"]
    params = next((r["ours"]["parameters"] for r in results if _ok(r["ours"])), 0)
    floor_mb = FLOOR_BYTES * params / 2**20
    for r in results:
        o, t = r["ours"], r["trainer"]
        if _ok(o):
            r["floor_mb"] = FLOOR_BYTES * o["trained_parameters"] / 2**20
            r["mem_vs_floor"] = o["peak_mb"] / floor_mb
            if _ok(base):
                r["speed_vs_base"] = o["samples_per_second"] / base["samples_per_second"]
                if base["peak_mb"] > 0:  # a tiny model's peak can round to nothing
                    r["mem_vs_base"] = o["peak_mb"] / base["peak_mb"]
            if _ok(t):
                r["speed_vs_trainer"] = o["samples_per_second"] / t["samples_per_second"]
                if t["peak_mb"] > 0:
                    r["mem_vs_trainer"] = o["peak_mb"] / t["peak_mb"]
    return {"parameters": params, "floor_mb": floor_mb, "rows": results}


def _cell(r: dict | None, key: str, fmt: str) -> str:
    if r is None:
        return "-"
    if "na" in r:
        return "n/a"
    if "failed" in r:
        return "failed"
    return format(r[key], fmt) if key in r else "-"


def format_table(cfg: Config, summary: dict) -> str:
    b = cfg.bench
    rows = summary["rows"]
    device = next((r["ours"]["device"] for r in rows if "device" in r["ours"]), "?")
    cuda = device.startswith("cuda")
    precision = next((r["ours"]["precision"] for r in rows[1:] if "precision" in r["ours"]), "?")
    head = (
        f"# make bench: {b.model}, sequence length {b.seq_len}, effective batch {b.effective_batch}, "
        f"{b.steps} timed step(s) per row, {device}\n\n"
        "| row | micro x accum | peak MB | x baseline | x floor | samples/s | x baseline | "
        "Trainer peak MB | Trainer samples/s | memory ours/Trainer | speed ours/Trainer |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        o, t = r["ours"], r["trainer"]
        shape = f"{o['micro']} x {o['accumulation']}" if "micro" in o else "-"
        peak = _cell(o, "peak_mb", ",.0f")
        if cuda and _ok(o):
            peak += f" ({o['reserved_mb']:,.0f} reserved)"
        lines.append(
            f"| {r['spec']['label']} | {shape} | {peak} | {_cell(r, 'mem_vs_base', '.2f')} | "
            f"{_cell(r, 'mem_vs_floor', '.2f')} | {_cell(o, 'samples_per_second', '.2f')} | "
            f"{_cell(r, 'speed_vs_base', '.2f')} | {_cell(t, 'peak_mb', ',.0f')} | "
            f"{_cell(t, 'samples_per_second', '.2f')} | {_cell(r, 'mem_vs_trainer', '.2f')} | "
            f"{_cell(r, 'speed_vs_trainer', '.2f')} |"
        )
    notes = [
        f"Floor: weights + gradients + AdamW state = {FLOOR_BYTES} bytes x {summary['parameters']:,} trainable "
        f"parameters = {summary['floor_mb']:,.0f} MB; 'x floor' is each row's peak divided by it.",
        f"Mixed precision here is {precision} autocast (fp32 master weights); every row sees the same "
        f"{b.effective_batch * b.steps} rows per timed run, random token ids at full length, random weights.",
        "Peak memory: "
        + (
            "torch.cuda.max_memory_allocated (max reserved in brackets)."
            if cuda
            else "peak resident memory of the row's own process minus its resident memory before the model "
            "existed (Linux VmHWM, reset at that point)."
        ),
        "Ours is pipeline.loop.train_epoch with loop.make_optimizer (torch AdamW, fused: no parameter-sized "
        "temporaries); Trainer uses optim=adamw_torch (the for-loop AdamW) with the same lr, weight decay, "
        "clipping, BCE-with-logits loss, micro-batch, accumulation and checkpointing (use_reentrant=False).",
        f"Trimming keeps the {b.vocab_used:,} ids the data is drawn from. That count stands in for the distinct "
        "XLM-R ids of the competition's texts: no XLM-R tokenizer is reachable offline to count them on "
        "../shared/jigsaw-real, so it is a documented, conservative guess (override with bench.vocab_used).",
    ]
    for r in rows:
        if "autofit" in r["ours"]:
            notes.append(f"Auto-fit picked micro-batch {r['ours']['micro']}: {r['ours']['autofit']}.")
        if "na" in r["ours"]:
            notes.append(f"{r['spec']['label']}: n/a, {r['ours']['na']}.")
    if not cuda:
        notes.append(
            "Speeds come from few steps on a shared CPU: treat differences under ~10% as noise. Mixed precision "
            "on CPU is bf16 autocast, whose speed depends on the CPU's bf16 support."
        )
    return head + "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def plot(summary: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["rows"]
    labels = [r["spec"]["label"] for r in rows]
    y = np.arange(len(rows))

    def values(who: str, key: str) -> list[float]:
        return [r[who][key] if _ok(r[who]) else 0.0 for r in rows]

    fig, axes = plt.subplots(1, 2, figsize=(13, 0.55 * len(rows) + 1.8), sharey=True)
    for ax, key, name in ((axes[0], "peak_mb", "peak memory (MB)"), (axes[1], "samples_per_second", "samples/s")):
        ax.barh(y - 0.2, values("ours", key), 0.4, label="ours")
        ax.barh(y + 0.2, values("trainer", key), 0.4, label="HF Trainer")
        ax.set_xlabel(name)
    axes[0].axvline(summary["floor_mb"], color="k", ls="--", lw=1, label="floor (16 B/param)")
    axes[0].set_yticks(y, labels)
    axes[0].invert_yaxis()
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper right", ncol=3, fontsize=8)  # clear of the bars
    fig.suptitle(title, x=0.02, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(cfg: Config, runner, log=print) -> dict:
    """Measure every row with `runner(spec) -> result` (a fresh process each), print and write the table."""
    summary = summarize(cfg, measure(cfg, runner, log))
    table = format_table(cfg, summary)
    out = Path(cfg.models_dir) / "bench"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{cfg.bench.model}.md", table)
    atomic_write_text(out / f"{cfg.bench.model}.json", json.dumps(summary, indent=1, default=str))
    plot(summary, out / f"{cfg.bench.model}.png", f"{cfg.bench.model}, seq {cfg.bench.seq_len}")
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
        cfg = config_mod.from_args(args)
        # every row's process gets the same resolved settings
        cfg_args = ["--config", args.config, *args.overrides, f"bench.seq_len={cfg.bench.seq_len}"]
        run(cfg, lambda spec: run_subprocess(cfg_args, spec))

    return run_stage(stage)


if __name__ == "__main__":
    sys.exit(main())
