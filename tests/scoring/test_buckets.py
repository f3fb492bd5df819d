"""Length buckets and the class x bucket weights of the six-language estimate (pipeline.scoring.buckets)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.scoring import buckets


def stand_ins() -> tuple[np.ndarray, np.ndarray]:
    """200 toxic and 200 clean rows over five buckets, the toxic ones longer: a translated language's link."""
    toxic = np.r_[np.ones(200), np.zeros(200)].astype(bool)
    bucket = np.r_[np.repeat([0, 1, 2, 3, 4], [20, 40, 40, 40, 60]), np.repeat([0, 1, 2, 3, 4], [60, 40, 40, 40, 20])]
    return toxic, bucket


def test_a_seed_gives_the_weights_its_class_length_link_and_keeps_both_margins() -> None:
    toxic, bucket = stand_ins()
    test_shares = [0.1, 0.25, 0.25, 0.2, 0.2]
    seed = np.array([[30, 50, 50, 40, 30], [200, 300, 300, 250, 250]])  # real comments: the toxic ones not longer
    own = buckets.language_weights(toxic, bucket, 0.3, 0.15, test_shares)
    seeded = buckets.language_weights(toxic, bucket, 0.3, 0.15, test_shares, seed)
    for w in (own, seeded):
        assert w[toxic].sum() == pytest.approx(0.3 * 0.15) and w[~toxic].sum() == pytest.approx(0.3 * 0.85)
        assert np.bincount(bucket, weights=w) / 0.3 == pytest.approx(test_shares)
    assert not np.allclose(own, seeded)

    def odds_ratio(table: np.ndarray) -> float:  # the toxic rows' odds of the longest bucket over the shortest
        return table[0, 4] * table[1, 0] / (table[0, 0] * table[1, 4])

    def cells(w: np.ndarray) -> np.ndarray:
        return np.stack([np.bincount(bucket[cls], weights=w[cls], minlength=5) for cls in (toxic, ~toxic)])

    assert odds_ratio(cells(seeded)) == pytest.approx(odds_ratio(seed), rel=1e-6)
    assert odds_ratio(cells(own)) == pytest.approx(odds_ratio(np.stack([[20, 40, 40, 40, 60], [60, 40, 40, 40, 20]])))


def test_a_bucket_thin_in_the_seed_merges_as_one_thin_in_the_rows_does() -> None:
    toxic, bucket = stand_ins()
    seed = np.array([[30, 50, 50, 40, 4], [200, 300, 300, 250, 250]])  # 4 toxic comments over 128 tokens
    w = buckets.language_weights(toxic, bucket, 1.0, 0.2, [0.1, 0.2, 0.2, 0.2, 0.3], seed)
    assert w[(bucket == 3) | (bucket == 4)].sum() == pytest.approx(0.5) and np.isfinite(w).all()
    # one group: its toxic rows weigh alike, not by a link read off 4 comments
    assert w[toxic & (bucket == 3)][0] == pytest.approx(w[toxic & (bucket == 4)][0])
    assert w[toxic & (bucket == 2)][0] != pytest.approx(w[toxic & (bucket == 3)][0])
    with pytest.raises(ValueError, match="needs rows of both classes"):  # else the toxic mass would fit to 0
        buckets.language_weights(toxic, bucket, 1.0, 0.2, [0.1, 0.2, 0.2, 0.2, 0.3], seed * [[0], [1]])


def test_class_length_counts_count_each_class_per_bucket_of_the_rows_with_a_count() -> None:
    got = buckets.class_length_counts([1, 0, 0, 1, 0, 1], [10, 40, 200, 300, float("nan"), 129])
    assert got == {"toxic": [1.0, 0.0, 0.0, 0.0, 2.0], "clean": [0.0, 1.0, 0.0, 0.0, 1.0]}
    assert np.array_equal(buckets.seed_table(got), [[1, 0, 0, 0, 2], [0, 1, 0, 0, 1]])
    assert buckets.seed_table(None) is None
    assert buckets.seed_table({"toxic": [0.0] * 5, "clean": [3.0] * 5}) is None  # no toxic comment: no link
