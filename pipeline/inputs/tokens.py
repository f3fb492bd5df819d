"""Tokenize once, cache, load as memory-mapped arrays (built by `make data`, read by train and predict).

Writes  input/prepared/<name>/tokenizer/    the tiny model's tokenizer, trained on the texts (tiny only)
        input/cache/<key>/{train,test}_ids.npy      every row's token ids, concatenated (int32)
        input/cache/<key>/{train,test}_offsets.npy  row i is ids[offsets[i]:offsets[i+1]] (int64)
        input/cache/<key>/meta.json                 key, sizes, digests, throughput
        input/prepared/<name>/lengths.csv           the untruncated token count of every validation,
                                                    held-out and test row (the six-language estimate's
                                                    length buckets), lengths.json: what it was counted from

Ids are stored unpadded; batches are padded at collate time to their own longest row. The key covers
the tokenizer's files, max length and the tables' content: a changed input rebuilds, an unchanged one
is a cache hit.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline import layout, progress
from pipeline.errors import PipelineError
from pipeline.files import atomic_dir, check_free_space, file_digest, json_digest, read_json, write_csv, write_json
from pipeline.inputs import tokenizer as tokenizer_mod
from pipeline.schema import Config

SPLITS = ("train", "test")
CHUNK = 2048


@dataclass(frozen=True)
class Ragged:
    """Variable-length rows of token ids over two flat arrays."""

    ids: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @classmethod
    def from_lists(cls, rows: list[list[int]]) -> Ragged:
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(r) for r in rows])
        ids = np.fromiter((t for r in rows for t in r), dtype=np.int32, count=int(offsets[-1]))
        return cls(ids, offsets)


def tokenizer_source(cfg: Config, folder: Path | None = None) -> Path | str:
    """The tiny model's trained tokenizer folder (in `folder`, default the prepared one), else the model's name."""
    if cfg.model.name == "tiny":
        return Path(folder or layout.prepared_dir(cfg)) / layout.TOKENIZER
    return cfg.model.path or cfg.model.name


class LengthError(PipelineError, ValueError):
    pass


def max_positions(cfg: Config) -> int | None:
    """The longest input the model can take, read from a local folder's config.json; None when unknown.

    XLM-R numbers positions from pad_token_id + 1 (2), so a checkpoint with 514 position embeddings takes 512.
    The tiny model is built with room for model.max_length, and a hub name is not read (no network here).
    """
    conf = Path(cfg.model.path or cfg.model.name).expanduser() / "config.json"
    if cfg.model.name == "tiny" or not conf.is_file():
        return None
    try:
        info = read_json(conf)
    except (OSError, ValueError) as e:  # a truncated or half-copied folder: json's own error names no file
        raise PipelineError(
            f"{conf}: not a readable config.json ({e}); the model folder is damaged: copy it again"
        ) from None
    if not isinstance(info, dict) or "max_position_embeddings" not in info:
        return None
    offset = info.get("pad_token_id", 1) + 1 if "roberta" in info.get("model_type", "xlm-roberta") else 0
    return int(info["max_position_embeddings"]) - offset


def check_max_length(cfg: Config) -> None:
    """model.max_length no longer than the model's position embeddings: refused in `make data`, not after an epoch."""
    limit = max_positions(cfg)
    if limit is not None and cfg.model.max_length > limit:
        raise LengthError(
            f"model.max_length={cfg.model.max_length} is longer than {cfg.model.name} can take "
            f"({limit} tokens, from its config.json); set model.max_length={limit} or less"
        )


def ensure_tokenizer(cfg: Config, table, test, meta: dict, folder: Path | None = None):
    """Load the tokenizer; for the tiny model, (re)train it when the texts it was trained on changed."""
    source = tokenizer_source(cfg, folder)
    if cfg.model.name == "tiny":
        note = {"table_digest": meta["table_digest"], "test_digest": meta["test_digest"], "vocab": cfg.model.tiny.vocab}
        stamp = Path(source) / "trained_on.json"
        if not stamp.exists() or read_json(stamp) != note:
            # pseudo-labelled rows are test texts already counted: the tokenizer stays the teacher's
            texts = list(table.loc[table["source"] != "pseudo", "text"]) + list(test["text"])
            n = len(set().union(*texts))
            # the unigram model needs a piece for every distinct character of the texts
            if cfg.model.tiny.vocab < n + len(tokenizer_mod.SPECIALS):
                raise PipelineError(
                    f"model.tiny.vocab={cfg.model.tiny.vocab} is too small for the {n} distinct characters "
                    f"of the texts; set model.tiny.vocab above {n + len(tokenizer_mod.SPECIALS)}"
                )
            # in a child process: SentencePiece ignores Ctrl-C until it is done (about 50 s on the real slice)
            progress.run_in_child(
                tokenizer_mod.train_tokenizer, texts, cfg.model.tiny.vocab, Path(source), note, desc="train tokenizer"
            )
    return tokenizer_mod.load_tokenizer(source)


# the files transformers reads a tokenizer from; a model folder's weights and config.json change no id
TOKENIZER_FILES = frozenset({
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
    "sentencepiece.bpe.model", "spiece.model", "spm.model", "tokenizer.model", "vocab.txt", "vocab.json", "merges.txt",
})  # fmt: skip
# meta.json's record of what its key's tokenizer digest covers; a cache without it was keyed by the whole folder
DIGEST_OF = "tokenizer files"


def tokenizer_digest(source: Path | str, tokenizer) -> str:
    """Digest of the tokenizer's own files in a folder (TOKENIZER_FILES: never a model's weights, whose hash would
    cost a read of every byte and whose change would rebuild ids that did not change), or of its serialized form
    (a hub name)."""
    if Path(source).is_dir():
        # json_digest of {name: digest}, as files.tree_digest makes it: the tiny tokenizer's folder holds these files
        # alone, so its caches keep their keys (and the fingerprint names it by the same value)
        files = sorted(p for p in Path(source).iterdir() if p.name in TOKENIZER_FILES and p.is_file())
        return json_digest({p.name: file_digest(p) for p in files})
    return hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest()


def rekeyed(cfg: Config, key: str) -> str:
    """The line `make data` says where the cache these tables used was keyed by the whole model folder (before the
    key covered the tokenizer's files alone): it is rebuilt under `key`, the same ids; "" otherwise."""
    try:
        old = read_json(layout.prepared_dir(cfg) / layout.TOKENS_POINTER)["key"]
        meta = read_json(layout.cache_root(cfg) / old / layout.CACHE_META)
    except (PipelineError, OSError, ValueError, KeyError, TypeError):
        return ""
    if old == key or meta.get("digest_of") == DIGEST_OF or cfg.model.name == "tiny":
        return ""
    return (f"tokens: the cache {old} was keyed by every file of {meta.get('tokenizer', 'the model folder')}, its "
            f"weights included; the key now covers the tokenizer's files alone, so it is rebuilt once as {key} "
            "(the same ids)")  # fmt: skip


KEY = re.compile(r"[0-9a-f]{16}")  # what cache_key makes: a token cache's folder name


def cache_key(tok_digest: str, max_length: int, table_digest: str, test_digest: str) -> str:
    parts = [tok_digest, str(max_length), table_digest, test_digest]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def is_cache(folder: Path) -> bool:
    """`folder` is a token cache `build` made: a key for a name, and a meta.json that names that key (whatever
    else it holds: a damaged cache is still one). A folder without them is someone else's, never removed."""
    try:
        return bool(KEY.fullmatch(folder.name)) and read_json(folder / layout.CACHE_META).get("key") == folder.name
    except (OSError, ValueError, AttributeError):  # no meta.json, not JSON, or JSON that is not an object
        return False


def tokenize(tokenizer, texts: list[str], max_length: int, desc: str = "tokenize") -> Ragged:
    """Batched fast tokenization, with special tokens, truncated to max_length; no padding."""
    rows: list[list[int]] = []
    for start in progress.bar(range(0, len(texts), CHUNK), desc=desc, unit="chunk", disable=len(texts) < 4 * CHUNK):
        enc = tokenizer(
            texts[start : start + CHUNK],
            truncation=True,
            max_length=max_length,
            add_special_tokens=True,
            return_attention_mask=False,
        )
        rows.extend(enc["input_ids"])
    return Ragged.from_lists(rows)


def token_counts(tokenizer, texts: list[str]) -> np.ndarray:
    """Each text's token count with special tokens and without truncation (what max_length would cut)."""
    out = []
    for start in range(0, len(texts), CHUNK):
        enc = tokenizer(texts[start : start + CHUNK], truncation=False, add_special_tokens=True,
                        return_attention_mask=False, verbose=False)  # fmt: skip
        out.extend(len(ids) for ids in enc["input_ids"])
    return np.asarray(out, dtype=np.int64)


def length_counter(cfg: Config):
    """texts -> untruncated token counts by the model's tokenizer, loaded at the first call, for the long
    comments the held-out split keeps (tables.hold_out); None for the tiny model, whose tokenizer is trained
    on the very tables the split makes."""
    if cfg.model.name == "tiny":
        return None
    loaded: list = []

    def count(texts: list[str]) -> np.ndarray:
        if not loaded:  # a table without stand-in rows to count never loads it
            loaded.append(tokenizer_mod.load_tokenizer(tokenizer_source(cfg)))
        return token_counts(loaded[0], texts)

    return count


def write_lengths(prepared: Path, tokenizer, tok_digest: str, table, test, meta: dict) -> None:
    """`prepared`/lengths.csv: the untruncated token count of every row the estimate scores (fold >= 0) and of
    every test row, by this tokenizer; counted again only when the tokenizer or the tables changed."""
    stamp = {"tokenizer_digest": tok_digest, "table_digest": meta["table_digest"], "test_digest": meta["test_digest"]}
    key = Path(prepared) / layout.LENGTHS_KEY
    try:
        if read_json(key) == stamp and (Path(prepared) / layout.LENGTHS).is_file():
            return
    except (OSError, ValueError):
        pass
    scored = table[table["fold"] >= 0]
    frame = pd.concat([
        pd.DataFrame({"split": "train", "id": scored["id"].astype(str), "source": scored["source"],
                      "lang": scored["lang"], "tokens": token_counts(tokenizer, list(scored["text"].astype(str)))}),
        pd.DataFrame({"split": "test", "id": test["id"].astype(str), "source": "test", "lang": test["lang"],
                      "tokens": token_counts(tokenizer, list(test["text"].astype(str)))}),
    ], ignore_index=True)  # fmt: skip
    write_csv(Path(prepared) / layout.LENGTHS, frame)
    write_json(key, stamp)


# the fields of a cache's meta.json that its readers use (load_cache, `make data`'s report), and their types
META_FIELDS = {"key": str, "max_length": int, "table_digest": str, "test_digest": str, "tokens": int, "files": dict,
               "tokenizer_identity": str}  # fmt: skip


def tokenizer_identity(tokenizer) -> str:
    """What turns a text into these ids, whatever folder it was read from: the fast tokenizer's whole definition
    (vocabulary, pieces, normalizer, special tokens), hashed; two folders of one tokenizer share it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        blob = sorted(tokenizer.get_vocab().items())
    else:  # less its truncation and padding: a call with max_length sets them on the object, not the ids' rule
        blob = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def check_cache(folder: Path, deep: bool = True, expect: dict | None = None) -> dict | None:
    """meta.json if it holds every field of META_FIELDS (with the values in `expect`) and every array is present
    with the size (and, if deep, the digest) it records; else None."""
    try:
        meta = read_json(folder / layout.CACHE_META)
        # valid JSON without a field is as damaged as a truncated file: a KeyError in train otherwise
        if any(not isinstance(meta.get(k), t) for k, t in META_FIELDS.items()):
            return None
        if any(meta[k] != v for k, v in (expect or {}).items()):
            return None
        for name, info in meta["files"].items():
            p = folder / name
            if p.stat().st_size != info["bytes"] or (deep and file_digest(p) != info["sha256"]):
                return None
        return meta
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # a damaged or foreign meta.json
        return None


def build(cfg: Config, prepared: Path, table, test, meta: dict, log=print) -> dict:
    """The tokenizer (tiny: trained into `prepared`) and the token cache of these tables; `prepared`/tokens.json
    points at the cache. `make data` calls this on its staging folder, so that the table, the tokenizer and
    the pointer are replaced together or not at all."""
    tokenizer = ensure_tokenizer(cfg, table, test, meta, prepared)
    source = tokenizer_source(cfg, prepared)
    tok_digest = tokenizer_digest(source, tokenizer)
    key = cache_key(tok_digest, cfg.model.max_length, meta["table_digest"], meta["test_digest"])
    folder = layout.cache_root(cfg) / key
    pointer = Path(prepared) / layout.TOKENS_POINTER
    if line := rekeyed(cfg, key):
        log(line)
    write_lengths(prepared, tokenizer, tok_digest, table, test, meta)
    if folder.exists():
        # a meta.json naming other inputs than its key's would be a hit here and refused by train: rebuilt
        made_of = {"key": key, "max_length": cfg.model.max_length, "table_digest": meta["table_digest"]}
        cached = check_cache(folder, expect={**made_of, "test_digest": meta["test_digest"]})
        if cached is not None:
            write_json(pointer, {"key": key})
            return {**cached, "status": "hit"}
        log(f"tokens: {folder} fails its own check (a field, size or digest); rebuilding it")
    texts = {"train": list(table["text"]), "test": list(test["text"])}
    chars = sum(len(t) for ts in texts.values() for t in ts)
    need = chars * 2 + (1 << 20)
    check_free_space(folder.parent, need, "the token cache")
    start = time.perf_counter()
    with atomic_dir(folder, need) as tmp:
        files, tokens, seen = {}, 0, np.zeros(len(tokenizer), dtype=bool)  # seen: the ids the tables use
        for split in SPLITS:
            ragged = tokenize(tokenizer, texts[split], cfg.model.max_length, desc=f"tokenize {split}")
            tokens += len(ragged.ids)
            seen[np.unique(ragged.ids)] = True
            for part, arr in (("ids", ragged.ids), ("offsets", ragged.offsets)):
                name = f"{split}_{part}.npy"
                np.save(tmp / name, arr)
                files[name] = {"bytes": (tmp / name).stat().st_size, "sha256": file_digest(tmp / name)}
        seconds = time.perf_counter() - start
        rows = len(texts["train"]) + len(texts["test"])
        out = {
            "key": key,
            "tokenizer_digest": tok_digest,
            "digest_of": DIGEST_OF,  # what the key's tokenizer digest covers (rekeyed)
            "tokenizer_identity": tokenizer_identity(tokenizer),  # load_cache compares the model's own with it
            "tokenizer": str(tokenizer_source(cfg)),  # where it lives once `make data` is done
            "max_length": cfg.model.max_length,
            "vocab_size": len(tokenizer),
            "pad_id": tokenizer.pad_token_id,
            "table_digest": meta["table_digest"],
            "test_digest": meta["test_digest"],
            "rows": {"train": len(texts["train"]), "test": len(texts["test"])},
            "tokens": tokens,
            # the embedding rows model.trim_vocab keeps, but for the few special ids it adds (pipeline.core.trim)
            "distinct_ids": int(seen.sum()),
            "seconds": round(seconds, 3),
            "comments_per_second": round(rows / max(seconds, 1e-9)),
            "files": files,
        }
        write_json(tmp / layout.CACHE_META, out)
    write_json(pointer, {"key": key})
    return {**out, "status": "built"}


def prepared_cache(cfg: Config) -> dict | None:
    """meta.json of the token cache `make data` made here for these tables with this model's tokenizer (what the
    Kaggle plans read their token counts from); None where there is none."""
    try:
        pointer = read_json(layout.prepared_dir(cfg) / layout.TOKENS_POINTER)
        cache = read_json(layout.cache_root(cfg) / pointer["key"] / layout.CACHE_META)
    except (PipelineError, OSError, ValueError, KeyError, TypeError):
        return None
    return cache if isinstance(cache, dict) and cache.get("tokenizer") == str(tokenizer_source(cfg)) else None


def load_cache(cfg: Config, meta: dict) -> tuple[dict[str, Ragged], dict]:
    """The cached splits as memory-mapped arrays, checked against the prepared tables they belong to."""
    pointer = layout.prepared_dir(cfg) / layout.TOKENS_POINTER
    try:
        key = read_json(pointer)["key"]
    except FileNotFoundError:
        raise PipelineError(f"no token cache for {pointer.parent}; run `make data` with this config first") from None
    except (OSError, ValueError, KeyError, TypeError):
        key = None
    if not isinstance(key, str) or not KEY.fullmatch(key):  # never a path out of the cache
        raise PipelineError(f"{pointer}: not a token cache pointer; run `make data` again")
    folder = layout.cache_root(cfg) / key
    cmeta = check_cache(folder)  # by content: a damaged id of the same size would train on other tokens
    if cmeta is None:
        raise PipelineError(f"{folder}: token cache is missing or damaged; run `make data` again")
    source = tokenizer_source(cfg)
    # the tiny tokenizer retrained in place (make data stopped before it updated tokens.json) gives other ids
    stale_tokenizer = (
        cfg.model.name == "tiny"
        and "tokenizer_digest" in cmeta
        and tokenizer_digest(source, None) != cmeta["tokenizer_digest"]
    )
    if cmeta["table_digest"] != meta["table_digest"] or cmeta["max_length"] != cfg.model.max_length or stale_tokenizer:
        raise PipelineError(f"{folder}: token cache is for other tables or settings; run `make data` again")
    # another model.name than `make data` had (e5 after the tiny sample) would train on the other tokenizer's ids
    if tokenizer_identity(tokenizer_mod.load_tokenizer(source)) != cmeta["tokenizer_identity"]:
        raise PipelineError(
            f"the token cache of {layout.prepared_dir(cfg)} was made with another tokenizer ({cmeta.get('tokenizer')}) "
            f"than model.name={cfg.model.name}'s; run `make data` with these CONFIG and ARGS first"
        )
    splits = {
        s: Ragged(np.load(folder / f"{s}_ids.npy", mmap_mode="r"), np.load(folder / f"{s}_offsets.npy", mmap_mode="r"))
        for s in SPLITS
    }
    return splits, cmeta
