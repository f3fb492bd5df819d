"""Every pooling is one record (pipeline/pooling.py): the setting's choices and doc, the model's pooling and head
width, a LoRA fold's head when it loads, and docs/export.md's loader are all made from it or checked against it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pipeline import config, pooling, schema
from pipeline.core import lora, modeling
from tests.helpers import ROOT
from tests.helpers.tinymodel import tiny_classifier

pytestmark = pytest.mark.usefixtures("torch_one_thread")
CPU = torch.device("cpu")
# a pooling of twice the hidden width: the mean beside the first token
BOTH = pooling.Pooling(
    "both",
    "the mean and the first token",
    lambda hidden, mask: torch.cat([pooling.masked_mean(hidden, mask), hidden[:, 0]], dim=-1),
    "lambda hidden, mask: torch.cat([(hidden * mask).sum(1) / mask.sum(1).clamp(min=1), hidden[:, 0]], -1)",
    width=2,
)


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    return torch.randn(3, 5, 4), mask


def test_the_export_page_s_loader_table_is_the_records_() -> None:
    text = (ROOT / "docs" / "export.md").read_text(encoding="utf-8")
    assert text == pooling.with_loader_table(text), "run `.venv/bin/python -m pipeline.pooling docs/export.md`"


@pytest.mark.parametrize("record", [*pooling.POOLINGS.values(), BOTH], ids=lambda p: p.name)
def test_each_loader_line_pools_as_the_pipeline_does(record: pooling.Pooling) -> None:
    hidden, mask = padded_batch()
    # as docs/export.md's loader calls it: plain torch, the attention mask as a float column
    outside = eval(record.loader, {"torch": torch})(hidden, mask.unsqueeze(-1).float())
    torch.testing.assert_close(outside, record.pool(hidden, mask))
    assert outside.shape == (3, record.width * 4)


def test_the_setting_s_choices_and_doc_are_the_records_() -> None:
    assert schema.CHOICES["model.pooling"] == tuple(pooling.POOLINGS)
    doc = schema.of("model.pooling").doc
    assert all(f"`{name}` ({p.doc})" in doc for name, p in pooling.POOLINGS.items())


def test_a_wider_pooling_widens_the_head_and_scores(monkeypatch) -> None:
    monkeypatch.setitem(pooling.POOLINGS, "both", BOTH)
    model = tiny_classifier(hidden=32, pooling="both").eval()
    assert model.head.in_features == 64
    ids = torch.tensor([[0, 17, 45, 9, 2, 1], [0, 5, 2, 1, 1, 1]])
    with torch.no_grad():
        assert model(input_ids=ids, attention_mask=(ids != 1).long()).shape == (2,)


def test_a_lora_fold_loads_with_its_own_pooling_whatever_the_config_s(monkeypatch, tmp_path: Path) -> None:
    """The head is built as wide as the fold's pooling (head.json's), not the config's, then its weights load."""
    monkeypatch.setitem(pooling.POOLINGS, "both", BOTH)
    lora_args = ["model.lora.r=4", "model.lora.alpha=8", "model.dropout=0.0"]
    trained = config.load("sample", [*lora_args, "model.pooling=mean"], device=False)
    base = {"from": "tiny", "seed": 0, "config": modeling.tiny_config(trained, 100, 1).to_dict()}
    model = modeling.lora_base(trained, None, base, modeling.HeadSpec("both", 0.0), "fp32", CPU, "none")
    lora.attach(model, lora.spec(trained.model.lora, model.encoder, base), torch.float32)
    torch.nn.init.normal_(model.head.weight)
    modeling.save(model, tmp_path)
    again = modeling.load_fold_model(tmp_path, cfg=trained, device=CPU)
    assert again.pooling == "both" and again.head.in_features == 2 * model.config.hidden_size
    torch.testing.assert_close(again.head.weight, model.head.weight)
