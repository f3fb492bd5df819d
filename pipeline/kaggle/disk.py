"""The disk plan of a Kaggle run: what /kaggle/working keeps and what /kaggle/temp holds for a while.

`make kernel` prints this plan and refuses one whose kept output passes `kaggle.working_gb` (Kaggle
keeps at most 20 GB of /kaggle/working): a run that fills it fails hours in, at a fold's save.

Sizes are computed, not measured: a model's parameter count comes from its architecture (a known hub
name, the tiny config, or a local folder's config.json), built on the meta device (shapes without memory) by
transformers itself, so that every family (XLM-R, BERT, ModernBERT's fused attention and GLU feed-forward) is
counted as it is built; safetensors store 4 bytes a trained parameter, and a resume state 4 and the optimizer's
state (`resume_bytes`: 12 for AdamW). Under `model.trim_vocab` a fold keeps the embedding rows of the tokens the
competition's texts use: as many as the token cache here holds distinct ids, else TRIMMED_VOCAB, an estimate.
Under LoRA (`model.lora.r` > 0) the trained parameters are the adapters and the head: a fold writes those alone,
and its frozen base is read from the model input (`kaggle.model_source`) by every fold, never written. Row counts
come from the real competition.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.optimizers import OPTIMIZERS
from pipeline.schema import Config

GB = 1e9  # Kaggle's quota is in decimal gigabytes
# The architectures of the hub names configs use (their config.json on the hub), for offline sizing.
KNOWN_MODELS = {
    "xlm-roberta-base": {"model_type": "xlm-roberta", "vocab_size": 250002, "hidden_size": 768, "num_hidden_layers": 12,
                         "intermediate_size": 3072, "num_attention_heads": 12},
    "xlm-roberta-large": {"model_type": "xlm-roberta", "vocab_size": 250002, "hidden_size": 1024,
                          "num_hidden_layers": 24, "intermediate_size": 4096, "num_attention_heads": 16},
    # facebook/xlm-roberta-xl: 3.5B parameters (pre-LayerNorm layers, the same count a layer)
    "xlm-roberta-xl": {"model_type": "xlm-roberta-xl", "vocab_size": 250880, "hidden_size": 2560,
                       "num_hidden_layers": 36, "intermediate_size": 10240, "num_attention_heads": 32},
    # jhu-clsp/mmBERT-base and -small (ModernBERT): a GLU feed-forward (Wi 2 x intermediate wide), no biases, Gemma's
    # 256k vocabulary, RoPE to 8192 positions; 307M and 140M parameters as published
    "mmbert-base": {"model_type": "modernbert", "vocab_size": 256000, "hidden_size": 768, "num_hidden_layers": 22,
                    "intermediate_size": 1152, "num_attention_heads": 12, "max_position_embeddings": 8192,
                    "pad_token_id": 0},
    "mmbert-small": {"model_type": "modernbert", "vocab_size": 256000, "hidden_size": 384, "num_hidden_layers": 22,
                     "intermediate_size": 1152, "num_attention_heads": 6, "max_position_embeddings": 8192,
                     "pad_token_id": 0},
}  # fmt: skip
# bytes a frozen matrix of a LoRA base keeps on the GPU (model.lora.quantize): half precision, or bitsandbytes'
# 8 bits and NF4's 4 (with its double-quantized constants, about 4.5 bits); its other weights stay in half precision
QUANTIZED_BYTES = {"none": 2.0, "8bit": 1.0, "4bit": 0.5625}
# The real competition: 223,549 English rows of which 21,384 toxic; 8,000 validation rows; 63,812 test rows.
ENGLISH_TOXIC, VALID_ROWS, TEST_ROWS = 21384, 8000, 63812
OOF_ROW_BYTES, SUB_ROW_BYTES = 48, 24  # a CSV row of id,lang,toxic,fold,pred / of id,toxic
TOKENIZER_BYTES_PER_TOKEN = 90  # tokenizer.json + sentencepiece model: 22 MB for XLM-R's 250k tokens
LOGS_BYTES = 2_000_000  # kernel-run.yaml, pipeline.yaml, metrics.jsonl, done.json, cv.json, cv.png


# the embedding rows a trimmed model keeps (model.trim_vocab): the pieces the competition's texts use (about 60k of
# XLM-R's 250k; pipeline.core.trim keeps exactly those the token cache holds), an estimate where no cache is read
TRIMMED_VOCAB = 60_000


@dataclass(frozen=True)
class Shapes:
    """What the plans need of an architecture, read off the encoder transformers builds from it on the meta device."""

    encoder: int  # the encoder's parameters (no pooler: the pipeline's head pools)
    matrices: int  # the weights of its layers' linear projections: what 8 or 4 bits hold under LoRA
    adapters: dict  # model.lora.targets -> sum of in + out over the projections it adapts, or the refusal's words
    glu: bool = False  # a gated feed-forward (ModernBERT's Wi): its first projection 2 x intermediate wide


@functools.cache
def _shapes(arch_json: str) -> Shapes:
    import torch  # `make kernel` starts without torch; the plans import it once, here

    from pipeline.core import lora, modeling
    from pipeline.errors import PipelineError

    arch = json.loads(arch_json)
    config = _config(arch)
    encoder = modeling.meta_encoder(config)  # every shape, no memory
    linears = {n: m for n, m in encoder.named_modules() if isinstance(m, torch.nn.Linear)}
    adapters = {}
    for targets in lora.TARGETS:
        try:
            adapters[targets] = sum(linears[n].in_features + linears[n].out_features
                                    for n in lora.target_names(encoder, targets))  # fmt: skip
        except PipelineError as e:  # a family or targets lora.py does not support: refused where it is planned
            adapters[targets] = str(e)
    matrices = sum(m.weight.numel() for m in linears.values())
    h, i = config.hidden_size, config.intermediate_size
    # the feed-forward's first projection (not a fused attention one, 3 h wide, which may equal 2 i)
    glu = any((m.in_features, m.out_features) == (h, 2 * i) for n, m in linears.items() if "att" not in n)
    return Shapes(sum(p.numel() for p in encoder.parameters()), matrices, adapters, glu)


def _config(arch: dict):
    """transformers' config of `arch` (config.json's keys); XLM-R where it names no model_type (the plans' own)."""
    from transformers import AutoConfig

    keys = {k: v for k, v in arch.items() if k != "model_type"}
    keys.setdefault("num_attention_heads", 1)  # heads split the hidden size, never add a weight: any divisor counts
    return AutoConfig.for_model(arch.get("model_type", "xlm-roberta"), **keys)


def shapes(arch: dict) -> Shapes:
    return _shapes(json.dumps(arch, sort_keys=True))


def transformer_parameters(arch: dict) -> int:
    """Parameters of the encoder `arch` describes (no pooler) under the pipeline's one-logit head."""
    return shapes(arch).encoder + arch["hidden_size"] + 1  # the head: one linear logit on the pooled hidden state


def kept_rows(cfg: Config) -> tuple[int, str]:
    """(the embedding rows model.trim_vocab keeps, where the figure comes from): the distinct ids of the token cache
    `make data` made here with this model's tokenizer, else TRIMMED_VOCAB, an estimate."""
    from pipeline.inputs.tokens import prepared_cache  # imports torch: `make kernel` starts without it

    used = (prepared_cache(cfg) or {}).get("distinct_ids")
    if isinstance(used, int) and used > 0:
        return used, "the token cache's distinct ids"
    return TRIMMED_VOCAB, "about, an estimate"


def kept_parameters(cfg: Config, arch: dict) -> int:
    """transformer_parameters less the embedding rows model.trim_vocab drops (kept_rows keeps)."""
    full = transformer_parameters(arch)
    if not cfg.model.trim_vocab:
        return full
    return full - max(0, arch["vocab_size"] - kept_rows(cfg)[0]) * arch["hidden_size"]


def layer_matrices(arch: dict) -> int:
    """The weights of every layer's projections (Q, K, V, output, the feed-forward's two): what 8 or 4 bits hold."""
    return shapes(arch).matrices


def lora_parameters(arch: dict, lora) -> int:
    """The adapters' parameters, r x (in + out) for each projection pipeline.core.lora adapts for `lora.targets`,
    and the head's: what a LoRA fold trains and saves; lora.py's one-line refusal where it does not support them."""
    from pipeline.core.lora import LoraError

    sides = shapes(arch).adapters[lora.targets]
    if isinstance(sides, str):
        raise LoraError(sides)
    return lora.r * sides + arch["hidden_size"] + 1


def trained_parameters(cfg: Config, arch: dict) -> int:
    """The parameters a fold trains, saves and resumes: every one, or under LoRA the adapters and the head."""
    return lora_parameters(arch, cfg.model.lora) if cfg.model.lora.r > 0 else kept_parameters(cfg, arch)


def frozen_bytes(cfg: Config, arch: dict) -> float:
    """What a LoRA fold's frozen base keeps on a GPU: its matrices at model.lora.quantize's bytes, the rest (the
    embedding, LayerNorms, biases) in half precision; 4 bytes a parameter in an fp32 run. 0 without LoRA."""
    if cfg.model.lora.r <= 0:
        return 0.0
    base = kept_parameters(cfg, arch) - arch["hidden_size"] - 1  # the head is trained, not frozen; trimmed as kept
    if cfg.train.precision == "fp32":
        return 4.0 * base
    matrices = layer_matrices(arch)
    return QUANTIZED_BYTES[cfg.model.lora.quantize] * matrices + 2.0 * (base - matrices)


WEIGHT_FILES = ("*.safetensors", "*.bin")  # a transformers folder's weights, one file or shards (safetensors first)


def source_bytes(cfg: Config, arch: dict) -> tuple[float, str]:
    """(bytes, where the figure comes from) of a LoRA base as its model source stores it, which every fold reads:
    the weight files of model.name's folder where it is here, else 4 bytes a parameter (the hub's XLM-R checkpoints
    are fp32: XLM-R XL's 13.9 GB, twice what the GPU holds of it). (0, "") without LoRA."""
    if cfg.model.lora.r <= 0:
        return 0.0, ""
    folder = Path(cfg.model.name)
    for pattern in WEIGHT_FILES if folder.is_dir() else ():
        files = sorted(folder.glob(pattern))
        if files:
            return float(sum(f.stat().st_size for f in files)), f"the size of {folder}'s {pattern} files"
    return 4.0 * (transformer_parameters(arch) - arch["hidden_size"] - 1), "4 bytes a parameter, as fp32 stores it"


def model_architecture(cfg: Config) -> dict | None:
    """config.json's size keys for model.name, or None when it cannot be known offline."""
    name = cfg.model.name
    if name == "tiny":
        t = cfg.model.tiny
        return {
            "vocab_size": t.vocab,
            "hidden_size": t.hidden,
            "num_hidden_layers": t.layers,
            "intermediate_size": t.intermediate,
            "max_position_embeddings": cfg.model.max_length + 2,
            "type_vocab_size": 2,  # XLMRobertaConfig's default, which tiny_config keeps
            "num_attention_heads": t.heads,
        }
    local = Path(name) / "config.json"
    if local.is_file():
        arch = json.loads(local.read_text(encoding="utf-8"))
        return arch if buildable(arch) else None
    return KNOWN_MODELS.get(Path(name).name.lower())


def buildable(arch: dict) -> bool:
    """transformers knows the architecture's family, so shapes can build it (a folder's own code is never run)."""
    from transformers import CONFIG_MAPPING

    return arch.get("model_type", "xlm-roberta") in CONFIG_MAPPING


@dataclass
class DiskPlan:
    working: list[tuple[str, int]] = field(default_factory=list)  # (what, bytes): kept as the kernel's output
    temp: list[tuple[str, int]] = field(default_factory=list)  # (what, bytes): scratch, peak at once
    parameters: int = 0  # 0 when the model's size is unknown
    trained: int = 0  # the parameters a fold trains and writes: all of them, or LoRA's adapters and the head
    lora: str = ""  # under LoRA: what the plan says of its frozen base
    trimmed: str = ""  # under model.trim_vocab: the embedding rows kept, and where the figure comes from

    @property
    def working_bytes(self) -> int:
        return sum(b for _, b in self.working)

    @property
    def temp_bytes(self) -> int:
        return sum(b for _, b in self.temp)


def training_row_bound(cfg: Config) -> int:
    """An upper bound of the training table's rows (extra files not counted: their size is not known here)."""
    return ENGLISH_TOXIC + cfg.data.english_negatives + VALID_ROWS + cfg.data.bias_rows


def resume_bytes(cfg: Config, trained: int) -> int:
    """A resume state's bytes: the fp32 weights, the optimizer's state (its record's bytes a parameter) and a
    weight average's fp32 copy (train.average)."""
    average = 4 if cfg.train.average != "none" else 0
    return (4 + OPTIMIZERS[cfg.train.optimizer].state_bytes + average) * trained


def plan_disk(cfg: Config, folds: int) -> DiskPlan:
    """What a run of `folds` folds writes where (see pipeline/notebook.py for the layout)."""
    arch = model_architecture(cfg)
    params = transformer_parameters(arch) if arch else 0
    trained = trained_parameters(cfg, arch) if arch else 0
    weights, resume = 4 * trained, resume_bytes(cfg, trained)  # a LoRA fold's: its adapters and head, never its base
    tokenizer = TOKENIZER_BYTES_PER_TOKEN * (arch or {}).get("vocab_size", 0)
    rows = training_row_bound(cfg)
    exp = f"models/{cfg.name}"
    plan = DiskPlan(parameters=params, trained=trained)
    if arch and cfg.model.trim_vocab:
        rows, source = kept_rows(cfg)
        plan.trimmed = f"{rows:,}, {source}"
    if arch and cfg.model.lora.r > 0:
        base = human(frozen_bytes(cfg, arch))
        plan.lora = (f"LoRA r={cfg.model.lora.r}: a fold writes its adapters and head; its frozen base ({base} on "
                     "each GPU) is read from the model input by every fold")  # fmt: skip
    if cfg.kaggle.keep_weights:
        plan.working.append((f"{exp}/fold<k>/model.safetensors: {folds} x {human(weights)}", folds * weights))
    plan.working += [
        (f"{exp}/fold<k>/tokenizer: {folds} x {human(tokenizer)}", folds * tokenizer),
        (f"{exp}/ OOF predictions (per fold and together)", 2 * rows * OOF_ROW_BYTES),
        (f"{exp}/fold<k>/test.csv, submission.csv, {cfg.name}.csv", (folds + 2) * TEST_ROWS * SUB_ROW_BYTES),
        ("configs, metrics, cv.json, cv.png", LOGS_BYTES),
    ]
    table = (rows + TEST_ROWS) * cfg.model.max_length * 4 + 2 * rows * 1000  # int32 token ids; ~1 kB of text a row
    plan.temp += [
        ("input/: prepared table and token cache", table),
        (f"{exp}/fold<k>/model.safetensors (read by predict): {folds} x {human(weights)}", folds * weights),
        (f"{exp}/fold<k>/resume.pt while a fold trains: 2 x {human(resume)} (old and new, for a moment)", 2 * resume),
    ]
    if cfg.kaggle.keep_resume:  # a fold cut off by the session's limit leaves its state for the next session...
        plan.working.append((f"{exp}/fold<k>/resume.pt of a fold cut off by the time limit", resume))
        if not cfg.kaggle.keep_weights:  # ...and its best evaluation's weights, kept whatever keep_weights says
            plan.working.append((f"{exp}/fold<k>/model.safetensors of that fold (its best evaluation's)", weights))
    if cfg.model.init_from and not cfg.kaggle.init_kernel:  # stage 1 first, in the same session
        stage1 = f"models/{cfg.model.init_from}/fold-1"
        # kept whatever keep_weights says: every fold of a later session starts from it
        plan.working.append((f"{stage1}/model.safetensors (stage 1)", weights))
        plan.working.append((f"{stage1}/tokenizer (stage 1)", tokenizer))
        plan.temp += [
            (f"input/ of {cfg.model.init_from} (stage 1): its table and token cache", table),
            (f"{stage1}/model.safetensors (read by every fold)", weights),
        ]
    return plan


def human(n: float) -> str:
    if n >= GB:
        return f"{n / GB:.2f} GB"
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    return f"{n / 1e3:.1f} kB" if n >= 1e3 else f"{int(n)} B"


def format_plan(plan: DiskPlan, quota_gb: float) -> str:
    size = f"{plan.parameters / 1e6:.1f}M parameters" if plan.parameters else "model size unknown"
    if plan.lora:
        size += f", {plan.trained / 1e6:.1f}M trained"
    elif plan.trimmed:  # model.trim_vocab: the rows the texts use
        size += f", {plan.trained / 1e6:.1f}M kept by model.trim_vocab ({plan.trimmed} embedding rows)"
    lines = [f"kernel: disk plan ({size}); sizes are estimates"]
    if plan.lora:
        lines.append(f"  {plan.lora}")
    lines.append(f"  /kaggle/working (kept, at most {quota_gb:g} GB):")
    lines += [f"    {human(b):>10}  {what}" for what, b in plan.working]
    lines.append(f"    {human(plan.working_bytes):>10}  in all, of {quota_gb:g} GB")
    lines.append("  /kaggle/temp (scratch, not kept):")
    lines += [f"    {human(b):>10}  {what}" for what, b in plan.temp]
    lines.append(f"    {human(plan.temp_bytes):>10}  at most")
    return "\n".join(lines)


def over_quota(plan: DiskPlan, quota_gb: float, must_resume: bool = False) -> str:
    """The fix to print when the kept output passes the quota; "" when it fits. `must_resume`: a fold is longer
    than a session, so kaggle.keep_resume=false is no fix (the fold could never end)."""
    if plan.working_bytes <= quota_gb * GB:
        return ""
    no_resume = "" if must_resume else "kaggle.keep_resume=false (a fold cut off by the time limit starts again next "
    no_resume += "" if must_resume else "session), "
    return (
        f"the run would keep {human(plan.working_bytes)} in /kaggle/working, more than the {quota_gb:g} GB Kaggle "
        "keeps: set kaggle.keep_weights=false (complete folds keep their OOF and test predictions, not their weights: "
        f"they count and predict without them, but cannot predict another test set), {no_resume}train fewer folds "
        "(train.folds=[0,1]), or push one kernel per fold (kaggle.kernel_slug=<name>-fold0 train.folds=[0])"
    )
