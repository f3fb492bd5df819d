"""Held-out translated rows (data.held_out, pipeline.inputs.groups): translations found to their English
original, groups held out whole and evenly, and no fold that validates on a translation trains on its
original or on another translation of it (the leak the grouping exists to stop)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import data
from pipeline.config import ConfigError
from pipeline.inputs import groups, tables
from tests.helpers import make_cfg

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


def test_a_translation_never_goes_to_an_original_of_the_other_label() -> None:
    found = groups.match_originals([translated(3, "es")], np.array([0]), [english(3), english(4)], np.array([1, 0]))
    assert found.tolist() == [1]  # the only original with its label, however alike the other is


def test_groups_are_the_ids_the_files_carry() -> None:
    extra = pd.DataFrame({"id": ["a-0", "a-1", "b-0"], "source_id": ["7", "8", "7"], "text": ["x", "y", "z"],
                          "lang": ["es", "es", "fr"], "toxic": [0, 1, 0]})  # fmt: skip
    keys, how = groups.source_groups(extra)
    assert keys[0] == keys[2] != keys[1] and "ids" in how


def test_held_out_groups_are_whole_seeded_and_even() -> None:
    keys = np.repeat(np.arange(300), np.random.default_rng(1).integers(1, 7, 300)).astype(str)
    folds = groups.held_out_folds(keys, 0.3, 5, seed=3)
    frame = pd.DataFrame({"key": keys, "fold": folds})
    assert (frame.groupby("key")["fold"].nunique() == 1).all()  # a group never split
    chosen = frame[frame["fold"] >= 0]["key"].nunique()
    assert chosen == 90
    per_fold = frame[frame["fold"] >= 0].groupby("fold")["key"].nunique()
    assert per_fold.max() - per_fold.min() <= 1
    assert np.array_equal(folds, groups.held_out_folds(keys, 0.3, 5, seed=3))
    assert not np.array_equal(folds, groups.held_out_folds(keys, 0.3, 5, seed=4))


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
