"""Blend weights (pipeline.scoring.blending): rank-averaging with weights on the simplex, fit on OOF, nested so
that fold k's weights never see fold k."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.scoring import blending, metrics
from tests.helpers.experiments import validation

# ---------------------------------------------------------------- weights


def test_fit_weights_on_the_simplex_and_better_than_each() -> None:
    rows = validation(900)
    y = rows["toxic"].to_numpy()
    rng = np.random.default_rng(0)
    ranks = np.column_stack([blending.rank01(y + rng.normal(0, 1, len(y))) for _ in range(3)])
    w = blending.fit_weights(ranks, y, 0.05)
    assert w.min() >= 0 and w.sum() == pytest.approx(1.0)
    assert metrics.auc(y, ranks @ w) > max(metrics.auc(y, ranks[:, j]) for j in range(3))
    assert blending.fit_weights(ranks[:, :1], y).tolist() == [1.0]  # one member: all the weight
    noise = np.column_stack([ranks[:, 0], blending.rank01(rng.random(len(y)))])
    assert blending.fit_weights(noise, y, 0.05)[1] < 0.2  # a member that is pure noise gets little


def test_rank01_scale() -> None:
    np.testing.assert_allclose(blending.rank01([0.3, 10.0, -1.0]), [0.5, 1.0, 0.0])


def test_fold_weights_do_not_depend_on_fold_k() -> None:
    """Leak test: scramble fold 2's labels and predictions; fold 2's weights stay, the others' change."""
    rows = validation(1000)
    y, folds = rows["toxic"].to_numpy(), rows["fold"].to_numpy()
    rng = np.random.default_rng(5)
    ranks = np.column_stack([blending.rank01(y + rng.normal(0, s, len(y))) for s in (0.8, 1.5)])
    before = blending.nested_weights(ranks, y, folds, 0.05)
    y2, ranks2 = y.copy(), ranks.copy()
    in2 = folds == 2
    y2[in2] = 1 - y2[in2]  # fold 2 now rewards the opposite order
    ranks2[in2, 1] = y2[in2]  # and member 1 is a perfect oracle there
    after = blending.nested_weights(ranks2, y2, folds, 0.05)
    np.testing.assert_array_equal(before[2], after[2])
    assert any(not np.array_equal(before[k], after[k]) for k in (0, 1, 3, 4))


def test_oracle_on_one_fold_gets_no_credit_for_it() -> None:
    """Leak test: member b is an oracle on fold 0 only (noise elsewhere). Weights fit on all OOF would
    count fold 0's rows and score clearly higher; the nested OOF must not."""
    rows = validation(1000)
    y, folds = rows["toxic"].to_numpy(), rows["fold"].to_numpy()
    rng = np.random.default_rng(1)
    a = y + rng.normal(0, 1.2, len(y))
    b = rng.random(len(y))
    b[folds == 0] = y[folds == 0] + 0.01 * rng.random(int((folds == 0).sum()))
    ranks = np.column_stack([blending.rank01(a), blending.rank01(b)])
    nested = blending.apply_weights(ranks, folds, blending.nested_weights(ranks, y, folds, 0.05))
    everywhere = ranks @ blending.fit_weights(ranks, y, 0.05)
    honest, leaky = metrics.auc(y, nested), metrics.auc(y, everywhere)
    assert leaky - honest > 0.04, (honest, leaky)
    fold0 = folds == 0
    assert metrics.auc(y[fold0], nested[fold0]) < metrics.auc(y[fold0], everywhere[fold0]) - 0.05


def test_the_search_takes_the_best_point_of_its_grid() -> None:
    """Two members: the weight is the best of 0, step, ..., 1. Here 0.75 is the best quarter and 0.875 beats it, so
    a grid of other points (eighths, fifths, one end left out) gives another weight."""
    rng = np.random.default_rng(19)
    y = np.r_[np.zeros(30), np.ones(30)]
    ranks = np.column_stack([blending.rank01(y + rng.normal(0, 1, 60)) for _ in range(2)])
    assert blending.fit_weights(ranks, y, 0.25).tolist() == [0.75, 0.25]
    assert blending.fit_weights(ranks, y, 0.125).tolist() == [0.875, 0.125]


def test_equal_members_keep_equal_weights_after_one_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ties keep the earlier, more even weights, and a round that moves nothing ends the search: the first AUC and
    one round of 2 members x 5 grid points."""
    y = np.r_[np.zeros(20), np.ones(20)]
    r = blending.rank01(y + np.random.default_rng(0).normal(0, 1, 40))
    calls = []
    auc = metrics.auc
    monkeypatch.setattr(metrics, "auc", lambda *a: calls.append(1) or auc(*a))
    assert blending.fit_weights(np.column_stack([r, r]), y, 0.25).tolist() == [0.5, 0.5]
    assert len(calls) == 1 + 2 * 5
    # weighted rows: every point scores the start's weighted AUC, which the unweighted one would undercut
    rows = np.where(np.abs(r - y) < 0.5, 1.0, 0.1)
    assert auc(y, r, rows) > auc(y, r)
    assert blending.fit_weights(np.column_stack([r, r]), y, 0.25, rows).tolist() == [0.5, 0.5]


def test_the_search_ends_where_no_single_move_raises_the_auc() -> None:
    """Rounds go on while one moves: at the weights returned, no member's weight on the grid, the others keeping
    their proportions, scores higher."""
    rng = np.random.default_rng(2)
    y = np.r_[np.zeros(60), np.ones(60)]
    ranks = np.column_stack([blending.rank01(y + rng.normal(0, s, 120)) for s in (0.8, 1.0, 1.2, 1.5)])
    w = blending.fit_weights(ranks, y, 0.1)
    best = metrics.auc(y, blending.mix(ranks, w))
    for j in range(4):
        rest = np.delete(w, j)
        for t in np.linspace(0, 1, 11):
            moved = np.insert(rest / rest.sum() * (1 - t), j, t) if rest.sum() > 0 else None
            assert moved is None or metrics.auc(y, blending.mix(ranks, moved)) <= best + 1e-12, (j, t, w)


def test_an_oracle_takes_all_the_weight_and_is_tried_again_from_even_shares(monkeypatch: pytest.MonkeyPatch) -> None:
    """A member at weight 1 tried again: the others' shares are 0/0, so they start even instead (no NaN), and every
    weighting tried is on the simplex."""
    tried = []
    mix = blending.mix
    monkeypatch.setattr(blending, "mix", lambda r, w: tried.append(np.array(w)) or mix(r, w))
    rng = np.random.default_rng(3)
    y = np.r_[np.zeros(1000), np.ones(1000)]
    # ranks 1/1999 apart at the classes' border: 5% of noise in the blend breaks the order there
    ranks = np.column_stack([blending.rank01(y + 0.1 * rng.random(2000)), rng.random(2000), rng.random(2000)])
    assert blending.fit_weights(ranks, y, 0.05).tolist() == [1.0, 0.0, 0.0]
    assert len(tried) == 1 + 2 * 3 * 21  # a second round, which moved nothing, from the oracle at weight 1
    np.testing.assert_allclose([w.sum() for w in tried], 1.0)


def test_row_weights_decide_which_member_wins() -> None:
    """Member a orders group one well and group two at random, b the reverse: the rows that weigh most pick the
    member, in fit_weights and, fold by fold, in nested_weights."""
    rng = np.random.default_rng(0)
    y = np.tile(np.r_[np.zeros(50), np.ones(50)], 2)
    one = np.arange(200) < 100
    a = np.where(one, y + 0.3 * rng.normal(size=200), rng.random(200))
    b = np.where(one, rng.random(200), y + 0.3 * rng.normal(size=200))
    ranks = np.column_stack([blending.rank01(a), blending.rank01(b)])
    first, second = np.where(one, 1.0, 0.01), np.where(one, 0.01, 1.0)
    assert blending.fit_weights(ranks, y, 0.05, first)[0] > 0.7
    assert blending.fit_weights(ranks, y, 0.05, second)[1] > 0.7
    folds = np.arange(200) % 4
    nested = blending.nested_weights(ranks, y, folds, 0.05, weigh=lambda mask: first[mask])
    for k in range(4):
        rest = folds != k
        np.testing.assert_array_equal(nested[k], blending.fit_weights(ranks[rest], y[rest], 0.05, first[rest]))
        assert nested[k][0] > 0.7


def test_mix_is_the_weighted_mean_to_ten_decimals() -> None:
    ranks = np.array([[0.123456789012345, 0.5], [1.0, 0.0]])
    np.testing.assert_array_equal(blending.mix(ranks, np.array([1.0, 0.0])), [0.123456789, 1.0])
    np.testing.assert_array_equal(blending.mix(ranks, np.array([0.5, 0.5])), [0.3117283945, 0.5])


def test_a_member_is_tried_with_the_others_kept_in_their_proportions(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first member's weight moved, the second's candidates scale the others as they stand (not evenly)."""
    rng = np.random.default_rng(1)
    y = np.r_[np.zeros(60), np.ones(60)]
    ranks = np.column_stack([blending.rank01(y + rng.normal(0, s, 120)) for s in (0.5, 1.5, 3.0)])
    tried = []
    mix = blending.mix
    monkeypatch.setattr(blending, "mix", lambda r, w: tried.append(np.array(w)) or mix(r, w))
    blending.fit_weights(ranks, y, 0.25)
    first, second = tried[1:6], tried[6:11]  # the start, then 5 grid points a member
    start = second[0]  # the second member at 0: the others' shares as they stand
    assert start[1] == 0 and not np.allclose(start[[0, 2]], [0.5, 0.5])  # the first member moved
    assert any(np.allclose(start[[0, 2]], w[[0, 2]] / w[[0, 2]].sum()) for w in first)
