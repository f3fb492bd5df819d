"""A tiny XLM-R under the pipeline's head for tests: built from a config, no download, no dropout (runs must
match)."""

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
    return modeling.Classifier(modeling.encoder_from_config(conf), pooling, 0.0)
