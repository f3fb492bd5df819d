"""`make mlm` (pipeline.mlm): the encoder trained as a masked language model on the texts alone (never a label),
written whole as a folder that `make data` and `make train` take as model.name, done once per fingerprint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from pipeline import config, data, files, layout, mlm, train
from pipeline.inputs import tables, tokens
from pipeline.inputs.tokenizer import load_tokenizer
from tests.helpers import E5, moved_copy, stage_args

pytestmark = pytest.mark.usefixtures("torch_one_thread")

# a few steps of the tiny model on the tiny experiment's texts: seconds on a CPU
FEW = ["mlm.steps=4", "mlm.micro_batch=4"]  # texts cut to model.max_length=32


@pytest.fixture
def prepared(prepared_once: Path, tmp_path: Path):
    """The tiny experiment's inputs under tmp_path, and its config with a few MLM steps."""
    from tests.helpers import tiny_cfg

    moved_copy(prepared_once, tmp_path)
    return config.with_overrides(tiny_cfg(tmp_path), FEW)


def test_the_corpus_is_every_text_and_no_label(prepared) -> None:
    table, test, _ = tables.load_table(prepared)
    texts = mlm.corpus(table, test)
    assert list(texts.columns) == ["text"]  # toxic, soft labels, lang, fold: none of them
    assert set(texts["text"]) == set(table["text"].astype(str)) | set(test["text"].astype(str))
    assert texts["text"].is_unique
    assert set(test["text"].astype(str)) <= set(texts["text"])  # the test's comments are read, their text alone


def test_the_loss_falls_on_a_small_repeated_corpus(prepared) -> None:
    cfg = config.with_overrides(prepared, ["mlm.steps=60", "mlm.micro_batch=8", "mlm.lr=2e-3", "mlm.warmup=0"])
    tokenizer = load_tokenizer(tokens.tokenizer_source(cfg))
    repeated = ["the cat sat on the mat", "a dog ran in the park", "we like green tea"] * 8
    rows = tokens.tokenize(tokenizer, repeated, cfg.mlm.max_length)
    losses = mlm.train_mlm(mlm.mlm_model(cfg, tokenizer), rows, tokenizer, cfg, torch.device("cpu"))
    assert len(losses) == 60
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < 0.75 * first, (first, last)


def test_max_steps_caps_the_run(prepared) -> None:
    cfg = config.with_overrides(prepared, ["mlm.steps=10", "mlm.max_steps=3"])
    dest = mlm.run(cfg, log=lambda *a: None)
    assert files.read_json(dest / layout.DONE)["steps"] == 3


def test_a_current_folder_is_kept_and_another_fingerprint_trains_again(prepared, monkeypatch) -> None:
    lines: list[str] = []
    dest = mlm.run(prepared, log=lines.append)
    before = files.file_digest(dest / layout.WEIGHTS)

    def never(*a, **k):
        raise AssertionError("trained again")

    with monkeypatch.context() as m:
        m.setattr(mlm, "train_mlm", never)
        assert mlm.run(prepared, log=lines.append) == dest
        assert mlm.run(config.with_overrides(prepared, ["mlm.save_every=7"]), log=lines.append) == dest  # NEVER
    assert "is current" in lines[-1]
    assert files.file_digest(dest / layout.WEIGHTS) == before
    mlm.run(config.with_overrides(prepared, ["mlm.lr=1e-3"]), log=lines.append)  # another setting: another run
    assert files.file_digest(dest / layout.WEIGHTS) != before


def test_a_run_killed_while_writing_leaves_the_previous_folder_whole(prepared, monkeypatch) -> None:
    dest = mlm.run(prepared, log=lambda *a: None)
    before = {p.name: files.file_digest(p) for p in dest.iterdir()}
    dead = dest.parent / ".mlm.tmp-999999999"  # a killed run's half-written folder (no such process)
    dead.mkdir()

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(files, "write_json", killed)  # done.json, the last file into the folder
    with pytest.raises(KeyboardInterrupt):
        mlm.run(config.with_overrides(prepared, ["mlm.lr=1e-3"]), log=lambda *a: None)
    assert {p.name: files.file_digest(p) for p in dest.iterdir()} == before
    assert [p.name for p in dest.parent.iterdir() if p.name.startswith(".mlm")] == []


def test_a_killed_run_goes_on_from_its_resume_state_to_the_uninterrupted_weights(prepared, monkeypatch) -> None:
    from safetensors.torch import load_file

    cfg = config.with_overrides(prepared, ["mlm.steps=6", "mlm.save_every=2"])
    dest, state_path = layout.mlm_dir(cfg), layout.mlm_resume(cfg)
    mlm.run(cfg, log=lambda *a: None)
    whole = load_file(dest / layout.WEIGHTS)
    assert not state_path.exists()  # removed once the folder is written
    shutil.rmtree(dest)
    save_state = mlm.save_state

    def killed_after_step_4(path, digest, parts, losses, device) -> None:
        save_state(path, digest, parts, losses, device)
        if len(losses) == 4:
            raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(mlm, "save_state", killed_after_step_4)
        with pytest.raises(KeyboardInterrupt):
            mlm.run(cfg, log=lambda *a: None)
    assert state_path.is_file() and not dest.exists()
    lines: list[str] = []
    mlm.run(cfg, log=lines.append)
    assert f"mlm: resumed from {state_path} at step 4" in lines
    assert files.read_json(dest / layout.DONE)["steps"] == 6
    again = load_file(dest / layout.WEIGHTS)
    assert again.keys() == whole.keys() and all(torch.equal(again[k], whole[k]) for k in whole)


def test_the_folder_is_the_encoder_make_data_and_make_train_take(tmp_path: Path) -> None:
    args = stage_args(tmp_path, "data.folds=2", "train.precision=fp32", "model.tiny.hidden=32",
                      "model.tiny.intermediate=64", "model.max_length=32", "train.folds=[0]", "train.max_steps=2",
                      *FEW)  # fmt: skip
    assert data.main(args) == 0
    assert mlm.main(args) == 0
    dest = layout.mlm_dir(config.load("sample", args))
    adapted = [*args, f"model.name={dest}"]
    assert data.main(adapted) == 0  # its tokenizer: the token cache of the adapted model
    from safetensors.torch import load_file

    from pipeline.core import modeling

    cfg = config.load("sample", adapted)
    model = modeling.build_model(cfg, load_tokenizer(dest))
    saved = load_file(dest / layout.WEIGHTS)
    state = model.encoder.state_dict()
    assert saved and all(torch.equal(state[k], v) for k, v in saved.items())  # the MLM's weights, every one
    assert train.main(adapted) == 0
    assert (layout.fold_dir(cfg, 0) / layout.DONE).is_file()


def test_an_encoder_without_a_masked_language_head_gets_one_and_says_so(prepared) -> None:
    if not E5.is_dir():
        pytest.skip("../shared/pretrained is absent (a user's clone has no ../shared)")
    lines: list[str] = []
    cfg = config.with_overrides(prepared, [f"model.name={E5}"])
    model = mlm.mlm_model(cfg, None, log=lines.append)
    assert len(lines) == 1 and lines[0].startswith(f"mlm: {E5} has no masked-language head"), lines
    assert "initialised as transformers does" in lines[0]
    assert model.get_output_embeddings() is not None


def test_texts_are_cut_to_what_the_models_positions_take(prepared) -> None:
    assert mlm.text_length(config.with_overrides(prepared, ["mlm.max_length=128"])) == 32  # model.max_length=32
    assert mlm.text_length(config.with_overrides(prepared, ["mlm.max_length=16"])) == 16
    if E5.is_dir():  # 512 positions
        assert mlm.text_length(config.with_overrides(prepared, [f"model.name={E5}", "mlm.max_length=600"])) == 512


def test_e5_adapted_is_a_folder_the_pipeline_reads_as_its_encoder(prepared) -> None:
    if not E5.is_dir():
        pytest.skip("../shared/pretrained is absent (a user's clone has no ../shared)")
    from transformers import AutoModel

    from pipeline.core import modeling

    cfg = config.with_overrides(prepared, [f"model.name={E5}", "mlm.steps=2", "mlm.micro_batch=2"])
    dest = mlm.run(cfg, log=lambda *a: None)
    _, info = AutoModel.from_pretrained(dest, add_pooling_layer=False, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]  # the encoder whole, nothing else
    encoder = modeling.pretrained_encoder(str(dest), 0.1)
    assert encoder.config.model_type == "bert" and load_tokenizer(dest).mask_token == "<mask>"


@pytest.mark.parametrize(("asked", "runs"), [("auto", "fp32"), ("fp32", "fp32"), ("bf16", "bf16")])
def test_train_precision_bf16_runs_the_stage_in_bf16_on_a_cpu(prepared, monkeypatch, asked: str, runs: str) -> None:
    seen = []
    real = mlm.precision.autocast
    monkeypatch.setattr(mlm.precision, "autocast", lambda prec, device: seen.append(prec) or real(prec, device))
    cfg = config.with_overrides(prepared, [f"train.precision={asked}", "mlm.steps=2"])
    tokenizer = load_tokenizer(tokens.tokenizer_source(cfg))
    rows = tokens.tokenize(tokenizer, ["the cat sat on the mat", "a dog ran"] * 4, cfg.mlm.max_length)
    lines = []
    mlm.train_mlm(mlm.mlm_model(cfg, tokenizer), rows, tokenizer, cfg, torch.device("cpu"), log=lines.append)
    assert seen == [runs, runs]
    assert f"mlm: {runs} on cpu" in lines


@pytest.mark.parametrize("family", ["xlm-roberta", "bert", "modernbert"])
def test_the_head_reads_the_masked_positions_alone_to_the_models_own_loss(family: str) -> None:
    from transformers import AutoConfig, AutoModelForMaskedLM

    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=97)
    cfg = AutoConfig.for_model(family, **small, max_position_embeddings=64, pad_token_id=0)
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(cfg).eval()
    ids = torch.randint(5, 97, (3, 12))
    labels = torch.full_like(ids, -100)
    labels[:, 2:5] = ids[:, 2:5]  # 9 of 36 positions carry a label
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    seen = []
    head = mlm.prediction_head(model)
    module = head if isinstance(head, torch.nn.Module) else model.decoder
    module.register_forward_hook(lambda m, args, out: seen.append(out.shape[0]))
    with torch.no_grad():
        ours = mlm.masked_loss(model, batch)
        theirs = model(**batch).loss
    assert seen[0] == 9  # logits of the 9 labelled positions, not of all 36
    assert torch.allclose(ours, theirs, atol=1e-5), (ours, theirs)
