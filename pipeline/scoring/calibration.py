"""Each language's predictions brought to one scale, learned without test labels (predict.calibration).

The competition's metric is one AUC over every test row: a model whose scores rank well inside each language
can still rank badly overall when one language's scores sit higher than another's. Calibration maps a
model's probabilities to probabilities, so it is fit on a model's OOF probabilities and applied to its test
probabilities, fold by fold, before the folds are ensembled (a blend's predictions are ranks: it is refused
there). Two settings, each learned without a test label:

- `lang`: a Platt scaling per language, fit on the OOF rows that stand for it (metrics.stand_ins:
  validation.csv's es, it, tr rows; the held-out translated fr, pt, ru rows), then moved by Bayes' rule
  from the stand-ins' toxic rate to the test's, as the test profile estimates it (metrics.test_profile):
  translated rows are about half toxic, the test's languages far less. A language with fewer than
  MIN_CLASS rows of either class among its stand-ins, or whose own fit would reverse its order (a slope
  that is not positive), gets the fit on all stand-ins instead, and is moved from all stand-ins' toxic rate.
  The regularisation is the one of C_GRID whose nested scaling gives the best estimate of the test AUC.
- `lang+prior`: then each language is moved once more, to the toxic rate that EM finds in its unlabelled
  test predictions (Saerens, Latinne and Decaestecker, 2002). An EM answer at a boundary (below
  RATE_FLOOR or above 1 - RATE_FLOOR) or one that does not converge is not used: the language keeps the
  profile's rate, and the run says so.

Its effect on the OOF is measured nested twice over (nested_choice): fold k's rows scaled by what the other
folds' rows fit, with the C that those rows chose, so that no row is scored by a choice it took part in.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression

from pipeline.scoring import metrics

EPS = 1e-6
MIN_CLASS = 10  # a language's own Platt scaling needs this many toxic and this many clean stand-in rows
C_GRID = (0.01, 0.1, 1.0, 10.0)  # inverse regularisation strengths tried, chosen by the nested estimate
RATE_FLOOR = 0.005  # an EM toxic rate closer than this to 0 or 1 is a boundary answer, not an estimate
EM_STEPS = 2000


def logit(p) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), EPS, 1 - EPS)
    return np.log(p / (1 - p))


def platt(scores, labels, c: float) -> tuple[float, float]:
    """(a, b) of p = sigmoid(a * logit(score) + b), fit by logistic regression with inverse strength `c`."""
    y = np.asarray(labels)
    if len(np.unique(y)) < 2:
        return 1.0, 0.0
    model = LogisticRegression(C=c, max_iter=1000).fit(logit(scores)[:, None], y)
    return float(model.coef_[0, 0]), float(model.intercept_[0])


def scale(scores, ab: tuple[float, float]) -> np.ndarray:
    return 1 / (1 + np.exp(-(ab[0] * logit(scores) + ab[1])))


def fit(oof: pd.DataFrame, profile: dict, c: float) -> dict[str, dict]:
    """Per test language: its Platt scaling (`ab`), the toxic rate of the rows that scaling was fit on
    (`prior`, what the scaled probabilities are made under: its own stand-ins', or all stand-ins' where it gets
    the pooled fit), the profile's rate (`target`) and whether it had its own fit."""
    rows = metrics.stand_ins(oof, profile["mix"])
    pooled_ab = platt(rows["pred"], rows["toxic"], c)
    if pooled_ab[0] <= 0:  # even all languages together reverse the order: no scaling at all
        pooled_ab = (1.0, 0.0)
    # the pooled fit's probabilities are made under the pooled rows' toxic rate, whatever the language's own
    # (from 5 toxic of 200 stand-ins, or none, its rows would all rise, by odds of 7 or of 10^5)
    pooled_prior = float(rows["toxic"].mean())
    out = {}
    for lang in profile["mix"]:
        own = rows[rows["lang"] == lang]
        y = own["toxic"].to_numpy()
        ab, prior, mine = pooled_ab, pooled_prior, False
        if min(int(y.sum()), int(len(y) - y.sum())) >= MIN_CLASS:
            found = platt(own["pred"], y, c)
            if found[0] > 0:  # a slope that is not positive would reverse the language's order
                ab, prior, mine = found, float(y.mean()), True
        out[lang] = {"ab": ab, "prior": prior, "target": profile["rates"][lang], "own_fit": mine, "rows": len(own)}
    return out


def shift_prior(p: np.ndarray, old: float, new: float) -> np.ndarray:
    """Probabilities made under toxic rate `old`, as they are under `new` (Bayes' rule on the odds)."""
    up, down = new / max(old, EPS), (1 - new) / max(1 - old, EPS)
    return up * p / (up * p + down * (1 - p))


def test_prior(p: np.ndarray, prior: float, steps: int = EM_STEPS) -> tuple[float, bool]:
    """(the toxic rate of unlabelled rows whose probabilities `p` were made under rate `prior`, whether EM
    converged to it): the rate that the rows' own probabilities, moved to it, average to."""
    rate = prior
    for _ in range(steps):
        new = float(shift_prior(p, prior, rate).mean())
        if abs(new - rate) < 1e-8:
            return new, True
        rate = new
    return rate, False


def usable_rate(rate: float, converged: bool) -> bool:
    """An EM answer that is an estimate: converged, and not at a boundary."""
    return converged and RATE_FLOOR <= rate <= 1 - RATE_FLOOR


def apply(preds: np.ndarray, langs: np.ndarray, fitted: dict[str, dict], prior: bool) -> tuple[np.ndarray, dict]:
    """The test predictions on one scale; and per language the toxic rate used and, where `prior` asked for
    EM, what EM found (`em`) and whether it was used."""
    out, rates = np.asarray(preds, dtype=np.float64).copy(), {}
    for lang in sorted(set(langs)):
        at = langs == lang
        f = fitted.get(lang) or next(iter(fitted.values()))
        p = shift_prior(scale(out[at], f["ab"]), f["prior"], f["target"])
        rates[lang] = {"rate": f["target"]}
        if prior:
            found, converged = test_prior(p, f["target"])
            used = usable_rate(found, converged)
            rates[lang] = {"rate": found if used else f["target"], "em": found, "converged": converged, "used": used}
            if used:
                p = shift_prior(p, f["target"], found)
        out[at] = p
    return out, rates


def nested(oof: pd.DataFrame, profile: dict, c: float) -> pd.DataFrame:
    """The OOF with each fold's rows scaled by the fit on the other folds' rows (what the OOF says of it)."""
    return by_the_other_folds(oof, profile, lambda k, rest: c)[0]


def nested_choice(oof: pd.DataFrame, profile: dict) -> tuple[pd.DataFrame, dict[int, float]]:
    """The OOF with each fold's rows scaled by the fit on the other folds' rows, with the C that those rows
    chose (choose_c on them alone); and each fold's C. Its estimate is what calibration, its C chosen as the
    submission's is, does to rows that neither fit it nor chose its C. The best of choose_c's estimates is
    not that: it is the one of four that these very rows picked."""
    return by_the_other_folds(oof, profile, lambda k, rest: choose_c(rest, profile)[0])


def with_recorded_c(oof: pd.DataFrame, profile: dict, c_by_fold: dict) -> pd.DataFrame:
    """The OOF scaled as nested_choice scaled it, each fold by the fit on the others with the C that a record
    (cv.json's calibration, `c_by_fold`: fold -> C, its keys strings once read back) says it chose."""
    return by_the_other_folds(oof, profile, lambda k, rest: float(c_by_fold.get(str(k), c_by_fold.get(k))))[0]


def by_the_other_folds(oof: pd.DataFrame, profile: dict, pick) -> tuple[pd.DataFrame, dict[int, float]]:
    """The OOF with each fold's rows scaled by the fit on the other folds' rows with the C `pick(the fold, those
    rows)` gives; and each fold's C."""
    out, chose = oof.copy(), {}
    for k in sorted(oof["fold"].unique()):
        at = (oof["fold"] == k).to_numpy()
        chose[int(k)] = pick(int(k), oof[~at])
        fitted = fit(oof[~at], profile, chose[int(k)])
        out.loc[at, "pred"], _ = apply(oof.loc[at, "pred"].to_numpy(), oof.loc[at, "lang"].to_numpy(), fitted, False)
    return out, chose


def choose_c(oof: pd.DataFrame, profile: dict) -> tuple[float, dict[float, float]]:
    """The C of C_GRID whose nested scaling gives the best estimate of the test AUC, and each one's estimate
    (the first of equals: the strongest regularisation). The rows of a single fold have no other folds to be
    scaled by: each C is then judged on the rows scaled by their own fit."""
    one_fold = oof["fold"].nunique() < 2

    def estimate(c: float) -> float:
        scaled = in_sample(oof, profile, c) if one_fold else nested(oof, profile, c)
        return metrics.six_language(scaled, profile)["auc"]

    scores = {c: estimate(c) for c in C_GRID}
    return max(C_GRID, key=lambda c: (np.nan_to_num(scores[c], nan=-1.0), -c)), scores


def in_sample(oof: pd.DataFrame, profile: dict, c: float) -> pd.DataFrame:
    """The OOF scaled by the fit on its own rows."""
    scaled, _ = apply(oof["pred"].to_numpy(), oof["lang"].to_numpy(), fit(oof, profile, c), False)
    return oof.assign(pred=scaled)
