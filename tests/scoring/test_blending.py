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
