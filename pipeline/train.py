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
import json
import os
import random
import shutil
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

from pipeline import config as config_mod
from pipeline import data as data_mod
from pipeline import distributed, fingerprint, io, lineage, loop, memory, metrics, modeling, tokens, trim
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


def load_resume(path: Path, digest: str, world: int) -> dict | None:
    """The saved state of an interrupted fold, or None where there is none this run can continue."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a damaged state is refused, not half-loaded
        print(f"warning: {path} is unreadable ({type(e).__name__}); starting the fold again", file=sys.stderr)
        return None
    if state.get("digest") != digest:
        return None
    if state.get("world", 1) != world:  # the batch plan (and so a step's rows) depends on the world size
        print(
            f"warning: {path} was saved by {state.get('world', 1)} processes and this run has {world}; "
            f"starting the fold again (run with the same GPUS to resume)",
            file=sys.stderr,
        )
        return None
    return state


def load_resume_everywhere(path: Path, digest: str, d: distributed.Dist) -> dict | None:
    """Rank 0's resume state on every rank, the model weights left out (DDP copies rank 0's weights).

    Rank 0 decides whether there is a state; a rank that sees the same file (a shared folder) reads it
    itself, and only when some rank cannot (another node) does rank 0 send it.
    """
    state = load_resume(path, digest, d.world) if d.is_main else None
    if not d.enabled:
        return state
    token = distributed.broadcast_object(d, state.get("token", "") if state else None)
    if token is None:
        return None
    if not d.is_main:
        mine = load_resume(path, digest, d.world)
        state = mine if mine is not None and mine.get("token") == token else None
    if distributed.any_rank(d, state is None):
        sent = distributed.broadcast_object(d, {k: v for k, v in state.items() if k != "model"} if d.is_main else None)
        state = state or sent
    return state


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


def build_fold_model(cfg: Config, tokenizer, keep: np.ndarray | None, d: distributed.Dist, fold_dir: Path):
    """The model as this fold trains it: trimmed, sparse embedding gradients or DDP, checkpointing, on device."""
    model = modeling.build_model(cfg, tokenizer)
    init = lineage.init_dir(cfg)
    init_map = trim.load_map(init) if init is not None else None
    if init_map is not None:  # a trimmed stage-1 model: its embedding rows are already the kept ones
        if keep is None or not np.array_equal(init_map, trim.vocab_map(keep, len(tokenizer), tokenizer.unk_token_id)):
            raise PipelineError(
                f"model.init_from={cfg.model.init_from} was trained with a trimmed vocabulary: "
                f"trim this experiment too (model.trim_vocab=true), on the same data"
            )
    elif keep is not None:
        trim.trim_model(model, keep)
    # before any state is written: a resume state is ~16 bytes a parameter (fp32 weights + AdamW moments), the
    # weights 4 more; every rank checks, so all of them stop together
    need = modeling.count_parameters(model) * (16 + 4)
    check_free_space(fold_dir.parent, need, f"fold {fold_dir.name[4:]}'s resume state and weights")
    if d.is_main:  # the map beside the weights lets predict remap test ids; an untrimmed run removes a stale one
        vmap = None if keep is None else trim.vocab_map(keep, len(tokenizer), tokenizer.unk_token_id)
        trim.save_map(fold_dir, vmap)
    if not d.enabled:
        modeling.sparse_embedding_grad(model)
    if cfg.train.checkpointing:
        modeling.enable_checkpointing(model)  # before DDP wraps the model
    return model.to(d.device)


def wrap(model, d: distributed.Dist):
    """DDP around the model under torchrun (it copies rank 0's weights to every rank), else the model."""
    if not d.enabled:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    # gradient_as_bucket_view: the gradients live in DDP's all-reduce buckets instead of beside a copy of them
    # (4 bytes a parameter saved: 2.2 GB for XLM-R large)
    return DDP(model, device_ids=[d.device.index] if d.device.type == "cuda" else None, gradient_as_bucket_view=True)


def auto_fit(cfg: Config, model, net, precision: str, d: distributed.Dist) -> Config:
    """cfg with the largest micro-batch that fits train.max_memory_gb (same effective batch)."""
    t = cfg.train
    per_device = t.micro_batch * t.accumulation
    micro, how = memory.fit_micro_batch(
        model, per_device, cfg.model.max_length, t.max_memory_gb, precision, d.device, t.optimizer, net=net
    )
    micro = min(distributed.gather_objects(d, micro))  # every rank must run the same plan
    if d.is_main:
        print(f"auto-fit under {t.max_memory_gb:g} GB: micro-batch {micro} x accumulation {per_device // micro}")
        print(f"  ({how})")
    # the banner and the saved config show the fitted plan
    return dataclasses.replace(cfg, train=dataclasses.replace(t, micro_batch=micro, accumulation=per_device // micro))


@dataclasses.dataclass
class Progress:
    """Where a fold is: a resume state is this, the weights, the optimizer and the random states.

    `step.window == windows` with no history entry for `epoch` means: trained, not yet evaluated.
    """

    epoch: int = 0
    step: loop.StepState = dataclasses.field(default_factory=loop.StepState)
    history: list = dataclasses.field(default_factory=list)
    best: dict = dataclasses.field(default_factory=lambda: {"auc": -1.0, "epoch": -1})


class FoldRun:
    """One fold's model, optimizer and schedule, with its resume states; `run()` trains it to the end."""

    def __init__(self, cfg, fold, table, data, tokenizer, d, stop, digest, keep=None) -> None:
        self.fold, self.table, self.data, self.tokenizer, self.d, self.stop = fold, table, data, tokenizer, d, stop
        self.digest = digest
        self.fold_dir = metrics.experiment_dir(cfg) / f"fold{fold}"
        if d.is_main:
            self.fold_dir.mkdir(parents=True, exist_ok=True)
            # an old result goes first: an interrupted retrain must never leave new weights behind an old
            # done.json, nor old test predictions beside new weights
            for name in ("done.json", "test.csv", "test.json"):
                (self.fold_dir / name).unlink(missing_ok=True)
        set_seed(cfg.train.seed + fold)
        self.precision = loop.resolve_precision(cfg.train.precision, d.device)
        # which rows train this fold is decided in one place, so the leak tests check what training uses
        self.train_idx = lineage.training_rows(table, fold, cfg.train.training_only_rows)
        stage1 = fold == lineage.STAGE1  # a stage-1 model has no validation rows
        self.valid_idx = np.flatnonzero((table["fold"].to_numpy() == fold) & (not stage1))
        if not stage1 and table["toxic"].iloc[self.valid_idx].nunique() < 2:
            raise PipelineError(f"fold {fold}: its validation rows hold one class, so no AUC; rebuild with `make data`")
        self.labels = table["toxic"].to_numpy(np.float32)
        self.pad_id = tokenizer.pad_token_id
        self.model = build_fold_model(cfg, tokenizer, keep, d, self.fold_dir)
        resume = load_resume_everywhere(self.fold_dir / RESUME, digest, d)
        if resume is not None and "model" in resume:
            self.model.load_state_dict(resume["model"])  # before DDP, which copies rank 0's weights everywhere
        self.net = wrap(self.model, d)
        self.cfg = cfg
        if resume is not None and "plan" in resume:  # the batch plan the saved steps count in, not a new fit
            micro, accumulation = resume["plan"]
            self.cfg = dataclasses.replace(
                cfg, train=dataclasses.replace(cfg.train, micro_batch=micro, accumulation=accumulation)
            )
        elif cfg.train.max_memory_gb > 0:
            self.cfg = auto_fit(cfg, self.model, self.net, self.precision, d)
        t = self.cfg.train
        self.optimizer = loop.make_optimizer(self.model, t, d.device)
        self.windows = len(loop.accumulation_windows(len(self.epoch_plan(0)), t.accumulation))
        self.scheduler = loop.make_scheduler(self.optimizer, t.warmup, t.epochs * self.windows)
        self.scaler = loop.make_scaler(self.precision, d.device)
        self.progress = Progress()
        if resume is not None:
            self.restore(resume)

    def epoch_plan(self, epoch: int) -> list[list[np.ndarray]]:
        """The epoch's micro-steps as row indices of the table: micro-step k, rank r's batch."""
        t = self.cfg.train
        lengths = self.data.lengths[self.train_idx]
        batches = loop.length_grouped_batches(lengths, t.micro_batch, t.seed + self.fold, epoch, self.d.world)
        return [[self.train_idx[b] for b in s] for s in loop.micro_steps(batches, self.d.world)]

    def restore(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        rngs = state["rng"] if isinstance(state["rng"], list) else [state["rng"]]  # older states: one
        set_rng_state(rngs[self.d.rank])  # each rank its own: dropout differs from rank to rank
        self.progress = Progress(state["epoch"], loop.StepState(**state["step"]), state["history"], state["best"])
        if self.d.is_main:
            print(f"fold {self.fold}: resuming at epoch {state['epoch'] + 1}, step {state['step']['window']} "
                  f"of {self.windows}")

    def checkpoint(self) -> None:
        """Save a resume state (every rank takes part: each one's random state is saved)."""
        rngs = distributed.gather_objects(self.d, rng_state())
        if self.d.is_main:
            p = self.progress
            state = {
                "digest": self.digest,
                "token": os.urandom(8).hex(),  # tells a rank whether the file it sees is the one rank 0 saved
                "world": self.d.world,
                "plan": (self.cfg.train.micro_batch, self.cfg.train.accumulation),  # as auto-fit chose them
                "epoch": p.epoch,
                "step": vars(p.step).copy(),
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                "best": p.best,
                "history": p.history,
                "rng": rngs,
            }
            with atomic_path(self.fold_dir / RESUME) as tmp:
                torch.save(state, tmp)
        distributed.barrier(self.d)

    def train_epoch(self, epoch: int) -> None:
        """Train the rest of the epoch; a stop (Ctrl-C, SIGTERM) saves a resume state and raises Interrupted."""
        t, p, d = self.cfg.train, self.progress, self.d
        stopped = False

        def after_window(state: loop.StepState) -> bool:
            nonlocal stopped
            stopped = distributed.any_rank(d, self.stop.raised)
            every = t.save_every_steps
            # the last window is saved by the stop only: the epoch's own end saves after the evaluation
            if stopped or (every and state.window % every == 0 and state.window < self.windows):
                p.step = state
                self.checkpoint()
            return stopped

        loop.reset_peak_memory(d.device)
        p.step = loop.train_epoch(
            self.net, self.epoch_plan(epoch), self.data, self.labels, self.optimizer, self.scheduler, self.scaler,
            t, self.precision, d.device, pad_id=self.pad_id, rank=d.rank, world=d.world, state=p.step,
            after_window=after_window, progress=d.is_main, desc=f"fold {self.fold} epoch {epoch + 1}/{t.epochs}",
            max_bad_steps=t.max_bad_steps,
        )
        if stopped:
            raise Interrupted(
                f"fold {self.fold} stopped at epoch {epoch + 1}, step {p.step.window}; "
                f"`make train` again resumes from there"
            )

    def evaluate_epoch(self, epoch: int, steps_run: int) -> None:
        """Score the fold's rows; the best epoch so far keeps its weights and OOF predictions."""
        p, d, step = self.progress, self.d, self.progress.step
        start = time.perf_counter()
        stage1 = self.fold == lineage.STAGE1  # no validation rows: the last epoch is the model
        preds = evaluate(self.model, d, self.data, self.valid_idx, self.cfg, self.precision, self.pad_id)
        valid = self.table.iloc[self.valid_idx]
        record = {
            "epoch": epoch + 1,
            "loss": step.loss_sum / max(step.examples, 1),
            "auc": None if stage1 else metrics.auc(valid["toxic"], preds),
            "auc_per_lang": {} if stage1 else metrics.auc_by_lang(valid["toxic"], preds, valid["lang"]),
            "seconds": round(step.seconds + time.perf_counter() - start, 2),
            "samples_per_second": round(step.examples * d.world / max(step.seconds, 1e-9), 1),
            "peak_memory_mb": round(loop.peak_memory_mb(d.device), 1),
            "skipped_steps": step.skipped,
            "steps_run": steps_run,  # optimizer steps this process ran in the epoch (fewer after a resume)
            "lr": self.scheduler.get_last_lr()[0],
        }
        p.history.append(record)
        if d.is_main:
            per = " ".join(f"{k} {v:.4f}" for k, v in record["auc_per_lang"].items())
            auc = "stage 1" if stage1 else f"AUC {record['auc']:.4f} ({per})"
            print(
                f"fold {self.fold} epoch {epoch + 1}: loss {record['loss']:.4f} {auc} "
                f"{record['samples_per_second']:.0f} ex/s, peak {record['peak_memory_mb']:.0f} MB"
            )
            atomic_write_text(self.fold_dir / "metrics.jsonl", "".join(json.dumps(h) + "\n" for h in p.history))
            if stage1 or record["auc"] > p.best["auc"]:
                p.best = {"auc": record["auc"], "epoch": epoch + 1}
                save_model(self.model, self.tokenizer, self.cfg, self.fold_dir)
                if not stage1:
                    write_csv(self.fold_dir / "oof.csv", valid[["id", "lang", "toxic", "fold"]].assign(pred=preds))
        p.best = distributed.gather_objects(d, p.best)[0]  # rank 0 decides, the others follow

    def run(self) -> dict:
        t, p, d = self.cfg.train, self.progress, self.d
        if d.is_main:
            print(f"\n=== fold {self.fold} ===")
            print(banner(self.cfg, d, self.precision, len(self.train_idx), len(self.valid_idx),
                         t.epochs * self.windows, modeling.count_parameters(self.model)))
        fold_start = time.perf_counter() - sum(h["seconds"] for h in p.history)
        for epoch in range(p.epoch, t.epochs):
            p.epoch, start_window = epoch, p.step.window
            if p.step.window < self.windows:
                self.train_epoch(epoch)
            if len(p.history) <= epoch:  # trained, not yet evaluated (a resume may land here)
                self.evaluate_epoch(epoch, p.step.window - start_window)
                p.step = loop.StepState(window=self.windows, halvings=p.step.halvings)
                self.checkpoint()
            # micro-batches halved after running out of memory stay halved
            p.epoch, p.step = epoch + 1, loop.StepState(halvings=p.step.halvings)
        return self.finish(time.perf_counter() - fold_start)

    def finish(self, seconds: float) -> dict:
        p, t = self.progress, self.cfg.train
        result = {
            "fold": self.fold,
            "digest": self.digest,
            "epochs": len(p.history),
            "best_epoch": p.best["epoch"],
            "auc": p.best["auc"],
            "auc_per_lang": p.history[p.best["epoch"] - 1]["auc_per_lang"],
            "minutes": round(seconds / 60, 2),
            "precision": self.precision,
            "world": self.d.world,
            "effective_batch": t.micro_batch * t.accumulation * self.d.world,
        }
        if self.d.is_main:
            write_json(self.fold_dir / "done.json", result)  # last: its presence means the fold is complete
            (self.fold_dir / RESUME).unlink(missing_ok=True)
        distributed.barrier(self.d)
        return result


def check_init_tokenizer(cfg: Config, tokenizer) -> None:
    """A stage-2 experiment reads its texts with the tokenizer its stage-1 model learned them with."""
    init = lineage.init_dir(cfg)
    if init is not None and modeling.load_tokenizer(init).get_vocab() != tokenizer.get_vocab():
        raise PipelineError(
            f"model.init_from={cfg.model.init_from}: its tokenizer differs from this experiment's; "
            f"give both the same data settings (the tiny model's tokenizer is learned from the data)"
        )


def train_fold(cfg, fold, table, data, tokenizer, d, stop, digest, keep=None) -> dict:
    """Train one fold; `keep`: the vocabulary ids to keep (model.trim_vocab), `data` already remapped to them."""
    return FoldRun(cfg, fold, table, data, tokenizer, d, stop, digest, keep).run()


# ---------------------------------------------------------------- the stage


def run(cfg: Config) -> dict | None:
    io.preflight(cfg, "train")  # paths and permissions, before any epoch
    io.hold_experiment_lock(cfg, "train")  # a second run on this experiment stops at once
    d = distributed.setup(cfg.train.device)
    try:
        result = _run(cfg, d)
    except BaseException:
        distributed.teardown(d, clean=False)  # another rank may have failed too: no waiting for it
        raise
    distributed.teardown(d)
    return result


def _run(cfg: Config, d: distributed.Dist) -> dict | None:
    """The train stage inside the process group: every fold to do, then (rank 0) the CV report."""
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
    bad = [f for f in folds if not lineage.STAGE1 <= f < k]
    if bad:
        raise PipelineError(f"train.folds: fold {bad[0]} does not exist (data.folds={k}; -1: a stage-1 model)")
    check_init_tokenizer(cfg, tokenizer)
    digest = fingerprint.fold_fingerprint(cfg, meta, data_mod.prepared_dir(cfg))
    exp = metrics.experiment_dir(cfg)
    if d.is_main:
        exp.mkdir(parents=True, exist_ok=True)
        config_mod.save(cfg, exp / "pipeline.yaml")
    # rank 0 decides which folds are complete: on several nodes only its models folder has done.json
    todo = distributed.broadcast_object(d, [f for f in folds if not is_complete(exp / f"fold{f}", digest)])
    if d.is_main:
        for fold in sorted(set(folds) - set(todo)):
            (exp / f"fold{fold}" / RESUME).unlink(missing_ok=True)  # killed after done.json
            done = read_json(exp / f"fold{fold}" / "done.json")
            print(f"fold {fold}: complete with these settings (AUC {done['auc']:.4f}); skipped")
    with StopFlag() as stop:
        for fold in todo:
            train_fold(cfg, fold, table, splits["train"], tokenizer, d, stop, digest, keep)
    if not d.is_main:
        return None
    if folds == [lineage.STAGE1]:
        print(f"stage-1 model in {exp / 'fold-1'}; start an experiment from it with model.init_from={cfg.name}")
        return None
    summary = metrics.cv_report(cfg, digest)
    print()
    print(metrics.format_table(summary))
    print(f"wrote {exp}/cv.json, cv.png, oof.csv")
    return summary


def main(argv=None) -> int:
    args = config_mod.parser("Train XLM-R on every fold; writes models/<name>/.").parse_args(argv)
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    distributed.exit_process(main())
