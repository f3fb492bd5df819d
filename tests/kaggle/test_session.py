"""What the notebook knows about Kaggle's machine (pipeline.kaggle.session): its three folders, where inputs are
mounted, the model folder, the GPUs, and what is copied from /kaggle/temp into /kaggle/working."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline import config
from pipeline.kaggle import session
from pipeline.kaggle.plan import KernelError
from tests.helpers.kernels import COMPETITION


@pytest.fixture(autouse=True)
def no_credentials(no_kaggle_env: Path) -> Path:
    """Every test starts with no Kaggle credentials and an empty HOME."""
    return no_kaggle_env


def test_kaggle_paths_from_env_or_defaults() -> None:
    defaults = session.KagglePaths(Path("/kaggle/input"), Path("/kaggle/working"), Path("/kaggle/temp"))
    assert session.kaggle_paths({}) == defaults
    paths = session.kaggle_paths({"KAGGLE_INPUT_ROOT": "/a", "KAGGLE_WORKING_ROOT": "/b", "KAGGLE_TEMP_ROOT": "/c"})
    assert paths == session.KagglePaths(Path("/a"), Path("/b"), Path("/c"))
    assert session.on_kaggle({"KAGGLE_KERNEL_RUN_TYPE": "Batch"})


def test_find_mount_one_or_two_levels_down(tmp_path: Path) -> None:
    (tmp_path / "datasets" / "owner" / "xlmr").mkdir(parents=True)
    (tmp_path / COMPETITION).mkdir()
    assert session.find_mount(tmp_path, COMPETITION) == tmp_path / COMPETITION
    assert session.find_mount(tmp_path, "xlmr") == tmp_path / "datasets" / "owner" / "xlmr"
    assert session.find_mount(tmp_path, "absent") is None


def fold_folder(root: Path) -> Path:
    fold = root / "fold0"
    fold.mkdir(parents=True)
    for name, size in (("model.safetensors", 1000), ("resume.pt", 3000), ("done.json", 10), ("oof.csv", 20)):
        (fold / name).write_bytes(b"x" * size)
    (fold / ".model.safetensors.tmp-1").write_bytes(b"half")  # a write in progress
    return fold


def test_sync_keeps_what_the_user_downloads(tmp_path: Path) -> None:
    src = fold_folder(tmp_path / "temp")
    copied = session.sync(src, tmp_path / "kept", keep_weights=True)
    assert sorted(p.name for p in copied) == ["done.json", "model.safetensors", "oof.csv"]
    assert session.sync(src, tmp_path / "kept", keep_weights=True) == []  # same size and time: nothing again
    os.utime(src / "oof.csv", ns=(1, 1))
    assert [p.name for p in session.sync(src, tmp_path / "kept", keep_weights=True)] == ["oof.csv"]
    light = session.sync(src, tmp_path / "light", keep_weights=False)
    assert sorted(p.name for p in light) == ["done.json", "oof.csv"]


def model_folder(path: Path, weights: str = "model.safetensors") -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / weights).write_bytes(b"w")
    return path


def test_find_model_dir_refuses_several_models(tmp_path: Path) -> None:
    model_folder(tmp_path / "xlm-roberta-base")
    model_folder(tmp_path / "xlm-roberta-large")
    with pytest.raises(KernelError, match=r"several models \(xlm-roberta-base, xlm-roberta-large\).*model_subdir"):
        session.find_model_dir(tmp_path)
    assert session.find_model_dir(tmp_path / "xlm-roberta-large") == tmp_path / "xlm-roberta-large"


@pytest.mark.parametrize(("weights", "said"), [("tf_model.h5", "TensorFlow weights only"), ("README.md", "no weights")])
def test_find_model_dir_needs_pytorch_weights(tmp_path: Path, weights: str, said: str) -> None:
    model_folder(tmp_path / "tf" / "xlm-roberta-large", weights)
    with pytest.raises(KernelError, match=f"{said}; the pipeline loads PyTorch weights"):
        session.find_model_dir(tmp_path / "tf")
    model_folder(tmp_path / "pt" / "large", "pytorch_model.bin")
    assert session.find_model_dir(tmp_path / "pt") == tmp_path / "pt" / "large"


def test_train_processes_follow_the_visible_gpus() -> None:
    cfg = config.load("sample")
    assert session.processes(cfg, gpus=2) == 2  # Kaggle's two T4s
    assert session.processes(cfg, gpus=0) == 1  # no GPU: one process
    two = config.load("sample", ["kaggle.gpus=2"])
    assert session.processes(two, gpus=0) == 2  # two CPU processes standing for two GPUs
    with pytest.raises(KernelError, match="kaggle.gpus=2, but 1 GPU"):
        session.processes(two, gpus=1)
