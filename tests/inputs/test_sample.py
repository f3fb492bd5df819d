"""The built-in sample competition (pipeline.inputs.sample): deterministic, Kaggle's columns and languages, and a
test_labels.csv with the ids of test.csv, labels as learnable as the validation's."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline import layout
from pipeline.inputs import sample
from pipeline.scoring import metrics
from tests.helpers import SCALE, digests

LANGS_VALID = {"es", "it", "tr"}
LANGS_TEST = {"es", "fr", "it", "pt", "ru", "tr"}


def insult_count(texts: pd.Series, langs: pd.Series) -> list[int]:
    return [sum(w in sample.TOXIC[lang] for w in text.split()) for text, lang in zip(texts, langs)]


def test_test_labels_match_test_and_are_learnable() -> None:
    frames = sample.make_frames(seed=0, scale=1.0)
    test, labels, valid = frames["test.csv"], frames["test_labels.csv"], frames["validation.csv"]
    assert list(labels.columns) == ["id", "toxic"] and labels["id"].tolist() == test["id"].tolist()
    assert set(labels["toxic"]) == {0, 1}
    # the words that make a comment toxic rank the test rows as well as the validation rows (label noise alike)
    test_auc = metrics.auc(labels["toxic"], insult_count(test["content"], test["lang"]))
    valid_auc = metrics.auc(valid["toxic"], insult_count(valid["comment_text"], valid["lang"]))
    assert 0.75 < test_auc < 0.95 and abs(test_auc - valid_auc) < 0.05
    # the labels come from a generator of their own: the other files are those of a run without them
    again = sample.make_frames(seed=0, scale=1.0)
    assert again["test.csv"].equals(test) and again["test_labels.csv"].equals(labels)


def test_sample_is_deterministic(tmp_path: Path) -> None:
    sample.write(tmp_path / "a", seed=0, scale=SCALE)
    sample.write(tmp_path / "b", seed=0, scale=SCALE)
    a, b = digests(tmp_path / "a"), digests(tmp_path / "b")
    assert sorted(a) == sorted(sample.FILES)
    assert a == b
    sample.write(tmp_path / "c", seed=1, scale=SCALE)
    assert digests(tmp_path / "c") != a


def test_sample_has_kaggles_columns_and_every_language() -> None:
    frames = sample.make_frames(0, SCALE)
    assert list(frames["validation.csv"].columns) == ["id", "comment_text", "lang", "toxic"]
    assert list(frames["test.csv"].columns) == ["id", "content", "lang"]
    assert list(frames["sample_submission.csv"].columns) == ["id", "toxic"]
    assert list(frames[layout.TRAIN].columns) == ["id", "comment_text", *sample.LABELS]
    assert set(frames["validation.csv"]["lang"]) == LANGS_VALID
    assert set(frames["test.csv"]["lang"]) == LANGS_TEST
    assert set(frames["translated-train.csv"]["lang"]) == LANGS_TEST | {"en"}
    for name in ("validation.csv", layout.TRAIN):
        rate = frames[name]["toxic"].mean()
        assert 0.03 < rate < 0.3, name  # both classes present, toxic the minority as in the real data
