"""Vocabulary trimming: keep only the embedding rows of the tokens the competition's texts use.

XLM-R's 250,002 x hidden word embedding is nearly half of the large model's parameters (and more than
two thirds of base's); a competition's texts use a fraction of it. Trimming keeps the used rows in
their old order, so every kept id maps to a smaller id, and saves that old -> new map as
`vocab_map.npy` beside the model. Token ids are cached unchanged; they are remapped when loaded,
so tokenization stays the same and the trimmed model's logits equal the full model's on these texts.

The special ids below the pad id (<s>=0, <pad>=1 for XLM-R) are always kept, so they keep their values:
XLM-R derives position ids from the pad id, and a moved pad id would shift every position.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pipeline import layout
from pipeline.errors import PipelineError
from pipeline.inputs.tokens import Ragged

MAP_FILE = layout.VOCAB_MAP


def used_ids(raggeds, vocab_size: int, always=()) -> np.ndarray:
    """Sorted ids that occur in any of the ragged arrays, plus `always` (the special tokens)."""
    seen = np.zeros(vocab_size, dtype=bool)
    for r in raggeds:
        # bincount is one pass over the ids (np.unique would sort 100M of them)
        seen |= np.bincount(np.asarray(r.ids), minlength=vocab_size)[:vocab_size] > 0
    seen[list(always)] = True
    return np.flatnonzero(seen)


def vocab_map(keep: np.ndarray, vocab_size: int, unk_id: int) -> np.ndarray:
    """old id -> new id (int32); an id that was not kept maps to <unk>'s new id."""
    keep = np.asarray(keep)
    if unk_id not in keep:
        raise PipelineError("vocabulary trimming must keep the <unk> token")
    out = np.full(vocab_size, -1, dtype=np.int32)
    out[keep] = np.arange(len(keep), dtype=np.int32)
    out[out < 0] = out[unk_id]  # texts the trimming did not see still tokenize to something the model knows
    return out


def special_ids(tokenizer) -> list[int]:
    """Every special id and every id up to the pad id (kept so that the pad id does not move)."""
    return sorted(set(tokenizer.all_special_ids) | set(range(tokenizer.pad_token_id + 1)))


def trim_model(model, keep: np.ndarray) -> None:
    """Replace the word embedding (and a tied LM head, if any) by its rows `keep`, in place."""
    keep_t = torch.as_tensor(np.asarray(keep), dtype=torch.long)
    old = model.get_input_embeddings()
    pad = model.config.pad_token_id
    if pad is not None and (pad >= len(keep) or int(keep_t[pad]) != pad):
        raise PipelineError(f"trimming would move the pad id {pad}; keep every id up to it")
    new = torch.nn.Embedding(len(keep), old.embedding_dim, padding_idx=old.padding_idx)
    new.weight.data = old.weight.data[keep_t.to(old.weight.device)].clone()
    new.to(old.weight.device)
    model.set_input_embeddings(new)
    model.config.vocab_size = len(keep)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:  # a masked-LM head: tied to the embedding, its bias indexed the same way
        if getattr(head, "bias", None) is not None:
            head.bias = torch.nn.Parameter(head.bias.data[keep_t.to(head.bias.device)].clone())
        model.tie_weights()


def kept_ids(vmap: np.ndarray, unk_id: int) -> np.ndarray:
    """The ids a map kept (vocab_map's `keep`), read back from it: each id that alone maps to its new id, and <unk>
    (which every dropped id maps to as well). A LoRA fold trims its base with them again when it loads."""
    vmap = np.asarray(vmap)
    counts = np.bincount(vmap, minlength=int(vmap.max()) + 1)
    keep = np.union1d(np.flatnonzero(counts[vmap] == 1), [unk_id])
    if len(keep) != int(vmap.max()) + 1 or not np.array_equal(vmap[keep], np.arange(len(keep))):
        raise PipelineError(f"{MAP_FILE} is not a map of kept ids (damaged?); retrain the fold")
    return keep


def untrim(model, vmap: np.ndarray) -> None:
    """A trimmed model's word embedding given back the tokenizer's whole vocabulary, in place: row i is the row the
    map sends id i to, so every id reads what the trimmed model read for it (an id it dropped: <unk>'s row)."""
    trim_model(model, vmap)  # the map is a list of rows to take, as `keep` is; it keeps the ids up to the pad id


def remap(data: Ragged, vmap: np.ndarray) -> Ragged:
    """The same rows with every id passed through the old -> new map."""
    return Ragged(vmap[np.asarray(data.ids)], data.offsets)


def save_map(folder: Path, vmap: np.ndarray | None) -> None:
    """Write vocab_map.npy, or remove a stale one when the model is not trimmed."""
    path = Path(folder) / MAP_FILE
    if vmap is None:
        path.unlink(missing_ok=True)
    else:
        np.save(path, vmap)


def load_map(folder: Path, model=None) -> np.ndarray | None:
    """The saved map, checked against the model's embedding size; None when the model is not trimmed."""
    path = Path(folder) / MAP_FILE
    if not path.exists():
        return None
    vmap = np.load(path)
    if model is not None and int(vmap.max()) + 1 != model.get_input_embeddings().num_embeddings:
        raise PipelineError(f"{path} does not fit the model beside it (embedding size differs); retrain the fold")
    return vmap
