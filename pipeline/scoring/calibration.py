"""Each language's predictions brought to one scale, learned without test labels (predict.calibration).

The competition's metric is one AUC over every test row: a model whose scores rank well inside each language
can still rank badly overall when one language's scores sit higher than another's. Two steps, each learned
without a test label:

- `lang`: a Platt scaling per language, fit on the OOF rows that stand for it (metrics.stand_ins:
  validation.csv's es, it, tr rows; the held-out translated fr, pt, ru rows), turns scores into
  probabilities of toxic on that language's OOF rows. A test language with no OOF rows gets the scaling
  fit on all of them.
- `lang+prior`: then each language's probabilities are moved from its OOF toxic rate to its toxic rate in
  the test, which is estimated from the unlabelled test predictions themselves by expectation-maximisation
  (Saerens, Latinne and Decaestecker, 2002): the translated rows are about half toxic, the test's
  languages between 10% and 45%.

Its effect on the OOF is measured nested: fold k's rows scaled by what the other folds' rows fit.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression

from pipeline.scoring.metrics import stand_ins

EPS = 1e-6


def logit(p) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), EPS, 1 - EPS)
    return np.log(p / (1 - p))


def platt(scores, labels) -> tuple[float, float]:
    """(a, b) of p = sigmoid(a * logit(score) + b), fit by logistic regression (nearly unregularised)."""
    y = np.asarray(labels)
    if len(np.unique(y)) < 2:
        return 1.0, 0.0
    model = LogisticRegression(C=1e4, max_iter=1000).fit(logit(scores)[:, None], y)
    return float(model.coef_[0, 0]), float(model.intercept_[0])


def scale(scores, ab: tuple[float, float]) -> np.ndarray:
    return 1 / (1 + np.exp(-(ab[0] * logit(scores) + ab[1])))


def fit(oof: pd.DataFrame, langs: list[str]) -> dict[str, dict]:
    """Per test language: its Platt scaling and its OOF toxic rate (`prior`), from its stand-in rows; a
    language without rows gets the fit on all of them."""
    rows = stand_ins(oof, dict.fromkeys(langs, 1.0))
    pooled = {"ab": platt(rows["pred"], rows["toxic"]), "prior": float(rows["toxic"].mean()), "rows": 0}
    out = {}
    for lang in langs:
        own = rows[rows["lang"] == lang]
        if own.empty or own["toxic"].nunique() < 2:
            out[lang] = pooled
        else:
            out[lang] = {"ab": platt(own["pred"], own["toxic"]), "prior": float(own["toxic"].mean()), "rows": len(own)}
    return out


def shift_prior(p: np.ndarray, old: float, new: float) -> np.ndarray:
    """Probabilities made under toxic rate `old`, as they are under `new` (Bayes' rule on the odds)."""
    up, down = new / max(old, EPS), (1 - new) / max(1 - old, EPS)
    return up * p / (up * p + down * (1 - p))


def test_prior(p: np.ndarray, prior: float, steps: int = 100) -> float:
    """The toxic rate of unlabelled rows whose probabilities `p` were made under rate `prior`: the rate that
    the rows' own probabilities, moved to it, average to (EM)."""
    rate = prior
    for _ in range(steps):
        new = float(shift_prior(p, prior, rate).mean())
        if abs(new - rate) < 1e-7:
            break
        rate = new
    return min(max(rate, EPS), 1 - EPS)


def apply(preds: np.ndarray, langs: np.ndarray, fitted: dict[str, dict], prior: bool) -> tuple[np.ndarray, dict]:
    """The test predictions on one scale; and per language the toxic rate used (estimated where `prior`)."""
    out, rates = np.asarray(preds, dtype=np.float64).copy(), {}
    for lang in sorted(set(langs)):
        at = langs == lang
        f = fitted.get(lang) or next(iter(fitted.values()))
        p = scale(out[at], f["ab"])
        if prior:
            rates[lang] = test_prior(p, f["prior"])
            p = shift_prior(p, f["prior"], rates[lang])
        out[at] = p
    return out, rates


def nested(oof: pd.DataFrame, langs: list[str]) -> pd.DataFrame:
    """The OOF with each fold's rows scaled by the fit on the other folds' rows (what the OOF says of it)."""
    out = oof.copy()
    for k in sorted(oof["fold"].unique()):
        at = (oof["fold"] == k).to_numpy()
        fitted = fit(oof[~at], langs)
        out.loc[at, "pred"], _ = apply(oof.loc[at, "pred"].to_numpy(), oof.loc[at, "lang"].to_numpy(), fitted, False)
    return out
