"""What a result was made from, by content, never by where the files were read from.

A fold's fingerprint covers what its weights depend on: the training table (its content digest, from
data.json), the tokenizer's files, the model it starts from and the settings that change the weights.
It leaves out what does not: the device, the evaluation batch, the resume cadence, which folds a run
trains, checkpointing (the same gradients), and paths (`data.dir`, `model.path`, the folders). So a fold
trained in a Kaggle notebook is complete on a laptop that holds the same inputs.

The stages use it three ways: `make train` skips a fold whose done.json carries the current fingerprint
and retrains any other; `make predict` and `make cv` use only such folds and say which they left out and
why; a fold's cached test predictions are keyed on its weights, the test table, max_length and precision.
"""

from __future__ import annotations

from pathlib import Path

from pipeline import lineage
from pipeline.config import Config
from pipeline.errors import PipelineError
from pipeline.io import file_digest, json_digest, read_json, tree_digest

# settings that never change a fold's weights (everything else in `train` and `model` does)
NOT_WEIGHTS = {
    "train": {"folds", "device", "eval_batch", "save_every_steps", "max_bad_steps", "checkpointing"},
    # the model is named by `model_identity`, not by where it was read from; a stage-1 model's settings
    # (init_args) reach the fold through that model's own fingerprint (lineage.init_identity)
    "model": {"name", "path", "init_args"},
}


def model_identity(cfg: Config, prepared: Path) -> dict:
    """The model a fold starts from: the tiny architecture and its tokenizer's files, a pretrained model's
    name (its files may sit anywhere: model.path), or the content of a folder given as model.name."""
    name, init = cfg.model.name, lineage.init_identity(cfg)  # a stage-2 fold: its stage-1 model's fingerprint
    if name == "tiny":
        return {"tiny": True, "tokenizer": tree_digest(prepared / "tokenizer", skip=("trained_on.json",)), **init}
    if not cfg.model.path and Path(name).is_dir():
        return {"folder": tree_digest(name), **init}
    return {"name": name, **init}


def settings(cfg: Config) -> dict:
    d = cfg.to_dict()
    return {section: {k: v for k, v in d[section].items() if k not in NOT_WEIGHTS[section]} for section in NOT_WEIGHTS}


def settings_differ(cfg: Config, saved: Path) -> str:
    """The weight-changing settings in which `cfg` differs from a saved config, as 'key (here, there)'."""
    if not saved.exists():
        return ""
    from pipeline import config as config_mod

    ours, theirs = settings(cfg), settings(config_mod.load_file(saved))
    keys = [(s, k) for s in ours for k in ours[s] if ours[s][k] != theirs[s].get(k)]
    return ", ".join(f"{s}.{k} ({ours[s][k]!r} here, {theirs[s].get(k)!r} there)" for s, k in keys)


def fold_fingerprint(cfg: Config, meta: dict, prepared: Path) -> str:
    """The digest a complete fold's done.json must carry to count for this config and these inputs."""
    model = model_identity(cfg, prepared)
    return json_digest({"table": meta["table_digest"], "model": model, "settings": settings(cfg)})


def current(cfg: Config) -> str:
    """The fold fingerprint of the prepared data as it is now (data.json and the tokenizer)."""
    from pipeline import data as data_mod

    prepared = data_mod.prepared_dir(cfg)
    if not (prepared / "data.json").exists():
        raise PipelineError(f"{prepared}: no prepared data; run `make data` with this config first")
    return fold_fingerprint(cfg, read_json(prepared / "data.json"), prepared)


def fold_status(fold_dir: Path, digest: str, k: int) -> str:
    """'' for a fold that counts; else why it does not."""
    fold = int(fold_dir.name[4:])
    if not 0 <= fold < k:
        return f"not a fold of data.folds={k}"
    done = fold_dir / "done.json"
    if not done.exists():
        return "not complete"
    if read_json(done).get("digest") != digest:
        return "trained on other data or settings (retrain it with `make train`)"
    return ""


def select_folds(exp: Path, digest: str, k: int) -> tuple[list[Path], dict[str, str]]:
    """(folds that count, in fold order; {fold name: why it is left out}), missing folds included."""
    # fold-1, a stage-1 model, has no OOF and no test predictions: it is not one of the k folds
    found = {int(p.name[4:]): p for p in exp.glob("fold*") if p.is_dir() and p.name[4:].isdigit()}
    use, left_out = [], {}
    for fold in sorted(set(found) | set(range(k))):
        why = fold_status(found[fold], digest, k) if fold in found else "not trained"
        if why:
            left_out[f"fold{fold}"] = why
        else:
            use.append(found[fold])
    return use, left_out


def describe(left_out: dict[str, str]) -> str:
    """One line per reason: 'fold3, fold4: not a fold of data.folds=3'."""
    by_reason: dict[str, list[str]] = {}
    for fold, why in left_out.items():
        by_reason.setdefault(why, []).append(fold)
    return "; ".join(f"{', '.join(folds)}: {why}" for why, folds in by_reason.items())


def test_cache_key(fold_dir: Path, meta: dict, cfg: Config, precision: str) -> dict:
    """What a fold's cached test predictions depend on."""
    return {
        "weights": file_digest(fold_dir / "model.safetensors"),
        "test": meta["test_digest"],
        "max_length": cfg.model.max_length,
        "precision": precision,
    }
