"""The one forward path (pipeline.core.modeling): pooling, the head, dropout by each family's own names, any
encoder transformers can load, fold folders reloaded as trained, and the real pretrained encoder fine-tuned
with each memory technique."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from pipeline import config, layout, schema, validity
from pipeline.core import batching, loop, modeling, optim, precision
from pipeline.errors import PipelineError
from pipeline.inputs.tokens import Ragged
from tests.helpers import ROOT
from tests.helpers.tinymodel import FAMILIES, family_config
from tests.helpers.training import train_parts

PRETRAINED = ROOT.parent / "shared" / "pretrained" / "multilingual-e5-small-jigsaw"
CPU = torch.device("cpu")


def batch_of(rows: list[list[int]], width: int) -> dict[str, torch.Tensor]:
    ids = torch.ones(len(rows), width, dtype=torch.long)  # pad id 1
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
    return {"input_ids": ids, "attention_mask": (ids != 1).long()}


def test_masked_mean_is_the_mean_of_the_real_tokens() -> None:
    hidden = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    torch.testing.assert_close(modeling.pool(hidden, mask, "mean")[0], hidden[0, :2].mean(0))
    torch.testing.assert_close(modeling.pool(hidden, mask, "cls"), hidden[:, 0])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("pooling", schema.CHOICES["model.pooling"])
def test_every_family_scores_a_row_whatever_its_padding(family: str, pooling: str) -> None:
    torch.manual_seed(0)
    model = modeling.Classifier(
        modeling.encoder_from_config(family_config(family)), modeling.HeadSpec(pooling, 0.1)
    ).eval()
    row = [0, 17, 45, 9, 2]
    with torch.no_grad():
        alone = model(**batch_of([row], 5))
        padded = model(**batch_of([row, [0, 5, 2]], 12))  # more padding, and another row beside it
    assert alone.dtype == torch.float32 and alone.shape == (1,)
    torch.testing.assert_close(padded[:1], alone, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_loads_from_a_folder_with_its_dropout_and_trains(tmp_path, family: str) -> None:
    """A pretrained folder of each family: model.dropout reaches the encoder under its config's own names
    (DistilBERT: dropout, attention_dropout), checkpointing switches on, and a step moves the weights."""
    torch.manual_seed(0)
    modeling.encoder_from_config(family_config(family)).save_pretrained(tmp_path / family)
    cfg = config.load("sample", [f"model.name={tmp_path / family}", "model.dropout=0.25"])
    model = modeling.build_model(cfg, tokenizer=None)
    names = modeling.with_dropout(model.encoder.config, 0.25)
    assert names and all(getattr(model.encoder.config, n) == 0.25 for n in names)
    assert model.pooling == "mean"  # the default, whatever the family
    modeling.enable_checkpointing(model)
    assert model.is_activation_checkpointing
    data = Ragged(np.array([0, 17, 45, 9, 2, 0, 5, 2] * 2), np.array([0, 5, 8, 13, 16]))
    opt = optim.make_optimizer(model, config.load("sample").train, CPU)
    before = model.head.weight.detach().clone()
    batch = batching.collate(data, np.arange(4), 1, 1, np.array([1.0, 0.0, 1.0, 0.0], dtype=np.float32))
    model.train()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(model(batch["input_ids"], batch["attention_mask"]),
                                                                batch["labels"])  # fmt: skip
    loss.backward()
    opt.step()
    assert torch.isfinite(loss) and not torch.equal(model.head.weight, before)


def test_an_encoder_the_head_cannot_read_is_one_line(tmp_path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "config.json").write_text('{"model_type": "clip_text_model"}')
    cfg = config.load("sample", [f"model.name={tmp_path / 'x'}"])
    with pytest.raises(PipelineError) as e:
        modeling.build_model(cfg, tokenizer=None)
    assert "\n" not in str(e.value)


def test_a_fold_folder_reloads_the_model_as_trained_and_an_old_one_is_refused(tmp_path) -> None:
    torch.manual_seed(0)
    model = modeling.Classifier(
        modeling.encoder_from_config(family_config("bert")), modeling.HeadSpec("mean", 0.1)
    ).eval()
    modeling.save(model, tmp_path / "fold0")
    again = modeling.load_fold_model(tmp_path / "fold0").eval()
    b = batch_of([[0, 17, 45, 2], [0, 9, 2]], 6)
    with torch.no_grad():
        torch.testing.assert_close(again(**b), model(**b))
    assert again.pooling == "mean"
    (tmp_path / "fold0" / modeling.HEAD_JSON).unlink()  # a fold written before the pipeline had its head
    with pytest.raises(PipelineError, match="made by an older version.*retrain it with `make train`"):
        modeling.load_fold_model(tmp_path / "fold0")


def cut(path, keep: int = 40) -> None:
    """A file cut short, as a copy stopped half way leaves it."""
    path.write_bytes(path.read_bytes()[:keep])


@pytest.mark.parametrize("damaged", ["config.json", "model.safetensors"])
def test_a_damaged_model_folder_is_one_line_naming_the_file(tmp_path, damaged: str) -> None:
    """A truncated file in model.name's folder or in a fold folder: one line naming it, never safetensors'
    SafetensorError or a hub message about the network."""
    torch.manual_seed(0)
    model = tmp_path / "bert"
    modeling.encoder_from_config(family_config("bert")).save_pretrained(model)
    classifier = modeling.Classifier(
        modeling.encoder_from_config(family_config("bert")), modeling.HeadSpec("mean", 0.1)
    )
    modeling.save(classifier, tmp_path / "fold0")
    cut(model / damaged)
    cut(tmp_path / "fold0" / damaged)
    cfg = config.load("sample", [f"model.name={model}"])
    for load, where in ((lambda: modeling.build_model(cfg, tokenizer=None), model),
                        (lambda: modeling.load_fold_model(tmp_path / "fold0"), tmp_path / "fold0")):  # fmt: skip
        with pytest.raises(PipelineError) as e:
            load()
        assert str(e.value).startswith(f"{where / damaged}: cannot read") and "\n" not in str(e.value), str(e.value)


def remote_code_folder(folder):
    """A model folder whose config names a model type transformers does not know and code of its own to run."""
    folder.mkdir()
    auto_map = {"AutoConfig": "custom.Config", "AutoModel": "custom.Model", "AutoTokenizer": ["custom.Tok", None]}
    (folder / "config.json").write_text(json.dumps({"model_type": "not-in-transformers", "auto_map": auto_map}))
    (folder / "custom.py").write_text(f"open({str(folder / 'ran')!r}, 'w')\n")
    (folder / modeling.HEAD_JSON).write_text(json.dumps({"version": modeling.HEAD, "pooling": "mean", "dropout": 0.1}))
    return folder


def test_no_loader_runs_a_folders_own_code_or_asks_whether_to(tmp_path, monkeypatch) -> None:
    """Every loading of a config, tokenizer or model refuses a folder's own code (auto_map) without transformers'
    y/N question: a stage's stdout goes to a log, so the question would wait on a terminal that never shows it."""
    from pipeline.benchmark import runner
    from pipeline.inputs import encoder, tokenizer

    folder = remote_code_folder(tmp_path / "custom")
    asked = []
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "n")
    bench_cfg = SimpleNamespace(bench=SimpleNamespace(model=str(folder), seq_len=16))
    loaders = {
        "pretrained_encoder": lambda: modeling.pretrained_encoder(str(folder), 0.1),
        "load_fold_model": lambda: modeling.load_fold_model(folder),
        "load_tokenizer": lambda: tokenizer.load_tokenizer(folder),
        "group encoder": lambda: encoder.load(folder),
        "bench model_config": lambda: runner.model_config(bench_cfg),
    }
    prompted = []
    for name, load in loaders.items():
        with pytest.raises((PipelineError, ValueError)):  # bench: transformers' own ValueError
            load()
        if asked:
            prompted.append(name)
            asked.clear()
    assert prompted == []
    assert not (folder / "ran").exists()


def test_predict_scores_a_trained_folds_rows_as_its_oof_says(prepared) -> None:
    """The fold folder predict reloads gives the OOF training wrote for the same rows (one forward path)."""
    from pipeline.inputs import tables, tokens
    from pipeline.inputs.tokenizer import load_tokenizer
    from tests.helpers.folds import StopAt, fold_run

    fold_run(prepared, StopAt(10**9)).run()
    folder = layout.experiment_dir(prepared) / "fold0"
    oof = pd.read_csv(folder / layout.OOF, dtype={"id": str})
    table, _, meta = tables.load_table(prepared)
    splits, _ = tokens.load_cache(prepared, meta)
    model = modeling.build_model(prepared, load_tokenizer(folder), source=folder)
    rows = table.index[table["id"].isin(oof["id"])].to_numpy()
    p = loop.predict(model, splits["train"], rows, 7, "fp32", CPU, 1)
    want = oof.set_index("id").loc[table["id"].iloc[rows], "pred"].to_numpy()
    np.testing.assert_allclose(p, want, atol=1e-6)


@pytest.mark.slow  # the real encoder: seconds
@pytest.mark.skipif(not PRETRAINED.is_dir(), reason="needs ../shared/pretrained (the real multilingual encoder)")
def test_the_real_encoder_fine_tunes_with_each_technique() -> None:
    """The pretrained e5 folder (fp16 on disk) under the pipeline's head: fp32 master weights, mean pooling;
    a few steps with no technique and with all three (bf16 autocast, accumulation, checkpointing): finite
    losses that fall, and checkpointing leaves the fp32 gradient as it was."""
    from pipeline.inputs.tokenizer import load_tokenizer

    tok = load_tokenizer(PRETRAINED)
    cfg = config.load("sample", [f"model.name={PRETRAINED}", "model.dropout=0.0"])
    texts = ["You are an idiot and a liar.", "Thanks for the helpful edit!", "Vete a la mierda, imbécil.",
             "Grazie per il tuo contributo.", "Ты тупой идиот.", "Teşekkürler, güzel makale."] * 2  # fmt: skip
    y = np.array([1, 0, 1, 0, 1, 0] * 2, dtype=np.float32)
    enc = [tok(t, truncation=True, max_length=24)["input_ids"] for t in texts]
    data = Ragged(np.concatenate(enc), np.cumsum([0] + [len(e) for e in enc]))
    grads = {}
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = modeling.build_model(cfg, tok)
        assert model.pooling == "mean" and {p.dtype for p in model.parameters()} == {torch.float32}
        if ckpt:
            modeling.enable_checkpointing(model)
        model.train()
        b = batching.collate(data, np.arange(12), tok.pad_token_id, 1, y)
        torch.nn.functional.binary_cross_entropy_with_logits(
            model(b["input_ids"], b["attention_mask"]), b["labels"]
        ).backward()
        grads[ckpt] = model.encoder.encoder.layer[3].attention.self.query.weight.grad.clone()
    torch.testing.assert_close(grads[True], grads[False], rtol=1e-4, atol=1e-6)
    for prec, accumulation, ckpt in (("fp32", 1, False), ("bf16", 3, True)):
        torch.manual_seed(0)
        model = modeling.build_model(cfg, tok)
        if ckpt:
            modeling.enable_checkpointing(model)
        tcfg = config.load("sample", ["train.lr=1e-4", f"train.accumulation={accumulation}", "train.warmup=0"]).train
        opt = optim.make_optimizer(model, tcfg, CPU)
        sched = optim.make_scheduler(opt, 0.0, 100)
        micro = 12 // accumulation
        steps = [[np.arange(i, i + micro)] for i in range(0, 12, micro)]
        losses = []
        for _ in range(4):
            state = train_parts(model, steps, data, y, opt, sched, precision.make_scaler(prec, CPU), tcfg, prec,
                                     CPU, pad_id=tok.pad_token_id, progress=False)  # fmt: skip
            losses.append(state.loss_sum / state.examples)
        assert all(np.isfinite(losses)) and losses[-1] < losses[0], (prec, losses)


def test_every_reader_refuses_a_fold_trained_under_the_old_head_in_one_line(tmp_path) -> None:
    """A fold from before the pipeline's head (its done.json has neither `head` nor `scale`): another
    fingerprint, and the reason given is the version, not 'other data or settings'."""
    from pipeline.files import write_json

    folder = tmp_path / "fold0"
    folder.mkdir()
    write_json(folder / layout.DONE, {"fold": 0, "digest": "before", "files": {}})
    assert validity.fold_status(folder, "now") == (
        "made by an older version, whose model had another head (retrain it with `make train`)"
    )
    write_json(folder / layout.DONE, {"fold": 0, "digest": "before", "files": {}, "head": modeling.HEAD})
    assert "other data or settings" in validity.fold_status(folder, "now")


def test_the_head_spec_is_what_head_json_keeps_and_what_the_fold_reloads_with(tmp_path) -> None:
    spec = modeling.HeadSpec("cls", 0.25)
    model = modeling.Classifier(modeling.encoder_from_config(family_config("bert")), spec)
    modeling.save(model, tmp_path)
    assert modeling.head_spec(modeling.read_head(tmp_path)) == spec
    assert modeling.load_fold_model(tmp_path).spec == spec
    again = modeling.load_fold_model(tmp_path, dropout=0.0)  # a stage-2 fold's dropout over its stage-1 model
    assert again.spec == modeling.HeadSpec("cls", 0.0) and again.dropout.p == 0.0


def test_model_dropout_reaches_every_dropout_of_a_modernbert_folder(tmp_path) -> None:
    """mmBERT's ModernBERT config names its dropouts embedding_dropout, attention_dropout and mlp_dropout (all 0 as
    published): model.dropout sets the three, and the layers built from them drop at that rate."""
    torch.manual_seed(0)
    modeling.encoder_from_config(family_config("modernbert")).save_pretrained(tmp_path / "mm")
    cfg = config.load("sample", [f"model.name={tmp_path / 'mm'}", "model.dropout=0.25"])
    model = modeling.build_model(cfg, tokenizer=None)
    conf = model.encoder.config
    assert (conf.embedding_dropout, conf.attention_dropout, conf.mlp_dropout) == (0.25, 0.25, 0.25)
    rates = {m.p for n, m in model.encoder.named_modules() if isinstance(m, torch.nn.Dropout)}
    assert rates == {0.25}
