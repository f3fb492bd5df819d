"""The plan of a Kaggle run, checked before anything is pushed: disk, sources, accelerator, model folder.

And the notebook's side of the disk plan: what it copies from /kaggle/temp into /kaggle/working.
No test reaches the network; the kaggle API is FakeKaggleApi.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_kaggle_io import FakeKaggleApi

from pipeline import config, kaggle_disk, kaggle_meta, kernel, notebook
from pipeline.kaggle_meta import KernelError


@pytest.fixture(autouse=True)
def no_credentials(no_kaggle_env: Path) -> Path:
    return no_kaggle_env


def cfg_for(tmp_path: Path, name: str = "sample", *overrides: str) -> config.Config:
    return config.load(
        name,
        [f"kaggle.dir={tmp_path / 'kernel'}", f"models_dir={tmp_path / 'models'}", "kaggle.user=tester", *overrides],
    )


# ---------------------------------------------------------------------------------------------
# Disk


def test_parameter_count_matches_the_model() -> None:
    """The plan's arithmetic against a real XLM-R classifier (tiny) and XLM-R large's known 560M."""
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification

    arch = {"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64}
    arch.update(max_position_embeddings=66, type_vocab_size=2)
    model = XLMRobertaForSequenceClassification(XLMRobertaConfig(num_attention_heads=2, num_labels=1, **arch))
    assert kaggle_disk.transformer_parameters(arch) == sum(p.numel() for p in model.parameters())
    large = kaggle_disk.transformer_parameters(kaggle_disk.KNOWN_MODELS["xlm-roberta-large"])
    assert 559e6 < large < 561e6  # 2.24 GB of fp32 safetensors


def test_xlmr_large_plan_fits_and_keeps_transients_out_of_working(tmp_path: Path, capsys) -> None:
    cfg = cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true")
    result = kernel.build_and_push(cfg)
    plan = result["disk"]
    assert 11e9 < plan.working_bytes < 12e9 < kaggle_disk.GB * cfg.kaggle.working_gb  # 5 x 2.24 GB + small files
    assert not any("resume" in what or "cache" in what for what, _ in plan.working)
    assert any("resume.pt" in what and size == 2 * 12 * plan.parameters for what, size in plan.temp)
    out = capsys.readouterr().out
    assert "/kaggle/working (kept, at most 20 GB)" in out and "/kaggle/temp (scratch, not kept)" in out
    assert "5 x 2.24 GB" in out


def test_a_two_stage_plan_counts_the_stage1_model(tmp_path: Path) -> None:
    one = kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true"))["disk"]
    two = kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true", "model.init_from=xl-s1"))["disk"]
    weights = 4 * one.parameters
    # stage 1 keeps its model in working and reads another table and token cache in temp
    assert weights < two.working_bytes - one.working_bytes < weights + 1e8
    assert any("xl-s1/fold-1/model.safetensors" in what and size == weights for what, size in two.working)
    assert two.temp_bytes - one.temp_bytes > weights
    kept = kernel.build_and_push(
        cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true", "model.init_from=xl-s1", "kaggle.keep_weights=false")
    )["disk"]
    assert not any("model.safetensors" in what for what, _ in kept.working)


def test_an_attached_stage1_kernel_is_a_kernel_source_and_not_trained_again(tmp_path: Path) -> None:
    two = ("kaggle.dry_run=true", "model.init_from=xl-s1")
    result = kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", *two, "kaggle.init_kernel=jigsaw-xl-s1"))
    assert result["metadata"]["kernel_sources"] == ["tester/jigsaw-xl-s1"]  # a bare slug: the user's own
    assert not any("xl-s1" in what for what, _ in result["disk"].working + result["disk"].temp)
    other = kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", *two, "kaggle.init_kernel=someone/xl-stage-one"))
    assert other["metadata"]["kernel_sources"] == ["someone/xl-stage-one"]
    with pytest.raises(KernelError, match="kaggle.init_kernel=x-s1 is set but model.init_from is empty"):
        kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true", "kaggle.init_kernel=x-s1"))
    with pytest.raises(KernelError, match="expected <owner>/<kernel> or <kernel>"):
        kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", *two, "kaggle.init_kernel=a/b/c"))


def test_a_plan_over_the_quota_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    big = (
        "model.name=xlm-roberta-large",
        "kaggle.model_source=someone/xlm-roberta-large",
        "data.folds=10",
        "data.extra_files=[]",
    )
    with pytest.raises(KernelError, match=r"more than the 20 GB.*kaggle.keep_weights=false.*one kernel per fold"):
        kernel.build_and_push(cfg_for(tmp_path, "sample", *big), api=api)
    assert api.calls == []
    # the fixes the message names are enough: weights left in temp, or fewer folds
    kernel.build_and_push(cfg_for(tmp_path, "sample", *big, "kaggle.keep_weights=false"), api=FakeKaggleApi())
    kernel.build_and_push(cfg_for(tmp_path, "sample", *big, "train.folds=[0,1,2]"), api=FakeKaggleApi())


def fold_folder(root: Path) -> Path:
    fold = root / "fold0"
    fold.mkdir(parents=True)
    for name, size in (("model.safetensors", 1000), ("resume.pt", 3000), ("done.json", 10), ("oof.csv", 20)):
        (fold / name).write_bytes(b"x" * size)
    (fold / ".model.safetensors.tmp-1").write_bytes(b"half")  # a write in progress
    return fold


def test_sync_keeps_what_the_user_downloads(tmp_path: Path) -> None:
    src = fold_folder(tmp_path / "temp")
    copied = notebook.sync(src, tmp_path / "kept", keep_weights=True)
    assert sorted(p.name for p in copied) == ["done.json", "model.safetensors", "oof.csv"]
    assert notebook.sync(src, tmp_path / "kept", keep_weights=True) == []  # same size and time: nothing again
    os.utime(src / "oof.csv", ns=(1, 1))
    assert [p.name for p in notebook.sync(src, tmp_path / "kept", keep_weights=True)] == ["oof.csv"]
    light = notebook.sync(src, tmp_path / "light", keep_weights=False)
    assert sorted(p.name for p in light) == ["done.json", "oof.csv"]


# ---------------------------------------------------------------------------------------------
# Sources: extra files, model folder


def test_extra_files_the_competition_lacks_are_refused(tmp_path: Path) -> None:
    """sample.yaml's translated-train.csv is not a file of the real competition: no dataset, no push."""
    api = FakeKaggleApi()
    with pytest.raises(KernelError, match=r"translated-train.csv is not a file of the competition.*data.datasets"):
        kernel.build_and_push(cfg_for(tmp_path), api=api)
    assert api.calls == []
    kaggle_meta.check_extra_files(cfg_for(tmp_path, "sample", "data.extra_files=[validation.csv]"))


def test_extra_files_are_looked_up_in_the_attached_datasets(tmp_path: Path) -> None:
    attached = ("data.datasets=[someone/jigsaw-translated]",)
    api = FakeKaggleApi()
    api.dataset_listing = {"someone/jigsaw-translated": ["jigsaw-toxic-comment-train-google-es.csv"]}
    with pytest.raises(KernelError, match="translated-train.csv is in none of someone/jigsaw-translated"):
        kernel.build_and_push(cfg_for(tmp_path, "sample", *attached), api=api)
    assert [n for n, _ in api.calls] == ["dataset_list_files"]
    api.dataset_listing["someone/jigsaw-translated"].append("translated-train.csv")
    kernel.build_and_push(cfg_for(tmp_path, "sample", *attached), api=api)
    assert [n for n, _ in api.calls][-1] == "kernels_push"


def model_folder(path: Path, weights: str = "model.safetensors") -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / weights).write_bytes(b"w")
    return path


def test_find_model_dir_refuses_several_models(tmp_path: Path) -> None:
    model_folder(tmp_path / "xlm-roberta-base")
    model_folder(tmp_path / "xlm-roberta-large")
    with pytest.raises(KernelError, match=r"several models \(xlm-roberta-base, xlm-roberta-large\).*model_subdir"):
        notebook.find_model_dir(tmp_path)
    assert notebook.find_model_dir(tmp_path / "xlm-roberta-large") == tmp_path / "xlm-roberta-large"


@pytest.mark.parametrize(("weights", "said"), [("tf_model.h5", "TensorFlow weights only"), ("README.md", "no weights")])
def test_find_model_dir_needs_pytorch_weights(tmp_path: Path, weights: str, said: str) -> None:
    model_folder(tmp_path / "tf" / "xlm-roberta-large", weights)
    with pytest.raises(KernelError, match=f"{said}; the pipeline loads PyTorch weights"):
        notebook.find_model_dir(tmp_path / "tf")
    model_folder(tmp_path / "pt" / "large", "pytorch_model.bin")
    assert notebook.find_model_dir(tmp_path / "pt") == tmp_path / "pt" / "large"


# ---------------------------------------------------------------------------------------------
# Accelerator and image


def test_accelerator_and_image_pinning_in_the_metadata(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, "sample", "kaggle.docker_image_pinning=original", "data.extra_files=[]")
    meta = kaggle_meta.kernel_metadata(cfg, kaggle_meta.make_plan(cfg, "tester"))
    assert meta["machine_shape"] == "NvidiaTeslaT4" and meta["docker_image_pinning_type"] == "original"
    cpu = cfg_for(tmp_path, "sample", "kaggle.enable_gpu=false")
    assert "machine_shape" not in kaggle_meta.kernel_metadata(cpu, kaggle_meta.make_plan(cpu, "tester"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"machine_shape": "NvidiaTeslaP100"}, "machine_shape 'NvidiaTeslaP100' is not one of NvidiaTeslaT4"),
        ({"machine_shape": "NvidiaTeslaT4", "enable_gpu": False}, "needs enable_gpu true"),
        ({"docker_image_pinning_type": "newest"}, "docker_image_pinning_type 'newest' is not one of original, latest"),
    ],
)
def test_accelerator_and_pinning_checks(tmp_path: Path, change: dict, message: str) -> None:
    cfg = cfg_for(tmp_path, "sample", "kaggle.dry_run=true", "data.extra_files=[]")
    meta = kernel.build_and_push(cfg)["metadata"]
    meta.update(change)
    with pytest.raises(KernelError, match=message):
        kaggle_meta.check_kernel_metadata(meta, tmp_path / "kernel" / "jigsaw-sample" / "notebook")
    with pytest.raises(config.ConfigError, match="kaggle.docker_image_pinning"):
        cfg_for(tmp_path, "sample", "kaggle.docker_image_pinning=newest")


def test_pushed_metadata_carries_the_accelerator(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    kernel.build_and_push(cfg_for(tmp_path, "sample", "data.extra_files=[]"), api=api)
    push = dict(api.calls)["kernels_push"]
    assert json.loads(json.dumps(push["metadata"]))["machine_shape"] == "NvidiaTeslaT4"


def test_train_processes_follow_the_visible_gpus() -> None:
    cfg = config.load("sample")
    assert notebook.processes(cfg, gpus=2) == 2  # Kaggle's two T4s
    assert notebook.processes(cfg, gpus=0) == 1  # no GPU: one process
    two = config.load("sample", ["kaggle.gpus=2"])
    assert notebook.processes(two, gpus=0) == 2  # two CPU processes standing for two GPUs
    with pytest.raises(KernelError, match="kaggle.gpus=2, but 1 GPU"):
        notebook.processes(two, gpus=1)
