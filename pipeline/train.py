"""Stage `make train`: k-fold XLM-R with mixed precision, gradient accumulation and checkpointing.

Reads   input/prepared/<name>/ (fold table, tokenizer) and the token cache
Writes  models/<name>/fold<k>/model.safetensors, config.json   the best epoch's weights (save_pretrained)
        models/<name>/fold<k>/tokenizer files                   the tokenizer the weights go with
        models/<name>/fold<k>/pipeline.yaml                     the resolved config
        models/<name>/fold<k>/metrics.jsonl                     per epoch: loss, AUC (overall, per language),
                                                               seconds, samples per second, peak memory
        models/<name>/fold<k>/oof.csv                           the best epoch's predictions on the fold
        models/<name>/fold<k>/resume.pt                         while a fold runs: the state to resume from
        models/<name>/fold<k>/done.json                         written last: the fold is complete
        models/<name>/oof.csv, cv.json, cv.png                  the cross-validation report

A fold is trained on every row of the other folds and of fold -1 (training-only rows) and evaluated
each epoch on its own rows. A rerun skips complete folds with the same settings, and resumes an
interrupted fold from its last saved state. Launch with torchrun for several GPUs (see README).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pipeline import config as config_mod
from pipeline import data as data_mod
from pipeline import distributed, io, loop, memory, metrics, modeling, tokens, trim
from pipeline.config import Config
from pipeline.errors import PipelineError, run_stage
from pipeline.io import (
    atomic_path,
    atomic_write_text,
    check_free_space,
    read_json,
    write_csv,
    write_json,
)

RESUME = "resume.pt"


class Interrupted(PipelineError):
    pass


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA too


def fold_digest(cfg: Config) -> str:
    """What a fold's result depends on: data, model and training settings, but not which folds to run."""
    d = cfg.to_dict()
    train = {k: v for k, v in d["train"].items() if k not in ("folds", "device")}
    blob = json.dumps({"data": d["data"], "model": d["model"], "train": train}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def is_complete(fold_dir: Path, digest: str) -> bool:
    done = fold_dir / "done.json"
    return done.exists() and read_json(done).get("digest") == digest and (fold_dir / "model.safetensors").exists()


class StopFlag:
    """SIGINT and SIGTERM set a flag; the loop saves a resume state at the next optimizer step and exits."""

    def __init__(self) -> None:
        self.raised = False
        self.previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.raised:  # a second Ctrl-C means now
            raise KeyboardInterrupt
        self.raised = True
        print(f"\n{signal.Signals(signum).name}: saving a resume state at the next optimizer step", file=sys.stderr)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


# ---------------------------------------------------------------- resume state


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_resume(
    path: Path,
    model,
    optimizer,
    scheduler,
    scaler,
    epoch: int,
    step: loop.StepState,
    best: dict,
    history: list,
    digest: str,
) -> None:
    state = {
        "digest": digest,
        "epoch": epoch,
        "step": vars(step).copy(),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "best": best,
        "history": history,
        "rng": rng_state(),
    }
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_resume(path: Path, digest: str) -> dict | None:
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a damaged state is refused, not half-loaded
        print(f"warning: {path} is unreadable ({type(e).__name__}); starting the fold again", file=sys.stderr)
        return None
    return state if state.get("digest") == digest else None


# ---------------------------------------------------------------- one fold


def banner(
    cfg: Config, d: distributed.Dist, precision: str, n_train: int, n_valid: int, steps: int, params: int
) -> str:
    t = cfg.train
    eff = t.micro_batch * t.accumulation * d.world
    return (
        f"model {cfg.model.name} ({params / 1e6:.1f}M parameters) | device {d.device} | precision {precision} | "
        f"checkpointing {'on' if t.checkpointing else 'off'}\n"
        f"examples {n_train:,} train / {n_valid:,} valid | micro-batch {t.micro_batch} x accumulation "
        f"{t.accumulation} x world {d.world} = effective batch {eff} | {t.epochs} epochs, {steps:,} optimizer steps"
    )


def evaluate(
    model, d: distributed.Dist, data: tokens.Ragged, idx: np.ndarray, cfg: Config, precision: str, pad_id: int
) -> np.ndarray:
    """Each rank predicts a shard; gathered back so every fold row is scored exactly once."""
    pos = np.arange(len(idx))[d.rank :: d.world]
    preds = loop.predict(
        model, data, idx[pos], cfg.train.eval_batch, precision, d.device, pad_id, progress=d.is_main, desc="valid"
    )
    out = np.empty(len(idx))
    for p, v in distributed.gather_objects(d, (pos, preds)):
        out[p] = v
    return out


def save_model(model, tokenizer, cfg: Config, fold_dir: Path) -> None:
    """save_pretrained (safetensors) into a temporary folder, then rename each file into place."""
    tmp = fold_dir / f".save-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        config_mod.save(cfg, tmp / "pipeline.yaml")
        io.default_modes(tmp)  # safetensors writes its file 0600; every artifact gets the same mode
        for p in tmp.iterdir():
            os.replace(p, fold_dir / p.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def train_fold(
    cfg: Config,
    fold: int,
    table: pd.DataFrame,
    data: tokens.Ragged,
    tokenizer,
    d: distributed.Dist,
    stop: StopFlag,
    digest: str,
    keep: np.ndarray | None = None,
) -> dict:
    """Train one fold; `keep`: the vocabulary ids to keep (model.trim_vocab), `data` already remapped to them."""
    t = cfg.train
    fold_dir = metrics.experiment_dir(cfg) / f"fold{fold}"
    if d.is_main:
        fold_dir.mkdir(parents=True, exist_ok=True)
    set_seed(t.seed + fold)
    precision = loop.resolve_precision(t.precision, d.device)
    train_idx = np.flatnonzero(table["fold"].to_numpy() != fold)
    valid_idx = np.flatnonzero(table["fold"].to_numpy() == fold)
    labels = table["toxic"].to_numpy(np.float32)
    lengths = data.lengths[train_idx]
    pad_id = tokenizer.pad_token_id

    model = modeling.build_model(cfg, tokenizer)
    if keep is not None:
        trim.trim_model(model, keep)
    # before any state is written: a resume state is ~16 bytes a parameter (fp32 weights + AdamW moments), the
    # weights 4 more; every rank checks, so all of them stop together
    check_free_space(
        fold_dir.parent, modeling.count_parameters(model) * (16 + 4), f"fold {fold}'s resume state and weights"
    )
    if d.is_main:  # the map beside the weights lets predict remap test ids; an untrimmed run removes a stale one
        vmap = None if keep is None else trim.vocab_map(keep, len(tokenizer), tokenizer.unk_token_id)
        trim.save_map(fold_dir, vmap)
    if not d.enabled:
        modeling.sparse_embedding_grad(model)
    if t.checkpointing:
        modeling.enable_checkpointing(model)  # before DDP wraps the model
    model.to(d.device)
    if t.max_memory_gb > 0:
        per_device = t.micro_batch * t.accumulation
        micro, how = memory.fit_micro_batch(
            model, per_device, cfg.model.max_length, t.max_memory_gb, precision, d.device, t.optimizer
        )
        micro = min(distributed.gather_objects(d, micro))  # every rank must run the same plan
        t = dataclasses.replace(t, micro_batch=micro, accumulation=per_device // micro)
        cfg = dataclasses.replace(cfg, train=t)  # the banner and the saved config show the fitted plan
        if d.is_main:
            print(f"auto-fit under {t.max_memory_gb:g} GB: micro-batch {micro} x accumulation {t.accumulation} ({how})")
    net = model
    if d.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model, device_ids=[d.device.index] if d.device.type == "cuda" else None)
    optimizer = loop.make_optimizer(model, t, d.device)
    windows_per_epoch = len(
        loop.accumulation_windows(
            len(loop.micro_steps(loop.length_grouped_batches(lengths, t.micro_batch, t.seed, 0, d.world), d.world)),
            t.accumulation,
        )
    )
    total_steps = t.epochs * windows_per_epoch
    scheduler = loop.make_scheduler(optimizer, t.warmup, total_steps)
    scaler = loop.make_scaler(precision, d.device)

    history: list[dict] = []
    best = {"auc": -1.0, "epoch": -1}
    start_epoch, step = 0, loop.StepState()
    resume = load_resume(fold_dir / RESUME, digest)
    if resume is not None:
        model.load_state_dict(resume["model"])
        optimizer.load_state_dict(resume["optimizer"])
        scheduler.load_state_dict(resume["scheduler"])
        scaler.load_state_dict(resume["scaler"])
        set_rng_state(resume["rng"])
        history, best = resume["history"], resume["best"]
        start_epoch, step = resume["epoch"], loop.StepState(**resume["step"])
        if step.window >= windows_per_epoch:  # saved at the end of an epoch
            start_epoch, step = start_epoch + 1, loop.StepState(halvings=step.halvings)
        if d.is_main:
            print(f"fold {fold}: resuming at epoch {start_epoch + 1}, step {step.window} of {windows_per_epoch}")
    if d.is_main:
        print(f"\n=== fold {fold} ===")
        print(banner(cfg, d, precision, len(train_idx), len(valid_idx), total_steps, modeling.count_parameters(model)))

    def checkpoint(epoch: int, state: loop.StepState) -> None:
        if d.is_main:
            save_resume(fold_dir / RESUME, model, optimizer, scheduler, scaler, epoch, state, best, history, digest)
        distributed.barrier(d)

    fold_start = time.perf_counter() - sum(h["seconds"] for h in history)
    for epoch in range(start_epoch, t.epochs):
        batches = loop.length_grouped_batches(lengths, t.micro_batch, t.seed + fold, epoch, d.world)
        steps = [[train_idx[b] for b in s] for s in loop.micro_steps(batches, d.world)]

        def after_window(state: loop.StepState, epoch=epoch) -> bool:
            stop_now = distributed.any_rank(d, stop.raised)
            every = t.save_every_steps
            if stop_now or (every and state.window % every == 0 and state.window < windows_per_epoch):
                checkpoint(epoch, state)
            return stop_now

        loop.reset_peak_memory(d.device)
        epoch_start = time.perf_counter()
        step = loop.train_epoch(
            net,
            steps,
            data,
            labels,
            optimizer,
            scheduler,
            scaler,
            t,
            precision,
            d.device,
            pad_id=pad_id,
            rank=d.rank,
            world=d.world,
            state=step,
            after_window=after_window,
            progress=d.is_main,
            desc=f"fold {fold} epoch {epoch + 1}/{t.epochs}",
            max_bad_steps=t.max_bad_steps,
        )
        if step.window < windows_per_epoch:
            raise Interrupted(
                f"fold {fold} stopped at epoch {epoch + 1}, step {step.window}; `make train` again resumes from there"
            )
        train_seconds = time.perf_counter() - epoch_start
        preds = evaluate(model, d, data, valid_idx, cfg, precision, pad_id)
        seconds = time.perf_counter() - epoch_start
        valid = table.iloc[valid_idx]
        record = {
            "epoch": epoch + 1,
            "loss": step.loss_sum / max(step.examples, 1),
            "auc": metrics.auc(valid["toxic"], preds),
            "auc_per_lang": metrics.auc_by_lang(valid["toxic"], preds, valid["lang"]),
            "seconds": round(seconds, 2),
            "samples_per_second": round(step.examples * d.world / train_seconds, 1),
            "peak_memory_mb": round(loop.peak_memory_mb(d.device), 1),
            "skipped_steps": step.skipped,
            "lr": scheduler.get_last_lr()[0],
        }
        history.append(record)
        if d.is_main:
            per = " ".join(f"{k} {v:.4f}" for k, v in record["auc_per_lang"].items())
            print(
                f"fold {fold} epoch {epoch + 1}: loss {record['loss']:.4f} AUC {record['auc']:.4f} ({per}) "
                f"{record['samples_per_second']:.0f} ex/s, peak {record['peak_memory_mb']:.0f} MB"
            )
            atomic_write_text(fold_dir / "metrics.jsonl", "".join(json.dumps(h) + "\n" for h in history))
            if record["auc"] > best["auc"]:
                best = {"auc": record["auc"], "epoch": epoch + 1}
                save_model(model, tokenizer, cfg, fold_dir)
                oof = valid[["id", "lang", "toxic", "fold"]].assign(pred=preds)
                write_csv(fold_dir / "oof.csv", oof)
        best = distributed.gather_objects(d, best)[0]  # rank 0 decides, the others follow
        halvings = step.halvings  # micro-batches halved after running out of memory stay halved
        step = loop.StepState(window=windows_per_epoch, halvings=halvings)
        checkpoint(epoch, step)
        step = loop.StepState(halvings=halvings)

    result = {
        "fold": fold,
        "digest": digest,
        "epochs": len(history),
        "best_epoch": best["epoch"],
        "auc": best["auc"],
        "auc_per_lang": history[best["epoch"] - 1]["auc_per_lang"],
        "minutes": round((time.perf_counter() - fold_start) / 60, 2),
        "precision": precision,
        "world": d.world,
        "effective_batch": t.micro_batch * t.accumulation * d.world,
    }
    if d.is_main:
        write_json(fold_dir / "done.json", result)  # last: its presence means the fold is complete
        (fold_dir / RESUME).unlink(missing_ok=True)
    distributed.barrier(d)
    return result


# ---------------------------------------------------------------- the stage


def run(cfg: Config) -> dict | None:
    io.preflight(cfg, "train")  # paths and permissions, before any epoch
    io.hold_experiment_lock(cfg, "train")  # a second run on this experiment stops at once
    d = distributed.setup(cfg.train.device)
    try:
        if d.device.type == "cpu" and d.enabled:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // d.world))  # processes share the cores
        table, _, meta = data_mod.load_table(cfg)
        splits, _ = tokens.load(cfg, meta)
        tokenizer = modeling.load_tokenizer(tokens.tokenizer_source(cfg))
        keep = None
        if cfg.model.trim_vocab:
            # the ids the competition's texts use (train, validation and test); the cache keeps the full ids
            keep = trim.used_ids(splits.values(), len(tokenizer), trim.special_ids(tokenizer))
            vmap = trim.vocab_map(keep, len(tokenizer), tokenizer.unk_token_id)
            splits = {name: trim.remap(split, vmap) for name, split in splits.items()}
            if d.is_main:
                print(f"vocabulary trimmed to the {len(keep):,} of {len(tokenizer):,} tokens the texts use")
        k = cfg.data.folds
        folds = list(cfg.train.folds) or list(range(k))
        bad = [f for f in folds if not 0 <= f < k]
        if bad:
            raise PipelineError(f"train.folds: fold {bad[0]} does not exist (data.folds={k})")
        digest = fold_digest(cfg)
        exp = metrics.experiment_dir(cfg)
        if d.is_main:
            exp.mkdir(parents=True, exist_ok=True)
            config_mod.save(cfg, exp / "pipeline.yaml")
        with StopFlag() as stop:
            for fold in folds:
                if is_complete(exp / f"fold{fold}", digest):
                    if d.is_main:
                        (exp / f"fold{fold}" / RESUME).unlink(missing_ok=True)  # killed after done.json
                        done = read_json(exp / f"fold{fold}" / "done.json")
                        print(f"fold {fold}: complete with these settings (AUC {done['auc']:.4f}); skipped")
                    continue
                train_fold(cfg, fold, table, splits["train"], tokenizer, d, stop, digest, keep)
        if not d.is_main:
            return None
        summary = metrics.cv_report(cfg)
        print()
        print(metrics.format_table(summary))
        print(f"wrote {exp}/cv.json, cv.png, oof.csv")
        return summary
    finally:
        distributed.teardown(d)


def main(argv=None) -> int:
    args = config_mod.parser("Train XLM-R on every fold; writes models/<name>/.").parse_args(argv)
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
