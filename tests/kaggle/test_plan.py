"""The plan of a Kaggle run, checked before anything is pushed (pipeline.kaggle.plan, pipeline.kaggle.disk): disk,
sources, accelerator, the kernel's and the code dataset's metadata.

No test reaches the network; the kaggle API is FakeKaggleApi. What the notebook copies from /kaggle/temp into
/kaggle/working, and how it finds the model folder, are tested in test_session.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import config, kernel
from pipeline.errors import ConfigError
from pipeline.kaggle import bundle, disk
from pipeline.kaggle import plan as kaggle_plan
from pipeline.kaggle.plan import KernelError
from tests.helpers import under
from tests.helpers.fake_kaggle import FakeKaggleApi
from tests.helpers.kernels import COMPETITION, dry, make_cfg


@pytest.fixture(autouse=True)
def no_credentials(no_kaggle_env: Path) -> Path:
    return no_kaggle_env


def cfg_for(tmp_path: Path, name: str = "sample", *overrides: str) -> config.Config:
    return config.load(
        name,
        [f"kaggle.dir={tmp_path / 'kernel'}", *under(tmp_path), "kaggle.user=tester", *overrides],
    )


# ---------------------------------------------------------------------------------------------
# Disk


def test_parameter_count_matches_the_model() -> None:
    """The plan's arithmetic against a real XLM-R classifier (tiny) and XLM-R large's known 560M."""
    from transformers import XLMRobertaConfig

    from pipeline.core import modeling

    arch = {"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64}
    arch.update(max_position_embeddings=66, type_vocab_size=2)
    encoder = modeling.encoder_from_config(XLMRobertaConfig(num_attention_heads=2, **arch))
    model = modeling.Classifier(encoder, modeling.HeadSpec("cls", 0.1))
    assert disk.transformer_parameters(arch) == sum(p.numel() for p in model.parameters())
    large = disk.transformer_parameters(disk.KNOWN_MODELS["xlm-roberta-large"])
    assert 558e6 < large < 560e6  # 2.24 GB of fp32 safetensors (the published 560M less its head's dense layer)


@pytest.mark.parametrize("family", ["xlm-roberta", "bert", "modernbert"])
def test_a_model_folder_s_parameters_are_counted_from_its_own_architecture(tmp_path: Path, family: str) -> None:
    """The plans build the folder's config.json on the meta device: XLM-R's, BERT's (its token types) and
    ModernBERT's (one fused Wqkv, a GLU Wi twice as wide, no biases) counted as the model they train has them."""
    from pipeline.core import modeling
    from tests.helpers.tinymodel import family_config

    modeling.encoder_from_config(family_config(family)).save_pretrained(tmp_path / family)
    model = modeling.Classifier(modeling.encoder_from_config(family_config(family)), modeling.HeadSpec("mean", 0.1))
    planned = disk.plan_disk(cfg_for(tmp_path, "sample", f"model.name={tmp_path / family}"), 1).parameters
    assert planned == pytest.approx(sum(p.numel() for p in model.parameters()), rel=0.01)


def test_a_folder_of_an_architecture_transformers_cannot_build_is_of_unknown_size(tmp_path: Path) -> None:
    """A config.json whose model_type needs the folder's own code: the plans say the size is unknown, never run it."""
    folder = tmp_path / "custom"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "my-own-encoder", "hidden_size": 8}))
    plan = disk.plan_disk(cfg_for(tmp_path, "sample", f"model.name={folder}"), 1)
    assert plan.parameters == 0 and "model size unknown" in disk.format_plan(plan, 20)


def test_mmbert_is_planned_offline_from_its_published_architecture(tmp_path: Path) -> None:
    """mmBERT-base: 306.9M parameters, 196.6M of them its 256k x 768 embedding; the time plan's FLOPs count the
    layers' 110.3M (Wi 768 x 2304 for the GLU); trimmed to the competition's pieces, a fold trains and keeps far
    fewer; LoRA goes on the projections lora.py knows, and `qv` is refused in one line."""
    from pipeline.errors import PipelineError
    from pipeline.kaggle import hours

    base = cfg_for(tmp_path, "sample", "model.name=jhu-clsp/mmBERT-base")
    arch = disk.model_architecture(base)
    assert disk.transformer_parameters(arch) == pytest.approx(306.9e6, rel=0.01)
    assert disk.transformer_parameters(disk.KNOWN_MODELS["mmbert-small"]) == pytest.approx(140.5e6, rel=0.01)
    layer = 768 * 2304 + 768 * 768 + 768 * 2304 + 1152 * 768  # Wqkv, Wo, Wi (GLU: 2 x 1152), the feed-forward's Wo
    assert hours.non_embedding_parameters(base) == pytest.approx(22 * layer, rel=0.01)
    trimmed = config.with_overrides(base, ["model.trim_vocab=true"], device=False)
    dropped = (256000 - disk.TRIMMED_VOCAB) * 768
    assert disk.trained_parameters(trimmed, arch) == disk.trained_parameters(base, arch) - dropped
    from pipeline.kaggle import memory as kaggle_memory

    # the GLU's activations: Wi's 2 x 1152 values, the gate's activation and the product, 8 bytes x 1152 a token
    glu = 18 * 512 * 768 + 8 * 512 * 1152 + 5 * 12 * 512 * 512
    assert kaggle_memory.layer_activations(arch, 512, 512, base.model.lora) == glu
    saved = kaggle_memory.plan_memory(base).total - kaggle_memory.plan_memory(trimmed).total
    assert saved >= kaggle_memory.FRAGMENTATION * 16 * dropped  # weights, gradients and AdamW's two moments
    lora = config.with_overrides(base, ["model.lora.r=8", "model.lora.targets=all"], device=False)
    assert disk.trained_parameters(lora, arch) == 8 * 22 * ((768 + 2304) + 2 * 768 + (768 + 2304) + (1152 + 768)) + 769
    with pytest.raises(PipelineError, match="one fused projection") as e:
        disk.plan_disk(config.with_overrides(lora, ["model.lora.targets=qv"], device=False), 5)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("targets", ["qv", "attention", "all"])
def test_lora_parameter_count_matches_the_adapters_put_on(targets: str) -> None:
    """The plan's count of what a LoRA fold trains and writes against a tiny XLM-R with its adapters on."""
    from transformers import XLMRobertaConfig

    from pipeline.core import lora, modeling

    arch = {"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64}
    model = modeling.Classifier(
        modeling.encoder_from_config(XLMRobertaConfig(num_attention_heads=2, **arch)), modeling.HeadSpec("cls", 0)
    )
    settings = config.load("sample", ["model.lora.r=4", f"model.lora.targets={targets}"], device=False).model.lora
    lora.attach(model, lora.spec(settings, model.encoder, {"from": "test"}), lora.base_dtype("fp32"))
    assert disk.lora_parameters(arch, settings) == modeling.count_parameters(model)


def test_an_xl_lora_plan_writes_adapters_reads_its_base_and_fits_a_t4(tmp_path: Path, capsys, monkeypatch) -> None:
    """XLM-R XL (3.5B) with LoRA on Kaggle's two T4s, planned without a network: a fold writes its adapters and head
    (53 MB), never its base, which every fold reads from the attached model (7 GB in fp16 on each GPU); a GPU holds
    about 9 GB of a T4's 15, where full fine-tuning would need over 56."""
    import socket

    from pipeline.kaggle import hours
    from pipeline.kaggle import memory as kaggle_memory

    def offline(*a, **k):
        raise OSError("no network in this test")

    monkeypatch.setattr(socket, "create_connection", offline)
    monkeypatch.setattr(socket.socket, "connect", offline)
    cfg = cfg_for(tmp_path, "xlmr-xl-lora", "kaggle.dry_run=true")
    plan = kernel.build_and_push(cfg)["disk"]
    assert 3.4e9 < plan.parameters < 3.6e9 and 13e6 < plan.trained < 14e6
    assert [size for what, size in plan.working if "model.safetensors" in what] == [5 * 4 * plan.trained]
    assert plan.working_bytes < 1e9 and plan.temp_bytes < 1e9
    out = capsys.readouterr().out
    assert "3475.9M parameters, 13.3M trained" in out and "5 x 53.1 MB" in out
    assert "its frozen base (6.95 GB on each GPU) is read from the model input by every fold" in out
    assert "reading the frozen LoRA base (13.9 GB, 4 bytes a parameter, as fp32 stores it)" in out
    assert "kernel: memory plan of one GPU while a fold trains" in out and "kernel: warning: a GPU" not in out
    gpu = kaggle_memory.plan_memory(cfg)
    assert 7.5e9 < gpu.total < 10e9 < kaggle_memory.T4_USABLE
    full = config.with_overrides(cfg, ["model.lora.r=0"], device=False)
    assert kaggle_memory.plan_memory(full).total > 16 * plan.parameters
    assert "or LoRA (model.lora.r=8" in kaggle_memory.over_memory(kaggle_memory.plan_memory(full), full)
    # no weight gradients for the frozen matrices: 6 FLOPs a weight a token with checkpointing, not 8
    assert hours.throughput(cfg)[0] == pytest.approx(hours.throughput(full)[0] * 8 / 6)


@pytest.mark.parametrize(("name", "parameters", "kept"), [("mmbert-base", "306.9M", "156.4M"),
                                                          ("mmbert-small", "140.5M", "65.2M")])  # fmt: skip
def test_the_mmbert_configs_plan_a_kaggle_run_offline(tmp_path: Path, capsys, name: str, parameters: str,
                                                      kept: str) -> None:  # fmt: skip
    """`make kernel CONFIG=mmbert-base ARGS=kaggle.dry_run=true`, no network: mmBERT's published architecture (a
    known hub name), its embedding trimmed to the competition's pieces, 512 tokens a row, every plan printed and a
    T4 holding the step."""
    from pipeline.kaggle import memory as kaggle_memory

    cfg = cfg_for(tmp_path, name, "kaggle.dry_run=true")
    assert (cfg.model.max_length, cfg.model.pooling, cfg.model.trim_vocab) == (512, "mean", True)
    kernel.build_and_push(cfg)
    out = capsys.readouterr().out
    assert f"disk plan ({parameters} parameters, {kept} kept by model.trim_vocab" in out
    assert "kernel: time plan" in out and "kernel: memory plan of one GPU" in out
    assert "kernel: warning" not in out
    assert kaggle_memory.plan_memory(cfg).total < kaggle_memory.T4_USABLE


def test_a_token_budget_prices_the_plan_at_its_tokens_not_micro_batch_times_max_length(tmp_path: Path) -> None:
    """mmBERT base reading 1,024 tokens whole on a T4: 8 rows of 1,024 a micro-batch would need about 20 GB without
    checkpointing; a budget of 2,048 tokens a micro-batch (short comments many to a batch, long ones few) fits."""
    from pipeline.kaggle import memory as kaggle_memory

    cfg = cfg_for(tmp_path, "mmbert-base", "model.max_length=1024", "train.checkpointing=false")
    budget = config.with_overrides(cfg, ["train.token_budget=2048"], device=False)
    whole, cut = kaggle_memory.plan_memory(cfg), kaggle_memory.plan_memory(budget)
    assert whole.total > kaggle_memory.T4_USABLE > cut.total
    assert "a smaller train.token_budget" in kaggle_memory.over_memory(whole, budget)
    what, size = cut.items[-1]
    assert "at most 2,048 tokens a micro-batch, rows up to 1024" in what
    arch = disk.model_architecture(budget)
    assert size == 23 * kaggle_memory.layer_activations(
        arch, 2048, 1024, budget.model.lora
    )  # 22 layers and one's grads
    off = config.with_overrides(cfg, ["train.token_budget=0"], device=False)
    assert kaggle_memory.plan_memory(off).total == whole.total  # 0: micro_batch x max_length, as before


def test_a_lora_plan_reads_the_base_as_its_source_stores_it_and_plans_host_memory(tmp_path: Path, capsys) -> None:
    """Every fold reads its frozen base from the model source as the source stores it, not at the size the GPU holds
    (XLM-R XL: 13.9 GB in fp32, 6.95 GB in fp16 on the GPU): the size of the weight files where model.name is a
    folder here, else 4 bytes a parameter. Each of the two processes reads the base on the CPU at once: the host
    memory is planned against the notebook's, with a warning where it passes it."""
    from pipeline.kaggle import hours
    from pipeline.kaggle import memory as kaggle_memory

    xl = disk.KNOWN_MODELS["xlm-roberta-xl"]
    cfg = cfg_for(tmp_path, "xlmr-xl-lora")
    base = disk.transformer_parameters(xl) - xl["hidden_size"] - 1
    plan = hours.plan_time(cfg, 5)
    assert plan.load_bytes == 4.0 * base and 13.8e9 < plan.load_bytes < 14e9
    assert plan.load_bytes == pytest.approx(2 * disk.frozen_bytes(cfg, xl), rel=0.01)
    folder = tmp_path / "xl"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(xl))
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        (folder / shard).write_bytes(b"\0" * 1000)
    (folder / "pytorch_model.bin").write_bytes(b"\0" * 99)  # the safetensors are what transformers reads
    local = cfg_for(tmp_path, "xlmr-xl-lora", f"model.name={folder}")
    assert hours.plan_time(local, 5).load_bytes == 2000
    assert "(0.0 GB, the size of" in hours.format_time(hours.plan_time(local, 5), local)
    line, total = kaggle_memory.host_memory(cfg, 2)
    assert total == 2 * (disk.frozen_bytes(cfg, xl) + 4.0 * disk.trained_parameters(cfg, xl)
                         + kaggle_memory.PROCESS_HOST_BYTES) + 12.0 * disk.trained_parameters(cfg, xl)  # fmt: skip
    assert "2 process(es) x (7.00 GB of the model on the CPU before its GPU" in line
    assert kaggle_memory.over_host(total, cfg) == ""
    full = cfg_for(tmp_path, "xlmr-xl-lora", "model.lora.r=0")  # every weight in fp32: 13.9 GB in each process
    _, big = kaggle_memory.host_memory(full, 2)
    # 2 x (13.9 + 2.5) GB loading, and a resumed fold's 41.7 GB state (fp32 weights and AdamW's moments) beside them
    assert "74.52 GB of host memory at once" in kaggle_memory.over_host(big, full)
    assert kaggle_memory.host_memory(full, 1)[1] == pytest.approx(big - 16.4e9, rel=1e-3)
    kernel.build_and_push(cfg_for(tmp_path, "xlmr-xl-lora", "kaggle.dry_run=true", "model.lora.r=0",
                                  "kaggle.working_gb=200"))  # fmt: skip
    assert "kernel: warning: the processes would hold about" in capsys.readouterr().out


def test_the_readme_quotes_the_measured_xl_lora_peak_in_one_unit() -> None:
    """The README's XLM-R XL with LoRA figure is docs/bench.md's measured peak (MiB: the bench counts 2^20 bytes) in
    the plans' unit, GB of 10^9 bytes, and says how it was measured."""
    root = Path(__file__).resolve().parents[2]
    row = next(line for line in (root / "docs" / "bench.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| all three + LoRA r=8 | XLM-R XL |"))  # fmt: skip
    mib = int(row.split("|")[4].strip().replace(",", ""))
    readme = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    assert f"peaked at {mib * 2**20 / disk.GB:.1f} GB ({mib:,} MiB; every GB here is 10^9 bytes)" in readme
    assert "micro-batch 4 x 256 tokens, bf16, random weights, measured on a CPU" in readme
    assert "9.7 GB" not in readme


def test_a_quantized_base_needs_bitsandbytes_in_the_kaggle_image(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match=r"^model.lora.quantize=4bit needs bitsandbytes in the Kaggle image"):
        kernel.build_and_push(cfg_for(tmp_path, "xlmr-xl-lora", "kaggle.dry_run=true", "model.lora.quantize=4bit"))
    four = cfg_for(tmp_path, "xlmr-xl-lora", "kaggle.dry_run=true", "model.lora.quantize=4bit",
                   "kaggle.has_bitsandbytes=true")  # fmt: skip
    assert kernel.build_and_push(four)["disk"].trained < 14e6
    assert disk.frozen_bytes(four, disk.KNOWN_MODELS["xlm-roberta-xl"]) < 0.5 * disk.frozen_bytes(
        cfg_for(tmp_path, "xlmr-xl-lora"), disk.KNOWN_MODELS["xlm-roberta-xl"]
    )


def test_xlmr_large_plan_fits_and_keeps_transients_out_of_working(tmp_path: Path, capsys) -> None:
    cfg = cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true")
    result = kernel.build_and_push(cfg)
    plan = result["disk"]
    # 5 x 2.24 GB + small files, and a cut-off fold's resume.pt (6.72 GB) beside that fold's best weights
    resume = 12 * plan.parameters
    assert 11e9 + resume < plan.working_bytes < 12e9 + resume < disk.GB * cfg.kaggle.working_gb
    assert [what for what, _ in plan.working if "resume" in what or "cache" in what] == [
        "models/xlmr-large/fold<k>/resume.pt of a fold cut off by the time limit"
    ]
    unkept = kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true", "kaggle.keep_resume=false"))
    assert 11e9 < unkept["disk"].working_bytes < 12e9
    assert any("resume.pt" in what and size == 2 * 12 * plan.parameters for what, size in plan.temp)
    out = capsys.readouterr().out
    assert "/kaggle/working (kept, at most 20 GB)" in out and "/kaggle/temp (scratch, not kept)" in out
    assert "5 x 2.24 GB" in out


DOCS = Path(__file__).resolve().parents[2] / "docs" / "kaggle.md"


def quoted_and_printed(marker: str, config_name: str, tmp_path: Path, capsys) -> tuple[list[str], list[str]]:
    """(the lines of docs/kaggle.md's first code block after `marker`, what that config's dry run prints)."""
    text = DOCS.read_text(encoding="utf-8")
    start = text.index("```\n", text.index(marker)) + 4
    quoted = text[start : text.index("```", start)].splitlines()
    cfg = config.load(config_name, [f"kaggle.dir={tmp_path / 'kernel'}", *under(tmp_path), "kaggle.dry_run=true"])
    kernel.build_and_push(cfg)
    return quoted, capsys.readouterr().out.splitlines()


def test_the_docs_quote_what_the_dry_run_prints(tmp_path: Path, capsys) -> None:
    """docs/kaggle.md's dry-run block is what `make kernel CONFIG=xlmr-large ARGS="kaggle.dry_run=true"` prints, from
    its first line (kaggle.model_source) to the notebook's deadline: numbers of an older plan would mislead."""
    quoted, printed = quoted_and_printed('ARGS="kaggle.dry_run=true"` prints', "xlmr-large", tmp_path, capsys)
    last = next(i for i, line in enumerate(printed) if line.startswith("kernel: in the notebook, training stops"))
    assert quoted == printed[: last + 1]


def test_the_docs_quote_what_the_xl_lora_dry_run_prints(tmp_path: Path, capsys) -> None:
    """docs/kaggle.md's XLM-R XL with LoRA block is what its dry run prints, from the disk plan to the host memory."""
    marker = '`make kernel CONFIG=xlmr-xl-lora ARGS="kaggle.dry_run=true"`'
    quoted, printed = quoted_and_printed(marker, "xlmr-xl-lora", tmp_path, capsys)
    first = next(i for i, line in enumerate(printed) if line.startswith("kernel: disk plan"))
    last = next(i for i, line in enumerate(printed) if line.startswith("kernel: host memory while the model loads"))
    assert quoted == printed[first : last + 1]


def test_a_two_stage_plan_counts_the_stage1_model(tmp_path: Path) -> None:
    big = ("kaggle.dry_run=true", "kaggle.working_gb=30")
    one = kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", *big))["disk"]
    two = kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", *big, "model.init_from=xl-s1"))["disk"]
    weights = 4 * one.parameters
    # stage 1 keeps its model in working and reads another table and token cache in temp
    assert weights < two.working_bytes - one.working_bytes < weights + 1e8
    assert any("xl-s1/fold-1/model.safetensors" in what and size == weights for what, size in two.working)
    assert two.temp_bytes - one.temp_bytes > weights
    # five folds, the stage-1 model and a cut fold's state and weights: 20.27 GB, more than Kaggle keeps
    with pytest.raises(KernelError, match=r"would keep 20\.2\d GB in /kaggle/working, more than the 20 GB"):
        kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true", "model.init_from=xl-s1"))
    kept = kernel.build_and_push(
        cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true", "model.init_from=xl-s1", "kaggle.keep_weights=false")
    )["disk"]
    # without kept weights: only the stage-1 model's (every later fold starts from it) and a cut fold's (its best)
    assert [what for what, _ in kept.working if "model.safetensors" in what] == [
        "models/xlmr-large/fold<k>/model.safetensors of that fold (its best evaluation's)",
        "models/xl-s1/fold-1/model.safetensors (stage 1)",
    ]


def test_a_cut_fold_keeps_its_state_and_its_weights_in_the_plan(tmp_path: Path) -> None:
    """A fold cut after its first evaluation keeps model.safetensors and resume.pt: six folds of XLM-R large are
    13.41 GB of weights and a 6.71 GB state, 20.27 GB with the small files: refused (the plan said 18.07)."""
    with pytest.raises(KernelError, match=r"would keep 20\.27 GB in /kaggle/working, more than the 20 GB"):
        kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true", "data.folds=6"))
    five = kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true"))["disk"]
    params = five.parameters
    assert five.working_bytes == pytest.approx(5 * 4 * params + 12 * params, abs=0.2e9)
    light = kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true", "kaggle.keep_weights=false"))
    assert light["disk"].working_bytes == pytest.approx(16 * params, abs=0.2e9)  # the cut fold's state and weights


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


def test_no_resume_state_with_a_fold_longer_than_a_session_is_refused(tmp_path: Path, capsys) -> None:
    """kaggle.keep_resume=false restarts a cut fold in the next session: with a fold longer than a session it could
    never end. The plan refuses that in one line, and a disk plan over the quota no longer offers it as a fix."""
    slow = ("kaggle.dry_run=true", "kaggle.tokens_per_second=200")  # a fold of about a day
    said = r"keep_resume=false with a fold of about \d+h\d\dm, more than the \d+h\d\dm a 12 h session trains: every"
    with pytest.raises(KernelError, match=said):
        kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", *slow, "kaggle.keep_resume=false"))
    assert str(capsys.readouterr().out).count("kernel: time plan") == 1  # the numbers are printed before
    kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", *slow))  # the resume state carries it: fine
    kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true", "kaggle.keep_resume=false"))  # fits
    with pytest.raises(KernelError, match="more than the 20 GB") as refused:
        kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", *slow, "data.folds=6"))
    assert "kaggle.keep_resume=false" not in str(refused.value) and "kaggle.keep_weights=false" in str(refused.value)
    with pytest.raises(KernelError, match="kaggle.keep_resume=false .a fold cut off"):  # a fold that fits: a fix
        kernel.build_and_push(cfg_for(tmp_path, "xlmr-large", "kaggle.dry_run=true", "data.folds=6"))


# ---------------------------------------------------------------------------------------------
# Sources: extra files, model folder


def test_extra_files_the_competition_lacks_are_refused(tmp_path: Path) -> None:
    """sample.yaml's translated-train.csv is not a file of the real competition: no dataset, no push."""
    api = FakeKaggleApi()
    with pytest.raises(KernelError, match=r"translated-train.csv is not a file of the competition.*data.datasets"):
        kernel.build_and_push(cfg_for(tmp_path), api=api)
    assert api.calls == []
    kaggle_plan.check_extra_files(cfg_for(tmp_path, "sample", "data.extra_files=[validation.csv]"))


def test_a_dry_run_of_the_sample_config_writes_the_folders_and_names_what_a_push_needs(tmp_path: Path, capsys) -> None:
    """`make kernel ARGS="kaggle.dry_run=true"` on the default config: the folders to read, and the one line that
    a push would refuse it with, said as what a push needs."""
    argv = ["--config", "sample", f"kaggle.dir={tmp_path / 'kernel'}", "kaggle.dry_run=true", *under(tmp_path)]
    assert kernel.main(argv) == 0
    out = capsys.readouterr().out
    assert "kernel: data.extra_files: translated-train.csv is not a file of the competition" in out, out
    assert "a push is refused until then" in out and "nothing sent" in out
    assert (tmp_path / "kernel" / "jigsaw-sample" / "notebook" / "kernel-metadata.json").is_file()


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


# ---------------------------------------------------------------------------------------------
# Accelerator and image


def test_accelerator_and_image_pinning_in_the_metadata(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, "sample", "kaggle.docker_image_pinning=original", "data.extra_files=[]")
    meta = kaggle_plan.kernel_metadata(cfg, kaggle_plan.make_plan(cfg, "tester"))
    assert meta["machine_shape"] == "NvidiaTeslaT4" and meta["docker_image_pinning_type"] == "original"
    cpu = cfg_for(tmp_path, "sample", "kaggle.enable_gpu=false")
    assert "machine_shape" not in kaggle_plan.kernel_metadata(cpu, kaggle_plan.make_plan(cpu, "tester"))


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
        kaggle_plan.check_kernel_metadata(meta, tmp_path / "kernel" / "jigsaw-sample" / "notebook")
    with pytest.raises(ConfigError, match="kaggle.docker_image_pinning"):
        cfg_for(tmp_path, "sample", "kaggle.docker_image_pinning=newest")


def test_pushed_metadata_carries_the_accelerator(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    kernel.build_and_push(cfg_for(tmp_path, "sample", "data.extra_files=[]"), api=api)
    push = dict(api.calls)["kernels_push"]
    assert json.loads(json.dumps(push["metadata"]))["machine_shape"] == "NvidiaTeslaT4"


# ---------------------------------------------------------------------------------------------
# Names


def test_slugify_matches_python_slugify() -> None:
    slugify = pytest.importorskip("slugify").slugify  # what kaggle's kernels_push compares the id with
    for title in ("Jigsaw sample", "Jigsaw xlmr-large", "XLM-R large: 5 folds!", "  a  b--c "):
        assert kaggle_plan.slugify(title) == slugify(title)


# ---------------------------------------------------------------------------------------------
# Metadata checks


def good_kernel(tmp_path: Path) -> tuple[dict, Path]:
    cfg = dry(tmp_path, "model.name=xlm-roberta-large", "kaggle.model_source=someone/xlm-roberta-large")
    plan = kaggle_plan.make_plan(cfg, "tester")
    folder = tmp_path / "k"
    meta = bundle.write_kernel(cfg, plan, folder)
    return meta, folder


def test_kernel_metadata_fields(tmp_path: Path) -> None:
    meta, folder = good_kernel(tmp_path)
    assert meta == {
        "id": "tester/jigsaw-sample",
        "title": "Jigsaw sample",
        "code_file": "jigsaw-sample.py",
        "language": "python",
        "kernel_type": "script",
        "is_private": True,
        "enable_gpu": True,
        "enable_tpu": False,
        "enable_internet": False,
        "dataset_sources": ["tester/jigsaw-sample-code", "someone/xlm-roberta-large"],
        "competition_sources": [COMPETITION],
        "kernel_sources": [],
        "machine_shape": "NvidiaTeslaT4",  # two T4s
    }
    assert json.loads((folder / "kernel-metadata.json").read_text()) == meta
    kaggle_plan.check_kernel_metadata(meta, folder)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"id": None}, "missing field 'id'"),
        ({"title": None}, "missing field 'title'"),
        ({"code_file": None}, "missing field 'code_file'"),
        ({"competition_sources": None}, "missing field 'competition_sources'"),
        ({"enable_internet": None}, "missing field 'enable_internet'"),
        ({"id": "jigsaw-sample"}, "is not <user>/<slug>"),
        ({"id": "tester/Jigsaw Sample"}, "the slug must be"),
        ({"id": "bad user/jigsaw-sample"}, "is not a Kaggle user name"),
        ({"title": "Jigsaw other"}, "gives the slug 'jigsaw-other'"),
        ({"language": "r"}, "language must be 'python'"),
        ({"kernel_type": "rmarkdown"}, "kernel_type must be"),
        ({"code_file": "missing.py"}, "not found"),
        ({"code_file": "../x.py"}, "must be a file name"),
        ({"code_file": "jigsaw-sample.ipynb"}, "must end in .py"),
        ({"is_private": "true"}, "is_private must be true or false"),
        ({"enable_gpu": 1}, "enable_gpu must be true or false"),
        ({"enable_internet": True}, "enable_internet must be false"),
        ({"competition_sources": []}, "competition_sources is empty"),
        ({"competition_sources": COMPETITION}, "must be a list of strings"),
        ({"dataset_sources": ["no-owner"]}, "dataset_sources: 'no-owner' is not <owner>/<dataset>"),
        ({"dataset_sources": ["a/b", "a/b"]}, "lists a source twice"),
        ({"model_sources": ["o/m/pytorch/large"]}, "model_sources: 'o/m/pytorch/large' is not"),
        ({"enable_gpus": True}, "unknown field 'enable_gpus'"),
    ],
)
def test_kernel_metadata_errors(tmp_path: Path, change: dict, message: str) -> None:
    meta, folder = good_kernel(tmp_path)
    for key, value in change.items():
        if value is None:
            del meta[key]
        else:
            meta[key] = value
    with pytest.raises(KernelError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        kaggle_plan.check_kernel_metadata(meta, folder)
    assert "kernel-metadata.json" in str(info.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"licenses": None}, "missing field 'licenses'"),
        ({"licenses": []}, "exactly one license"),
        ({"licenses": [{"name": ""}]}, "needs a name"),
        ({"id": "tester/abc"}, "6-50"),
        ({"title": "abc"}, "title 'abc' must be 6-50"),
        ({"id": "tester"}, "is not <user>/<slug>"),
    ],
)
def test_dataset_metadata_errors(change: dict, message: str) -> None:
    meta = kaggle_plan.dataset_metadata(kaggle_plan.make_plan(config.load("sample"), "tester"))
    kaggle_plan.check_dataset_metadata(meta)
    for key, value in change.items():
        if value is None:
            del meta[key]
        else:
            meta[key] = value
    with pytest.raises(KernelError, match=message):
        kaggle_plan.check_dataset_metadata(meta)


def test_bad_metadata_is_caught_before_anything_is_sent(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    cfg = make_cfg(tmp_path, "kaggle.title=Another title")
    with pytest.raises(KernelError, match="gives the slug 'another-title'"):
        kernel.build_and_push(cfg, api=api)
    assert api.calls == []  # no upload, no push


def test_non_tiny_model_needs_a_model_source(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="set kaggle.model_source"):
        kaggle_plan.make_plan(make_cfg(tmp_path, "model.name=xlm-roberta-large"), "tester")
    with pytest.raises(KernelError, match="expected a dataset owner/slug"):
        kaggle_plan.make_plan(dry(tmp_path, "model.name=x", "kaggle.model_source=a/b/c"), "tester")


def test_kaggle_model_goes_to_model_sources(tmp_path: Path) -> None:
    cfg = dry(tmp_path, "model.name=xlm-roberta-large", "kaggle.model_source=owner/xlmr/transformers/large/2")
    plan = kaggle_plan.make_plan(cfg, "tester")
    assert plan.model_mount == "xlmr/transformers/large/2"
    meta = bundle.write_kernel(cfg, plan, tmp_path / "k")
    assert meta["model_sources"] == ["owner/xlmr/transformers/large/2"]
    assert meta["dataset_sources"] == ["tester/jigsaw-sample-code"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["kaggle.continue_from=../x"], "kaggle.continue_from='../x': expected self, <kernel>, <owner>/<kernel>"),
        *(
            (
                [f"kaggle.continue_from={ref}"],
                f"kaggle.continue_from={ref!r}: expected self, <kernel>, <owner>/<kernel>",
            )
            for ref in ("a/../b", "./x", "x/", "a//b", "a/b/", "/x", "..", "x/..", "someone/Run-A", "RUN-A", "a/b")
        ),
        (["kaggle.continue_from=a/b/c"], "kaggle.continue_from='a/b/c': the version must be a number from 1"),
        (["kaggle.continue_from=a/b/0"], "kaggle.continue_from='a/b/0': the version must be a number"),
        (["kaggle.continue_from=someone/Bad_Run"], "kaggle.continue_from='someone/Bad_Run': expected self"),
        (["kaggle.kernel_slug=Bad_Slug", "kaggle.continue_from=self"], "kaggle.kernel_slug='Bad_Slug': a kernel slug"),
        (["kaggle.kernel_slug=Bad_Slug"], "kaggle.kernel_slug='Bad_Slug': a kernel slug is 5-50 lower-case"),
    ],
)
def test_kernel_references_are_checked_and_the_right_key_is_blamed(tmp_path: Path, overrides, message) -> None:
    """A path is no kernel, and a bad slug is the slug's fault even where continue_from=self is built from it."""
    with pytest.raises(KernelError) as info:
        kaggle_plan.make_plan(dry(tmp_path, *overrides), "tester")
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_a_continued_run_may_name_the_version(tmp_path: Path) -> None:
    plan = kaggle_plan.make_plan(dry(tmp_path, "kaggle.continue_from=someone/run-a/7"), "tester")
    assert (plan.continue_kernel, plan.continue_version) == ("someone/run-a", 7)
    assert plan.kernel_sources == ("someone/run-a/7",)
    meta, folder = good_kernel(tmp_path)
    meta["kernel_sources"] = ["someone/run-a/7"]  # kaggle 2.2.5's validate_kernel_string takes a version
    kaggle_plan.check_kernel_metadata(meta, folder)


def test_the_memory_plan_keeps_the_cards_margin(tmp_path: Path) -> None:
    """A plan that would fill a T4 to its last 0.5 GB warns: the CUDA context, NCCL and fragmentation need more."""
    from pipeline.kaggle import memory as kaggle_memory

    cfg = cfg_for(tmp_path)
    assert kaggle_memory.T4_USABLE == pytest.approx(kaggle_memory.T4_TOTAL - max(2**30, 0.07 * 15.83e9))
    near = kaggle_memory.MemoryPlan([("a step", (kaggle_memory.T4_TOTAL - 0.5e9) / kaggle_memory.FRAGMENTATION)])
    assert "its margin: the first step would run out of memory" in kaggle_memory.over_memory(near, cfg)
    room = kaggle_memory.MemoryPlan([("a step", (kaggle_memory.T4_TOTAL - 1.2e9) / kaggle_memory.FRAGMENTATION)])
    assert kaggle_memory.over_memory(room, cfg) == ""


def test_the_host_plan_counts_one_resume_state_under_two_processes(tmp_path: Path) -> None:
    """XLM-R large resumed on two GPUs: the first process reads the 6.7 GB state, the second maps it (no copy)."""
    from pipeline.kaggle import memory as kaggle_memory

    cfg = cfg_for(tmp_path, "xlmr-large")
    arch = disk.model_architecture(cfg)
    state = 12.0 * disk.trained_parameters(cfg, arch)
    assert 6.6e9 < state < 6.9e9
    line, total = kaggle_memory.host_memory(cfg, 2)
    assert total == 2 * (kaggle_memory.loaded_bytes(cfg, arch) + kaggle_memory.PROCESS_HOST_BYTES) + state
    assert "of a resumed fold's state (read by the first process, mapped by the others)" in line
    assert kaggle_memory.host_memory(cfg, 1)[1] == total - kaggle_memory.loaded_bytes(cfg, arch) - 2.5e9


# docs/encoders.md's planned-memory tables, row by row: (the row's name, its config, overrides)
PLANNED = {
    "XLM-R large (560M, untrimmed)": ("xlmr-large", "model.trim_vocab=false"),
    "mmBERT base, untrimmed (307M)": ("mmbert-base", "model.trim_vocab=false"),
    "mmBERT base, trimmed (156M kept)": ("mmbert-base", "model.trim_vocab=true"),
    "mmBERT small, trimmed (65M kept)": ("mmbert-small", "model.trim_vocab=true"),
}


def planned_cell(tmp_path: Path, name: str, length: int, budget: int) -> str:
    """`with checkpointing / without` GB, as the docs' table gives them; `-` past the model's positions."""
    from pipeline.kaggle import memory as kaggle_memory

    config_name, trim = PLANNED[name]
    if config_name.startswith("xlmr") and length > 512:
        return "-"  # XLM-R reads 512 positions
    totals = []
    for checkpointing in ("true", "false"):
        cfg = cfg_for(tmp_path, config_name, trim, f"model.max_length={length}", "train.micro_batch=8",
                      f"train.token_budget={budget}", f"train.checkpointing={checkpointing}")  # fmt: skip
        totals.append(kaggle_memory.plan_memory(cfg).total / 1e9)
    return f"{totals[0]:.1f} / {totals[1]:.1f} GB"


TABLES = [("The memory plan beside XLM-R large", 0, (256, 512)), ("Reading long comments whole", 2048, (512, 1024))]


@pytest.mark.parametrize(("title", "budget", "lengths"), TABLES)
def test_the_encoders_page_planned_memory_is_the_plan_s(tmp_path: Path, title: str, budget: int, lengths) -> None:
    from tests.helpers import ROOT

    page = (ROOT / "docs" / "encoders.md").read_text(encoding="utf-8")
    table = page.split(f"### {title}\n", 1)[1].split("\n#", 1)[0]
    rows = {cells[0]: cells[1:] for line in table.splitlines() if line.startswith("| ")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}  # fmt: skip
    assert rows["model"] == [f"{n} tokens" for n in lengths]
    for name in PLANNED:
        assert rows[name] == [planned_cell(tmp_path, name, n, budget) for n in lengths], name
