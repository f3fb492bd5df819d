"""The model and its tokenizer: a hub name, a local folder, or a tiny XLM-R built from a config.

The tiny model (config `model.name=tiny`) needs no download: its tokenizer is a SentencePiece-style
unigram model trained here on the competition's texts and saved as an ordinary transformers folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedTokenizerFast

from pipeline import lineage
from pipeline.config import Config
from pipeline.errors import PipelineError
from pipeline.io import atomic_dir

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # XLM-R's ids: <s>=0 <pad>=1 </s>=2 <unk>=3


class ModelError(PipelineError):
    pass


def train_tokenizer(texts, vocab_size: int, dest: Path, note: dict | None = None) -> Path:
    """Train a SentencePiece unigram model with XLM-R's special tokens and save it as a transformers folder.

    SentencePiece trains deterministically (the same texts give the same pieces and scores); the
    pieces then become a fast `tokenizers` Unigram model, laid out like XLM-R's: <s> <pad> </s> <unk>,
    the pieces, then <mask>.
    """
    import io

    import sentencepiece as spm
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers.processors import TemplateProcessing

    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=proto,
        vocab_size=vocab_size - len(SPECIALS) + 1,  # its own <unk> gives way to the 5 specials
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        num_threads=1,
        unk_id=0,
        bos_id=-1,
        eos_id=-1,
        max_sentence_length=1 << 16,
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    pieces = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(1, sp.get_piece_size())]  # 0 is sp's <unk>
    vocab = [(t, 0.0) for t in SPECIALS[:4]] + pieces + [(SPECIALS[4], 0.0)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tok.normalizer = normalizers.Sequence(
        [normalizers.Nmt(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    # <s> text </s>, as XLM-R frames every sequence
    tok.post_processor = TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        sep_token="</s>",
        cls_token="<s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )
    with atomic_dir(dest) as tmp:
        fast.save_pretrained(tmp)
        (tmp / "trained_on.json").write_text(json.dumps(note or {}))
    return dest


def load_tokenizer(source: str | Path):
    """A fast tokenizer from a folder or the hub; offline failures say what to do."""
    try:
        tok = AutoTokenizer.from_pretrained(str(source), use_fast=True)
    except (OSError, ValueError) as e:
        raise ModelError(
            f"cannot load the tokenizer {source!r}: not a folder and not in the Hugging Face cache "
            f"(no network?). Point model.name to a local folder that holds it. ({str(e).splitlines()[0]})"
        ) from None
    if not tok.is_fast:
        raise ModelError(f"{source}: the pipeline needs a fast tokenizer (tokenizer.json)")
    return tok


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

    name = source or lineage.init_dir(cfg) or cfg.model.path or cfg.model.name
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
