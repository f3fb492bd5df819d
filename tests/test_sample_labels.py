"""The sample competition's test_labels.csv: the ids of test.csv, labels as learnable as the validation's."""

from __future__ import annotations

import pandas as pd

from pipeline import metrics, sample


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
