"""Blend weights: members' predictions as ranks, mixed with non-negative weights that sum to one and
maximise the OOF AUC (weighted by row: the estimate of the test AUC, metrics.six_language, is a weighted
AUC), and fit nested so that fold k's weights never saw fold k's rows.

Each member's predictions are rank-normalised to [0, 1] (AUC only sees order, and members on other
scales then count alike); the weights are found by a coordinate search on the simplex.
"""

from __future__ import annotations

import numpy as np

from pipeline.scoring import metrics
from pipeline.scoring.submission import ensemble


def rank01(p) -> np.ndarray:
    """Average ranks scaled to [0, 1]: the order of `p`, on a scale every member shares."""
    return ensemble([np.asarray(p, dtype=np.float64)], "rank")


def fit_weights(ranks: np.ndarray, y: np.ndarray, step: float = 0.05, rows: np.ndarray | None = None) -> np.ndarray:
    """Non-negative weights summing to one that maximise AUC(y, ranks @ w), each row weighted by `rows`
    (None: alike): coordinate search on the simplex.

    From equal weights, each member's weight in turn is tried at 0, step, ..., 1 with the others keeping
    their proportions; a move is kept only if it raises the AUC, until a round moves nothing.
    """
    m = ranks.shape[1]
    w = np.full(m, 1.0 / m)
    if m == 1:
        return w
    grid = np.linspace(0.0, 1.0, int(round(1.0 / step)) + 1)
    best = metrics.auc(y, mix(ranks, w), rows)
    for _ in range(50):  # a safety bound: a round that moves raises the AUC, so the search ends well before
        moved = False
        for j in range(m):
            rest = np.delete(w, j)
            share = rest / rest.sum() if rest.sum() > 0 else np.full(m - 1, 1.0 / (m - 1))
            for t in grid:
                cand = np.insert(share * (1.0 - t), j, t)
                a = metrics.auc(y, mix(ranks, cand), rows)
                if a > best + 1e-12:  # strictly better only: ties keep the earlier, more even weights
                    best, w, moved = a, cand, True
        if not moved:
            break
    return w


def mix(ranks: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The weighted mean of the members' ranks, rounded to 10 decimals: sums of ranks tie often, and
    float noise (1e-16) would break those ties differently once a CSV has rounded it, changing the AUC."""
    return np.round(ranks @ w, 10)


def nested_weights(
    ranks: np.ndarray, y: np.ndarray, folds: np.ndarray, step: float, weigh=None
) -> dict[int, np.ndarray]:
    """Fold k's weights, fit on the rows of every other fold: fold k's own rows are never seen. `weigh`: the
    row weights of the rows a mask selects, computed on those rows alone (None: rows alike)."""
    out = {}
    for k in np.unique(folds):
        rest = folds != k
        out[int(k)] = fit_weights(ranks[rest], y[rest], step, None if weigh is None else weigh(rest))
    return out


def apply_weights(ranks: np.ndarray, folds: np.ndarray, fold_weights: dict[int, np.ndarray]) -> np.ndarray:
    """Each row blended with its own fold's weights."""
    out = np.empty(len(ranks))
    for k, w in fold_weights.items():
        out[folds == k] = mix(ranks[folds == k], w)
    return out
