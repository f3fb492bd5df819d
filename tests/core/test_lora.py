"""LoRA (pipeline.core.lora, `model.lora`): only the adapters and the head train, the frozen base stays bit for bit;
a fold saves and resumes its adapters alone and reloads over its base built again (predict gives its OOF), over
every family the pipeline trains and XLM-R XL; r=0 is the pipeline as it was; what cannot run says so in a line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from pipeline import config, layout, validity
from pipeline.core import loop, lora, modeling, optim, precision, trim
from pipeline.errors import PipelineError
from pipeline.inputs import tables, tokens
from pipeline.inputs.tokenizer import load_tokenizer
from tests.helpers import prepare_tiny
from tests.helpers.folds import StopAt, fold_run
from tests.helpers.tinymodel import FAMILIES, family_config, tiny_classifier
from tests.helpers.training import train_parts

pytestmark = pytest.mark.usefixtures("torch_one_thread")
CPU = torch.device("cpu")
LORA = ["model.lora.r=4", "model.lora.alpha=8"]


def with_lora(model: modeling.Classifier, targets: str = "all", dtype=torch.float32, r: int = 4):
    """`model` with adapters on, as a fold puts them on (lora.spec, lora.attach)."""
    lora_cfg = config.load("sample", [f"model.lora.r={r}", f"model.lora.targets={targets}"], device=False).model.lora
    lora.attach(model, lora.spec(lora_cfg, model.encoder, {"from": "test"}), dtype)
    return model


def toy_batch(n: int = 6, vocab: int = 100, seed: int = 0) -> tuple[loop.Ragged, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = [[0, *rng.integers(4, vocab, size=rng.integers(3, 12)).tolist(), 2] for _ in range(n)]
    return loop.Ragged.from_lists(rows), rng.integers(0, 2, size=n).astype(np.float32)


def one_step(model, prec: str = "fp32", checkpointing: bool = False, accumulation: int = 2) -> None:
    """One optimizer step of the training loop (AdamW from optim's factory, accumulation, the precision's autocast)."""
    if checkpointing:
        modeling.enable_checkpointing(model)
    data, labels = toy_batch()
    tcfg = config.load("sample", ["train.lr=1e-2", "train.warmup=0", f"train.accumulation={accumulation}"]).train
    opt, sched = optim.make_training(model, tcfg, CPU, 1)
    steps = [[np.arange(i, i + 3)] for i in range(0, 6, 3)]
    train_parts(model, steps, data, labels, opt, sched, precision.make_scaler(prec, CPU), tcfg, prec, CPU, pad_id=1,
                progress=False)  # fmt: skip


@pytest.mark.parametrize(
    ("family", "prec"), [*((f, "bf16") for f in (*FAMILIES, "xlm-roberta-xl")), ("xlm-roberta", "fp16")]
)
def test_a_step_changes_only_the_adapters_and_the_head(family: str, prec: str) -> None:
    """The whole base (embedding, LayerNorms, the projections' own weights) bit for bit as it was after an
    optimizer step in bf16 (fp16: with the GradScaler) with accumulation and checkpointing; every adapter's B and
    the head moved."""
    torch.manual_seed(0)
    model = modeling.Classifier(modeling.encoder_from_config(tiny_config(family)), modeling.HeadSpec("mean", 0.0))
    with_lora(model, dtype=lora.base_dtype(prec))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trained = set(lora.trained_state(model))
    assert {k for k in trained if "lora_" not in k} == {"head.weight", "head.bias"}
    one_step(model, prec, checkpointing=True)
    after = model.state_dict()
    for key, value in before.items():
        if key in trained:
            assert value.dtype == torch.float32, key  # adapters and head in fp32 over the half-precision base
            if "lora_B" in key or key.startswith("head."):
                assert not torch.equal(after[key], value), f"{key} did not train"
        else:
            assert torch.equal(after[key], value), f"{key}: the frozen base changed"
    assert {v.dtype for k, v in before.items() if k not in trained and v.is_floating_point()} == {lora.HALF[prec]}


def tiny_config(family: str):
    """The tests' tiny config of each family, and a tiny XLM-R XL (pre-LayerNorm, the 3.5B model's architecture)."""
    if family != "xlm-roberta-xl":
        return family_config(family)
    from transformers import XLMRobertaXLConfig

    return XLMRobertaXLConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=64, pad_token_id=1)  # fmt: skip


# ModernBERT fuses query, key and value: its own test (test_modernbert_adapters_go_on_its_fused_attention...)
@pytest.mark.parametrize("family", [*(f for f in FAMILIES if f != "modernbert"), "xlm-roberta-xl"])
def test_each_family_s_projections_are_found_by_their_names(family: str) -> None:
    """qv: 2 projections a layer, attention: 4, all: 6 (the feed-forward's two as well)."""
    encoder = modeling.encoder_from_config(tiny_config(family))
    layers = 2
    assert [len(lora.target_names(encoder, t)) for t in ("qv", "attention", "all")] == [2 * layers, 4 * layers,
                                                                                       6 * layers]  # fmt: skip


def test_a_family_whose_projections_are_not_known_is_refused_in_one_line(monkeypatch) -> None:
    from transformers import AlbertConfig

    albert = modeling.encoder_from_config(AlbertConfig(vocab_size=50, embedding_size=16, hidden_size=32,
                                                       num_attention_heads=2, intermediate_size=64))  # fmt: skip
    with pytest.raises(PipelineError) as e:
        lora.target_names(albert, "all")
    assert "the albert family's projections are not known" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setitem(lora.FAMILIES, "bert", {k: "nothing" for k in lora.BERT_LIKE})  # modules renamed
    with pytest.raises(PipelineError) as e:
        lora.target_names(modeling.encoder_from_config(family_config("bert")), "qv")
    assert "no qv projections found in this bert model" in str(e.value) and "\n" not in str(e.value)


def test_checkpointing_leaves_the_adapters_gradients_as_they_were() -> None:
    """Non-reentrant checkpointing back-propagates into adapters inside a frozen encoder: the same gradients."""
    grads = {}
    for ckpt in (False, True):
        model = with_lora(tiny_classifier(layers=2, seed=0))
        torch.manual_seed(1)
        for name, p in model.named_parameters():  # B starts at zero: A's gradient would be zero too
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
        if ckpt:
            modeling.enable_checkpointing(model)
        model.train()
        ids = torch.randint(4, 200, (3, 9))
        torch.nn.functional.binary_cross_entropy_with_logits(
            model(ids, torch.ones_like(ids)), torch.tensor([0.0, 1.0, 1.0])
        ).backward()
        grads[ckpt] = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    assert model.is_activation_checkpointing
    assert grads[True].keys() == grads[False].keys() and len(grads[True]) == 2 * 12 + 2
    for name, g in grads[False].items():
        assert g.abs().sum() > 0, name
        torch.testing.assert_close(grads[True][name], g, rtol=1e-5, atol=1e-7, msg=name)


def test_layer_decay_gives_each_layer_s_adapters_their_layer_s_rate() -> None:
    """train.layer_decay under LoRA: the adapters of each layer at that layer's rate, the head at `lr`, and no group
    for the frozen embedding; every trained parameter in one group."""
    model = with_lora(tiny_classifier(layers=2))
    tcfg = config.load("sample", ["train.layer_decay=0.5", "train.lr=1e-3"], device=False).train
    groups = optim.param_groups(model, tcfg)
    assert [(g["name"], g["lr"]) for g in groups] == [("layer0", 2.5e-4), ("layer1", 5e-4), ("top", 1e-3),
                                                      ("top", 1e-3)]  # fmt: skip
    trained = [p for p in model.parameters() if p.requires_grad]
    assert sorted(map(id, trained)) == sorted(id(p) for g in groups for p in g["params"])


def test_a_tiny_xlm_roberta_xl_folder_trains_a_step_on_cpu(tmp_path: Path) -> None:
    """XLM-R XL read as the pipeline reads a pretrained folder, straight into bf16 under LoRA; a bf16 step."""
    modeling.encoder_from_config(tiny_config("xlm-roberta-xl")).save_pretrained(tmp_path / "xl")
    cfg = config.load("sample", [f"model.name={tmp_path / 'xl'}", *LORA, "model.dropout=0.0"], device=False)
    model = modeling.build_model(cfg, tokenizer=None, precision="bf16", device=CPU)
    assert type(model.encoder).__name__ == "XLMRobertaXLModel" and model.encoder.dtype == torch.bfloat16
    block = lora.spec(cfg.model.lora, model.encoder, modeling.base_record(cfg, None))
    assert block["base"] == {"from": "model", "name": str(tmp_path / "xl")}
    lora.attach(model, block, lora.base_dtype("bf16"))
    heads = [v.clone() for k, v in lora.trained_state(model).items() if "lora_B" in k]
    one_step(model, "bf16", checkpointing=True)
    moved = [not torch.equal(h, v) for h, (k, v) in zip(heads, lora.trained_state(model).items()) if "lora_B" in k]
    assert heads and all(moved)


def test_quantize_is_refused_on_a_cpu_and_for_a_model_built_from_a_config_in_one_line(tmp_path: Path) -> None:
    modeling.encoder_from_config(family_config("xlm-roberta")).save_pretrained(tmp_path / "enc")
    cfg = config.load("sample", [f"model.name={tmp_path / 'enc'}", *LORA, "model.lora.quantize=4bit"], device=False)
    with pytest.raises(PipelineError) as e:
        modeling.build_model(cfg, tokenizer=None, precision="fp32", device=CPU)
    assert str(e.value) == (
        "model.lora.quantize=4bit runs only on a CUDA GPU (bitsandbytes); use model.lora.quantize=none here"
    )
    tiny = config.load("sample", [*LORA, "model.lora.quantize=8bit"], device=False)
    with pytest.raises(PipelineError, match=r"^model.lora.quantize=8bit: only a pretrained model.name is read "):
        modeling.lora_base(tiny, None, {"from": "tiny"}, modeling.HeadSpec("mean", 0.0), "fp32", CPU, "8bit")


def test_r0_leaves_the_fingerprint_and_the_optimizer_as_they_were(prepared) -> None:
    """model.lora.r=0: no `lora` in a fold's settings (whatever the other LoRA keys say), every weight in the
    optimizer's two groups, no adapter anywhere, the full state saved; r > 0 is another fingerprint."""
    made = validity.current_made_from(prepared)
    assert "lora" not in made["settings"]["model"]
    off = config.with_overrides(prepared, ["model.lora.alpha=64", "model.lora.targets=qv"], device=False)
    assert validity.current_fingerprint(off) == validity.current_fingerprint(prepared)
    on = config.with_overrides(prepared, LORA, device=False)
    assert validity.current_made_from(on)["settings"]["model"]["lora"]["r"] == 4
    assert validity.current_fingerprint(on) != validity.current_fingerprint(prepared)

    run = fold_run(prepared, StopAt(10**9))
    model = run.model
    assert model.lora is None and not any("lora" in k for k in model.state_dict())
    assert modeling.trained_state(model).keys() == model.state_dict().keys()
    groups = {g["name"]: g["params"] for g in run.optimizer.param_groups}
    assert list(groups) == ["decay", "no_decay"]
    assert sum(len(ps) for ps in groups.values()) == len(list(model.parameters()))  # every weight trains
    assert model.get_input_embeddings().sparse  # as before LoRA existed: sparse embedding gradients


# ---------------------------------------------------------------- a LoRA fold: saved, reloaded, resumed


@pytest.fixture(scope="module")
def lora_fold(tmp_path_factory, torch_one_thread) -> SimpleNamespace:
    """A trained two-epoch LoRA fold of the tiny model, trimmed, evaluated inside its epochs."""
    tmp = tmp_path_factory.mktemp("lora")
    cfg = prepare_tiny(tmp, *LORA, "model.trim_vocab=true", "train.epochs=2", "train.eval_every_steps=7")
    reference = dataclasses.replace(cfg, models_dir=str(tmp / "reference"))
    done = fold_run(reference, StopAt(10**9)).run()
    return SimpleNamespace(cfg=cfg, reference=reference, done=done, folder=layout.fold_dir(reference, 0))


@pytest.mark.slow  # trains a fold
def test_a_lora_fold_saves_its_adapters_and_head_only(lora_fold) -> None:
    head = json.loads((lora_fold.folder / modeling.HEAD_JSON).read_text())
    saved = load_file(lora_fold.folder / layout.WEIGHTS)
    assert {k for k in saved if "lora_" not in k} == {"head.weight", "head.bias"}
    assert len(saved) == 2 + 2 * len(head["lora"]["modules"])
    assert head["lora"]["base"]["from"] == "tiny" and head["lora"]["r"] == 4
    assert (lora_fold.folder / layout.VOCAB_MAP).is_file()


@pytest.mark.slow  # trains a fold
def test_predict_from_a_lora_fold_equals_its_oof(lora_fold) -> None:
    """The fold predict reloads (the tiny base drawn again, trimmed again, its adapters on) gives the OOF training
    wrote: the best evaluation's predictions (`best`), whose weights are the ones kept."""
    got, want = oof_predictions(lora_fold.reference, lora_fold.folder)
    np.testing.assert_allclose(got, want, atol=1e-6)


def copy_with_head(source: Path, folder: Path, edit) -> Path:
    """A copy of a fold folder whose head.json is `edit(head)`."""
    folder.mkdir()
    for p in source.iterdir():
        (folder / p.name).write_bytes(p.read_bytes())
    head = json.loads((folder / modeling.HEAD_JSON).read_text())
    (folder / modeling.HEAD_JSON).write_text(json.dumps(edit(head)))
    return folder


@pytest.mark.slow  # trains a fold
def test_a_lora_fold_over_another_base_is_refused_in_one_line(lora_fold, tmp_path: Path) -> None:
    def other_seed(head: dict) -> dict:
        head["lora"]["base"]["seed"] += 1  # the tiny base drawn from another seed
        return head

    folder = copy_with_head(lora_fold.folder, tmp_path / "fold0", other_seed)
    with pytest.raises(PipelineError) as e:
        modeling.build_model(lora_fold.reference, load_tokenizer(folder), source=folder)
    assert str(e.value).startswith(f"{folder}: the base model is not the one its adapters were trained over")


@pytest.mark.slow  # trains a fold
def test_a_fold_over_a_quantized_base_is_not_exported_in_one_line(lora_fold, tmp_path: Path) -> None:
    """Its adapters fit the 4-bit weights, not plain ones: `make export` refuses it before reading any base."""
    from pipeline import export

    folder = copy_with_head(
        lora_fold.folder, tmp_path / "fold0", lambda h: {**h, "lora": {**h["lora"], "quantize": "4bit"}}
    )
    with pytest.raises(PipelineError) as e:
        export.export_fold(lora_fold.reference, folder, tmp_path / "export")
    assert str(e.value).startswith("a fold trained on a 4bit base cannot be merged into plain weights; ")
    assert "\n" not in str(e.value) and not (tmp_path / "export").exists()


class KillAt:
    """A stop flag that kills the run (an exception, no resume state saved) at the `at`-th optimizer step."""

    def __init__(self, at: int) -> None:
        self.at, self.asked = at, 0

    @property
    def raised(self) -> bool:
        self.asked += 1
        if self.asked >= self.at:
            raise SystemExit("killed")
        return False


@pytest.mark.slow  # trains a fold
def test_a_killed_lora_fold_resumes_to_the_uninterrupted_result(lora_fold) -> None:
    """Killed at step 9 after a resume state at step 6 (adapters, head and optimizer, never the base), the fold
    continues from step 6 and ends with the uninterrupted fold's evaluations and OOF."""
    cfg = config.with_overrides(lora_fold.cfg, ["train.save_every_steps=6"], device=False)
    with pytest.raises(SystemExit):
        fold_run(cfg, KillAt(9)).run()
    state = torch.load(layout.fold_dir(cfg, 0) / layout.RESUME, weights_only=True)
    assert state["step"]["window"] == 6
    assert {k for k in state["model"] if "lora_" not in k} == {"head.weight", "head.bias"}  # no base
    resumed = fold_run(cfg, StopAt(10**9))
    assert resumed.progress.step.window == 6
    got = resumed.run()
    for key in ("auc", "best_step", "steps", "evaluations"):
        assert got[key] == lora_fold.done[key], key
    oof = [pd.read_csv(f / layout.OOF) for f in (layout.fold_dir(cfg, 0), lora_fold.folder)]
    assert (oof[0]["pred"] - oof[1]["pred"]).abs().max() < 1e-6


def test_auto_fit_probes_a_lora_model_and_leaves_it_as_it_was(prepared) -> None:
    """Auto-fit's probes (a whole step at learning rate 0) over the frozen base: nothing moves; a fold decides
    checkpointing=auto and fits its plan."""
    from pipeline.core import memory

    model = with_lora(tiny_classifier(layers=2), dtype=torch.bfloat16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    micro, _ = memory.fit_micro_batch(model, 8, 16, 4.0, "bf16", CPU)
    assert 8 % micro == 0
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    cfg = config.with_overrides(prepared, [*LORA, "train.max_memory_gb=4", "train.checkpointing=auto"], device=False)
    run = fold_run(cfg, StopAt(10**9))
    assert run.cfg.train.checkpointing in (True, False)  # auto decided on the LoRA model, as for any other
    assert run.cfg.train.micro_batch * run.cfg.train.accumulation == (
        prepared.train.micro_batch * prepared.train.accumulation
    )


def named(cfg, name: str, init: str = ""):
    """The config under another experiment name, its data prepared (each experiment has its own), starting from
    the stage-1 model of `init`."""
    from pipeline import data as data_mod
    from tests.helpers import prepare_tokens

    cfg = dataclasses.replace(cfg, name=name, model=dataclasses.replace(cfg.model, init_from=init))
    data_mod.prepare(cfg, log=lambda *a: None)
    prepare_tokens(cfg, log=lambda *a: None)
    return cfg


def oof_predictions(cfg, folder: Path) -> tuple[np.ndarray, np.ndarray]:
    """(the fold reloaded as predict reloads it, on its validation rows; its oof.csv's `best` for them)."""
    oof = pd.read_csv(folder / layout.OOF, dtype={"id": str})
    table, _, meta = tables.load_table(cfg)
    splits, _ = tokens.load_cache(cfg, meta)
    model = modeling.build_model(cfg, load_tokenizer(folder), source=folder)
    vmap = trim.load_map(folder, model)  # a trimmed fold: its base trimmed again as the map says
    data = splits["train"] if vmap is None else trim.remap(splits["train"], vmap)
    rows = table.index[table["id"].isin(oof["id"])].to_numpy()
    got = loop.predict(model, data, rows, 7, "fp32", CPU, 1)
    return got, oof.set_index("id").loc[table["id"].iloc[rows], "best"].to_numpy()


@pytest.mark.slow  # trains a fold
def test_a_lora_stage_two_starts_where_a_lora_stage_one_ended(prepared) -> None:
    """Stage 2 (model.init_from) over a LoRA stage-1 model: its adapters merged into the frozen base, new adapters
    at zero, so the fold starts with the stage-1 model's very scores; its own fold reloads over that base."""
    base = config.with_overrides(prepared, [*LORA, "model.dropout=0.0"], device=False)
    s1 = named(base, "s1")
    fold_run(s1, StopAt(10**9), fold=-1).run()
    s1_dir = layout.fold_dir(s1, -1)
    stage1 = modeling.build_model(s1, load_tokenizer(s1_dir), source=s1_dir).eval()
    s2 = named(base, "s2", init="s1")
    run = fold_run(s2, StopAt(10**9))
    assert run.model.lora["base"] == {"from": "init_from", "digest": validity.read_done(s1_dir)["digest"]}
    ids = torch.randint(4, 300, (4, 12))
    with torch.no_grad():
        start = run.model.eval()(ids, torch.ones_like(ids))
        torch.testing.assert_close(start, stage1(ids, torch.ones_like(ids)), rtol=1e-4, atol=1e-5)
    run.run()
    got, want = oof_predictions(s2, layout.fold_dir(s2, 0))
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_the_base_sample_reads_inside_a_tensor_of_more_than_2_24_values() -> None:
    """XLM-R XL's feed-forward matrices hold 2560 x 10240 values: a float32 linspace put the last sampled position
    one past the end. The sample is integer positions, the first and last value among them."""
    from pipeline.core import lora

    big = torch.nn.Linear(10240, 2560, bias=False, dtype=torch.float64)  # 26,214,400 values, each exact in fp64
    with torch.no_grad():
        big.weight.copy_(torch.arange(big.weight.numel(), dtype=torch.float64).reshape(2560, 10240))
    sample = lora.base_sample(big)
    assert sample[0] == 0.0 and sample[-1] == float(big.weight.numel() - 1)


@pytest.mark.slow  # trains a fold
def test_a_full_stage_two_over_a_lora_stage_one_trains_every_weight(prepared) -> None:
    """Stage 2 without LoRA over a LoRA stage-1 model: the adapters merged, every weight of the plain encoder is
    trained (not the head alone, which the stage-1 base's freezing would leave), from the stage-1 model's scores."""
    s1 = named(config.with_overrides(prepared, [*LORA, "model.dropout=0.0"], device=False), "s1")
    fold_run(s1, StopAt(10**9), fold=-1).run()
    s2 = named(config.with_overrides(prepared, ["model.dropout=0.0"], device=False), "s2", init="s1")
    run = fold_run(s2, StopAt(10**9))
    assert run.model.lora is None
    assert modeling.count_parameters(run.model) == sum(p.numel() for p in run.model.parameters())
    before = {n: p.detach().clone() for n, p in run.model.named_parameters()}
    run.run()
    after = modeling.build_model(s2, load_tokenizer(layout.fold_dir(s2, 0)), source=layout.fold_dir(s2, 0))
    moved = [n for n, p in after.named_parameters() if not torch.equal(p, before[n])]
    assert any(n.startswith("encoder.") for n in moved)


def test_a_rank_not_below_the_projections_side_is_refused_in_one_line() -> None:
    """The tiny XLM-R's projections are 32 wide: r=31 is a low rank, r=32 or more is refused before any adapter."""
    encoder = modeling.encoder_from_config(tiny_config("xlm-roberta"))
    for r in (32, 64):
        lora_cfg = config.load("sample", [f"model.lora.r={r}"], device=False).model.lora
        with pytest.raises(PipelineError, match=rf"^model.lora.r={r}: not below 32, the smaller side of the "):
            lora.spec(lora_cfg, encoder, {"from": "test"})
    lora_cfg = config.load("sample", ["model.lora.r=31"], device=False).model.lora
    assert lora.spec(lora_cfg, encoder, {"from": "test"})["r"] == 31


def test_modernbert_adapters_go_on_its_fused_attention_and_glu_and_refuse_qv() -> None:
    """ModernBERT (mmBERT) computes query, key and value in one `attn.Wqkv`, then `attn.Wo`, and a GLU feed-forward
    `mlp.Wi` / `mlp.Wo`: `attention` adapts the first two a layer, `all` the four, and `qv` (which would adapt the
    key too through the fused matrix) is refused in one line; a step trains the adapters and the head alone."""
    encoder = modeling.encoder_from_config(family_config("modernbert"))
    attention, every = lora.target_names(encoder, "attention"), lora.target_names(encoder, "all")
    assert [n.split(".", 2)[-1] for n in attention[:2]] == ["attn.Wqkv", "attn.Wo"] and len(attention) == 4
    assert [n.split(".", 2)[-1] for n in every[:4]] == ["attn.Wqkv", "attn.Wo", "mlp.Wi", "mlp.Wo"]
    assert len(every) == 8
    with pytest.raises(PipelineError) as e:
        lora.target_names(encoder, "qv")
    assert "one fused projection" in str(e.value) and "targets=attention or all" in str(e.value)
    assert "\n" not in str(e.value)
    torch.manual_seed(0)
    model = with_lora(modeling.Classifier(encoder, modeling.HeadSpec("mean", 0.0)), dtype=torch.bfloat16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    one_step(model, "bf16", checkpointing=True)
    moved = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert moved and all("lora_B" in k or k.startswith("head.") or "lora_A" in k for k in moved)
    assert sum("lora_B" in k for k in moved) == 8


@pytest.mark.slow  # trains a fold
def test_a_modernbert_folder_trains_a_trimmed_lora_fold_that_predicts_its_oof(tmp_path: Path) -> None:
    """mmBERT's architecture end to end, tiny: a ModernBERT model folder (the tiny tokenizer beside random weights)
    through `make data`, a fold trimmed to the texts' pieces with adapters on its fused Wqkv, Wo and GLU, saved,
    and reloaded by predict over its base read again: the OOF it wrote."""
    from transformers import ModernBertConfig

    tokenizer_dir = tokens.tokenizer_source(prepare_tiny(tmp_path / "tok"))
    folder = tmp_path / "mmbert"
    folder.mkdir()
    for p in tokenizer_dir.iterdir():
        if p.name != "trained_on.json":
            (folder / p.name).write_bytes(p.read_bytes())
    tok = load_tokenizer(folder)
    ids = {k: tok.convert_tokens_to_ids(getattr(tok, f"{k}_token")) for k in ("bos", "eos", "cls", "sep")}
    conf = ModernBertConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, max_position_embeddings=64,
                            **{f"{k}_token_id": v for k, v in ids.items()}, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=64)  # fmt: skip
    torch.manual_seed(0)
    modeling.encoder_from_config(conf).save_pretrained(folder)
    cfg = prepare_tiny(tmp_path / "run", f"model.name={folder}", "model.trim_vocab=true", *LORA, "model.dropout=0.0")
    fold_run(cfg, StopAt(10**9)).run()
    fold = layout.fold_dir(cfg, 0)
    head = json.loads((fold / modeling.HEAD_JSON).read_text())
    assert {m.split(".", 2)[-1] for m in head["lora"]["modules"]} == {"attn.Wqkv", "attn.Wo", "mlp.Wi", "mlp.Wo"}
    assert (fold / layout.VOCAB_MAP).is_file()
    got, want = oof_predictions(cfg, fold)
    np.testing.assert_allclose(got, want, atol=1e-6)
