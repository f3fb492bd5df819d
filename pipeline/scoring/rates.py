"""The test's toxic rate per language read off the experiment's unlabelled test predictions by EM (Saerens,
Latinne, Decaestecker 2002, "Adjusting the outputs of a classifier to new a priori probabilities";
calibration.test_prior, the one EM of the pipeline, and its boundary rule, calibration.usable_rate): a second
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

from pipeline.scoring.calibration import test_prior, usable_rate

PRIOR_STEPS = 40  # bisection halvings of (0, 1) for calibrated_prior: 1e-12 apart at the end


def calibrated_prior(pred, toxic) -> float:
    """The prior at which EM on labelled rows' probabilities `pred` reads back their toxic rate (see the module's
    docstring); NaN where the rows hold one class only. EM's answer rises with the prior it is given: bisection."""
    y = np.asarray(toxic, dtype=np.float64) >= 0.5
    if y.all() or not y.any():
        return float("nan")
    p, target, low, high = np.asarray(pred, dtype=np.float64), float(y.mean()), 0.0, 1.0
    for _ in range(PRIOR_STEPS):
        mid = (low + high) / 2
        low, high = (mid, high) if test_prior(p, mid)[0] > target else (low, mid)
    return (low + high) / 2


def test_rates(stand_ins: pd.DataFrame, folds: list[pd.DataFrame], test: pd.DataFrame) -> dict | None:
    """Each test language's toxic rate by EM (`rates`: the mean over the folds' test predictions `folds`, each
    id, toxic, a model's probabilities) with the prior it was read from (`priors`: calibrated_prior on the
    language's stand-in rows, lang, toxic, pred); `unusable`: the languages some fold's EM answer of which is at
    a boundary or did not converge (no rate: one fold's noise would move the range). `test`: id, lang. None
    without test predictions."""
    if not folds:
        return None
    rates, priors, unusable = {}, {}, []
    for lang, rows in stand_ins.groupby("lang"):
        prior = calibrated_prior(rows["pred"], rows["toxic"])
        ids = set(test.loc[test["lang"] == lang, "id"])
        if not np.isfinite(prior) or not ids:
            continue
        preds = [f.loc[f["id"].isin(ids), "toxic"].to_numpy(np.float64) for f in folds]
        found = [test_prior(p, prior) for p in preds if len(p)]
        if found and all(usable_rate(*answer) for answer in found):
            rates[str(lang)] = round(float(np.mean([rate for rate, _ in found])), 6)
        else:
            unusable.append(str(lang))
        priors[str(lang)] = round(prior, 6)
    return {"rates": rates, "priors": priors, "unusable": unusable, "folds": len(folds)}
