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
    with pytest.raises(PipelineError, match="pad id"):  # the pad id past the kept ids
        trim.trim_model(tiny_model(), np.array([0]))


def test_the_ids_of_every_table_are_kept_and_the_pad_row_stays_the_padding_row() -> None:
    """used_ids over the training and the test table: an id of either is kept; the trimmed embedding's padding
    row is the pad id's, as before (it gets no gradient)."""
    train, test = Ragged.from_lists([[0, 10, 2]]), Ragged.from_lists([[0, 20, 2]])
    assert trim.used_ids([train, test], VOCAB, always=(1,)).tolist() == [0, 1, 2, 10, 20]
    model = tiny_model()
    before = model.get_input_embeddings().padding_idx
    trim.trim_model(model, np.array([0, 1, 2, 3, 10, 20]))
    assert before == 1 and model.get_input_embeddings().padding_idx == 1


def test_the_kept_ids_are_read_back_from_their_map_and_a_damaged_map_is_refused() -> None:
    keep = np.array([0, 1, 2, 3, 7, 40, 41])
    vmap = trim.vocab_map(keep, 50, unk_id=3)
    assert vmap.dtype == np.int32  # what vocab_map.npy holds: 4 bytes an id of a 250k vocabulary
    np.testing.assert_array_equal(trim.kept_ids(vmap, unk_id=3), keep)
    # <unk> is kept even where no dropped id maps to it
    np.testing.assert_array_equal(trim.kept_ids(trim.vocab_map(np.arange(6), 6, unk_id=3), unk_id=3), np.arange(6))
    damaged = vmap.copy()
    damaged[40] = 2  # a new id reached twice: id 2's row would be taken for 40
    with pytest.raises(PipelineError, match=r"vocab_map.npy is not a map of kept ids \(damaged\?\); retrain the fold$"):
        trim.kept_ids(damaged, unk_id=3)
    swapped = np.array([1, 0, 2, 3], dtype=np.int32)  # each new id reached once, but out of order
    with pytest.raises(PipelineError, match="not a map of kept ids"):
        trim.kept_ids(swapped, unk_id=3)
    with pytest.raises(PipelineError, match="^vocabulary trimming must keep the <unk> token$"):
        trim.vocab_map(np.array([0, 1, 2]), 50, unk_id=3)


def test_the_special_ids_are_every_special_token_and_every_id_up_to_the_pad_id() -> None:
    from types import SimpleNamespace

    tokenizer = SimpleNamespace(all_special_ids=[0, 2, 3, 250001], pad_token_id=1)
    assert trim.special_ids(tokenizer) == [0, 1, 2, 3, 250001]
    assert trim.special_ids(SimpleNamespace(all_special_ids=[5], pad_token_id=2)) == [0, 1, 2, 5]


def test_untrim_gives_every_id_the_row_the_trimmed_model_read_for_it() -> None:
    model = tiny_model()
    keep = trim.used_ids([corpus()], VOCAB, always=(0, 1, 2, 3))
    vmap = trim.vocab_map(keep, VOCAB, unk_id=3)
    trim.trim_model(model, keep)
    trimmed = model.get_input_embeddings().weight.detach().clone()
    trim.untrim(model, vmap)
    full = model.get_input_embeddings().weight.detach()
    assert full.shape[0] == VOCAB and model.config.vocab_size == VOCAB
    torch.testing.assert_close(full, trimmed[torch.as_tensor(vmap, dtype=torch.long)])


def test_an_untrimmed_model_saves_no_map_and_removes_a_stale_one(tmp_path) -> None:
    trim.save_map(tmp_path, None)  # nothing there: nothing to remove
    trim.save_map(tmp_path, np.arange(4, dtype=np.int32))
    assert trim.load_map(tmp_path) is not None
    trim.save_map(tmp_path, None)
    assert trim.load_map(tmp_path) is None
