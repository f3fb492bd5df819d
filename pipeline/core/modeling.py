"""The model: a hub name, a local folder, or a tiny XLM-R built from a config; and the switches training sets.

The tiny model (config `model.name=tiny`) needs no download: it is XLM-R's architecture at toy size, and
its tokenizer (pipeline.inputs.tokenizer) is trained on the competition's texts by `make data`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification

from pipeline import layout
from pipeline.config import Config
from pipeline.errors import PipelineError


class ModelError(PipelineError):
    pass


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
        num_labels=1,
    )


def build_model(cfg: Config, tokenizer, source: str | Path | None = None):
    """A sequence classifier with one logit: from `source` (a trained fold), the hub name, or tiny."""
    from transformers import XLMRobertaForSequenceClassification

    name = source or layout.init_dir(cfg) or cfg.model.path or cfg.model.name
    if name == "tiny":
        return XLMRobertaForSequenceClassification(tiny_config(cfg, len(tokenizer), tokenizer.pad_token_id))
    # master weights in fp32 whatever the folder stores: transformers 5 keeps a checkpoint's own dtype, and
    # fp16/bf16 trainable weights round most AdamW updates away (and GradScaler refuses fp16 gradients)
    kwargs = {"num_labels": 1, "dtype": torch.float32}
    if source is None:
        kwargs.update(hidden_dropout_prob=cfg.model.dropout, attention_probs_dropout_prob=cfg.model.dropout)
    try:
        return AutoModelForSequenceClassification.from_pretrained(str(name), **kwargs)
    except OSError as e:
        raise ModelError(
            f"cannot load the model {str(name)!r}: not a folder and not in the Hugging Face cache "
            f"(no network?). Point model.name to a local folder. ({str(e).splitlines()[0]})"
        ) from None


def enable_checkpointing(model) -> None:
    """Gradient checkpointing through the model's own switch, non-reentrant (works under DDP).

    transformers 5.x names it activation_checkpointing_enable (the old name is deprecated); 4.x >= 4.35
    has gradient_checkpointing_enable(gradient_checkpointing_kwargs=...). Older 4.x only has the bare
    call, which defaults to the reentrant variant, so we refuse rather than silently use it.
    """
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        try:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        except TypeError:
            raise ModelError("gradient checkpointing needs transformers >= 4.35 (non-reentrant)") from None
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False  # a decoder's KV cache and checkpointing do not mix


def sparse_embedding_grad(model) -> None:
    """Word-embedding gradients as sparse rows, made dense once per optimizer step (loop.densify_grads).

    A dense embedding gradient is vocabulary x hidden (768 MB for XLM-R base): under accumulation every
    micro-batch would build one more in full before adding it in. Sparse, a micro-batch adds only the
    rows it used. One process only: NCCL cannot all-reduce sparse tensors.
    """
    model.get_input_embeddings().sparse = True


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
