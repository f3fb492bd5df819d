"""Determinism: the same config and seed on CPU give the same fold table, tokens and OOF, bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import data, train
from tests.helpers import digests
from tests.helpers.tinyrun import TINY, overrides


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """`make data` then `make train`, twice from nothing, in separate folders."""
    bases = []
    for run in ("a", "b"):
        base = tmp_path_factory.mktemp(f"determinism-{run}")
        args = ["--config", "sample", *overrides(base), *TINY]
        assert data.main(args) == 0
        assert train.main(args) == 0
        bases.append(base)
    return bases[0], bases[1]


pytestmark = pytest.mark.slow  # two trainings of the sample


def test_fold_table_identical(two_runs) -> None:
    a, b = (base / "input" / "prepared" / "sample" for base in two_runs)
    for name in ("folds.csv", "test.csv"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_tokenizer_and_token_cache_identical(two_runs) -> None:
    a, b = two_runs
    tok = [base / "input" / "prepared" / "sample" / "tokenizer" for base in (a, b)]
    assert digests(tok[0]) == digests(tok[1])  # SentencePiece trained twice, the same model file
    caches = [sorted((base / "input" / "cache").iterdir()) for base in (a, b)]
    assert [p.name for p in caches[0]] == [p.name for p in caches[1]]  # the same key
    assert len(caches[0]) == 1
    for name in ("train_ids.npy", "train_offsets.npy", "test_ids.npy", "test_offsets.npy"):
        assert (caches[0][0] / name).read_bytes() == (caches[1][0] / name).read_bytes(), name


def test_oof_and_weights_identical(two_runs) -> None:
    a, b = (base / "models" / "sample" for base in two_runs)
    assert (a / "oof.csv").read_bytes() == (b / "oof.csv").read_bytes()
    for fold in (0, 1):
        for name in ("oof.csv", "model.safetensors"):
            assert (a / f"fold{fold}" / name).read_bytes() == (b / f"fold{fold}" / name).read_bytes(), (fold, name)
