"""The long comments of the held-out split (pipeline.inputs.lengths): which languages are stood in for, and
what `make data` says of their held-out rows over LONG tokens."""

from __future__ import annotations

import numpy as np

from pipeline.inputs import lengths
from pipeline.scoring import buckets


def test_the_split_and_the_estimate_share_one_set_of_edges() -> None:
    assert buckets.LENGTH_EDGES is lengths.LENGTH_EDGES and buckets.MIN_BUCKET_ROWS == lengths.MIN_BUCKET_ROWS
    assert lengths.LONG == lengths.LENGTH_EDGES[-1]


def test_standin_languages_are_the_test_s_without_validation_rows() -> None:
    test = ["es", "fr", "it", "pt", "ru", "tr", "fr"]
    assert lengths.standin_langs(test, ["es", "it", "tr"]) == ["fr", "pt", "ru"]
    assert lengths.standin_langs(test, test) == []


def test_long_lines_count_held_out_long_rows_by_class_and_warn_under_the_bucket_floor() -> None:
    n = lengths.MIN_BUCKET_ROWS
    langs = np.array(["fr"] * (2 * n + 3) + ["pt"] * 3 + ["en"])
    tokens = np.array([lengths.LONG + 1] * (2 * n + 2) + [lengths.LONG] + [500] * 3 + [-1])
    toxic = np.array([1] * n + [0] * n + [1, 1, 1] + [1, 0, 0] + [1])
    held = np.ones(len(langs), dtype=bool)
    held[2 * n + 1] = False  # a long toxic fr row left in training is not counted
    lines = lengths.long_lines(langs, tokens, toxic, held, ["fr", "pt", "ru"])
    long = lengths.LONG
    assert lines == [
        f"held out fr {2 * n + 1} over {long} tokens (toxic {n + 1} / clean {n})",
        f"held out pt 3 over {long} tokens (toxic 1 / clean 2)",
        f"warning: held out pt has under {n} toxic and clean rows over {long} tokens: the estimate merges its "
        f">{long} bucket for pt into a shorter one",
    ]  # ru has no rows: nothing stands in for it, no line
