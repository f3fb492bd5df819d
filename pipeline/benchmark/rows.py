"""The rows of the bench table: which switches each runs, and the Trainer job that matches each of ours."""

from __future__ import annotations

from pipeline.config import Config

BASELINE = "fp32"  # the key of the row every "x baseline" ratio is to (benchmark.report)


def plan(cfg: Config) -> list[dict]:
    """Our rows, each a dict of switches; every row has the same effective batch and data."""
    b = cfg.bench  # its values were checked when the config loaded (pipeline.schema, pipeline.validation)
    big, small = b.effective_batch, b.micro_batch
    base = {"precision": "auto", "micro": big, "checkpointing": False, "trim": False, "optimizer": "adamw", "lora": 0}
    # every row of ours has sparse word-embedding gradients, as `make train` in one process; bench.sparse=false
    # makes them dense, as Trainer's, to measure what that one switch is worth
    sparse = "sparse embedding grads" if b.sparse else "none (dense embedding grads)"
    base |= {"autofit": False, "sparse": b.sparse, "only_ours": sparse}
    all3 = {**base, "micro": small, "checkpointing": True}
    # LoRA: the base frozen in half precision, adapters of rank bench.lora_r trained; no embedding gradient at all
    lora = {**all3, "lora": b.lora_r, "only_ours": "none (the embedding is frozen)"}
    rows = [
        {**base, "key": BASELINE, "label": f"fp32 baseline (batch {big} in one go)", "precision": "fp32"},
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
        {**lora, "key": "lora", "label": f"all three + LoRA (r {b.lora_r}, the base frozen)"},
        {**lora, "key": "lora_trim", "label": "all three + LoRA + vocabulary trimming", "trim": True}
        | {"only_ours": "trimming (Trainer: full vocabulary)"},
    ]
    # the baseline joins any choice of rows (every "x baseline" ratio is to it) unless bench.baseline=false: then it
    # runs only where bench.rows names it, since a machine that cannot hold a model's fp32 baseline (XLM-R XL on a
    # CPU) would be killed or swap in it before the rows that fit ran; nothing chosen is every row but it
    chosen = set(b.rows) or {r["key"] for r in rows}
    if b.baseline:
        chosen.add(BASELINE)
    elif not b.rows:
        chosen.discard(BASELINE)
    return [r for r in rows if r["key"] in chosen]


def trainer_spec(spec: dict, ours: dict) -> dict:
    """The Trainer row for one of ours: the same job, without the switches Trainer lacks."""
    # trimming is ours only: a Trainer user trains the full vocabulary; auto-fit is ours only: Trainer
    # gets the micro-batch ours picked (the one it ended with, after any out-of-memory halving)
    micro = ours["micro"]
    return {**spec, "runner": "trainer", "trim": False, "autofit": False, "micro": micro, "force_micro": micro}


def same_job(a: dict) -> tuple:
    """What makes two Trainer rows the same job (the trimming row's Trainer job is the all-three one's)."""
    return tuple(a[k] for k in ("precision", "force_micro", "checkpointing", "trim", "optimizer", "lora"))
