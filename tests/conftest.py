"""Shared test helpers: small configs in a temporary input folder, and the real data slice."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline import config, sample
from pipeline.config import Config
from pipeline.io import file_digest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "jigsaw-real"
SCALE = 0.2  # the built-in sample at a fifth of its size: 690 training rows, 180 test rows


def make_cfg(tmp_path: Path, *overrides: str) -> Config:
    """The sample config, small and fast, writing under tmp_path/input; later overrides win."""
    return config.load(
        "sample",
        [f"input_dir={tmp_path / 'input'}", f"data.sample_scale={SCALE}", "model.tiny.vocab=1000", *overrides],
    )


def digests(folder: Path) -> dict[str, str]:
    """Every file under `folder` (relative path) with its sha256: equal before and after means untouched."""
    return {str(p.relative_to(folder)): file_digest(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def real_slice() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared/jigsaw-real is absent (a user's clone has no ../shared)")
    return SHARED


@pytest.fixture
def raw_sample(tmp_path: Path) -> Path:
    """A writable folder holding the sample competition's files, for `data.source=dir` runs that damage them."""
    raw = tmp_path / "raw"
    sample.write(raw, seed=0, scale=SCALE)
    return raw


@pytest.fixture
def no_kaggle_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty HOME and no Kaggle variables; returns the home."""
    home = tmp_path / "home"
    home.mkdir()
    for key in list(os.environ):
        if key.startswith("KAGGLE_") or key == "XDG_CONFIG_HOME":
            monkeypatch.delenv(key)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture(scope="module")
def torch_one_thread():
    """One intra-op thread for the module: on a shared, busy CPU, OpenMP threads that wait on each other at
    every op made tiny-model training up to 100x slower (measured: 8 against 980 examples/s)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
