"""Shared fixtures: the checkout's own folders kept out of every test, the real data slice, a writable sample
competition, an empty Kaggle environment, one torch thread, and a prepared tiny experiment. Helpers are in
tests/helpers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.inputs import sample
from tests.helpers import SCALE, SHARED, moved_copy, prepare_tiny, tiny_cfg
from tests.helpers.checkout import Watch

_watch: list[Watch] = []  # one for the session: its audit hook stays installed once added


@pytest.fixture(autouse=True)
def checkout_untouched():
    """Fail a test that reads or writes the checkout's own input/, models/ or submissions/: they hold what
    `make data train predict` left there, which a test must neither lean on nor change (a test gives its
    stages input_dir=, models_dir= and submissions_dir= under tmp_path, as make_cfg and stage_args do)."""
    if not _watch:
        _watch.append(Watch())
    watch = _watch[0]
    watch.start()
    yield
    touched = watch.stop()
    if touched:
        shown = "; ".join(touched[:6]) + (f"; and {len(touched) - 6} more" if len(touched) > 6 else "")
        pytest.fail(f"the test touched the checkout's own folders: {shown}", pytrace=False)


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


@pytest.fixture(scope="session")
def prepared_once(tmp_path_factory) -> Path:
    """The tiny experiment's inputs, built once a test process (tables, tokenizer, token cache: about a second)."""
    root = tmp_path_factory.mktemp("prepared")
    prepare_tiny(root)
    return root


@pytest.fixture
def prepared(prepared_once, tmp_path):
    """A tiny two-fold experiment under tmp_path, its inputs built (a copy of prepared_once's, as built there)."""
    moved_copy(prepared_once, tmp_path)
    return tiny_cfg(tmp_path)
