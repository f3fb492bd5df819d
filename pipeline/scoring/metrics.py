"""ROC AUC overall and per language, on the validation rows and, where the labels are known, on test; and the
one estimate of the test's pooled AUC that every choice is made by (`six_language`).

The competition's metric is one ROC AUC over all test rows together, whatever their language. A pooled AUC
compares every toxic row with every clean one, so it depends on how many of each every language brings: the
estimate (`six_language`) pools the out-of-fold rows that stand for each test language (validation.csv's
where the language has them: es, it, tr; else the held-out translated rows: fr, pt, ru with data.held_out)
and weights each language's toxic and clean rows to what the test is believed to hold of them: its share
of the test's rows (known: test.csv has a lang column) times its toxic rate in the test (not known:
`test_profile` estimates it without test labels). The validation AUC is validation.csv's rows only.
METRICS is the one list of figures every report shows.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

from pipeline import layout
from pipeline.errors import PipelineError
from pipeline.inputs.csvfile import label_values, read_csv
from pipeline.layout import TEST_LABELS, VALID_SOURCE
from pipeline.schema import Config

# where a test language's toxic rate comes from, as cv.json and `make cv` say it
FROM_VALIDATION, FROM_PRIOR = "validation.csv", "prior"


def auc(y, p, weight=None) -> float:
    """ROC AUC (weighted where `weight` is given), or NaN where only one class is present."""
    y = np.asarray(y)
    if len(np.unique(y)) < 2:
        return float("nan")
    return float(roc_auc_score(y, p, sample_weight=weight))


def auc_by_lang(y, p, lang) -> dict[str, float]:
    y, p, lang = np.asarray(y), np.asarray(p), np.asarray(lang)
    return {str(g): auc(y[lang == g], p[lang == g]) for g in sorted(set(lang))}


def language_mix(langs) -> dict[str, float]:
    """Each language's share of the rows (of the test table: what the estimate is weighted to)."""
    counts = pd.Series(np.asarray(langs)).value_counts()
    return {str(k): float(v / counts.sum()) for k, v in counts.sort_index().items()}


def test_profile(valid: pd.DataFrame, test_langs) -> dict:
    """What the test is believed to hold, per language: `mix` (its share of the test's rows, from test.csv's
    lang column) and `rates` (its toxic rate), with `rate_from` saying where each rate comes from.

    A rate is validation.csv's for a language it has: the competition drew validation.csv and test.csv from
    the same comments and annotation. A language without validation rows gets the prior, validation.csv's
    rate over all its rows: the translated rows that stand for it are toxic by design (about half), so their
    own rate says nothing of the test's, and an EM estimate from the unlabelled test predictions needs
    probabilities calibrated for that language, which only its labelled rows could give.
    `valid`: validation.csv's rows (lang, toxic)."""
    mix = language_mix(test_langs)
    y = valid["toxic"].to_numpy(np.float64)
    prior = float(y.mean()) if len(y) else float("nan")
    rates, rate_from = {}, {}
    for lang in mix:
        own = y[(valid["lang"] == lang).to_numpy()]
        rates[lang], rate_from[lang] = (float(own.mean()), FROM_VALIDATION) if len(own) else (prior, FROM_PRIOR)
    return {"mix": mix, "rates": rates, "rate_from": rate_from}


def on_validation(oof: pd.DataFrame) -> np.ndarray:
    """Which OOF rows are validation.csv's (all of them in a file written before held-out rows existed)."""
    return (oof["source"] == VALID_SOURCE).to_numpy() if "source" in oof else np.ones(len(oof), dtype=bool)


def stand_in_mask(oof: pd.DataFrame, langs) -> np.ndarray:
    """The OOF rows that stand for each test language: its validation.csv rows if it has any, else its
    held-out translated rows (and none for a language with neither)."""
    keep, valid = np.zeros(len(oof), dtype=bool), on_validation(oof)
    for lang in langs:
        own = (oof["lang"] == lang).to_numpy()
        real = own & valid
        keep |= real if real.any() else own
    return keep


def stand_ins(oof: pd.DataFrame, langs) -> pd.DataFrame:
    return oof[stand_in_mask(oof, langs)]


def row_weights(oof: pd.DataFrame, profile: dict) -> np.ndarray:
    """Each OOF row's weight in the estimate: a toxic row of language g gets mix[g] * rate[g] / (g's toxic
    stand-ins), a clean one mix[g] * (1 - rate[g]) / (g's clean stand-ins), so that every language brings
    the test's share of toxic and of clean rows whatever its stand-ins' own rate; 0 for a row that stands for
    no test language (an English original held out with its translations, a translation of a language
    validation.csv has)."""
    weights = np.zeros(len(oof))
    at = stand_in_mask(oof, profile["mix"])
    langs, y = oof["lang"].to_numpy(), oof["toxic"].to_numpy() >= 0.5
    for lang, share in profile["mix"].items():
        rate = profile["rates"][lang]
        for cls, mass in ((True, share * rate), (False, share * (1 - rate))):
            rows = at & (langs == lang) & (y == cls)
            if rows.any():
                weights[rows] = mass / rows.sum()
    return weights


def six_language(oof: pd.DataFrame, profile: dict) -> dict:
    """The estimate of the test's pooled AUC (see the module's docstring), and per language; `missing`: test
    languages the OOF has no row of, or rows of one class only (their weight goes to the others)."""
    weights = row_weights(oof, profile)
    rows = oof[weights > 0]
    both = rows.groupby("lang")["toxic"].nunique()
    return {
        "auc": auc(oof["toxic"], oof["pred"], weights) if weights.any() else float("nan"),
        "per_lang": auc_by_lang(rows["toxic"], rows["pred"], rows["lang"]),
        "rows": len(rows),
        "missing": sorted(set(profile["mix"]) - set(both[both == 2].index)),
    }


def prior_span(profile: dict) -> tuple[list[str], float, float] | None:
    """(the test languages whose toxic rate is the prior, the lowest and the highest rate of a language
    validation.csv has): the rates a language without validation rows may plausibly have; None where no
    language takes the prior or none has its own rate."""
    frm = profile.get("rate_from") or {}
    guessed = sorted(g for g in profile["mix"] if frm.get(g) == FROM_PRIOR)
    own = [profile["rates"][g] for g in profile["mix"] if frm.get(g) == FROM_VALIDATION]
    return (guessed, min(own), max(own)) if guessed and own else None


def six_corners(oof: pd.DataFrame, profile: dict) -> list[float] | None:
    """The six-language estimate with each prior-rate language's toxic rate at either end of prior_span, every
    combination in one fixed order (the estimate's assumption, shown: its range is their min to max, and two
    experiments whose order differs at some corner are a tie); None where no rate is a prior."""
    span = prior_span(profile)
    if span is None:
        return None
    guessed, low, high = span
    out = []
    for corner in itertools.product((low, high), repeat=len(guessed)):
        moved = {**profile, "rates": {**profile["rates"], **dict(zip(guessed, corner))}}
        out.append(six_language(oof, moved)["auc"])
    return out


@dataclass(frozen=True)
class Metric:
    """A figure every report shows of OOF rows: the fold table, cv.json, the blend's table and the board all
    read METRICS, so a metric is added here once."""

    key: str  # its key in cv.json ("metrics", each fold's) and in the board's rows
    header: str  # its column in every table, and its name in every line that prints it
    doc: str  # what it is, in one line
    score: Callable[[pd.DataFrame, dict | None], float]  # (OOF rows with `pred`, the test profile) -> value
    fmt: str = ".4f"
    probabilities: bool = False  # meaningless on ranks (a blend's OOF): not computed there


def six_auc(rows: pd.DataFrame, profile: dict | None) -> float:
    """The six-language AUC, only where every test language has stand-in rows of both classes (else it would
    be an estimate of another test: NaN, and a fold is judged by its validation AUC)."""
    if not profile:
        return math.nan
    six = six_language(rows, profile)
    return math.nan if six["missing"] else six["auc"]


def valid_auc(rows: pd.DataFrame, profile: dict | None = None) -> float:
    at = on_validation(rows)
    return auc(rows["toxic"][at], rows["pred"][at])


def valid_brier(rows: pd.DataFrame, profile: dict | None = None) -> float:
    at = on_validation(rows)
    if not at.any():
        return math.nan
    return float(np.mean((rows["pred"][at].to_numpy(np.float64) - rows["toxic"][at].to_numpy(np.float64)) ** 2))


SIX = Metric("six", "6-lang AUC", "the estimate of the test's pooled AUC: every test language's stand-in rows "
             "weighted to its share of the test and its toxic rate there (what best steps, blends and the board "
             "choose by)", six_auc)  # fmt: skip
METRICS = (
    SIX,
    Metric("valid_auc", "valid AUC", "ROC AUC on validation.csv's rows (es, it, tr)", valid_auc),
    Metric("brier", "Brier", "mean squared error of the probabilities on validation.csv's rows (lower is "
           "better; calibration shows here, not in an AUC)", valid_brier, probabilities=True),
)  # fmt: skip
BY_KEY = {m.key: m for m in METRICS}
RANKED_BY = (SIX, BY_KEY["valid_auc"])  # an experiment is ranked by the first of these it has


def judged_by(record: dict) -> str:
    """The name of the metric an evaluation (a metrics.jsonl record) was judged by; 'AUC' for one made before
    evaluations said so (the six-language estimate over whichever test languages the fold's rows stood for)."""
    metric = BY_KEY.get(record.get("metric") or "") if isinstance(record, dict) else None
    return metric.header if metric else "AUC"


def headline(figures: dict) -> tuple[Metric, float] | None:
    """The figure an experiment is ranked by (the first of RANKED_BY that `figures`, a cv.json's `metrics`,
    has), with its metric; None without one."""
    for m in RANKED_BY:
        value = figures.get(m.key) if isinstance(figures, dict) else None
        if isinstance(value, (int, float)) and not math.isnan(value):
            return m, float(value)
    return None


def saved_figures(cv) -> dict:
    """A cv.json's figures by metric key: its `metrics`; of one written before it had them, what it recorded
    under the old keys (`oof_auc`: the validation AUC; the six-language AUC where no test language was missing)."""
    if not isinstance(cv, dict):
        return {}
    if isinstance(cv.get("metrics"), dict):
        return cv["metrics"]
    six = cv.get("six") if isinstance(cv.get("six"), dict) else {}
    old = {SIX.key: six.get("auc") if six.get("missing") == [] else None, "valid_auc": cv.get("oof_auc")}
    return {k: v for k, v in old.items() if isinstance(v, (int, float))}


def scores(rows: pd.DataFrame, profile: dict | None, scale: str) -> dict[str, float]:
    """Every metric of METRICS on these OOF rows (NaN where it needs probabilities and `pred` is a rank)."""
    ranks = scale != layout.PROBABILITY
    return {m.key: math.nan if m.probabilities and ranks else m.score(rows, profile) for m in METRICS}


def figures(rows: pd.DataFrame, profile: dict | None, scale: str) -> dict:
    """Every metric of METRICS and the AUC per test language of one set of OOF rows: a row of every table."""
    return {**scores(rows, profile, scale), "per_lang": per_language(rows, profile)}


def per_language(rows: pd.DataFrame, profile: dict | None) -> dict[str, float]:
    """The AUC of each test language on the rows that stand for it (validation.csv's where it has them, else
    its held-out translated rows); without a profile, of each language on validation.csv's rows."""
    if profile:
        return six_language(rows, profile)["per_lang"]
    at = on_validation(rows)
    return auc_by_lang(rows["toxic"][at], rows["pred"][at], rows["lang"][at])


def shown(value, fmt: str = "") -> str:
    """A table cell: '-' for a figure that is not there (None, NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def read_profile(cfg: Config) -> dict | None:
    """The test profile of cfg's prepared tables (validation rows of folds.csv, langs of test.csv); None
    without them."""
    folder = layout.prepared_dir(cfg)
    try:
        table = pd.read_csv(folder / layout.TABLE, usecols=["lang", "toxic", "source"], dtype={"lang": str,
                            "source": str}, keep_default_na=False)  # fmt: skip
        test = pd.read_csv(folder / layout.TEST_TABLE, usecols=["lang"], dtype=str, keep_default_na=False)
    except (OSError, ValueError):
        return None
    return test_profile(table[table["source"] == VALID_SOURCE], test["lang"])


def fold_score(rows: pd.DataFrame, preds, profile: dict | None) -> tuple[str, float, dict[str, float]]:
    """What a fold's evaluation is judged by, its value and its AUC per language: the six-language AUC where
    the fold's rows stand for every test language (the best step is chosen by what the board ranks by);
    else (no held-out translated rows, or a stage without prepared test rows) the validation AUC."""
    rows = rows.assign(pred=np.asarray(preds))
    six = six_language(rows, profile) if profile else None  # once: it is every evaluation's work
    # the labels of a fold's rows never change: every evaluation of a fold is judged by one metric
    if six and not six["missing"]:
        return SIX.key, six["auc"], six["per_lang"]
    return "valid_auc", valid_auc(rows), six["per_lang"] if six else per_language(rows, None)


def test_score(raw: Path, test: pd.DataFrame, preds: pd.DataFrame) -> dict | None:
    """AUC overall and per language against the competition's test_labels.csv, where it is present."""
    path = raw / TEST_LABELS
    if not path.exists():
        return None
    labels = read_csv(path, ["id", "toxic"])
    labels["toxic"] = label_values(labels, "toxic", path, allowed=(-1,))
    labels = labels[labels["toxic"].isin([0, 1])]  # rows left out of scoring are marked -1
    rows = test[["id", "lang"]].merge(labels[["id", "toxic"]], on="id").merge(preds, on="id", suffixes=("", "_pred"))
    if rows.empty:
        raise PipelineError(f"{path}: no id in common with the test table")
    return {
        "auc": auc(rows["toxic"], rows["toxic_pred"]),
        "per_lang": auc_by_lang(rows["toxic"], rows["toxic_pred"], rows["lang"]),
        "rows": len(rows),
    }
