"""pipeline.inputs.tokens: the tiny tokenizer, the keyed token cache, Ragged arrays, damage detection."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from pipeline import config, data, layout
from pipeline.errors import PipelineError
from pipeline.files import read_json, write_json
from pipeline.inputs import tables, tokens
from pipeline.inputs import tokenizer as tokenizer_mod
from pipeline.inputs.tokenizer import load_tokenizer
from pipeline.inputs.tokens import Ragged
from pipeline.schema import Config
from tests.helpers import make_cfg, prepare_tokens, stage_args

MULTILINGUAL = [
    "спасибо пожалуйста обсуждение раздел",  # Cyrillic
    "teşekkürler ılık kaynakça bağlantı şehir",  # Turkish, dotless ı
    "gracias por favor, el artículo música",
    "grazie città musica squadra",
    "l'article s'il vous plaît",
    "obrigado discussão seção",
]


def quiet(*_args) -> None:
    pass


def prepare(tmp_path: Path, *overrides: str) -> tuple[Config, dict]:
    cfg = make_cfg(tmp_path, *overrides)
    data.prepare(cfg, log=quiet)
    return cfg, prepare_tokens(cfg, log=quiet)


@pytest.fixture
def built(tmp_path: Path) -> tuple[Config, dict]:
    return prepare(tmp_path)


def cache_folder(cfg: Config, info: dict) -> Path:
    return layout.cache_root(cfg) / info["key"]


# ---------------------------------------------------------------- Ragged


def test_ragged_from_lists() -> None:
    r = Ragged.from_lists([[5, 6, 7], [], [8]])
    assert len(r) == 3
    assert r[0].tolist() == [5, 6, 7] and r[1].tolist() == [] and r[2].tolist() == [8]
    assert r.lengths.tolist() == [3, 0, 1]
    assert r.ids.dtype == np.int32 and r.offsets.dtype == np.int64
    assert len(Ragged.from_lists([])) == 0


def test_cache_round_trip(built) -> None:
    cfg, info = built
    table, test, meta = tables.load_table(cfg)
    splits, cmeta = tokens.load_cache(cfg, meta)
    assert cmeta["key"] == info["key"]
    tok = load_tokenizer(tokens.tokenizer_source(cfg))
    for split, texts in (("train", list(table["text"])), ("test", list(test["text"]))):
        ragged = splits[split]
        assert isinstance(ragged.ids, np.memmap)  # read from disk lazily, not loaded whole
        assert len(ragged) == len(texts) == info["rows"][split]
        expected = tok(texts, truncation=True, max_length=cfg.model.max_length)["input_ids"]
        assert [ragged[i].tolist() for i in range(len(ragged))] == expected
        assert ragged.lengths.max() <= cfg.model.max_length
    assert info["rows"]["test"] == len(test)  # test texts are cached too
    assert info["pad_id"] == 1 and info["tokens"] == len(splits["train"].ids) + len(splits["test"].ids)


# ---------------------------------------------------------------- the key


def test_cache_key_covers_each_input() -> None:
    base = ("tok", 128, "table", "test")
    key = tokens.cache_key(*base)
    assert key == tokens.cache_key(*base)
    for i, other in enumerate(("tok2", 64, "table2", "test2")):
        changed = list(base)
        changed[i] = other
        assert tokens.cache_key(*changed) != key, i


def test_key_changes_with_max_length_and_table(tmp_path: Path, built) -> None:
    cfg, info = built
    _, shorter = prepare(Path(cfg.input_dir).parent, "model.max_length=32")
    assert shorter["key"] != info["key"] and shorter["status"] == "built"
    assert cache_folder(cfg, info).is_dir() and cache_folder(cfg, shorter).is_dir()
    _, reseeded = prepare(tmp_path / "other", "data.seed=7")  # other folds: other table digest
    assert reseeded["table_digest"] != info["table_digest"]
    assert reseeded["key"] != info["key"]


def test_key_changes_with_tokenizer_files(tmp_path: Path, built) -> None:
    cfg, info = built
    source = tokens.tokenizer_source(cfg)
    tok = load_tokenizer(source)
    digest = tokens.tokenizer_digest(source, tok)
    (source / "trained_on.json").write_text("{}")  # provenance only, not the tokenizer
    assert tokens.tokenizer_digest(source, tok) == digest
    with open(source / "tokenizer_config.json", "a") as f:
        f.write("\n")
    assert tokens.tokenizer_digest(source, tok) != digest

    _, smaller = prepare(tmp_path / "v", "model.tiny.vocab=300")  # another vocabulary: other files
    assert smaller["table_digest"] == info["table_digest"]
    # the vocabulary size is an upper bound: SentencePiece stops early on a small corpus
    assert smaller["vocab_size"] <= 300 < info["vocab_size"] and smaller["key"] != info["key"]


def test_second_prepare_is_a_fast_hit(built) -> None:
    cfg, info = built
    assert info["status"] == "built"
    folder = cache_folder(cfg, info)
    stamp = (folder / "meta.json").stat().st_mtime_ns
    start = time.perf_counter()
    again = prepare_tokens(cfg, log=quiet)
    assert time.perf_counter() - start < 1.0
    assert again["status"] == "hit" and again["key"] == info["key"]
    assert (folder / "meta.json").stat().st_mtime_ns == stamp


def test_changed_texts_retrain_the_tokenizer(tmp_path: Path, raw_sample: Path) -> None:
    cfg, info = prepare(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    stamp = tokens.tokenizer_source(cfg) / "trained_on.json"
    note = read_json(stamp)
    assert note["table_digest"] == info["table_digest"]
    with open(raw_sample / "test.csv", "a", encoding="utf-8") as f:
        f.write("999999,новый комментарий,ru\n")
    with open(raw_sample / "sample_submission.csv", "a", encoding="utf-8") as f:
        f.write("999999,0.5\n")
    data.prepare(cfg, log=quiet)
    again = prepare_tokens(cfg, log=quiet)
    assert again["status"] == "built" and again["rows"]["test"] == info["rows"]["test"] + 1
    assert read_json(stamp)["test_digest"] == again["test_digest"] != note["test_digest"]


# ---------------------------------------------------------------- damage


def test_truncated_array_is_refused_then_rebuilt(built) -> None:
    cfg, info = built
    meta = tables.load_table(cfg)[2]
    before = tokens.load_cache(cfg, meta)[0]["train"].ids.copy()
    target = cache_folder(cfg, info) / "train_ids.npy"
    target.write_bytes(target.read_bytes()[:-100])
    with pytest.raises(PipelineError, match="missing or damaged"):
        tokens.load_cache(cfg, meta)
    said: list[str] = []
    again = prepare_tokens(cfg, log=said.append)
    assert again["status"] == "built" and again["key"] == info["key"]
    assert any("rebuilding" in line for line in said)
    assert np.array_equal(tokens.load_cache(cfg, meta)[0]["train"].ids, before)


def test_same_size_corruption_is_rebuilt(built) -> None:
    cfg, info = built
    target = cache_folder(cfg, info) / "test_ids.npy"
    raw = bytearray(target.read_bytes())
    raw[-8:] = bytes(8)  # the last two ids zeroed: same size, other bytes
    target.write_bytes(bytes(raw))
    assert prepare_tokens(cfg, log=quiet)["status"] == "built"
    assert tokens.check_cache(cache_folder(cfg, info)) is not None


@pytest.mark.parametrize("field", ["table_digest", "max_length", "tokens"])
def test_a_meta_json_without_a_field_is_a_damaged_cache(built, field: str) -> None:
    """Valid JSON whose arrays check out but that lacks a field its readers use: one line, then rebuilt."""
    cfg, info = built
    meta = tables.load_table(cfg)[2]
    path = cache_folder(cfg, info) / layout.CACHE_META
    write_json(path, {k: v for k, v in read_json(path).items() if k != field})
    with pytest.raises(PipelineError, match="missing or damaged"):
        tokens.load_cache(cfg, meta)  # train and predict: not a KeyError
    said: list[str] = []
    assert prepare_tokens(cfg, log=said.append)["status"] == "built"
    assert any("rebuilding" in line for line in said)
    assert tokens.load_cache(cfg, meta)[1][field] == info[field]


def test_a_meta_json_of_other_settings_is_rebuilt_not_a_hit(built) -> None:
    """A meta.json naming other tables than its key was made of: `make data` would call it a hit, and train
    would refuse it and send the user back to `make data`, forever."""
    cfg, info = built
    meta = tables.load_table(cfg)[2]
    path = cache_folder(cfg, info) / layout.CACHE_META
    write_json(path, {**read_json(path), "table_digest": "0" * 16})
    assert prepare_tokens(cfg, log=quiet)["status"] == "built"
    assert tokens.load_cache(cfg, meta)[1]["table_digest"] == meta["table_digest"]


def test_load_refuses_other_settings(built) -> None:
    cfg, _ = built
    meta = tables.load_table(cfg)[2]
    other = make_cfg(Path(cfg.input_dir).parent, "model.max_length=32")
    with pytest.raises(PipelineError, match="other tables or settings"):
        tokens.load_cache(other, meta)
    (layout.prepared_dir(cfg) / "tokens.json").unlink()
    with pytest.raises(PipelineError, match="no token cache"):
        tokens.load_cache(cfg, meta)


# ---------------------------------------------------------------- the tiny tokenizer


def test_tiny_tokenizer_is_a_fast_xlmr_style_folder(built) -> None:
    cfg, _ = built
    tok = AutoTokenizer.from_pretrained(str(tokens.tokenizer_source(cfg)))
    assert tok.is_fast
    assert (tok.bos_token_id, tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    assert tok.convert_ids_to_tokens([0, 1, 2, 3]) == ["<s>", "<pad>", "</s>", "<unk>"]
    assert tok.mask_token == "<mask>"
    for text in MULTILINGUAL:
        ids = tok(text)["input_ids"]
        assert ids[0] == 0 and ids[-1] == 2 and 3 not in ids, text  # framed, and nothing unknown
        assert " ".join(tok.decode(ids, skip_special_tokens=True).split()) == " ".join(text.split())
    long = tok(" ".join(MULTILINGUAL * 20), truncation=True, max_length=cfg.model.max_length)["input_ids"]
    assert len(long) == cfg.model.max_length and long[0] == 0 and long[-1] == 2
    batch = tok(MULTILINGUAL[:2], padding=True)["input_ids"]
    assert 1 in batch[0] or 1 in batch[1]  # padding uses id 1


def test_data_stage_hits_the_token_cache(built, capsys) -> None:
    cfg, info = built
    args = [f"input_dir={cfg.input_dir}", f"data.sample_scale={cfg.data.sample_scale}", "model.tiny.vocab=1000"]
    assert data.main(args) == 0  # the token cache is built by `make data` (pipeline.data.run); it is there already
    assert f"cache {info['key']} (hit, {info['tokens']:,} tokens)" in capsys.readouterr().out


def test_cache_of_an_older_tokenizer_is_refused(tmp_path: Path, capsys) -> None:
    assert data.main(stage_args(tmp_path)) == 0
    cfg = make_cfg(tmp_path)
    _, _, meta = tables.load_table(cfg)
    tokens.load_cache(cfg, meta)
    # as if `make data` had retrained the tokenizer in place and stopped before it rewrote tokens.json
    vocab = tokens.tokenizer_source(cfg) / "tokenizer.json"
    vocab.write_text(vocab.read_text().replace('"<mask>"', '"<MASK>"'))
    with pytest.raises(tokens.PipelineError, match="token cache is for other tables or settings"):
        tokens.load_cache(cfg, meta)


def test_lengths_count_every_scored_and_test_row_untruncated(tmp_path: Path) -> None:
    """lengths.csv: the token count of every validation and test row without max_length's cut (the estimate's
    length buckets), and the test profile's length mix per language from it."""
    from pipeline.scoring import metrics

    cfg, _ = prepare(tmp_path, "model.max_length=16")
    table, test, _ = tables.load_table(cfg)
    lengths = tables.read_lengths(layout.prepared_dir(cfg))
    tok = load_tokenizer(tokens.tokenizer_source(cfg))
    scored = table[table["fold"] >= 0]
    train = lengths[lengths["split"] == "train"]
    assert train["id"].tolist() == scored["id"].astype(str).tolist()
    assert train["tokens"].tolist() == [len(ids) for ids in tok(list(scored["text"]))["input_ids"]]
    assert train["tokens"].max() > 16  # not cut at max_length
    on_test = lengths[lengths["split"] == "test"]
    assert on_test["tokens"].tolist() == [len(ids) for ids in tok(list(test["text"]))["input_ids"]]
    profile = metrics.read_profile(cfg)
    assert set(profile["lengths"]) == set(test["lang"])
    assert all(abs(sum(v) - 1) < 1e-9 for v in profile["lengths"].values())
    # the OOF rows get their counts by source and id
    oof = scored[layout.OOF_COLUMNS].iloc[::-1]
    assert tables.with_tokens(oof, lengths)["tokens"].tolist() == train["tokens"].tolist()[::-1]


def test_another_models_tokenizer_never_reads_this_cache(built, tmp_path: Path) -> None:
    """`make data` with the tiny model, then train with model.name=<another encoder's folder>: its ids would be the
    tiny tokenizer's (noise to that model). Refused in one line naming `make data`; the same tokenizer read from
    another folder is no other tokenizer."""
    cfg, info = built
    table, test, meta = tables.load_table(cfg)
    other = tmp_path / "other-encoder"
    tokenizer_mod.train_tokenizer(list(table["text"]), info["vocab_size"] + 40, other)
    with pytest.raises(PipelineError, match=r"made with another tokenizer .* run `make data` with these CONFIG"):
        tokens.load_cache(config.with_overrides(cfg, [f"model.name={other}"]), meta)
    same = tmp_path / "same-tokenizer"
    shutil.copytree(tokens.tokenizer_source(cfg), same)
    assert tokens.load_cache(config.with_overrides(cfg, [f"model.name={same}"]), meta)[1]["key"] == info["key"]


def model_folder(cfg: Config, where: Path) -> Path:
    """A model folder as a hub download holds one: the tokenizer's files beside weights and config.json."""
    shutil.copytree(tokens.tokenizer_source(cfg), where)
    (where / "trained_on.json").unlink()
    (where / "model.safetensors").write_bytes(b"weights" * 1000)
    (where / "config.json").write_text('{"model_type": "xlm-roberta"}')
    return where


def test_the_tokenizer_digest_covers_its_files_never_a_model_s_weights(built, tmp_path: Path) -> None:
    """A model folder's digest is its tokenizer files' alone: new weights (another checkpoint of one tokenizer) keep
    the cache; the tiny tokenizer's folder keeps the digest it had when the whole folder was hashed."""
    from pipeline.files import tree_digest

    cfg, _ = built
    tiny = tokens.tokenizer_source(cfg)
    assert tokens.tokenizer_digest(tiny, None) == tree_digest(tiny, skip=("trained_on.json",))
    folder = model_folder(cfg, tmp_path / "model")
    digest = tokens.tokenizer_digest(folder, None)
    assert digest == tokens.tokenizer_digest(tiny, None)
    (folder / "model.safetensors").write_bytes(b"other weights")
    (folder / "config.json").write_text('{"model_type": "bert"}')
    assert tokens.tokenizer_digest(folder, None) == digest


def test_a_cache_keyed_by_the_whole_model_folder_is_rebuilt_with_a_line(built, tmp_path: Path) -> None:
    """The tables' cache made when the key hashed every file of the model folder (its meta.json says nothing of
    `digest_of`) is not silently left behind: `make data` says it is rebuilt once under the new key, then hits."""
    cfg, _ = built
    cfg = config.with_overrides(cfg, [f"model.name={model_folder(cfg, tmp_path / 'model')}"])
    lines: list[str] = []
    info = prepare_tokens(cfg, log=lines.append)
    assert not lines
    old = layout.cache_root(cfg) / "0123456789abcdef"  # the same ids under the key the whole folder gave
    shutil.move(cache_folder(cfg, info), old)
    meta = read_json(old / layout.CACHE_META)
    del meta["digest_of"]
    write_json(old / layout.CACHE_META, {**meta, "key": old.name})
    write_json(layout.prepared_dir(cfg) / layout.TOKENS_POINTER, {"key": old.name})
    rebuilt = prepare_tokens(cfg, log=lines.append)
    assert (rebuilt["key"], rebuilt["status"]) == (info["key"], "built")
    assert len(lines) == 1 and "0123456789abcdef was keyed by every file of" in lines[0]
    assert f"rebuilt once as {info['key']}" in lines[0]
    lines.clear()
    assert prepare_tokens(cfg, log=lines.append)["status"] == "hit" and not lines


def test_the_cache_counts_the_rows_a_trimmed_embedding_keeps_and_the_plans_read_it(built) -> None:
    """meta.json's distinct_ids: the ids the tables use, which model.trim_vocab keeps (with the few special ids
    pipeline.core.trim adds); the Kaggle plans read it where the cache is here, else they estimate."""
    from pipeline.core import trim
    from pipeline.kaggle import disk

    cfg, info = built
    table, _, meta = tables.load_table(cfg)
    splits, cmeta = tokens.load_cache(cfg, meta)
    tokenizer = load_tokenizer(tokens.tokenizer_source(cfg))
    keep = trim.used_ids(splits.values(), len(tokenizer), trim.special_ids(tokenizer))
    assert cmeta["distinct_ids"] == len(np.unique(np.concatenate([s.ids for s in splits.values()])))
    assert 0 <= len(keep) - cmeta["distinct_ids"] <= len(trim.special_ids(tokenizer))
    trimmed = config.with_overrides(cfg, ["model.trim_vocab=true"])
    assert disk.kept_rows(trimmed) == (cmeta["distinct_ids"], "the token cache's distinct ids")
    assert disk.kept_rows(config.with_overrides(trimmed, ["model.name=xlm-roberta-large"])) == (
        disk.TRIMMED_VOCAB, "about, an estimate")  # fmt: skip
