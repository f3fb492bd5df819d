"""The tokenizer: XLM-R's own from a folder or the hub, or the tiny model's, trained on the competition's texts.

The tiny model's tokenizer is a SentencePiece-style unigram model trained here and saved as an ordinary
transformers folder, laid out like XLM-R's: <s> <pad> </s> <unk>, the pieces, then <mask>.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerFast

from pipeline.errors import PipelineError
from pipeline.files import atomic_dir

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # XLM-R's ids: <s>=0 <pad>=1 </s>=2 <unk>=3


class TokenizerError(PipelineError):
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
        # never a folder's own code, nor the y/N question about it: a stage's stdout goes to a log, unseen
        tok = AutoTokenizer.from_pretrained(str(source), use_fast=True, trust_remote_code=False)
    except (OSError, ValueError) as e:
        raise TokenizerError(
            f"cannot load the tokenizer {source!r}: not a folder and not in the Hugging Face cache "
            f"(no network?). Point model.name to a local folder that holds it. ({str(e).splitlines()[0]})"
        ) from None
    if not tok.is_fast:
        raise TokenizerError(f"{source}: the pipeline needs a fast tokenizer (tokenizer.json)")
    return tok
