"""Held-out translated rows (data.held_out, pipeline.inputs.groups): translations found to their English
original, groups held out whole and evenly, and no fold that validates on a translation trains on its
original or on another translation of it (the leak the grouping exists to stop)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import data
from pipeline.errors import ConfigError
from pipeline.inputs import groups, tables
from tests.helpers import ROOT, make_cfg, turkish_upper

PRETRAINED = ROOT.parent / "shared" / "pretrained" / "multilingual-e5-small-jigsaw"

NAMES = ["Smith", "Wikipedia", "Jimbo", "Bishonen", "Template", "Einstein", "Python", "Talk", "Ottoman", "Kyiv"]
FOREIGN = {"es": "es un comentario sobre", "fr": "est un commentaire sur", "ru": "это комментарий о"}


def english(i: int) -> str:
    """An English comment with what translation keeps: a number, two names, marks."""
    return f"Comment {i * 37 + 5} about {NAMES[i % 10]} and {NAMES[(i * 3 + 1) % 10]}{'!!' if i % 4 == 0 else ''}"


def translated(i: int, lang: str) -> str:
    return f"{FOREIGN[lang]} {i * 37 + 5} {NAMES[i % 10]}, {NAMES[(i * 3 + 1) % 10]}{'!!' if i % 4 == 0 else ''}"


def test_translations_are_matched_to_their_original() -> None:
    n = 60
    originals = [english(i) for i in range(n)]
    labels = np.arange(n) % 2
    order = np.random.default_rng(0).permutation(n)
    texts = [translated(int(i), "ru") for i in order]
    found = groups.match_originals(texts, labels[order], originals, labels)
    assert (found == order).mean() == 1.0


def test_a_translation_never_goes_to_an_original_of_the_other_label_nor_below_the_floor() -> None:
    found = groups.match_originals([translated(3, "es")], np.array([0]), [english(3), english(4)], np.array([1, 0]))
    # never the other label's original, however alike; the only one of its label is unlike it: none
    assert found.tolist() == [-1]
    unlike = groups.match_originals(["nothing kept here"], np.array([0]), [english(3)], np.array([0]))
    assert unlike.tolist() == [-1]  # no original resembles it: its own group, not the nearest one's


def test_groups_are_the_ids_the_files_carry() -> None:
    extra = pd.DataFrame({"id": ["a-0", "a-1", "b-0"], "source_id": ["7", "8", "7"], "text": ["x", "y", "z"],
                          "lang": ["es", "es", "fr"], "toxic": [0, 1, 0]})  # fmt: skip
    keys, how = groups.source_groups(extra)
    assert keys[0] == keys[2] != keys[1] and "ids" in how


def planted(n: int = 40, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """n comments, each in en, es, fr and ru: unit vectors of one comment close together (a translation moves
    it a little), comments far apart; and an es row of a comment's other label next to it. Returns the rows,
    their vectors and the comment each row is a version of (-1: the distractor)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, 32))
    rows, vecs, source = [], [], []
    for i in range(n):
        for lang in ("en", "es", "fr", "ru"):
            rows.append({"source_id": "", "text": f"{lang} {i}", "lang": lang, "toxic": i % 2})
            vecs.append(base[i] + rng.normal(0, 0.15, 32))
            source.append(i)
    rows.append({"source_id": "", "text": "distractor", "lang": "es", "toxic": 1})
    vecs.append(base[0] + rng.normal(0, 0.15, 32))  # as close to comment 0 as its translations, other label
    source.append(-1)
    vecs = np.array(vecs)
    return pd.DataFrame(rows), vecs / np.linalg.norm(vecs, axis=1, keepdims=True), np.array(source)


def test_versions_of_one_comment_are_found_by_content() -> None:
    rows, vecs, source = planted()
    keys, how = groups.source_groups(rows, vecs)
    assert "by content" in how
    frame = pd.DataFrame({"key": keys, "source": source})
    versions = frame[frame["source"] >= 0]
    assert (versions.groupby("source")["key"].nunique() == 1).all()  # every translation with its original
    assert (versions.groupby("key")["source"].nunique() == 1).all()  # and no two comments in one group
    assert frame["key"].iloc[-1] not in set(versions["key"])  # the other label's row is its own


def test_duplicates_are_one_group_and_look_alikes_are_not() -> None:
    texts = ["You are a FOOL!!", "you are a fool", "You are a fool, really", "Something else entirely"]
    assert groups.duplicate_links(texts) == [(0, 1)]


def test_turkish_capitals_are_duplicates_of_their_small_letters() -> None:
    """'ILIK'.lower() is 'ilik', not 'ılık', and 'İ'.lower() is 'i' with a combining dot: the four i's are one."""
    text = "ılık bir gün, iyi insanlar ve sıcak çay"
    copies = [turkish_upper(text), text.upper(), turkish_upper(text).lower(), text.casefold()]
    assert groups.duplicate_links([text, *copies, "başka bir yorum, hiç benzemez"]) == [(0, i) for i in (1, 2, 3, 4)]
    assert len({groups.normalised(t) for t in [text, *copies]}) == 1


def test_held_out_groups_are_whole_seeded_and_even_per_language() -> None:
    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 7, 300)
    keys = np.repeat(np.arange(300), sizes).astype(str)
    langs = rng.choice(["fr", "pt", "ru"], len(keys))
    eligible = np.ones(len(keys), dtype=bool)
    folds = groups.held_out_folds(keys, langs, eligible, 0.3, 5, seed=3)
    frame = pd.DataFrame({"key": keys, "fold": folds, "lang": langs})
    assert (frame.groupby("key")["fold"].nunique() == 1).all()  # a group never split
    assert frame[frame["fold"] >= 0]["key"].nunique() == 90
    per = frame[frame["fold"] >= 0].groupby(["lang", "fold"]).size().unstack()
    assert (per.max(axis=1) - per.min(axis=1)).max() <= 6  # each language about even over the folds
    assert np.array_equal(folds, groups.held_out_folds(keys, langs, eligible, 0.3, 5, seed=3))
    assert not np.array_equal(folds, groups.held_out_folds(keys, langs, eligible, 0.3, 5, seed=4))


def test_every_group_with_a_forced_row_is_held_out_whole_and_the_share_drawn_from_the_rest() -> None:
    rng = np.random.default_rng(2)
    sizes = rng.integers(1, 5, 200)
    keys = np.repeat(np.arange(200), sizes).astype(str)
    langs = rng.choice(["fr", "pt", "ru", "en"], len(keys))
    eligible = langs != "en"
    forced = eligible & (rng.random(len(keys)) < 0.05)
    folds = groups.held_out_folds(keys, langs, eligible, 0.1, 5, seed=3, forced=forced)
    frame = pd.DataFrame({"key": keys, "fold": folds})
    assert (frame.groupby("key")["fold"].nunique() == 1).all()  # a group never split
    assert (folds[forced] >= 0).all()  # every long group held out, with its other rows
    assert frame.loc[frame["key"].isin(set(keys[forced])), "fold"].ge(0).all()
    can = frame[eligible].groupby("key").size().index
    rest = len(set(can) - set(keys[forced]))
    assert frame["key"][folds >= 0].nunique() == len(set(keys[forced])) + round(0.1 * rest)
    # no forced row: the very split as without the argument
    none = np.zeros(len(keys), dtype=bool)
    assert np.array_equal(groups.held_out_folds(keys, langs, eligible, 0.1, 5, seed=3, forced=none),
                          groups.held_out_folds(keys, langs, eligible, 0.1, 5, seed=3))  # fmt: skip


def test_a_group_too_large_or_without_a_translation_is_never_held_out() -> None:
    keys = np.array(["big"] * (groups.MAX_GROUP + 1) + ["en-only"] * 2 + [f"g{i}" for i in range(10)])
    eligible = np.array([True] * (groups.MAX_GROUP + 1) + [False] * 2 + [True] * 10)
    folds = groups.held_out_folds(keys, np.array(["fr"] * len(keys)), eligible, 0.99, 5, seed=0)
    assert (folds[: groups.MAX_GROUP + 3] == -1).all() and (folds[-10:] >= 0).all()
    forced = np.zeros(len(keys), dtype=bool)
    forced[0] = True  # a long comment in the large group: the group still stays out
    folds = groups.held_out_folds(keys, np.array(["fr"] * len(keys)), eligible, 0.99, 5, seed=0, forced=forced)
    assert (folds[: groups.MAX_GROUP + 3] == -1).all()


def write_translations(folder: Path, n: int) -> list[str]:
    """Translated files as the competition's datasets ship them (id of the English comment, text, toxic),
    and the English comments they translate; returns their ids."""
    ids = [f"src{i:04d}" for i in range(n)]
    toxic = [i % 2 for i in range(n)]
    for lang in FOREIGN:
        pd.DataFrame({"id": ids, "comment_text": [translated(i, lang) for i in range(n)], "toxic": toxic}).to_csv(
            folder / f"jigsaw-toxic-comment-train-google-{lang}-cleaned.csv", index=False
        )
    return ids


def test_no_fold_trains_on_a_group_it_validates_on(tmp_path: Path, raw_sample: Path) -> None:
    raw = raw_sample  # a copy of the sample's files of this test's own
    ids = write_translations(raw, 80)
    train = pd.read_csv(raw / "jigsaw-toxic-comment-train.csv")
    originals = pd.DataFrame(
        {"id": ids, "comment_text": [english(i) for i in range(80)], "toxic": [i % 2 for i in range(80)]}
    )
    pd.concat([train, originals]).to_csv(raw / "jigsaw-toxic-comment-train.csv", index=False)  # the originals train
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw}", "data.held_out=0.5", "data.english_negatives=100000",
                   f"data.extra_files=[{raw}/jigsaw-toxic-comment-train-google-*-cleaned.csv]")  # fmt: skip
    data.prepare(cfg, log=lambda *_: None)
    table = tables.load_table(cfg)[0]
    group = table["id"].where(table["lang"] == "en", None)
    translated_rows = table["source"].str.startswith("jigsaw-toxic-comment-train-google")
    group[translated_rows] = [ids[int(i.rsplit("-", 1)[1])] for i in table.loc[translated_rows, "id"]]
    held = table[translated_rows & (table["fold"] >= 0)]
    assert held["lang"].nunique() == 3 and 0.4 < held.shape[0] / translated_rows.sum() < 0.6
    for k in range(cfg.data.folds):
        validated = set(group[(table["fold"] == k) & translated_rows])
        trained = set(group.iloc[tables.training_rows(table, k)].dropna())
        assert validated and not validated & trained, k  # neither the original nor another translation


@pytest.mark.parametrize("share", [-0.1, 1.0])
def test_held_out_share_out_of_range_is_one_line(tmp_path: Path, share: float) -> None:
    with pytest.raises(ConfigError, match="data.held_out"):
        make_cfg(tmp_path, f"data.held_out={share}")


def test_without_ids_no_fold_trains_on_a_version_of_a_comment_it_validates_on(tmp_path: Path, raw_sample: Path,
                                                                              monkeypatch) -> None:  # fmt: skip
    """A translated file without ids, as the real slice's: the encoder (here: each comment's planted vector,
    a little moved by each translation) finds the versions, the English originals in train.csv among them."""
    raw, n = raw_sample, 80
    rng = np.random.default_rng(5)
    base = rng.normal(size=(n, 16))
    rows = [{"comment_text": translated(i, lang), "lang": lang, "toxic": i % 2} for i in range(n) for lang in FOREIGN]
    pd.DataFrame(rows).to_csv(raw / "translated-train.csv", index=False)
    train = pd.read_csv(raw / "jigsaw-toxic-comment-train.csv")
    originals = pd.DataFrame({"id": [f"src{i:04d}" for i in range(n)], "comment_text": [english(i) for i in range(n)],
                              "toxic": [i % 2 for i in range(n)]})  # fmt: skip
    pd.concat([train, originals]).to_csv(raw / "jigsaw-toxic-comment-train.csv", index=False)
    source = {english(i): i for i in range(n)} | {translated(i, lg): i for i in range(n) for lg in FOREIGN}

    def vectors(cfg, texts):  # the planted comment's vector, or a random one for every other row
        out = np.array([base[source[t]] + rng.normal(0, 0.1, 16) if t in source else rng.normal(size=16)
                        for t in texts])  # fmt: skip
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    monkeypatch.setattr(tables.encoder, "vectors", vectors)
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw}", "data.held_out=0.5", "data.english_negatives=100000",
                   "data.extra_files=[translated-train.csv]", f"data.group_encoder={tmp_path}")  # fmt: skip
    said = []
    data.prepare(cfg, log=said.append)
    assert any("grouped by content" in s for s in said), said
    table = tables.load_table(cfg)[0]
    comment = table["text"].map(source)
    held = table[table["source"].eq("translated-train") & (table["fold"] >= 0)]
    assert held["lang"].nunique() == 3 and 0.3 < len(held) / (3 * n) < 0.7
    for k in range(cfg.data.folds):
        validated = set(comment[(table["fold"] == k)].dropna())
        trained = set(comment.iloc[tables.training_rows(table, k)].dropna())
        assert validated and not validated & trained, k  # neither the original nor another translation


@pytest.mark.skipif(not PRETRAINED.is_dir(), reason="needs ../shared/pretrained (the real multilingual encoder)")
def test_the_real_encoder_finds_translations_of_one_comment() -> None:
    """Four comments, each in four languages, through the pretrained multilingual encoder: each comment's
    versions in one group, no two comments together."""
    from pipeline.inputs import encoder

    versions = {
        "en": ["Thank you for fixing the article about the old bridge.", "Stop deleting my edits, you idiot!",
               "Please add a source for the population figure.", "This page is a joke and so are you."],
        "es": ["Gracias por arreglar el artículo sobre el puente viejo.", "¡Deja de borrar mis ediciones, idiota!",
               "Por favor, añade una fuente para la cifra de población.", "Esta página es un chiste y tú también."],
        "ru": ["Спасибо, что исправили статью о старом мосту.", "Перестань удалять мои правки, идиот!",
               "Пожалуйста, добавьте источник для численности населения.", "Эта страница — шутка, как и ты."],
        "tr": ["Eski köprü hakkındaki makaleyi düzelttiğin için teşekkürler.", "Düzenlemelerimi silmeyi bırak, aptal!",
               "Lütfen nüfus rakamı için bir kaynak ekle.", "Bu sayfa bir şaka, sen de öylesin."],
    }  # fmt: skip
    rows = pd.DataFrame([{"source_id": "", "text": t, "lang": lg, "toxic": int(i in (1, 3)), "comment": i}
                         for lg, texts in versions.items() for i, t in enumerate(texts)])  # fmt: skip
    keys, _ = groups.source_groups(rows, encoder.encode(PRETRAINED, rows["text"].tolist()))
    frame = rows.assign(key=keys)
    assert (frame.groupby("comment")["key"].nunique() == 1).all()
    assert (frame.groupby("key")["comment"].nunique() == 1).all()


def test_sentence_vectors_are_kept_apart_from_the_token_caches_make_data_prunes(tmp_path: Path) -> None:
    from pipeline import layout

    cfg = make_cfg(tmp_path)
    assert layout.cache_root(cfg) not in layout.vectors_cache(cfg, "key").parents


def test_two_data_runs_of_the_same_texts_make_their_sentence_vectors_once(tmp_path: Path, monkeypatch) -> None:
    """Two experiments' `make data` side by side (a recipe's): the second waits for the first's vectors and reads
    them, where each used to encode every text itself."""
    import threading
    import time

    from pipeline.inputs import encoder

    made = []

    def encode(folder, texts):
        made.append(len(texts))
        time.sleep(0.5)  # long enough for the other run to reach the cache while this one encodes
        return np.arange(len(texts) * 4, dtype=np.float32).reshape(len(texts), 4)

    monkeypatch.setattr(encoder, "encode", encode)
    (tmp_path / "encoder").mkdir()
    (tmp_path / "encoder" / "config.json").write_text("{}")
    cfg = make_cfg(tmp_path, f"data.group_encoder={tmp_path / 'encoder'}")
    texts = ["one text", "another"]
    out = [None, None]
    runs = [threading.Thread(target=lambda i=i: out.__setitem__(i, encoder.vectors(cfg, texts))) for i in range(2)]
    for t in runs:
        t.start()
    for t in runs:
        t.join()
    assert made == [2]
    assert np.array_equal(out[0], out[1]) and out[0].shape == (2, 4)
