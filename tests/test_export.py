"""`make export` (pipeline/export.py): a trained fold as a folder that transformers and torch load by themselves,
read by the loading function of docs/export.md in a process that never imports `pipeline`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import export, layout, predict, schema, train
from pipeline.errors import PipelineError
from pipeline.inputs import tables
from tests.helpers import ROOT, prepare_tiny

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("torch_one_thread")]


def loader() -> str:
    """The loading function as docs/export.md shows it: the test runs the page's own block."""
    page = (ROOT / "docs" / "export.md").read_text()
    block = page.split("<!-- loader -->", 1)[1].split("<!-- /loader -->", 1)[0]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


SCORE = """
import sys
texts = json.load(open(sys.argv[2]))
print(json.dumps(load(sys.argv[1])(texts).tolist()))
# transformers and torch alone: nothing of the project was imported, and it cannot be found from here
assert not any(m == "pipeline" or m.startswith("pipeline.") for m in sys.modules), "pipeline was imported"
"""


def score_outside(folder: Path, texts: list[str], tmp_path: Path) -> np.ndarray:
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the checkout is not on the path
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-c", loader() + SCORE, str(folder), str(tmp_path / "texts.json")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return np.array(json.loads(out.stdout.strip().splitlines()[-1]))


# every pooling the schema allows (the page's loader reads each one), a trimmed vocabulary under the default, and a
# trimmed LoRA fold (its adapters and head only: exported with its adapters merged into its base's weights, a plain
# encoder folder that transformers alone loads, predicting as the fold did)
CASES = [(False, p, False) for p in schema.CHOICES["model.pooling"]]
CASES += [(True, schema.Config().model.pooling, False), (True, schema.Config().model.pooling, True)]


@pytest.mark.parametrize(("trimmed", "pooling", "lora"), CASES)
def test_an_exported_fold_loads_without_the_pipeline_and_predicts_as_the_fold(
    tmp_path: Path, trimmed: bool, pooling: str, lora: bool
) -> None:
    trim = f"model.trim_vocab={str(trimmed).lower()}"
    cfg = prepare_tiny(tmp_path, "train.folds=[0]", "train.device=cpu", trim, f"model.pooling={pooling}",
                       *(["model.lora.r=4"] if lora else []))  # fmt: skip
    train.run(cfg)
    predict.run(cfg)
    [folder] = export.run(cfg)
    assert folder == layout.export_dir(cfg, 0)
    fold = layout.fold_dir(cfg, 0)
    assert (fold / layout.VOCAB_MAP).is_file() == trimmed
    assert ("lora" in json.loads((fold / "head.json").read_text())) == lora
    spec = json.loads((folder / layout.EXPORT_SPEC).read_text())
    assert spec == {"pooling": cfg.model.pooling, "max_length": cfg.model.max_length, "scale": "probability", "fold": 0}
    _, test, _ = tables.load_table(cfg)
    expected = pd.read_csv(fold / layout.TEST_PREDS, dtype={"id": str}, keep_default_na=False)
    assert expected["id"].tolist() == test["id"].tolist()
    got = score_outside(folder, test["text"].tolist(), tmp_path)
    np.testing.assert_allclose(got, expected["toxic"].to_numpy(), rtol=0, atol=1e-5)


def test_the_export_folder_holds_exactly_the_folds_exported(tmp_path: Path, capsys) -> None:
    """A re-export after a fold is gone (removed, retrained away, no longer current) leaves no older export of it
    beside the new ones, nor a killed export's temporary; a fold with any file damaged is not exported."""
    cfg = prepare_tiny(tmp_path, "train.device=cpu", "train.max_steps=2")
    train.run(cfg)
    assert [p.name for p in export.run(cfg)] == ["fold0", "fold1"]
    root = layout.export_dir(cfg, 0).parent
    shutil.rmtree(layout.fold_dir(cfg, 1))
    dead = root / f".fold1.tmp-{2**22 + 12345}"  # no such process
    dead.mkdir()
    capsys.readouterr()
    assert export.run(cfg) == [layout.export_dir(cfg, 0)]
    assert sorted(p.name for p in root.iterdir()) == ["fold0"]
    assert f"export: removed {root / 'fold1'} (its fold is not among the ones exported now)" in capsys.readouterr().out
    (layout.fold_dir(cfg, 0) / "head.json").write_text("{")  # damaged: the fold is left out, naming the file
    with pytest.raises(PipelineError, match=r"fold0: head.json has 1 bytes, done.json records \d+ \(damaged\?\)"):
        export.run(cfg)


# what docs/export.md promises for each precision a fold can predict at: fp32 to 1e-5; bf16 (the default `auto`
# where the CPU or GPU computes it) to the rounding of bf16's 8-bit mantissa, here under 1e-3
ATOL = {"fp32": "1e-5", "bf16": "1e-3"}


@pytest.mark.parametrize("precision", sorted(ATOL))
def test_an_exported_fold_predicts_as_the_fold_at_each_precision_to_what_export_md_says(
    tmp_path: Path, precision: str
) -> None:
    page = (ROOT / "docs" / "export.md").read_text()
    assert f"`{precision}`" in page and f"to {ATOL[precision]}" in page, precision
    cfg = prepare_tiny(tmp_path, "train.folds=[0]", "train.device=cpu", f"train.precision={precision}")
    train.run(cfg)
    predict.run(cfg)
    [folder] = export.run(cfg)
    _, test, _ = tables.load_table(cfg)
    expected = pd.read_csv(layout.fold_dir(cfg, 0) / layout.TEST_PREDS, dtype={"id": str}, keep_default_na=False)
    got = score_outside(folder, test["text"].tolist(), tmp_path)
    gap = float(np.abs(got - expected["toxic"].to_numpy()).max())
    print(f"{precision}: largest gap {gap:.2e}")
    assert gap <= float(ATOL[precision]), gap


def test_the_ensemble_example_of_export_md_loads_every_exported_fold(tmp_path: Path, monkeypatch) -> None:
    """The page's usage block, run with a stand-in `load`, in a folder holding five exported folds."""
    import torch

    page = (ROOT / "docs" / "export.md").read_text()
    block = page.split("<!-- usage -->", 1)[1].split("<!-- /usage -->", 1)[0].split("```python\n", 1)[1]
    for k in range(5):
        (tmp_path / "models" / "sample" / "export" / f"fold{k}").mkdir(parents=True)
    loaded: list[str] = []

    def load(folder):
        loaded.append(Path(folder).name)
        return lambda texts: torch.full((len(texts),), float(len(loaded)))

    monkeypatch.chdir(tmp_path)
    exec(block.split("```", 1)[0], {"load": load})  # noqa: S102  # the block's own names: only `load` is given
    assert loaded == ["fold0", "fold0", "fold1", "fold2", "fold3", "fold4"]


def test_a_trimmed_folds_export_has_the_whole_vocabulary_and_every_special_token_at_its_id(tmp_path: Path) -> None:
    """What the fold's test predictions cannot show (its texts use only the kept ids): the exported encoder has as
    many embedding rows as the untrimmed model and its config says so, each id's row is the one the fold read for it
    in training (a dropped id: <unk>'s), and the tokenizer's special tokens sit at their original ids."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoTokenizer

    from pipeline.core import modeling, trim
    from pipeline.inputs.tokenizer import load_tokenizer

    cfg = prepare_tiny(tmp_path, "train.folds=[0]", "train.device=cpu", "model.trim_vocab=true")
    train.run(cfg)
    [folder] = export.run(cfg)
    fold = layout.fold_dir(cfg, 0)
    tokenizer = load_tokenizer(fold)
    original = modeling.build_model(cfg, tokenizer).encoder.get_input_embeddings().num_embeddings  # untrimmed
    trained = modeling.build_model(cfg, tokenizer, source=fold)  # as the fold trained: its embedding trimmed
    vmap = trim.load_map(fold, trained)
    rows = trained.encoder.get_input_embeddings().weight.detach()
    assert len(rows) < original == len(vmap)  # trimmed indeed

    exported = AutoConfig.from_pretrained(folder)
    [weight] = [v for k, v in load_file(folder / "model.safetensors").items() if k.endswith("word_embeddings.weight")]
    assert exported.vocab_size == len(weight) == original
    assert exported.pad_token_id == tokenizer.pad_token_id
    torch.testing.assert_close(weight, rows[torch.as_tensor(vmap, dtype=torch.long)], rtol=0, atol=0)
    dropped = np.flatnonzero(vmap == vmap[tokenizer.unk_token_id])
    assert len(dropped) > 1 and all(torch.equal(weight[i], weight[tokenizer.unk_token_id]) for i in dropped)

    out = AutoTokenizer.from_pretrained(folder)
    specials = ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "cls_token_id", "sep_token_id",
                "mask_token_id")  # fmt: skip
    assert {s: getattr(out, s) for s in specials} == {s: getattr(tokenizer, s) for s in specials}
    assert len(out) == original and out.all_special_ids == tokenizer.all_special_ids
    for i in tokenizer.all_special_ids:  # each its own row (<unk>'s the dropped ids' too), the one the fold trained
        assert torch.equal(weight[i], rows[vmap[i]])
        assert i == tokenizer.unk_token_id or np.count_nonzero(vmap == vmap[i]) == 1
