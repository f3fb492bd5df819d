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


def overrides(base: Path) -> list[str]:
    return [f"input_dir={base / 'input'}", f"models_dir={base / 'models'}", f"submissions_dir={base / 'submissions'}"]
