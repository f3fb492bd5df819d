"""Sentence vectors of texts from a pretrained multilingual encoder (data.group_encoder), cached by content.

Translations of one comment sit close together in a multilingual encoder's space whatever their language
and script, which is what pipeline.inputs.groups needs to find them in a file that does not say which
English comment each row translates. The vector of a text is the encoder's last hidden states averaged
over its tokens (the pooling such encoders are trained with) and scaled to unit length, so that a dot
product is a cosine. Only the first MAX_LENGTH tokens count: a translation keeps its opening.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline import layout
from pipeline.errors import DataError
from pipeline.files import atomic_path, json_digest, tree_digest, waiting_lock
from pipeline.progress import bar
from pipeline.schema import Config

MAX_LENGTH = 64
BATCH = 64


def load(folder: Path):
    """(tokenizer, encoder) of a Hugging Face folder, in eval mode; one line when it is not one."""
    from transformers import AutoModel, AutoTokenizer

    try:
        # never a folder's own code, nor the y/N question about it: a stage's stdout goes to a log, unseen
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
        try:  # a BERT-style folder without a pooler: none is built (nor reported missing)
            model = AutoModel.from_pretrained(folder, dtype="float32", add_pooling_layer=False, trust_remote_code=False)
        except TypeError:  # an architecture without that switch
            model = AutoModel.from_pretrained(folder, dtype="float32", trust_remote_code=False)
    except (OSError, ValueError) as e:
        raise DataError(f"data.group_encoder={folder}: not a model folder transformers can load ({e})") from None
    return tokenizer, model.eval()


def encode(folder: Path, texts: list[str]) -> np.ndarray:
    """Unit-length mean-pooled vectors of `texts` (rows x hidden, float32), shortest texts batched together."""
    import torch

    tokenizer, model = load(folder)
    order = np.argsort([len(t) for t in texts], kind="stable")  # little padding in each batch
    out = None
    with torch.inference_mode():
        for start in bar(range(0, len(texts), BATCH), desc="data: sentence vectors", unit="batch"):
            idx = order[start : start + BATCH]
            batch = tokenizer([texts[i] for i in idx], padding=True, truncation=True, max_length=MAX_LENGTH,
                              return_tensors="pt")  # fmt: skip
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1), dim=-1)
            if out is None:
                out = np.zeros((len(texts), pooled.shape[1]), dtype=np.float32)
            out[idx] = pooled.numpy()
    return out if out is not None else np.zeros((0, 0), dtype=np.float32)


def cached(path: Path, rows: int) -> np.ndarray | None:
    """The vectors saved at `path` if they are there whole, for `rows` texts; None (made again) otherwise."""
    if path.is_file():
        try:
            found = np.load(path)
            if found.shape[0] == rows:
                return found
        except (OSError, ValueError):
            pass  # damaged: made again
    return None


def vectors(cfg: Config, texts: list[str]) -> np.ndarray:
    """encode() with data.group_encoder, cached in input/cache/vectors/ by the encoder's and the texts' content.
    Made once: a second `make data` of the same texts (another experiment's, beside this one) waits for the
    first and reads its vectors."""
    folder = Path(cfg.data.group_encoder).expanduser()
    if not folder.is_dir():
        raise DataError(f"data.group_encoder={cfg.data.group_encoder}: no such folder")
    key = json_digest({"encoder": tree_digest(folder), "texts": json_digest(texts), "max_length": MAX_LENGTH})
    path = layout.vectors_cache(cfg, key)
    with waiting_lock(path.with_name(f".{path.stem}.lock")):
        found = cached(path, len(texts))
        if found is not None:
            return found
        out = encode(folder, texts)
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.save(f, out)
    return out
