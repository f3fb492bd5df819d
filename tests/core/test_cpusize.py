"""`train.device: auto` without CUDA (pipeline.core.cpusize): a pretrained model over 200M parameters is refused in
one line before any work, unless train.device=cpu insists; the tiny model and multilingual-e5-small still run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import BertConfig, XLMRobertaConfig

from pipeline import config, train
from pipeline.core import cpusize
from tests.helpers import one_line_error, stage_args

LARGE = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096}
XLMR = {"vocab_size": 250002, "max_position_embeddings": 514, "type_vocab_size": 1, "pad_token_id": 1}
E5_SMALL = {"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 1536}
E5 = Path(__file__).parents[2] / ".." / "shared" / "pretrained" / "multilingual-e5-small-jigsaw"


def folder(tmp_path: Path, conf) -> Path:
    """A model folder holding only its config.json: all the size check reads."""
    out = tmp_path / conf.model_type
    conf.save_pretrained(out)
    return out


@pytest.mark.parametrize(
    "conf, millions",
    [
        (XLMRobertaConfig(**XLMR, **LARGE), 559),  # xlm-roberta-large
        (XLMRobertaConfig(**XLMR), 277),  # xlm-roberta-base
        (BertConfig(vocab_size=250037, **E5_SMALL), 118),  # multilingual-e5-small, its full vocabulary
    ],
)
def test_the_parameter_count_comes_from_the_config_alone(tmp_path: Path, conf, millions: int) -> None:
    assert round(cpusize.encoder_parameters(str(folder(tmp_path, conf))) / 1e6) == millions


def test_base_is_refused_under_auto_on_a_cpu_and_e5_small_and_an_insisting_cpu_are_not(tmp_path: Path) -> None:
    cpu = torch.device("cpu")
    base = str(folder(tmp_path, XLMRobertaConfig(**XLMR)))
    with pytest.raises(cpusize.PipelineError, match="277M parameters"):
        cpusize.check_cpu_auto(config.load("sample", [f"model.name={base}"]), cpu)
    cpusize.check_cpu_auto(config.load("sample", [f"model.name={base}", "train.device=cpu"]), cpu)
    cpusize.check_cpu_auto(config.load("sample", [f"model.name={base}"]), torch.device("cuda:0"))
    cpusize.check_cpu_auto(config.load("sample", ["train.device=auto"]), cpu)  # the tiny model
    if E5.is_dir():
        cpusize.check_cpu_auto(config.load("sample", [f"model.name={E5}", "train.device=auto"]), cpu)


def test_xlmr_large_without_cuda_stops_train_in_one_line_before_any_work(tmp_path: Path, capsys, monkeypatch) -> None:
    """No data is prepared: the refusal comes before the inputs are read, and nothing is written under models/."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    large = folder(tmp_path, XLMRobertaConfig(**XLMR, **LARGE))
    args = stage_args(tmp_path, f"model.name={large}", "train.device=auto")
    assert train.main(args) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"error: train.device=auto found no CUDA GPU, and {large} (559M parameters)")
    assert cpusize.CHECK_TORCH in line and "set train.device=cpu" in line
    assert not list((tmp_path / "models").rglob("*.json"))
    assert train.main([*args, "train.device=cpu"]) == 2  # insisting: on to the inputs, which are missing here
    assert "found no CUDA GPU" not in one_line_error(capsys)
