"""A small, fast CPU run of the stages on the sample (`make data` then `make train`), under one base folder."""

from __future__ import annotations

from pathlib import Path

TINY = [
    "data.sample_scale=0.2",
    "data.folds=2",
    "train.epochs=1",
    "model.tiny.hidden=32",
    "model.tiny.intermediate=64",
    "model.tiny.vocab=300",
    "model.max_length=32",
    "train.precision=fp32",
    "train.device=cpu",
]


# the sample config read from a raw folder of a test's own (`stage_argv`), two folds of a tiny model
DIR_RUN = [
    "data.source=dir",
    "data.folds=2",
    "train.epochs=1",
    "train.precision=fp32",
    "model.tiny.hidden=32",
    "model.tiny.intermediate=64",
    "model.tiny.vocab=600",
    "model.max_length=32",
]


def stage_argv(root: Path, raw: Path, *more: str) -> list[str]:
    """A stage's command line: the sample config on the competition files in `raw`, writing under `root`."""
    paths = [f"input_dir={root / 'input'}", f"models_dir={root / 'models'}", f"submissions_dir={root / 'subs'}"]
    return ["--config", "sample", *paths, f"data.dir={raw}", *DIR_RUN, *more]


def overrides(base: Path) -> list[str]:
    return [f"input_dir={base / 'input'}", f"models_dir={base / 'models'}", f"submissions_dir={base / 'submissions'}"]
