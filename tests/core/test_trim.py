"""Vocabulary trimming: the kept ids, the id map, and logits unchanged on texts the trimming saw."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.core import modeling, trim
from pipeline.errors import PipelineError
from pipeline.inputs.tokens import Ragged
from tests.helpers.tinymodel import tiny_classifier

VOCAB = 300


def tiny_model():
    return tiny_classifier(vocab=VOCAB).eval()


def corpus(seed: int = 0) -> Ragged:
    """Rows of varied length from a 60-id slice of the vocabulary, framed by <s> ... </s>."""
    rng = np.random.default_rng(seed)
    words = rng.choice(np.arange(5, VOCAB), 60, replace=False)
    return Ragged.from_lists([[0, *rng.choice(words, int(n)).tolist(), 2] for n in rng.integers(3, 30, 12)])


def test_used_ids_and_map() -> None:
    data = corpus()
    keep = trim.used_ids([data], VOCAB, always=(0, 1, 2, 3))
    assert keep[:4].tolist() == [0, 1, 2, 3]  # specials keep their ids, the pad id above all
    assert set(np.unique(data.ids)) <= set(keep) and len(keep) <= 64
    vmap = trim.vocab_map(keep, VOCAB, unk_id=3)
    assert vmap[keep].tolist() == list(range(len(keep)))
    unseen = np.setdiff1d(np.arange(VOCAB), keep)
    assert (vmap[unseen] == 3).all()  # an id the trimming never saw reads as <unk>
    remapped = trim.remap(data, vmap)
    assert remapped.offsets is data.offsets and int(remapped.ids.max()) < len(keep)


def logits(model, data: Ragged) -> torch.Tensor:
    width = int(data.lengths.max())
    ids = torch.ones(len(data), width, dtype=torch.long)  # pad id 1
    for i in range(len(data)):
        ids[i, : data.lengths[i]] = torch.as_tensor(np.asarray(data[i]), dtype=torch.long)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=(ids != 1).long())


def test_trimming_leaves_predictions_unchanged(tmp_path) -> None:
    model, data = tiny_model(), corpus()
    before = logits(model, data)
    keep = trim.used_ids([data], VOCAB, always=(0, 1, 2, 3))
    vmap = trim.vocab_map(keep, VOCAB, unk_id=3)
    trim.trim_model(model, keep)
    assert model.get_input_embeddings().num_embeddings == len(keep) == model.config.vocab_size
    torch.testing.assert_close(logits(model, trim.remap(data, vmap)), before, rtol=1e-5, atol=1e-6)

    # saved and loaded as a fold is: weights + vocab_map.npy beside them
    modeling.save(model, tmp_path)
    trim.save_map(tmp_path, vmap)
    loaded = modeling.load_fold_model(tmp_path).eval()
    vmap2 = trim.load_map(tmp_path, loaded)
    torch.testing.assert_close(logits(loaded, trim.remap(data, vmap2)), before, rtol=1e-5, atol=1e-6)
    trim.save_map(tmp_path, None)  # an untrimmed retrain removes the stale map
    assert trim.load_map(tmp_path) is None


def test_map_must_fit_the_model(tmp_path) -> None:
    model = tiny_model()
    trim.save_map(tmp_path, trim.vocab_map(np.arange(50), VOCAB, unk_id=3))
    with pytest.raises(PipelineError, match="does not fit"):
        trim.load_map(tmp_path, model)


def test_pad_id_may_not_move() -> None:
    with pytest.raises(PipelineError, match="pad id"):
        trim.trim_model(tiny_model(), np.array([0, 2, 3, 10]))
