"""The tiny models of the tests, in one place: a tiny XLM-R under the pipeline's head built from a config (no
download, no dropout: runs must match), the same built through the sample config's `model.tiny` settings, and a
tiny config of every encoder family the pipeline promises to train."""

from __future__ import annotations

import torch
from transformers import XLMRobertaConfig

from pipeline.core import modeling


def tiny_classifier(
    vocab: int = 200, hidden: int = 32, layers: int = 1, intermediate: int = 64, seed: int = 0, pooling: str = "cls"
) -> modeling.Classifier:
    torch.manual_seed(seed)
    conf = XLMRobertaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        intermediate_size=intermediate,
        max_position_embeddings=40,
        pad_token_id=1,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return modeling.Classifier(modeling.encoder_from_config(conf), modeling.HeadSpec(pooling, 0.0))


def sample_tiny(seed: int = 0, *overrides: str) -> modeling.Classifier:
    """The tiny XLM-R the sample config builds (`model.tiny`: 2 layers, hidden 32), fp32, dropout 0."""
    from pipeline import config

    cfg = config.load("sample", [*SAMPLE_TINY, *overrides])
    torch.manual_seed(seed)
    encoder = modeling.encoder_from_config(modeling.tiny_config(cfg, SAMPLE_VOCAB, SAMPLE_PAD))
    return modeling.Classifier(encoder, modeling.HeadSpec("cls", cfg.model.dropout)).float()


SAMPLE_VOCAB, SAMPLE_PAD = 100, 1
SAMPLE_TINY = [
    "model.tiny.layers=2",
    "model.tiny.hidden=32",
    "model.tiny.heads=2",
    "model.tiny.intermediate=64",
    "model.max_length=32",
    "model.dropout=0.0",
]

FAMILIES = ("xlm-roberta", "bert", "distilbert", "deberta-v2", "modernbert")
SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


def family_config(family: str):
    """A tiny config of each family the pipeline promises to train (vocab 120, pad id 1)."""
    from transformers import BertConfig, DebertaV2Config, DistilBertConfig, ModernBertConfig, XLMRobertaConfig

    if family == "modernbert":  # mmBERT's architecture: its special ids inside the tiny vocabulary
        return ModernBertConfig(vocab_size=120, pad_token_id=1, bos_token_id=0, eos_token_id=2, cls_token_id=0,
                                sep_token_id=2, max_position_embeddings=64, **SMALL)  # fmt: skip
    if family == "distilbert":
        return DistilBertConfig(vocab_size=120, dim=32, n_layers=2, n_heads=2, hidden_dim=64, pad_token_id=1,
                                max_position_embeddings=64)  # fmt: skip
    make = {"xlm-roberta": XLMRobertaConfig, "bert": BertConfig, "deberta-v2": DebertaV2Config}[family]
    return make(vocab_size=120, pad_token_id=1, max_position_embeddings=64, **SMALL)
