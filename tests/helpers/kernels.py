"""Configs for `make kernel` tests: the kernel and bundle folders, input, models and submissions under a temporary
folder."""

from __future__ import annotations

from pathlib import Path

from pipeline import config

COMPETITION = "jigsaw-multilingual-toxic-comment-classification"


def make_cfg(tmp_path: Path, *overrides: str, name: str = "sample") -> config.Config:
    return config.load(
        name,
        [
            f"kaggle.dir={tmp_path / 'kernel'}",
            f"input_dir={tmp_path / 'input'}",
            f"models_dir={tmp_path / 'models'}",
            f"submissions_dir={tmp_path / 'submissions'}",
            "data.extra_files=[]",  # the real competition has no translated-train.csv (see test_extra_files_*)
            *overrides,
        ],
    )


def dry(tmp_path: Path, *overrides: str) -> config.Config:
    return make_cfg(tmp_path, "kaggle.dry_run=true", "kaggle.user=tester", *overrides)
