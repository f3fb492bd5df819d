"""Stage `make train`: k-fold XLM-R with mixed precision, gradient accumulation and checkpointing.

Reads   input/prepared/<name>/ (fold table, tokenizer) and the token cache
Writes  models/<name>/fold<k>/model.safetensors, config.json   the best evaluation's weights (save_pretrained)
        models/<name>/fold<k>/tokenizer files                   the tokenizer the weights go with
        models/<name>/fold<k>/pipeline.yaml                     the resolved config
        models/<name>/fold<k>/metrics.jsonl                     per evaluation: epoch, step, loss, AUC (overall,
                                                               per language), seconds, samples/s, peak memory
        models/<name>/fold<k>/steps.jsonl                       every train.log_every_steps steps (a smoke run: every
                                                               step): loss, lr,
                                                               gradient norm, loss scale, tokens/s, memory
        models/<name>/fold<k>/oof.csv                           the best evaluation's predictions on the fold
                                                               (train.eval_ensemble: the last N evaluations' mean)
        models/<name>/fold<k>/test.csv, test.json               train.eval_ensemble only: the last N evaluations'
                                                               mean on the test rows, what `make predict` uses
        models/<name>/fold<k>/resume.pt                         while a fold runs: the state to resume from
        models/<name>/fold<k>/done.json                         written last: the fold is complete
        models/<name>/tb/fold<k>/                               with train.tensorboard: the same, for TensorBoard
        models/<name>/oof.csv, cv.json, cv.png, curves.png      the cross-validation report
        models/<name>/pipeline.yaml                             the resolved config, once a fold's training begins

A fold is trained on every row of the other folds and of fold -1 (training-only rows) and evaluated
on its own rows at each epoch's end and every train.eval_every_steps steps; train.patience stops it early
(pipeline.core.fold, pipeline.core.evaluation). A rerun skips complete folds with the same settings,
and resumes an interrupted fold from its last saved state. Launch with torchrun for several GPUs.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from pipeline import config as config_mod
from pipeline import experiments, files, fingerprint, layout, validity
from pipeline.core import distributed, eta, memory, resume, steplog, trim
from pipeline.core.evaluation import TestRows
from pipeline.core.fold import FoldInputs, FoldRun
from pipeline.core.foldmodel import check_settings
from pipeline.core.resume import StopFlag
from pipeline.errors import PipelineError, run_stage
from pipeline.inputs import tables, tokens
from pipeline.inputs.tokenizer import load_tokenizer
from pipeline.schema import Config
from pipeline.scoring import metrics, report
from pipeline.scoring import summary as run_summary


def check_init_tokenizer(cfg: Config, tokenizer) -> None:
    """A stage-2 experiment reads its texts with the tokenizer its stage-1 model learned them with."""
    init = validity.init_dir(cfg)
    if init is not None and load_tokenizer(init).get_vocab() != tokenizer.get_vocab():
        raise PipelineError(
            f"{validity.init_setting(cfg)}: its tokenizer differs from this experiment's; "
            f"give both the same data settings (the tiny model's tokenizer is learned from the data)"
        )


# ---------------------------------------------------------------- the stage


def run(cfg: Config, on_evaluation=None) -> dict | None:
    """Every fold of train.folds, then the CV report (None for a stage-1 model or on another rank).
    `on_evaluation(fold, record)`: called after each evaluation (FoldInputs.on_evaluation; `make search`)."""
    start = time.perf_counter()
    experiments.preflight(cfg, "train")  # paths and permissions, before any epoch
    if cfg.train.tensorboard:
        steplog.require_tensorboard()
    # a second train of one of these folds stops at once; one of other folds runs beside this one
    experiments.hold_fold_locks(cfg, requested_folds(cfg), "train")
    resume.set_deterministic(cfg.train.deterministic)  # before CUDA first runs: cuBLAS reads its workspace then
    d = distributed.setup(cfg.train.device)
    try:
        result = _run(cfg, d, on_evaluation)
    except BaseException:
        distributed.teardown(d, clean=False)  # another rank may have failed too: no waiting for it
        raise
    distributed.teardown(d)
    if d.is_main and result is not None:  # the k folds' report (a stage-1 model has none)
        print()
        print(run_summary.block(cfg, "train", time.perf_counter() - start))
    return result


def load_inputs(cfg: Config, d: distributed.Dist):
    """(table, the training table's token ids, tokenizer, kept vocabulary ids or None, data.json, and the test rows
    each evaluation predicts too under train.eval_ensemble, else None)."""
    table, test, meta = tables.load_table(cfg)
    splits, _ = tokens.load_cache(cfg, meta)
    tokenizer = load_tokenizer(tokens.tokenizer_source(cfg))
    keep = None
    if cfg.model.trim_vocab:
        # the ids the competition's texts use (train, validation and test); the cache keeps the full ids
        keep = trim.used_ids(splits.values(), len(tokenizer), trim.special_ids(tokenizer))
        vmap = trim.vocab_map(keep, len(tokenizer), tokenizer.unk_token_id)
        splits = {name: trim.remap(split, vmap) for name, split in splits.items()}
        if d.is_main:
            print(f"vocabulary trimmed to the {len(keep):,} of {len(tokenizer):,} tokens the texts use")
    tested = None
    if cfg.train.eval_ensemble:  # the test rows and ids `make predict` reads, the ids trimmed as the training ids
        rows = tables.test_rows(test, cfg.train.langs)
        tested = TestRows(test["id"].iloc[rows].to_numpy(), splits["test"], rows, meta["test_digest"])
    return table, splits["train"], tokenizer, keep, meta, tested


def requested_folds(cfg: Config) -> list[int]:
    """train.folds, or every fold of data.folds."""
    k = cfg.data.folds
    folds = list(cfg.train.folds) or list(range(k))
    bad = [f for f in folds if not layout.STAGE1 <= f < k]
    if bad:
        raise PipelineError(f"train.folds: fold {bad[0]} does not exist (data.folds={k}; -1: a stage-1 model)")
    return folds


def folds_to_train(cfg: Config, folds: list[int], made: dict, d: distributed.Dist) -> list[int]:
    """The folds of `folds` not yet complete with these settings (`made`: what they are made from); the others
    are named as skipped, and what each one to train does with a resume state it has is said."""
    digest = fingerprint.fold_fingerprint(made)
    # rank 0 decides which folds are complete: on several nodes only its models folder has done.json
    todo = [f for f in folds if not validity.is_complete(layout.fold_dir(cfg, f), digest)]
    todo = distributed.broadcast_object(d, todo)
    if d.is_main:
        for fold in sorted(set(folds) - set(todo)):
            folder = layout.fold_dir(cfg, fold)
            (folder / layout.RESUME).unlink(missing_ok=True)  # killed after done.json
            done = validity.read_done(folder)
            # a stage-1 model has no validation rows
            how = "a stage-1 model" if done.get("auc") is None else metrics.fold_own(done)
            print(f"fold {fold}: complete with these settings ({how}); skipped")
        for fold in todo:
            say_stale(layout.fold_dir(cfg, fold), fold, digest, made, cfg)
            say_resume(layout.fold_dir(cfg, fold) / layout.RESUME, fold, digest, made, d.world)
    return todo


def say_stale(folder, fold: int, digest: str, made: dict, cfg: Config) -> None:
    """Before any fold starts: a complete fold that no longer counts (other inputs or weight-changing settings,
    damaged files) is named, with why, before training it again replaces it."""
    why = validity.fold_status(folder, digest, needs=(layout.WEIGHTS,))
    if why in ("", "not complete"):
        return
    why = why.removesuffix(validity.RETRAIN)
    if why == validity.OTHER_INPUTS:
        why += f": {changed_since(folder, made, cfg)}"
    print(f"warning: fold {fold}: the complete fold in {folder} no longer counts ({why}); it is trained again, "
          "replacing it", file=sys.stderr)  # fmt: skip


def changed_since(folder, made: dict, cfg: Config) -> str:
    """What differs between what a complete fold was made from and `made`: from its done.json, or (a fold trained
    before done.json recorded it) the weight-changing settings of its own pipeline.yaml."""
    done = validity.read_done(folder) or {}
    if isinstance(done.get("made_from"), dict):
        return resume.what_changed(done["made_from"], made, "trained")
    try:
        trained = fingerprint.settings(config_mod.load_file(folder / layout.RUN_CONFIG))
        differ = fingerprint.differ(made["settings"], trained, "when trained")
    except (OSError, PipelineError):
        differ = ""
    return differ or "the training table or the model it starts from changed since it was trained"


def world_problem(cfg: Config, digest: str, todo: list[int], world: int) -> str:
    """Why this run may not train `todo` with `world` processes ('' when it may): every fold of an experiment is
    trained by as many processes, since the effective batch (micro-batch x accumulation x world) changes the weights."""
    if not todo:
        return ""
    done, _ = validity.select_folds(layout.experiment_dir(cfg), digest, cfg.data.folds)
    others = {d.name: (validity.read_done(d) or {}).get("world", 1) for d in done if layout.fold_index(d) not in todo}
    other = sorted({w for w in others.values() if w != world})
    if not other:
        return ""
    t = cfg.train
    names = ", ".join(n for n, w in others.items() if w == other[0])
    return (
        f"{names} of {layout.experiment_dir(cfg)} were trained by {other[0]} process(es) (effective batch "
        f"{t.micro_batch * t.accumulation * other[0]}) and this run has {world} (effective batch "
        f"{t.micro_batch * t.accumulation * world}): run with GPUS={other[0]}, or train under another name="
    )


def say_resume(path, fold: int, digest: str, made: dict, world: int) -> None:
    """Before any fold starts: a resume state this run cannot continue is named, with why, before anything of it
    is replaced; one it continues under other settings that only decide when the fold is evaluated and stops
    (train.patience, train.eval_every_steps) says which."""
    state = resume.read_state(path, mmap=True)  # its tensors mapped, not read: a look at what it holds
    if state is None:
        return
    ok, note = resume.verdict(state, digest, made, world)
    where = f"epoch {state['epoch'] + 1}, step {state['step']['window']}"
    if not ok:
        print(f"warning: fold {fold}: the progress saved in {path} ({where}) will be dropped and the fold trained "
              f"from its start: {note}. To continue it instead, stop now and run with the settings it was saved "
              "with", file=sys.stderr)  # fmt: skip
    elif note:
        print(f"fold {fold}: continues its saved progress ({where}) with {note}: these decide only when the fold "
              "is evaluated and stops, not the weights trained so far")  # fmt: skip


def _run(cfg: Config, d: distributed.Dist, on_evaluation=None) -> dict | None:
    """The train stage inside the process group: every fold to do, then (rank 0) the CV report."""
    if d.device.type == "cpu" and d.enabled:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // d.world))  # processes share the cores
    check_settings(cfg, d.device)  # what building a fold's model or optimizer would refuse: before any fold starts
    table, data, tokenizer, keep, meta, tested = load_inputs(cfg, d)
    folds = requested_folds(cfg)
    check_init_tokenizer(cfg, tokenizer)
    made = validity.current_made_from(cfg, meta)
    digest = fingerprint.fold_fingerprint(made)
    exp = layout.experiment_dir(cfg)
    if d.is_main:  # its pipeline.yaml is written when a fold's training begins (FoldRun.begin), not by a refused run
        exp.mkdir(parents=True, exist_ok=True)
        files.remove_dead_temporaries(exp)  # eta.json's or oof.csv's of a run killed while it wrote them
    todo = folds_to_train(cfg, folds, made, d)
    problem = distributed.broadcast_object(d, world_problem(cfg, digest, todo, d.world) if d.is_main else "")
    if problem:  # every rank stops, before any fold starts
        raise PipelineError(problem)
    with StopFlag() as stop:
        for n, fold in enumerate(todo):
            after = len(todo) - n - 1 + eta.folds_after()  # what the ETA counts beyond this fold
            inputs = FoldInputs(cfg, fold, table, data, tokenizer, digest, keep, folds_after=after, made_from=made,
                                on_evaluation=on_evaluation, test=tested)  # fmt: skip
            FoldRun(inputs, d, stop).run()
            memory.release(d.device)  # the fold's optimizer and model freed before the next fold's probe
    if not d.is_main:
        return None
    if folds == [layout.STAGE1]:
        folder = layout.fold_dir(cfg, layout.STAGE1)
        print(f"stage-1 model in {folder}; start an experiment from it with model.init_from={cfg.name}")
        return None
    summary = report.cv_report(cfg, digest)
    print()
    print(report.fold_table(summary))
    print(f"wrote {exp}/cv.json, cv.png, curves.png, oof.csv")
    return summary


def main(argv=None) -> int:
    args = config_mod.parser("Train XLM-R on every fold; writes models/<name>/.").parse_args(argv)
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    distributed.exit_process(main())
