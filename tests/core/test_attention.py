"""model.attn_implementation (pipeline.core.attention): the kernel reaches the encoder where it is built, gives the
same scores as the others, is no part of a fold's fingerprint, and is refused in one line where it cannot run."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from pipeline import config, fingerprint
from pipeline.core import attention, modeling
from pipeline.errors import PipelineError
from tests.helpers.tinymodel import family_config

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def built(folder, choice: str) -> modeling.Classifier:
    cfg = config.load("sample", [f"model.name={folder}", "model.dropout=0.0", f"model.attn_implementation={choice}"])
    torch.manual_seed(0)  # the same head wherever the encoder is read from
    return modeling.build_model(cfg, tokenizer=None).eval()


def test_the_chosen_attention_reaches_the_encoder_and_scores_as_the_others(tmp_path) -> None:
    """A ModernBERT folder built with `eager` runs eager, with `auto` transformers' sdpa; the two score a padded
    batch alike (the same exact attention, rounding apart)."""
    torch.manual_seed(0)
    modeling.encoder_from_config(family_config("modernbert")).save_pretrained(tmp_path / "mm")
    ids = torch.tensor([[0, 17, 45, 9, 2, 1, 1], [0, 5, 33, 8, 60, 7, 2]])
    scores = {}
    for choice, runs in (("eager", "eager"), ("sdpa", "sdpa"), ("auto", "sdpa")):
        model = built(tmp_path / "mm", choice)
        assert model.encoder.config._attn_implementation == runs, choice
        with torch.no_grad():
            scores[choice] = model(ids, (ids != 1).long())
    torch.testing.assert_close(scores["eager"], scores["sdpa"], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(scores["auto"], scores["sdpa"])


def test_the_attention_kernel_is_no_part_of_a_fold_s_fingerprint() -> None:
    ours = fingerprint.settings(config.load("sample", device=False))
    for choice in ("eager", "sdpa", "flash_attention_2"):
        cfg = config.load("sample", [f"model.attn_implementation={choice}"], device=False)
        assert fingerprint.settings(cfg) == ours, choice


def one_line(choice: str, device) -> str:
    with pytest.raises(PipelineError) as e:
        attention.implementation(choice, device)
    assert "\n" not in str(e.value) and "model.attn_implementation=sdpa" in str(e.value)
    return str(e.value)


def test_flash_attention_is_refused_in_one_line_where_it_cannot_run(monkeypatch) -> None:
    """On a CPU; on a GPU older than Ampere (a T4: 7.5); without the flash_attn package. sdpa and eager run
    anywhere."""
    assert attention.implementation("auto", torch.device("cpu")) is None
    assert attention.implementation("eager", torch.device("cpu")) == "eager"
    assert "not on the cpu" in one_line("flash_attention_2", torch.device("cpu"))
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 5))
    assert "Tesla T4 is 7.5" in one_line("flash_attention_2", gpu)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (8, 0))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "flash_attn" else real(n, *a))
    assert "needs the flash_attn package" in one_line("flash_attention_2", gpu)


def test_a_run_with_flash_attention_on_a_cpu_stops_before_any_fold() -> None:
    from pipeline.core import foldmodel

    cfg = config.load("sample", ["model.attn_implementation=flash_attention_2"], device=False)
    with pytest.raises(PipelineError, match="runs only on a CUDA GPU"):
        foldmodel.check_settings(cfg, torch.device("cpu"))
