"""A fold's resume state written and read back into its training, and what an earlier run left dropped once a
run has begun. What a state holds and when it is saved: pipeline.core.resume; the fold that saves it:
pipeline.core.fold.FoldRun.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from pipeline import config as config_mod
from pipeline import fingerprint, layout
from pipeline.core import distributed, modeling, resume, trim
from pipeline.core.resume import FoldState
from pipeline.errors import PipelineError
from pipeline.files import atomic_path
from pipeline.schema import Config


def resume_state(progress: FoldState, trained: dict, made: dict | None, carries: list, rngs: list) -> dict:
    """The state resume.pt holds: `trained` (what the fold trains with: the digest, its time, world and precision,
    the batch plan, the model's, optimizer's, schedule's and scaler's states), what the weights were made from
    (`made`), where the fold is (`progress`), and every rank's step-record sums (`carries`) and random state."""
    p = progress
    return {
        **trained,
        # what the weights were made from: a run with other settings says which, and continues the state
        # where they only decide when the fold is evaluated and stops (fingerprint.RESUMABLE)
        "made_from": made,
        "resume_key": fingerprint.resume_key(made) if made is not None else None,
        "token": os.urandom(8).hex(),  # tells a rank whether the file it sees is the one rank 0 saved
        "epoch": p.epoch,
        "step": vars(p.step).copy(),
        "best": p.best,
        "history": p.history,
        "predictions": p.predictions,
        "test_predictions": p.test_predictions,  # train.eval_ensemble's: the last N evaluations' of the test rows
        "steplog": carries,
        "rng": rngs,
    }


def write_state(path: Path, state: dict, model) -> None:
    """resume.pt written whole or not at all, with room checked for it first."""
    need = modeling.count_parameters(model) * 16  # fp32 weights and AdamW's two moments
    # through a Python file: a full disk is then an OSError (ENOSPC), which atomic_path says in one line;
    # torch's own writer says only "unexpected pos"
    with atomic_path(path, need=need) as tmp, open(tmp, "wb") as f:
        torch.save(resume.saved_form(state), f)  # tensors and plain values only: resume.read_state loads it safely


def restore(state: dict, optimizer, scheduler, scaler, d: distributed.Dist, fold: int, windows: int,
            average=None) -> FoldState:  # fmt: skip
    """A saved state's optimizer, schedule, scaler, weight average and random state put back, said in a line;
    returns where the fold is, on this rank (`windows`: the optimizer steps of an epoch)."""
    if average is not None:
        if not state.get("average"):  # saved under train.average=none: no average to go on from
            raise PipelineError(
                f"fold {fold}: its resume state holds no weight average (saved under train.average=none)"
            )
        try:
            average.load(state["average"])
        except ValueError as e:  # saved under another train.average
            raise PipelineError(f"fold {fold}: {e}") from e
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    scaler.load_state_dict(state["scaler"])
    resume.set_rng_state(resume.own_rng(state, d.rank), d.device)
    if d.is_main:
        print(f"fold {fold}: resuming at epoch {state['epoch'] + 1}, step {state['step']['window']} of {windows}")
    return resume.fold_state(state, d.rank)


def drop_old(fold_dir: Path, fresh: bool, cfg: Config, keep, tokenizer) -> None:
    """What an earlier run left in the fold's folder, dropped once this run has begun (never before, so that a run
    refused or stopped before it leaves the folder as it was). A complete fold's done.json and test and training-row
    predictions go (new weights never sit behind an old done.json, nor old predictions beside new weights); a
    `fresh` fold's resume state it could not continue (`make train` said it would be dropped); then the vocabulary
    map (of the ids `keep`s) and the experiment's pipeline.yaml are this run's."""
    cached = (*layout.CACHE_KEYS, *layout.CACHE_KEYS.values())  # test and training-row predictions, their stamps
    for name in (layout.DONE, *cached) + ((layout.RESUME,) if fresh else ()):
        (fold_dir / name).unlink(missing_ok=True)
    vmap = None if keep is None else trim.vocab_map(keep, len(tokenizer), tokenizer.unk_token_id)
    trim.save_map(fold_dir, vmap)  # beside the weights: predict remaps test ids; untrimmed, a stale one goes
    config_mod.save(cfg, layout.experiment_dir(cfg) / layout.RUN_CONFIG)
