"""Experiments that build on experiments: which rows a fold trains on, and what it starts from.

- A stage-1 model (`train.folds=[-1]`) is one model trained on the training-only rows (fold -1: English
  and translated comments), never on a validation row; it is saved in models/<name>/fold-1/ and has no OOF.
- A stage-2 experiment (`model.init_from=<experiment>`) starts every fold from that experiment's stage-1
  weights; with `train.training_only_rows=false` it fine-tunes on the other folds' validation rows only.
- Pseudo-labelled test rows (`data.pseudo_from`, see pipeline.pseudo) carry the fold they were made for
  in `pseudo_for`: fold k trains only on the labels of the teacher's fold-k model, which never saw fold k.

The digest of an experiment a fold builds on is part of the fold's fingerprint, so retraining the
teacher or the stage-1 model makes the student's folds stale.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import config as config_mod
from pipeline.config import Config
from pipeline.errors import PipelineError
from pipeline.io import read_json

STAGE1 = -1  # the fold number of a stage-1 model: trained on the training-only rows


def fold_dir(cfg: Config, experiment: str, fold: int) -> Path:
    return Path(cfg.models_dir) / experiment / f"fold{fold}"


def training_rows(table: pd.DataFrame, fold: int, training_only_rows: bool = True) -> np.ndarray:
    """Row positions fold `fold` trains on; for STAGE1 the training-only rows and nothing else."""
    folds = table["fold"].to_numpy()
    pseudo_for = table["pseudo_for"].to_numpy() if "pseudo_for" in table else np.full(len(table), -1)
    plain = pseudo_for == -1
    if fold == STAGE1:
        return np.flatnonzero((folds == STAGE1) & plain)
    rows = (folds >= 0) & (folds != fold)  # the other folds' validation rows
    if training_only_rows:
        rows |= (folds == STAGE1) & plain
    rows |= pseudo_for == fold  # test rows labelled by the teacher's model of this very fold
    return np.flatnonzero(rows)


def complete_digest(folder: Path, what: str, make: str) -> str:
    """The digest in a complete fold's done.json, or an error naming the command that makes it."""
    done = folder / "done.json"
    if not done.exists() or not (folder / "model.safetensors").exists():
        raise PipelineError(f"{what}: {folder} is not complete; make it first with {make}")
    return read_json(done).get("digest", "")


def init_dir(cfg: Config) -> Path | None:
    """The stage-1 folder `model.init_from` names, checked complete; None without init_from."""
    name = cfg.model.init_from
    if not name:
        return None
    if name == cfg.name:
        raise PipelineError(f"model.init_from={name}: an experiment cannot start from itself; name it differently")
    folder = fold_dir(cfg, name, STAGE1)
    complete_digest(folder, f"model.init_from={name}", "`make stage1` (this run's CONFIG and ARGS)")
    return folder


def stage1_config(cfg: Config, device: bool = True) -> Config | None:
    """The stage-1 experiment `model.init_from` names, as this config trains it: `model.init_args` applied, then
    its name, fold -1, no init of its own and no pseudo-labels (test rows are never a stage-1 row anyway)."""
    name = cfg.model.init_from
    if not name:
        return None
    fixed = [f"name={name}", "train.folds=[-1]", "model.init_from=", "model.init_args=[]", "data.pseudo_from="]
    fixed.append("train.training_only_rows=true")  # the default, though fold -1 reads only those rows anyway
    return config_mod.with_overrides(cfg, [*cfg.model.init_args, *fixed], device=device)


def init_identity(cfg: Config) -> dict:
    """What a fold started from its init experiment depends on: that model's own fingerprint."""
    folder = init_dir(cfg)
    return {} if folder is None else {"init_from": read_json(folder / "done.json")["digest"]}
