"""`make train` (pipeline.train): a models folder in the way, or a setting no fold can be built with, stops it in one
line and touches nothing. One fold's training is tested in tests/core/test_fold.py, whole runs in test_e2e.py,
resumes in tests/core/test_resume.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import data, predict, train
from tests.helpers import digests, one_line_error, stage_args


def test_models_being_a_file_stops_train_in_one_line(tmp_path: Path, capsys) -> None:
    models = tmp_path / "models"
    models.write_text("not a folder")
    assert train.main(stage_args(tmp_path, f"models_dir={models}")) == 2
    assert one_line_error(capsys) == (
        f"error: {models}: is a file, but the models folder (models_dir) must be a folder there; move the file away"
    )


# a tiny smoke run of fold 0 (pipeline.data then pipeline.train), seconds on a CPU
SMOKE = ["data.folds=2", "train.epochs=1", "train.precision=fp32", "model.tiny.hidden=32", "model.tiny.intermediate=64",
         "model.max_length=32", "train.folds=[0]", "train.max_steps=2"]  # fmt: skip


@pytest.mark.usefixtures("torch_one_thread")
@pytest.mark.parametrize(
    "refused, why",
    [
        (["model.lora.r=4", "model.lora.quantize=8bit"], "model.lora.quantize=8bit: only a pretrained model.name"),
        (["train.optimizer=adamw8bit"], "train.optimizer=adamw8bit runs only on a CUDA GPU"),
    ],
)
def test_a_setting_a_fold_cannot_be_built_with_is_refused_before_anything_is_touched(
    tmp_path: Path, capsys, refused: list[str], why: str
) -> None:
    """A complete fold and the experiment's pipeline.yaml stay as they were when a retrain under other settings is
    refused: the one line comes before any fold is named as replaced, and `make predict` still has its fold."""
    args = stage_args(tmp_path, *SMOKE)
    assert data.main(args) == 0 and train.main(args) == 0 and predict.main(args) == 0
    exp = tmp_path / "models" / "sample"
    before = digests(exp)
    assert {"pipeline.yaml", "fold0/done.json", "fold0/test.csv"} <= set(before)
    capsys.readouterr()
    assert train.main([*args, *refused]) == 2
    err = capsys.readouterr().err
    assert digests(exp) == before
    assert err.startswith(f"error: {why}") and err.count("\n") == 1  # no warning of a fold to be replaced
    assert predict.main(args) == 0


@pytest.mark.usefixtures("torch_one_thread")
def test_a_killed_runs_temporaries_beside_the_folds_are_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    """A run killed while it wrote eta.json or oof.csv leaves `.eta.json.tmp-<pid>` in models/<name>/; the next
    train removes it, while a temporary of a process still running (another fold's train) stays."""
    import subprocess

    args = stage_args(tmp_path, *SMOKE)
    assert data.main(args) == 0
    exp = tmp_path / "models" / "sample"
    exp.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid that ran and ended: its temporaries are a killed writer's
    dead = exp / f".eta.json.tmp-{gone.pid}"
    running = subprocess.Popen(["sleep", "300"])  # another process still writing its temporary
    live = exp / f".oof.csv.tmp-{running.pid}"
    dead.write_text("{half")
    live.write_text("id,toxic\n")
    try:
        assert train.main(args) == 0
    finally:
        running.kill()
        running.wait()
    assert not dead.exists() and live.exists()


@pytest.mark.usefixtures("torch_one_thread")
def test_a_finished_folds_optimizer_is_freed_before_the_next_fold_starts(tmp_path: Path, monkeypatch) -> None:
    """A fold's optimizer (6.7 GB for XLM-R large) is gone before the next fold builds its model and probes memory,
    not whenever the collector next runs: automatic collection is off here, so only the run's own frees it."""
    import gc
    import weakref

    from pipeline.core import fold as fold_mod
    from pipeline.core import optim

    optimizers, alive_at_start = [], []
    make_training, build = optim.make_training, fold_mod.FoldRun.build

    def recorded(*args, **kw):
        optimizer, scheduler = make_training(*args, **kw)
        optimizers.append(weakref.ref(optimizer))
        return optimizer, scheduler

    def starting(self, state) -> None:  # a fold's build: its model, its memory probe, its optimizer
        alive_at_start.append([ref() is not None for ref in optimizers])
        build(self, state)

    monkeypatch.setattr(optim, "make_training", recorded)
    monkeypatch.setattr(fold_mod.FoldRun, "build", starting)
    args = stage_args(tmp_path, *SMOKE, "train.folds=[0,1]")
    assert data.main(args) == 0
    gc.collect()
    gc.disable()
    try:
        assert train.main(args) == 0
    finally:
        gc.enable()
    assert alive_at_start == [[], [False]]


@pytest.mark.usefixtures("torch_one_thread")
def test_train_deterministic_turns_on_the_switches_before_a_fold_starts_and_is_off_by_default(
    tmp_path: Path, monkeypatch
) -> None:
    """train.deterministic=true: deterministic algorithms, cuBLAS's fixed workspace and no cuDNN autotuning, as a
    fold is built (the env var before CUDA first runs); by default none of them."""
    import os

    import torch

    from pipeline.core import fold as fold_mod

    seen, build = [], fold_mod.FoldRun.build

    def starting(self, state) -> None:
        seen.append((torch.are_deterministic_algorithms_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
                     torch.backends.cudnn.benchmark))  # fmt: skip
        build(self, state)

    monkeypatch.setattr(fold_mod.FoldRun, "build", starting)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)  # restored as it was after the test
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)  # as a user's earlier code might have left it
    args = stage_args(tmp_path, *SMOKE)
    assert data.main(args) == 0
    try:
        assert train.main([*args, "train.deterministic=true"]) == 0
        assert seen == [(True, ":4096:8", False)]
        monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")
        assert train.main([*args, "train.max_steps=3"]) == 0  # a fold of another fingerprint: trained again
        assert seen[1:] == [(False, None, False)]
    finally:
        torch.use_deterministic_algorithms(False)
