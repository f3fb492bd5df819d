"""The model a fold trains: built (trimmed, sparse embedding gradients, checkpointing), wrapped in DDP, its batch
plan fitted to the memory given, described in the fold's banner, and saved with its tokenizer and config."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import numpy as np

from pipeline import config as config_mod
from pipeline import files, layout, validity
from pipeline.core import attention, cpusize, distributed, lora, memory, modeling, optim, trim
from pipeline.errors import PipelineError
from pipeline.files import check_free_space
from pipeline.inputs.tokens import Ragged
from pipeline.schema import Config


def smoke_steps(cfg: Config, steps: int) -> int:
    """train.max_steps where it stops a fold before its `steps` scheduled optimizer steps (a smoke run); else 0."""
    return cfg.train.max_steps if 0 < cfg.train.max_steps < steps else 0


def banner(
    cfg: Config, d: distributed.Dist, prec: str, n_train: int, n_valid: int, steps: int, model, why: str = ""
) -> str:
    """The fold's header: the model (under LoRA, what it trains), device, precision, checkpointing (and, `why`, how
    auto decided it), the plan."""
    t = cfg.train
    n = modeling.count_parameters(model)
    params = f"{n / 1e6:.1f}M parameters" if n >= 1e5 else f"{n:,} parameters"  # a tiny LoRA fold's: thousands
    if model.lora is not None:
        frozen = "quantized to " + model.lora["quantize"] if model.lora["quantize"] != "none" else prec
        params += (f" trained: LoRA r={model.lora['r']} on {len(model.lora['modules'])} projections, the base "
                   f"frozen in {frozen}")  # fmt: skip
    smoke = smoke_steps(cfg, steps)
    # the schedule (warm-up, decay) still counts every step: a smoke run is its first few, and says so
    plan = f"smoke run: {smoke:,} of {steps:,} steps (train.max_steps)" if smoke else f"{steps:,} optimizer steps"
    return (
        f"model {cfg.model.name} ({params}) | device {d.device} | precision {prec} | "
        f"checkpointing {'on' if t.checkpointing is True else 'off'}{f' ({why})' if why else ''}\n"
        f"examples {n_train:,} train / {n_valid:,} valid | {batch_plan(t, d.world)} | {t.epochs} epochs, {plan}"
    )


def batch_plan(t, world: int) -> str:
    """The banner's micro-batch x accumulation x world: rows, or under a token budget rows and tokens at most (the
    rows of a step vary with their lengths)."""
    eff = t.micro_batch * t.accumulation * world
    if t.token_budget <= 0:
        return f"micro-batch {t.micro_batch} x accumulation {t.accumulation} x world {world} = effective batch {eff}"
    return (f"micro-batches of at most {t.token_budget:,} tokens and {t.micro_batch} rows (train.token_budget) x "
            f"accumulation {t.accumulation} x world {world} = at most {eff} rows, "
            f"{t.token_budget * t.accumulation * world:,} tokens a step")  # fmt: skip


def probe_rows(cfg: Config, prec: str) -> int:
    """Rows of the micro-batch a fold's memory checks step at model.max_length (memory.probed_rows)."""
    return memory.probed_rows(cfg.train.micro_batch, cfg.model.max_length, prec, cfg.train)


def check_settings(cfg: Config, device) -> None:
    """The settings that only building a fold's model or optimizer would refuse (an 8-bit optimizer or a quantized
    base on a CPU, flash attention where it cannot run, a quantized tiny model, a stage-2 pooling other than its
    stage-1 model's), refused in one line before any fold starts: nothing is touched then."""
    init = validity.init_dir(cfg)
    if init is not None:  # a stage-2 model is the stage-1 model's, head and pooling included (modeling.build_model)
        pooling = modeling.head_spec(modeling.read_head(init)).pooling
        if pooling != cfg.model.pooling:
            raise PipelineError(
                f"{validity.init_setting(cfg)}: its model pools by {pooling} and a stage-2 fold pools as "
                f"the model it starts from, not by model.pooling={cfg.model.pooling}; set model.pooling={pooling}, "
                f"or train the stage-1 model with model.pooling={cfg.model.pooling}"
            )
    if lora.on(cfg.model.lora):
        lora.check_quantize(cfg.model.lora.quantize, modeling.base_from(cfg), device)
    attention.implementation(cfg.model.attn_implementation, device)
    optim.check_optimizer(cfg.train, device)
    cpusize.check_cpu_auto(cfg, device)  # XLM-R large on a CPU that `auto` fell back to: days, refused


def save_model(model, tokenizer, cfg: Config, fold_dir: Path) -> None:
    """The model (weights, config, head), its tokenizer and the config into a temporary folder, then each
    file renamed into place."""
    tmp = fold_dir / f".save-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    need = modeling.count_parameters(model) * 4  # fp32 weights; a full disk is one line, the old files kept
    try:
        with files.disk_full(fold_dir / layout.WEIGHTS, need):
            modeling.save(model, tmp)
            tokenizer.save_pretrained(tmp)
            config_mod.save(cfg, tmp / layout.RUN_CONFIG)
        files.default_modes(tmp)  # safetensors writes its file 0600; every artifact gets the same mode
        for p in tmp.iterdir():
            os.replace(p, fold_dir / p.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def padded_tokens(plan: list[list[np.ndarray]], data: Ragged) -> float:
    """What an epoch computes: every micro-batch's rows times its longest row, on every rank."""
    lengths = data.lengths
    return float(sum(len(b) * int(lengths[b].max()) for step in plan for b in step if len(b)))


def build_fold_model(cfg: Config, tokenizer, keep: np.ndarray | None, d: distributed.Dist, fold_dir: Path,
                     prec: str = "fp32"):  # fmt: skip
    """The model as this fold trains it: trimmed, LoRA's adapters on its frozen base, sparse embedding gradients
    or DDP, checkpointing, on device."""
    fold = layout.fold_index(fold_dir)  # model.init_folds: fold k starts from that experiment's fold k
    model = modeling.build_model(cfg, tokenizer, precision=prec, device=d.device, fold=fold)
    init = validity.init_dir(cfg, fold)
    init_map = trim.load_map(init) if init is not None else None
    if init_map is not None:  # a trimmed stage-1 model: its embedding rows are already the kept ones
        if keep is None or not np.array_equal(init_map, trim.vocab_map(keep, len(tokenizer), tokenizer.unk_token_id)):
            raise PipelineError(
                f"{validity.init_setting(cfg)} was trained with a trimmed vocabulary: "
                f"trim this experiment too (model.trim_vocab=true), on the same data"
            )
    elif keep is not None:
        trim.trim_model(model, keep)
    if lora.on(cfg.model.lora):  # after trimming: the trimmed embedding is frozen with the rest of the base
        block = lora.spec(cfg.model.lora, model.encoder, modeling.base_record(cfg, tokenizer, fold))
        lora.attach(model, block, lora.base_dtype(prec))
    # before any state is written: a resume state is ~16 bytes a trained parameter (fp32 weights + AdamW moments),
    # the weights 4 more (a LoRA fold's: its adapters and head); every rank checks, so all of them stop together
    need = modeling.count_parameters(model) * (16 + 4)
    check_free_space(fold_dir.parent, need, f"fold {layout.fold_index(fold_dir)}'s resume state and weights")
    if not d.enabled and model.lora is None:  # a LoRA base's embedding is frozen: no gradient to keep sparse
        modeling.sparse_embedding_grad(model)
    if cfg.train.checkpointing is True:  # `auto` is decided once the model is on its device (checkpointing)
        modeling.enable_checkpointing(model)  # before DDP wraps the model
    return model.to(d.device)


def checkpointing(cfg: Config, model, net, prec: str, d: distributed.Dist) -> tuple[Config, str]:
    """(cfg with train.checkpointing true or false, why): `auto` turns it on only where one step at the configured
    micro-batch would not fit without it (on a CPU without max_memory_gb: off, memory is not what limits it)."""
    t = cfg.train
    if t.checkpointing != "auto":
        return cfg, ""
    if d.device.type != "cuda" and t.max_memory_gb <= 0:
        on, how = False, "a CPU without train.max_memory_gb"
    else:
        rows = probe_rows(cfg, prec)
        fit, how = memory.fits(net, model, rows, cfg.model.max_length, t.max_memory_gb, prec, d.device, t)
        on = not all(distributed.gather_objects(d, fit))  # every rank runs the same way
        how = f"micro-batch {rows} x {cfg.model.max_length} tokens without it: {how}"
    if on:
        # after DDP has wrapped the model: non-reentrant checkpointing leaves the parameters' gradient hooks alone
        modeling.enable_checkpointing(model)
    return dataclasses.replace(cfg, train=dataclasses.replace(t, checkpointing=on)), f"auto: {how}"


def ddp_headroom(cfg: Config, model, net, prec: str, d: distributed.Dist) -> None:
    """Under DDP on GPUs, refuse a fold whose step at its micro-batch leaves a card no margin (memory.cuda_cap).

    One process halves a window that ran out of memory and goes on (pipeline.core.loop); under DDP the other ranks
    would wait for it in a collective, so there an out-of-memory error stops the fold (resumable) instead. Better
    to measure the step once at the fold's start, every rank together, and stop before any step is trained."""
    if not d.enabled or d.device.type != "cuda":
        return  # on CPUs nothing is measured against a card (gloo runs are tests and smoke runs)
    t = cfg.train
    rows = probe_rows(cfg, prec)
    fit, how = memory.fits(net, model, rows, cfg.model.max_length, t.max_memory_gb, prec, d.device, t)
    fits = distributed.gather_objects(d, (fit, how))
    if all(f for f, _ in fits):
        return
    rank, (_, how) = next((r, f) for r, f in enumerate(fits) if not f[0])
    fix = "lower train.token_budget" if t.token_budget > 0 else "lower train.micro_batch"
    fix += "" if t.checkpointing is True else " or set train.checkpointing=true"
    raise PipelineError(
        f"micro-batch {rows} x {cfg.model.max_length} tokens leaves process {rank} no memory margin ({how}): under "
        "DDP an out-of-memory error mid-fold stops the fold rather than halving the micro-batch; "
        f"{fix} (or train.max_memory_gb: auto-fit)"
    )


def wrap(model, d: distributed.Dist):
    """DDP around the model under torchrun (it copies rank 0's weights to every rank), else the model."""
    if not d.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    # gradient_as_bucket_view: the gradients live in DDP's all-reduce buckets instead of beside a copy of them
    # (4 bytes a parameter saved: 2.2 GB for XLM-R large)
    # broadcast_buffers=False: the model's buffers are constants (position and token type ids; no running
    # statistics), and a broadcast at every forward would make the memory probe a collective, so two ranks
    # that probe a different number of times would wait on each other until the timeout
    return DDP(model, device_ids=[d.device.index] if d.device.type == "cuda" else None, gradient_as_bucket_view=True,
               broadcast_buffers=False)  # fmt: skip


def with_plan(cfg: Config, micro: int, accumulation: int) -> Config:
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, micro_batch=micro, accumulation=accumulation))


def auto_fit(cfg: Config, model, net, prec: str, d: distributed.Dist) -> Config:
    """cfg with the largest micro-batch that fits train.max_memory_gb (same effective batch)."""
    t = cfg.train
    per_device = t.micro_batch * t.accumulation
    micro, how = memory.fit_micro_batch(
        model, per_device, cfg.model.max_length, t.max_memory_gb, prec, d.device, t, net=net
    )
    micro = min(distributed.gather_objects(d, micro))  # every rank must run the same plan
    if d.is_main:
        print(f"auto-fit under {t.max_memory_gb:g} GB: micro-batch {micro} x accumulation {per_device // micro}")
        print(f"  ({how})")
    return with_plan(cfg, micro, per_device // micro)  # the banner and the saved config show the fitted plan
