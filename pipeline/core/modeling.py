"""The model: any encoder transformers can load (a hub name, a local folder) or a tiny XLM-R built from a
config, under the pipeline's own head; and the switches training sets.

One forward path, the same for training, evaluation, predict, auto-fit's memory probe and `make bench`:

    input ids -> encoder (its last hidden states, under autocast) -> pooling (model.pooling) -> dropout
              -> one linear logit, in fp32 (outside autocast)

`mean` (the default) averages the hidden states over the attention mask, so padding never counts; `cls`
reads the first token. The mean suits every family: an encoder pretrained by masked language modelling
alone (XLM-R) never trained its first token to summarise a text, and sentence encoders (e5) were
pretrained with mean pooling; the first token is what transformers' own RoBERTa head reads. The head is
the pipeline's, not a transformers `...ForSequenceClassification`, so every encoder is trained, scored and
reloaded the same way, and a pooler a checkpoint does not have is never built untrained.

A fold folder holds model.safetensors (the encoder's and the head's weights), config.json (the encoder's
config) and head.json (the pooling and the head's version); the tiny model (`model.name=tiny`) needs no
download: its tokenizer (pipeline.inputs.tokenizer) is trained on the competition's texts by `make data`.
Under LoRA (`model.lora.r` > 0, pipeline.core.lora) model.safetensors holds the adapters and the head only,
and head.json's `lora` block names the base they go over: `model.name` (read from `model.path` wherever the
run is), the tiny XLM-R drawn from a seed, or the stage-1 model of `model.init_from` with its own adapters
merged. Loading such a fold builds that base again, trimmed as the fold was, and puts the adapters on it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from pipeline import fingerprint, layout, validity
from pipeline.core import attention, lora, trim
from pipeline.errors import PipelineError
from pipeline.pooling import POOLINGS
from pipeline.schema import Config

HEAD = fingerprint.HEAD  # the head's version: in every fold's fingerprint and head.json
HEAD_JSON = "head.json"
# the names encoders' configs give their dropout probabilities, all set to model.dropout
DROPOUT_NAMES = (
    "hidden_dropout_prob", "attention_probs_dropout_prob",  # BERT, XLM-R, DeBERTa(-v2), ELECTRA
    "dropout", "attention_dropout",  # DistilBERT, BART-style encoders
    "hidden_dropout", "activation_dropout",  # others
    "embedding_dropout", "mlp_dropout",  # ModernBERT (mmBERT), with attention_dropout above
)  # fmt: skip


class ModelError(PipelineError):
    pass


def pool(hidden: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """[batch, width x hidden] from [batch, seq, hidden]: the pooling `how` names (pipeline.pooling)."""
    return POOLINGS[how].pool(hidden, mask)


@dataclass(frozen=True)
class HeadSpec:
    """What the classification head is: the pooling it reads (pipeline.pooling) and the dropout before it. Every
    Classifier is built from one; head.json holds it (write_head, read_head) with the head's version and, for a
    LoRA fold, the `lora` block."""

    pooling: str
    dropout: float

    @classmethod
    def of(cls, cfg: Config) -> HeadSpec:
        """The head the config asks for (model.pooling, model.dropout)."""
        return cls(cfg.model.pooling, cfg.model.dropout)

    def with_dropout(self, dropout: float | None) -> HeadSpec:
        """This head with `dropout` instead of its own (None: its own)."""
        return self if dropout is None else dataclasses.replace(self, dropout=dropout)


class Classifier(nn.Module):
    """An encoder, pooled, dropped out and read by one linear logit: forward gives fp32 logits [batch]."""

    def __init__(self, encoder: nn.Module, spec: HeadSpec) -> None:
        super().__init__()
        self.encoder, self.spec = encoder, spec
        self.lora: dict | None = None  # head.json's `lora` block once adapters are on (lora.attach)
        self.dropout = nn.Dropout(spec.dropout)
        self.head = nn.Linear(POOLINGS[spec.pooling].width * encoder.config.hidden_size, 1)  # as wide as it pools
        std = getattr(encoder.config, "initializer_range", 0.02)
        nn.init.normal_(self.head.weight, std=std)  # as transformers starts its heads
        nn.init.zeros_(self.head.bias)

    @property
    def config(self):
        return self.encoder.config

    @property
    def pooling(self) -> str:
        return self.spec.pooling

    @property
    def is_activation_checkpointing(self) -> bool:
        """Whether the encoder recomputes its activations in backward (enable_checkpointing)."""
        encoder = self.encoder
        if hasattr(type(encoder), "is_activation_checkpointing"):  # transformers 5.x; the old name warns there
            return bool(encoder.is_activation_checkpointing)
        return bool(getattr(encoder, "is_gradient_checkpointing", False))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        pooled = pool(hidden, attention_mask, self.pooling)
        # the logit in fp32 outside autocast: a bf16 logit keeps 8 bits of mantissa, so close scores tie and
        # AUC (which sees only their order) loses them
        with torch.autocast(device_type=pooled.device.type, enabled=False):
            return self.head(self.dropout(pooled.float())).squeeze(-1)

    def activation_checkpointing_enable(self, **kwargs) -> None:
        """The encoder's own switch (what Trainer calls; the pipeline calls enable_checkpointing)."""
        switch = getattr(self.encoder, "activation_checkpointing_enable", None)
        if switch is not None:
            switch(**kwargs)
        else:  # transformers 4.x
            self.encoder.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs=kwargs.get("activation_checkpointing_kwargs")
            )

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.get_input_embeddings()

    def set_input_embeddings(self, new: nn.Embedding) -> None:
        self.encoder.set_input_embeddings(new)


def tiny_config(cfg: Config, vocab_size: int, pad_id: int):
    from transformers import XLMRobertaConfig

    t = cfg.model.tiny
    return XLMRobertaConfig(
        vocab_size=vocab_size,
        hidden_size=t.hidden,
        num_hidden_layers=t.layers,
        num_attention_heads=t.heads,
        intermediate_size=t.intermediate,
        max_position_embeddings=cfg.model.max_length + pad_id + 1,  # positions start after the pad id
        hidden_dropout_prob=cfg.model.dropout,
        attention_probs_dropout_prob=cfg.model.dropout,
        pad_token_id=pad_id,
        bos_token_id=0,
        eos_token_id=2,
    )


def with_dropout(config, p: float) -> list[str]:
    """Set every dropout probability the config names (DROPOUT_NAMES) to `p`; the names set."""
    found = [n for n in DROPOUT_NAMES if isinstance(getattr(config, n, None), float)]
    for name in found:
        setattr(config, name, p)
    return found


def encoder_from_config(config, dtype: torch.dtype | None = None) -> nn.Module:
    """The bare encoder of a config, randomly initialised, without a pooler (the head pools); in `dtype` from the
    start where given (`make bench`'s frozen XLM-R XL: 7 GB in half precision, never 14 in fp32 first)."""
    from transformers import AutoModel

    kwargs = {} if dtype is None else {"dtype": dtype}
    try:
        return AutoModel.from_config(config, add_pooling_layer=False, trust_remote_code=False, **kwargs)
    except TypeError:  # an architecture without a pooler to switch off
        return AutoModel.from_config(config, trust_remote_code=False, **kwargs)


def meta_encoder(config) -> nn.Module:
    """The bare encoder of a config on the meta device: every shape, no memory (XLM-R XL's 3.5B parameters in
    seconds), for the counts of what a model would be before it is read (cpusize, the Kaggle plans)."""
    with torch.device("meta"):
        return encoder_from_config(config)


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def _damaged(folder: Path | str, what: str, e: BaseException, fix: str) -> ModelError:
    """A model folder's file that does not read (truncated, half copied) as one line naming it."""
    return ModelError(f"{folder}: cannot read {what} ({type(e).__name__}: {_first_line(e)}); {fix}")


def pretrained_encoder(name: str, dropout: float, dtype: torch.dtype = torch.float32, quantized=None,
                       device: torch.device | None = None) -> nn.Module:  # fmt: skip
    """A pretrained encoder in fp32 with model.dropout set, or one line saying what it lacks. A LoRA base comes in
    its frozen `dtype`, or `quantized` (a BitsAndBytesConfig) on the CUDA `device`."""
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModel

    try:
        # never a folder's own code, nor the y/N question about it: a stage's stdout goes to a log, unseen
        config = AutoConfig.from_pretrained(name, trust_remote_code=False)
    except (OSError, ValueError) as e:
        if Path(name, "config.json").is_file():  # a local folder whose config.json is damaged, not a hub name
            raise _damaged(Path(name, "config.json"), "the model's config", e, "copy the folder again") from None
        raise ModelError(
            f"cannot load the model {name!r}: not a folder and not in the Hugging Face cache (no network?). "
            f"Point model.name to a local folder. ({_first_line(e)})"
        ) from None
    if not hasattr(config, "hidden_size"):
        raise ModelError(
            f"{name!r} ({config.model_type}): its config has no hidden_size; not an encoder the head can read"
        )
    with_dropout(config, dropout)
    # master weights in fp32 whatever the folder stores: transformers 5 keeps a checkpoint's own dtype, and
    # fp16/bf16 trainable weights round most AdamW updates away (and GradScaler refuses fp16 gradients). A frozen
    # LoRA base is read straight into half precision: XLM-R XL read in fp32 first would need 14 GB of host memory
    kwargs = {"config": config, "dtype": dtype, "trust_remote_code": False}
    if quantized is not None:
        kwargs |= {"quantization_config": quantized, "device_map": {"": device.index or 0}}
    try:
        try:
            return AutoModel.from_pretrained(name, add_pooling_layer=False, **kwargs)
        except TypeError:
            return AutoModel.from_pretrained(name, **kwargs)
    except SafetensorError as e:  # a truncated weights file: not an OSError to the safetensors library
        single = Path(name, layout.WEIGHTS)  # a sharded checkpoint's folder is named instead
        raise _damaged(single if single.is_file() else name, "the weights", e, "copy the folder again") from None
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot load the encoder of {name!r}: {_first_line(e)}") from None


def write_head(folder: Path, spec: HeadSpec, lora_block: dict | None) -> None:
    """head.json: the head's version, its spec and, for a LoRA fold, the `lora` block (which base, which
    adapters)."""
    head = {"version": HEAD, **dataclasses.asdict(spec)}
    if lora_block is not None:
        head["lora"] = lora_block
    (Path(folder) / HEAD_JSON).write_text(json.dumps(head, indent=1) + "\n")


def head_spec(head: dict) -> HeadSpec:
    """The HeadSpec of a head.json read by read_head."""
    return HeadSpec(**{f.name: head[f.name] for f in dataclasses.fields(HeadSpec)})


def read_head(folder: Path) -> dict:
    """A fold folder's head.json (head_spec gives its HeadSpec); one line saying to retrain a fold made before the
    pipeline had its head."""
    path = Path(folder) / HEAD_JSON
    try:
        head = json.loads(path.read_text())
    except (OSError, ValueError):
        raise ModelError(
            f"{folder}: no {HEAD_JSON} (a model made by an older version); retrain it with `make train`"
        ) from None
    if head.get("version") != HEAD:
        raise ModelError(
            f"{path}: head {head.get('version')!r}, this version reads {HEAD!r}; retrain it with `make train`"
        )
    return head


def load_fold_model(folder: Path, dropout: float | None = None, cfg: Config | None = None, tokenizer=None,
                    precision: str = "fp32", device: torch.device | None = None) -> Classifier:  # fmt: skip
    """The Classifier a fold folder (or a stage-1 model's) holds, in fp32; `dropout` replaces its own. A LoRA
    fold is its base (built from `cfg`, the frozen part in `precision`'s dtype) with its adapters on."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    from transformers import AutoConfig

    head = read_head(folder)
    if head.get("lora"):
        if cfg is None:
            raise ModelError(f"{folder}: a LoRA fold holds its adapters only; it loads with its config (build_model)")
        return load_lora_fold(Path(folder), head, cfg, tokenizer, precision, device, dropout)
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError) as e:
        raise _damaged(Path(folder) / "config.json", "the fold's config", e, "retrain the fold") from None
    if dropout is not None:
        with_dropout(config, dropout)
    model = Classifier(encoder_from_config(config), head_spec(head).with_dropout(dropout))
    try:
        weights = load_file(Path(folder) / layout.WEIGHTS)
    except (SafetensorError, OSError) as e:
        raise _damaged(Path(folder) / layout.WEIGHTS, "the weights", e, "retrain the fold") from None
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise ModelError(f"{folder / layout.WEIGHTS}: does not fit its config.json ({len(missing)} weights "
                         f"missing, {len(unexpected)} unexpected); retrain the fold")  # fmt: skip
    return model.float()


def load_lora_fold(folder: Path, head: dict, cfg: Config, tokenizer, precision: str, device, dropout) -> Classifier:
    """A LoRA fold's model: its base built again (lora_base), trimmed as the fold was, its adapters and head on."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    block = head["lora"]
    # the head as the fold trained it (head.json's pooling), whatever the config's: its width is the pooling's
    model = lora_base(cfg, tokenizer, block["base"], head_spec(head).with_dropout(dropout), precision, device,
                      block["quantize"])  # fmt: skip
    vmap = trim.load_map(folder)
    # a base with the tokenizer's whole vocabulary is trimmed as the fold was; a trimmed stage-1 model already is
    if vmap is not None and model.get_input_embeddings().num_embeddings == len(vmap):
        trim.trim_model(model, trim.kept_ids(vmap, tokenizer.unk_token_id))
    lora.attach(model, block, lora.base_dtype(precision), where=str(folder))
    try:
        weights = load_file(folder / layout.WEIGHTS)
    except (SafetensorError, OSError) as e:
        raise _damaged(folder / layout.WEIGHTS, "the adapters", e, "retrain the fold") from None
    lora.load_trained(model, weights, str(folder / layout.WEIGHTS))
    return model


def base_from(cfg: Config) -> str:
    """Which base a LoRA fold of this config goes over: `init_from`, `init_folds`, `tiny` or `model` (base_record's
    `from`)."""
    if cfg.model.init_folds:
        return "init_folds"
    return "init_from" if cfg.model.init_from else "tiny" if cfg.model.name == "tiny" else "model"


def base_record(cfg: Config, tokenizer, fold: int = 0) -> dict | None:
    """Where a LoRA fold's base comes from, as head.json keeps it; None without LoRA (model.lora.r=0). Fold `fold`
    of model.init_folds' experiment is a base of its own: the fold and its digest are recorded."""
    if not lora.on(cfg.model.lora):
        return None
    if base_from(cfg) == "init_from":
        return {"from": "init_from", "digest": validity.init_digest(cfg)}
    if base_from(cfg) == "init_folds":
        return {
            "from": "init_folds",
            "fold": fold,
            "digest": validity.read_done(validity.init_dir(cfg, fold))["digest"],
        }
    if base_from(cfg) == "tiny":  # random weights: the seed and the config draw them again
        config = tiny_config(cfg, len(tokenizer), tokenizer.pad_token_id)
        return {"from": "tiny", "seed": cfg.train.seed, "config": config.to_dict()}
    return {"from": "model", "name": cfg.model.name}


def lora_base(cfg: Config, tokenizer, base: dict, spec: HeadSpec, precision: str, device, quantize: str) -> Classifier:
    """The frozen base a LoRA fold trains over, under a new head: `base` (base_record's) built again, in the dtype
    lora.attach casts it to (a pretrained one read straight into it) or quantized. `spec`: a trained fold's
    (head.json's), whose head is as wide as it pools, or the config's."""
    dropout = spec.dropout
    dtype = lora.base_dtype(precision)
    lora.check_quantize(quantize, base["from"], device or torch.device("cpu"))
    if base["from"] in ("init_from", "init_folds"):  # a stage-1 model, or fold k of model.init_folds' experiment
        init = validity.init_dir(cfg, base.get("fold", 0))
        if init is None or validity.read_done(init)["digest"] != base["digest"]:
            raise ModelError(f"{validity.init_setting(cfg) or 'model.init_from=(none)'}: not the model the adapters "
                             f"were trained over; retrain the fold")  # fmt: skip
        model = load_fold_model(init, dropout, cfg, tokenizer, precision, device)
        lora.merge(model)  # a LoRA model started from: its adapters become part of the frozen base
        if spec.pooling != model.pooling:  # a fold's own pooling over its stage-1 base: a head of its width
            return Classifier(model.encoder, spec).to(model.head.weight.device)
        return model
    if base["from"] == "tiny":
        from transformers import AutoConfig

        config = AutoConfig.for_model(**base["config"])
        with_dropout(config, dropout)
        with torch.random.fork_rng():  # the same weights wherever it is built again, the run's random numbers kept
            torch.manual_seed(base["seed"])
            encoder = encoder_from_config(config)
    else:  # where model.name's files are here (model.path), when the fold was made from this config's model
        name = (cfg.model.path or cfg.model.name) if base["name"] == cfg.model.name else base["name"]
        quantized = lora.quantization(quantize, dtype, device or torch.device("cpu"))
        encoder = pretrained_encoder(str(name), dropout, dtype, quantized, device)
    return Classifier(encoder, spec)


def build_model(cfg: Config, tokenizer, source: str | Path | None = None, precision: str = "fp32",
                device: torch.device | None = None, fold: int = 0) -> Classifier:  # fmt: skip
    """The model a fold trains or predicts with: a trained fold's (`source`), a stage-1 model's, fold `fold` of
    model.init_folds' experiment, or the encoder model.name names (model.path holding its files), or the tiny
    XLM-R, under a new head. Under LoRA the encoder is its frozen base in `precision`'s dtype; the caller trims it,
    then puts the adapters on."""
    model = _built(cfg, tokenizer, source, precision, device, fold)
    attention.apply(model.encoder, cfg.model.attn_implementation, device)  # after peft: the adapters wrap it
    return model


def _built(cfg: Config, tokenizer, source, precision: str, device, fold: int) -> Classifier:
    if source is not None:
        return load_fold_model(Path(source), cfg=cfg, tokenizer=tokenizer, precision=precision, device=device)
    base = base_record(cfg, tokenizer, fold)
    if base is not None:
        return lora_base(cfg, tokenizer, base, HeadSpec.of(cfg), precision, device, cfg.model.lora.quantize)
    init = validity.init_dir(cfg, fold)
    if init is not None:
        model = load_fold_model(init, cfg.model.dropout, cfg, tokenizer)
        lora.merge(model)  # a LoRA stage-1 model under a fold that trains every weight: one plain encoder
        return model.float()
    name = cfg.model.path or cfg.model.name
    if name == "tiny":
        encoder = encoder_from_config(tiny_config(cfg, len(tokenizer), tokenizer.pad_token_id))
    else:
        encoder = pretrained_encoder(str(name), cfg.model.dropout)
    return Classifier(encoder, HeadSpec.of(cfg))


def trained_state(model: Classifier) -> dict[str, torch.Tensor]:
    """What a fold saves and resumes: every weight, or under LoRA the adapters and the head only."""
    return lora.trained_state(model) if model.lora is not None else model.state_dict()


def load_trained(model: Classifier, state: dict[str, torch.Tensor], where: str) -> None:
    """trained_state's tensors back into the model (a resume state's)."""
    if model.lora is not None:
        lora.load_trained(model, state, where)
    else:
        model.load_state_dict(state)


def save(model: Classifier, folder: Path) -> None:
    """model.safetensors, config.json and head.json of a Classifier into `folder` (a LoRA fold: its adapters and
    head, and the `lora` block that says which base they go over)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in trained_state(model).items()}
    save_file(state, folder / layout.WEIGHTS, metadata={"format": "pt"})
    model.encoder.config.save_pretrained(folder)
    write_head(folder, model.spec, model.lora)


def enable_checkpointing(model) -> None:
    """Gradient checkpointing through the encoder's own switch, non-reentrant (works under DDP).

    transformers 5.x names it activation_checkpointing_enable (the old name is deprecated); 4.x >= 4.35
    has gradient_checkpointing_enable(gradient_checkpointing_kwargs=...). Older 4.x only has the bare
    call, which defaults to the reentrant variant, so we refuse rather than silently use it.
    """
    encoder = model.encoder if isinstance(model, Classifier) else model
    if not getattr(encoder, "supports_gradient_checkpointing", False):
        raise ModelError(f"{type(encoder).__name__} has no gradient checkpointing; set train.checkpointing=false")
    kwargs = {"use_reentrant": False}
    if hasattr(encoder, "activation_checkpointing_enable"):
        encoder.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        try:
            encoder.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        except TypeError:
            raise ModelError("gradient checkpointing needs transformers >= 4.35 (non-reentrant)") from None
    if hasattr(encoder.config, "use_cache"):
        encoder.config.use_cache = False  # a decoder's KV cache and checkpointing do not mix


def sparse_embedding_grad(model) -> None:
    """Word-embedding gradients as sparse rows, made dense once per optimizer step (loop.densify_grads).

    A dense embedding gradient is vocabulary x hidden (768 MB for XLM-R base): under accumulation every
    micro-batch would build one more in full before adding it in. Sparse, a micro-batch adds only the
    rows it used. One process only: NCCL cannot all-reduce sparse tensors.
    """
    model.get_input_embeddings().sparse = True


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
