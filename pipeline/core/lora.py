"""LoRA (`model.lora`): the encoder frozen, low-rank adapters on its projections trained beside the head (peft).

Full fine-tuning keeps 16 bytes a parameter on the device (the fp32 weight, its gradient, AdamW's two moments):
56 GB for XLM-R XL's 3.5 billion. Under LoRA the frozen base keeps 2 bytes a parameter in a bf16 or fp16 run
(4 in an fp32 run, about 1 or 0.5 quantized to 8 or 4 bits on CUDA) and has no gradient and no optimizer state;
each targeted projection W (out x in) gets A (r x in) and B (out x r) in fp32, B starting at zero, and computes
W x + (alpha / r) B A x. Only A, B and the head are trained, and only they are saved: a fold's model.safetensors
holds them, and head.json's `lora` block says how to build the base again (pipeline.core.modeling) and holds a
sample of the base's values, checked at every load so that adapters are never read over another base.

Which projections are found by each encoder family's module names (FAMILIES): a family not there, or one whose
modules do not match, is refused in one line. This module is the only one that imports peft.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import warnings

import numpy as np
import torch

from pipeline.errors import PipelineError

# module names of each family's projections, matched at the end of a module's dotted name
BERT_LIKE = {
    "query": r"attention\.self\.query",
    "key": r"attention\.self\.key",
    "value": r"attention\.self\.value",
    "output": r"attention\.output\.dense",
    "feed_forward": r"(intermediate|layer\.\d+\.output)\.dense",
}
FAMILIES = {
    **{family: BERT_LIKE for family in ("xlm-roberta", "xlm-roberta-xl", "roberta", "camembert", "bert", "electra")},
    "deberta-v2": {
        **BERT_LIKE,
        **{k: rf"attention\.self\.{k}_proj" for k in ("query", "key", "value")},
    },
    "distilbert": {
        "query": r"attention\.q_lin",
        "key": r"attention\.k_lin",
        "value": r"attention\.v_lin",
        "output": r"attention\.out_lin",
        "feed_forward": r"ffn\.lin[12]",
    },
    # ModernBERT (mmBERT): query, key and value in one fused matrix, a GLU feed-forward whose Wi is twice as wide
    "modernbert": {"qkv": r"attn\.Wqkv", "output": r"attn\.Wo", "feed_forward": r"mlp\.W[io]"},
}
FUSED = ("query", "key", "value")  # what a family's one `qkv` projection computes together
TARGETS = {
    "qv": ("query", "value"),
    "attention": ("query", "key", "value", "output"),
    "all": ("query", "key", "value", "output", "feed_forward"),
}
HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}
SAMPLE_TENSORS, SAMPLE_VALUES = 16, 8  # the base's values head.json keeps: a few from each of a few tensors


class LoraError(PipelineError):
    pass


def on(lora_cfg) -> bool:
    """LoRA is on (`model.lora.r` > 0); at 0 every weight is trained, as before LoRA existed."""
    return lora_cfg.r > 0


def base_dtype(precision: str) -> torch.dtype:
    """The frozen base's dtype: the run's half precision, or fp32 in an fp32 run (no autocast to cast it there)."""
    return HALF.get(precision, torch.float32)


def target_names(encoder: torch.nn.Module, targets: str) -> list[str]:
    """The dotted names of the encoder's linear projections that `targets` (model.lora.targets) names."""
    family = getattr(encoder.config, "model_type", type(encoder).__name__)
    patterns = FAMILIES.get(family)
    if patterns is None:
        raise LoraError(f"model.lora: the {family} family's projections are not known to the pipeline (known: "
                        f"{', '.join(sorted(FAMILIES))}); set model.lora.r=0 to train it whole")  # fmt: skip
    wanted = re.compile(rf"(^|\.)({'|'.join(patterns[t] for t in roles(patterns, targets, family))})$")
    names = [n for n, m in encoder.named_modules() if isinstance(m, torch.nn.Linear) and wanted.search(n)]
    # a quantized base's projections are bitsandbytes layers, subclasses of nn.Linear: found the same way
    if not names:
        raise LoraError(f"model.lora: no {targets} projections found in this {family} model ({type(encoder).__name__})"
                        f"; set model.lora.r=0 to train it whole")  # fmt: skip
    return names


def roles(patterns: dict, targets: str, family: str) -> tuple[str, ...]:
    """The keys of a family's `patterns` that `targets` adapts: query, key and value as one `qkv` where the family
    fuses them, refused in one line where `targets` would adapt some of them without the others."""
    wanted = TARGETS[targets]
    if "qkv" not in patterns:
        return wanted
    if not set(FUSED) <= set(wanted):  # an adapter on the fused matrix would adapt key (and query) too: not `qv`
        raise LoraError(f"model.lora.targets={targets}: the {family} family computes query, key and value in one "
                        f"fused projection, which cannot be adapted in part; use model.lora.targets=attention or "
                        f"all")  # fmt: skip
    return ("qkv", *(t for t in wanted if t not in FUSED))


def spec(lora_cfg, encoder: torch.nn.Module, base: dict) -> dict:
    """head.json's `lora` block before the base is sampled: the settings, the projections and the base's source."""
    names = target_names(encoder, lora_cfg.targets)
    modules = dict(encoder.named_modules())
    side = min(min(modules[n].in_features, modules[n].out_features) for n in names)
    if lora_cfg.r >= side:  # B A of rank r >= the projection's smaller side: more weights than W, nothing more to say
        raise LoraError(f"model.lora.r={lora_cfg.r}: not below {side}, the smaller side of the smallest projection "
                        f"it adapts, so its adapters would hold more weights than the projection and express nothing "
                        f"more; use model.lora.r below {side}, or model.lora.r=0 to train every weight")  # fmt: skip
    return {"r": lora_cfg.r, "alpha": lora_cfg.alpha, "dropout": lora_cfg.dropout, "targets": lora_cfg.targets,
            "quantize": lora_cfg.quantize, "modules": names, "base": base}  # fmt: skip


# each base (base_record's `from`) as a refusal names it
BASES = {"tiny": "tiny model", "init_from": "stage-1 model", "init_folds": "earlier experiment's fold"}


def check_quantize(quantize: str, base_from: str, device: torch.device) -> None:
    """Refuse, in one line, a model.lora.quantize this run cannot read its base with (`base_from`: base_record's
    `from`): called before any fold starts (pipeline.train) as well as where the base is read."""
    if quantize == "none":
        return
    if base_from != "model":
        raise LoraError(
            f"model.lora.quantize={quantize}: only a pretrained model.name is read quantized, not the "
            f"{BASES.get(base_from, base_from)}; use model.lora.quantize=none"
        )
    if device.type != "cuda":
        raise LoraError(f"model.lora.quantize={quantize} runs only on a CUDA GPU (bitsandbytes); use "
                        f"model.lora.quantize=none here")  # fmt: skip
    if importlib.util.find_spec("bitsandbytes") is None:  # else transformers' ImportError, mid-load, as a traceback
        raise LoraError(f"model.lora.quantize={quantize} needs bitsandbytes, which is not installed here")


def quantization(quantize: str, dtype: torch.dtype, device: torch.device):
    """transformers' BitsAndBytesConfig for model.lora.quantize (None for `none`), or one line where it cannot run."""
    if quantize == "none":
        return None
    check_quantize(quantize, "model", device)
    from transformers import BitsAndBytesConfig

    if quantize == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    # NF4 with its constants quantized too (QLoRA); the matrix products run in the run's half precision
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=dtype)  # fmt: skip


def peft_module():
    """peft, imported quietly: on a CPU, bitsandbytes (which peft imports when it is there) logs at its import that
    an optional 4-bit kernel is missing, which no run of the pipeline uses on a CPU."""
    log = logging.getLogger("bitsandbytes")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        import peft
    finally:
        log.setLevel(level)  # its later warnings (on a GPU) are said as usual
    return peft


def attach(model, block: dict, dtype: torch.dtype, where: str = "") -> dict:
    """Freeze `model.encoder` (cast to `dtype` unless quantized), check or take the sample of its values, and put
    adapters on the projections `block` names; the block with its sample is returned and kept as `model.lora`.
    `where`: the fold folder whose block is read (its sample is checked), '' for a fold that starts now."""
    encoder = model.encoder
    # the embedding included (a trimmed one stays frozen too); peft freezes all but its adapters as well, but the
    # cast and the sample below must see the base as it trains
    encoder.requires_grad_(False)
    if block["quantize"] == "none":
        encoder.to(dtype)  # a quantized base is already in its 8 or 4 bits, its other weights in `dtype`
    sample = base_sample(encoder)
    if where:
        check_base(sample, block.get("sample"), where)
    peft = peft_module()
    config = peft.LoraConfig(r=block["r"], lora_alpha=block["alpha"], lora_dropout=block["dropout"],
                             target_modules=block["modules"], bias="none")  # fmt: skip
    # autocast_adapter_dtype: the adapters in fp32 over a half-precision base (AdamW's updates would round away
    # in half precision); peft's default, said here because it is what makes them trainable
    with warnings.catch_warnings():  # peft reads transformers' deprecated is_gradient_checkpointing: not ours to fix
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        model.encoder = peft.get_peft_model(encoder, config, autocast_adapter_dtype=True)
    model.lora = {**block, "sample": sample}
    return model.lora


def trained_state(model) -> dict[str, torch.Tensor]:
    """What a LoRA fold saves and resumes: the tensors training changes (adapters and head), never the base."""
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    return {k: v for k, v in model.state_dict().items() if k in trained}


def load_trained(model, state: dict[str, torch.Tensor], where: str) -> None:
    """The adapters and the head from `state` (trained_state's), refusing one that does not fit in one line."""
    want = set(trained_state(model))
    if set(state) != want:
        raise LoraError(f"{where}: its adapters do not fit this model ({len(want - set(state))} missing, "
                        f"{len(set(state) - want)} unexpected); retrain the fold")  # fmt: skip
    model.load_state_dict(state, strict=False)  # the base is the one built, checked by its sample


def check_mergeable(block: dict | None) -> None:
    """Refuse, in one line, to merge adapters trained over a quantized base (`block`: head.json's `lora`)."""
    if block and block["quantize"] != "none":  # adding into 4 or 8 bits would round the adapters' part away
        raise LoraError(
            f"a fold trained on a {block['quantize']} base cannot be merged into plain weights; "
            "train it with model.lora.quantize=none to export it or start a stage-2 fold from it"
        )


def merge(model) -> None:
    """The adapters added into the base's weights (W + alpha / r B A) and peft taken away: a plain encoder, every
    weight trainable, that gives what base and adapters gave, for a stage-2 fold or an export."""
    if model.lora is None:
        return
    check_mergeable(model.lora)
    model.encoder = model.encoder.merge_and_unload()
    # attach froze the base: a plain encoder trains whole again (a full stage-2 fold), or is frozen anew (attach)
    model.encoder.requires_grad_(True)
    model.lora = None


def base_sample(encoder: torch.nn.Module) -> list[float]:
    """A few values of a few of the base's tensors (floating point ones: a quantized matrix is packed integers),
    spread over the model: enough to tell one base from another, small enough for head.json."""
    state = {k: v for k, v in encoder.state_dict().items() if torch.is_floating_point(v) and v.numel()}
    names = sorted(state)
    picked = names[:: max(1, len(names) // SAMPLE_TENSORS)][:SAMPLE_TENSORS]
    out = []
    for name in picked:
        flat = state[name].detach().reshape(-1)
        # integer positions: a float32 linspace rounds the last one past the end of a tensor over 2**24 values
        last = flat.numel() - 1
        index = torch.tensor([i * last // (SAMPLE_VALUES - 1) for i in range(SAMPLE_VALUES)], device=flat.device)
        out += flat[index].double().cpu().tolist()  # the same positions whatever the device
    return out


def check_base(sample: list[float], recorded: list[float] | None, where: str) -> None:
    """The base built now against the one the adapters were trained over: equal up to its precision's rounding
    (a fold trained over a bf16 base may be read over the same base in fp32)."""
    if recorded is None or len(sample) != len(recorded):
        raise LoraError(f"{where}: the base model has another shape than the one its adapters were trained over; "
                        f"retrain the fold")  # fmt: skip
    if not np.allclose(sample, recorded, rtol=1e-2, atol=1e-3):
        raise LoraError(f"{where}: the base model is not the one its adapters were trained over (another model.name "
                        f"or model.path, another seed or stage-1 model); retrain the fold")  # fmt: skip
