"""The test's toxic rate per language read off the experiment's unlabelled test predictions by EM (Saerens,
Latinne, Decaestecker 2002, "Adjusting the outputs of a classifier to new a priori probabilities"): a second
reading of what the six-language estimate otherwise assumes (validation.csv's rate, or its overall rate for a
language without validation rows), which the estimate's range (metrics.rate_spans) is widened to take in.

EM needs the prior the model's probabilities are calibrated to. It is not the training rows' rate: a fold
learns English, translated and validation.csv rows at different rates, and its head is never refit to any of
them. It is measured instead on the language's own labelled stand-ins, the rows the estimate scores it by
(`calibrated_prior`): the prior from which EM, run on their out-of-fold probabilities, reads back their known
toxic rate. A model calibrated on them gives their rate; one whose probabilities sit too high or too low on them
gives the prior that undoes it, which is all EM can use of the stand-ins (Saerens' assumption: the test differs
from them in the class balance only, not in what a toxic or a clean comment of the language looks like).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

EPS = 1e-6  # probabilities held off 0 and 1: a certain row would pin its posterior whatever the prior
EM_TOLERANCE = 1e-7  # EM stops when the rate moves less than this in a round
PRIOR_STEPS = 40  # bisection halvings of (0, 1) for calibrated_prior: 1e-12 apart at the end


def em_rate(pred, prior: float, rounds: int = 2000) -> float:
    """The class balance of the rows `pred` (a model's probabilities, calibrated at `prior`) holds, by EM: each
    row's probability moved to the current rate by Bayes' rule, the rate then the mean of them, until it stays
    put. NaN without rows or with a prior of 0 or 1 (no odds to move)."""
    p = np.clip(np.asarray(pred, dtype=np.float64), EPS, 1 - EPS)
    if not len(p) or not 0 < prior < 1:
        return float("nan")
    rate = prior
    for _ in range(rounds):
        # the posterior under the new prior: the likelihoods are the model's, only the priors' ratio changes
        toxic, clean = rate / prior * p, (1 - rate) / (1 - prior) * (1 - p)
        new = float(np.mean(toxic / (toxic + clean)))
        if abs(new - rate) < EM_TOLERANCE:
            return new
        rate = new
    return rate


def calibrated_prior(pred, toxic) -> float:
    """The prior at which EM on labelled rows' probabilities `pred` reads back their toxic rate (see the module's
    docstring); NaN where the rows hold one class only. EM's answer rises with the prior it is given: bisection."""
    y = np.asarray(toxic, dtype=np.float64) >= 0.5
    if y.all() or not y.any():
        return float("nan")
    target, low, high = float(y.mean()), 0.0, 1.0
    for _ in range(PRIOR_STEPS):
        mid = (low + high) / 2
        low, high = (mid, high) if em_rate(pred, mid) > target else (low, mid)
    return (low + high) / 2


def test_rates(stand_ins: pd.DataFrame, folds: list[pd.DataFrame], test: pd.DataFrame) -> dict | None:
    """Each test language's toxic rate by EM (`rates`: the mean over the folds' test predictions `folds`, each
    id, toxic, a model's probabilities) with the prior it was read from (`priors`: calibrated_prior on the
    language's stand-in rows, lang, toxic, pred); `test`: id, lang. None without test predictions."""
    if not folds:
        return None
    rates, priors = {}, {}
    for lang, rows in stand_ins.groupby("lang"):
        prior = calibrated_prior(rows["pred"], rows["toxic"])
        ids = set(test.loc[test["lang"] == lang, "id"])
        each = [em_rate(f.loc[f["id"].isin(ids), "toxic"], prior) for f in folds]
        if np.isfinite(prior) and ids and np.isfinite(each).all():
            rates[str(lang)], priors[str(lang)] = round(float(np.mean(each)), 6), round(prior, 6)
    return {"rates": rates, "priors": priors, "folds": len(folds)}
