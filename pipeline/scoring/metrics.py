"""ROC AUC overall and per language, on the validation rows and, where the labels are known, on test; and the
one estimate of the test's pooled AUC that every choice is made by (`six_language`).

The competition's metric is one ROC AUC over all test rows together, whatever their language. A pooled AUC
compares every toxic row with every clean one, so it depends on how many of each every language brings: the
estimate (`six_language`) pools the out-of-fold rows that stand for each test language (validation.csv's
where the language has them: es, it, tr; else the held-out translated rows: fr, pt, ru with data.held_out)
and weights each language's toxic and clean rows to what the test is believed to hold of them: its share
of the test's rows (known: test.csv has a lang column) times its toxic rate in the test (not known:
`test_profile` estimates it without test labels). Where the OOF rows carry their untruncated token counts
(`tokens`) and the profile the test's length mix per language (`lengths`), each language's rows are weighted
over class x length bucket instead (buckets.language_weights): the class margins as above, the length margins
the test's own bucket shares for that language, the link between class and length its stand-ins' own where they
are real comments and validation.csv's comments' (`valid_lengths`) where they are translations. The rates a
language's toxic rate is varied over (`rate_spans`) take in the rate EM reads off the test predictions where a
profile has one (`em`: pipeline.scoring.rates). The validation AUC is validation.csv's rows only. METRICS is the
one list of figures every report shows.
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
from pipeline.inputs import tables
from pipeline.inputs.csvfile import label_values, read_csv
from pipeline.layout import TEST_LABELS, VALID_SOURCE
from pipeline.schema import Config
from pipeline.scoring.buckets import class_length_counts, language_weights, length_buckets, length_mix, seed_table

# where a test language's toxic rate comes from, as cv.json and `make cv` say it
FROM_VALIDATION, FROM_PRIOR = "validation.csv", "prior"
# the toxic rates a language without validation rows is varied over for the estimate's range: wider than
# validation.csv's languages (0.107-0.195), since nothing says the test's other languages lie between them
PRIOR_RATES = (0.05, 0.35)
RATE_SES = 2.0  # a language with validation rows is varied by this many standard errors of its rate


def auc(y, p, weight=None) -> float:
    """ROC AUC (weighted where `weight` is given), or NaN where only one class is present: sklearn's figure, from
    one sort (the estimate's ranges and the best-step choices score thousands of AUCs; sklearn's checks cost more
    than the sum)."""
    y = np.asarray(y)
    classes = np.unique(y)
    if len(classes) < 2:
        return float("nan")
    p = np.asarray(p, dtype=np.float64)
    w = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=np.float64)
    if len(classes) > 2 or p.shape != y.shape or w.shape != y.shape or not np.isfinite(p).all() or (w < 0).any():
        return float(roc_auc_score(y, p, sample_weight=weight))  # sklearn's own error for what it refuses
    order = np.argsort(p, kind="stable")
    scores, pos, w = p[order], y[order] == classes[-1], w[order]  # the larger label is the positive, as sklearn's
    tie = np.cumsum(np.r_[True, scores[1:] != scores[:-1]]) - 1  # rows of equal score share one group
    w_pos, w_neg = np.bincount(tie, w * pos), np.bincount(tie, w * ~pos)
    if w_pos.sum() <= 0 or w_neg.sum() <= 0:
        return float(roc_auc_score(y, p, sample_weight=weight))
    # each positive beats the negatives below its score and half of those tied with it (the ROC's trapezoids)
    beaten = np.cumsum(w_neg) - w_neg + 0.5 * w_neg
    return float(np.dot(w_pos, beaten) / (w_pos.sum() * w_neg.sum()))


def auc_by_lang(y, p, lang) -> dict[str, float]:
    y, p, lang = np.asarray(y), np.asarray(p), np.asarray(lang)
    return {str(g): auc(y[lang == g], p[lang == g]) for g in sorted(set(lang))}


def language_mix(langs) -> dict[str, float]:
    """Each language's share of the rows (of the test table: what the estimate is weighted to)."""
    counts = pd.Series(np.asarray(langs)).value_counts()
    return {str(k): float(v / counts.sum()) for k, v in counts.sort_index().items()}


def test_profile(valid: pd.DataFrame, test_langs, test_tokens=None, valid_tokens=None) -> dict:
    """What the test is believed to hold, per language: `mix` (its share of the test's rows, from test.csv's
    lang column) and `rates` (its toxic rate), with `rate_from` saying where each rate comes from and `rate_se`
    its standard error (0 for the prior, which the range moves over PRIOR_RATES instead); with `test_tokens`
    (each test row's untruncated token count), `lengths`: each language's share of rows per length bucket; with
    `valid_tokens` (each of `valid`'s rows' count), `valid_lengths`: their class x bucket counts, the link between
    class and length that the weights of a language without validation rows are seeded with (buckets.py).

    A rate is validation.csv's for a language it has: the competition drew validation.csv and test.csv from
    the same comments and annotation. A language without validation rows gets the prior, validation.csv's
    rate over all its rows: the translated rows that stand for it are toxic by design (about half), so their
    own rate says nothing of the test's. A reading of each rate by EM on the test predictions
    (pipeline.scoring.rates) is added by `make cv` once they exist (`em`), and widens the range (rate_spans).
    `valid`: validation.csv's rows (lang, toxic)."""
    mix = language_mix(test_langs)
    y = valid["toxic"].to_numpy(np.float64)
    prior = float(y.mean()) if len(y) else float("nan")
    rates, rate_from, ses = {}, {}, {}
    for lang in mix:
        own = y[(valid["lang"] == lang).to_numpy()]
        rates[lang], rate_from[lang] = (float(own.mean()), FROM_VALIDATION) if len(own) else (prior, FROM_PRIOR)
        ses[lang] = math.sqrt(rates[lang] * (1 - rates[lang]) / len(own)) if len(own) else 0.0
    profile = {"mix": mix, "rates": rates, "rate_from": rate_from, "rate_se": ses}
    if test_tokens is not None:
        profile["lengths"] = length_mix(test_langs, test_tokens)
    if valid_tokens is not None:
        profile["valid_lengths"] = class_length_counts(y, valid_tokens)
    return profile


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
    validation.csv has). Where the rows carry `tokens` and the profile `lengths`, each language's mass is
    spread over class x length bucket as well (language_weights), a language of translated stand-ins seeded
    with validation.csv's class x length link where the profile has it (`valid_lengths`); a language
    length_gaps names keeps the class weights alone."""
    weights = np.zeros(len(oof))
    at = stand_in_mask(oof, profile["mix"])
    langs, y, real = oof["lang"].to_numpy(), oof["toxic"].to_numpy() >= 0.5, on_validation(oof)
    lengths, buckets = profile.get("lengths") or {}, stand_in_buckets(oof, profile)
    seed = seed_table(profile.get("valid_lengths"))
    for lang, share in profile["mix"].items():
        rows = at & (langs == lang)
        if not rows.any():
            continue
        # validation.csv's rows are real comments: their own link; translated stand-ins: the real comments'
        mine = None if real[rows].any() else seed
        weights[rows] = language_weights(
            y[rows], buckets.get(lang), share, profile["rates"][lang], lengths.get(lang), mine
        )
    return weights


def stand_in_buckets(oof: pd.DataFrame, profile: dict) -> dict[str, np.ndarray]:
    """Each test language's stand-in rows' length buckets, for the languages weighted by length: those whose
    every stand-in row has a token count and whose test rows have a length mix (the others: length_gaps)."""
    if "tokens" not in oof or not profile.get("lengths"):
        return {}
    at, langs = stand_in_mask(oof, profile["mix"]), oof["lang"].to_numpy()
    tokens = pd.to_numeric(oof["tokens"], errors="coerce").to_numpy(np.float64)
    out = {}
    for lang in profile["mix"]:
        mine = tokens[at & (langs == lang)]
        if lang in profile["lengths"] and len(mine) and not np.isnan(mine).any():
            out[lang] = length_buckets(mine)
    return out


def length_gaps(oof: pd.DataFrame, profile: dict) -> dict[str, str]:
    """The test languages weighted without length where the estimate weights by length (the rows carry token
    counts, the profile the test's lengths), each with why: rows lengths.csv has no count for (one is enough: a
    language's weights over class x bucket need every row's bucket), or no test rows' lengths; {} otherwise."""
    if "tokens" not in oof or not profile.get("lengths"):
        return {}
    at, langs, done = stand_in_mask(oof, profile["mix"]), oof["lang"].to_numpy(), stand_in_buckets(oof, profile)
    tokens = pd.to_numeric(oof["tokens"], errors="coerce").to_numpy(np.float64)
    out = {}
    for lang in profile["mix"]:
        rows = at & (langs == lang)
        if lang in done or not rows.any():
            continue
        lacking = int(np.isnan(tokens[rows]).sum())
        out[lang] = (f"{lacking} of its {int(rows.sum())} stand-in rows have no token count"
                     if lacking else "its test rows have no token counts")  # fmt: skip
    return out


def without_lengths(profile: dict | None) -> dict | None:
    """The profile with no length margins: the estimate weighted over language and class only."""
    return {k: v for k, v in profile.items() if k != "lengths"} if profile else profile


def effective_sizes(oof: pd.DataFrame, profile: dict) -> dict[str, dict[str, float]]:
    """Each test language's effective sample size per class, (sum w)^2 / sum w^2 of its stand-ins' weights:
    how many equally weighted rows its figure is worth."""
    weights, out = row_weights(oof, profile), {}
    langs, y = oof["lang"].to_numpy(), oof["toxic"].to_numpy() >= 0.5
    for lang in profile["mix"]:
        out[lang] = {}
        for name, cls in (("toxic", True), ("clean", False)):
            w = weights[(langs == lang) & (y == cls) & (weights > 0)]
            out[lang][name] = round(float(w.sum() ** 2 / (w**2).sum()), 1) if len(w) else 0.0
    return out


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
    """(the test languages whose toxic rate is the prior, and PRIOR_RATES, the lowest and the highest rate such
    a language is varied over); None where no language takes the prior or none has its own rate."""
    frm = profile.get("rate_from") or {}
    guessed = sorted(g for g in profile["mix"] if frm.get(g) == FROM_PRIOR)
    own = [g for g in profile["mix"] if frm.get(g) == FROM_VALIDATION]
    return (guessed, *PRIOR_RATES) if guessed and own else None


def rate_spans(profile: dict) -> dict[str, tuple[float, float]]:
    """Every rate the estimate's range moves, and its two ends: a prior language's over PRIOR_RATES, a
    language with validation rows by RATE_SES standard errors of its rate (rate_se; a profile recorded
    before it had one: none of those); each widened to take in the language's rate by EM on the test
    predictions where the profile has one (`em`: pipeline.scoring.rates), so that the range holds both
    readings of the test's rate."""
    span, ses = prior_span(profile), profile.get("rate_se") or {}
    if span is None:
        return {}
    out = {g: (span[1], span[2]) for g in span[0]}
    for g, se in ses.items():
        if g in profile["mix"] and g not in out and se > 0:
            r = profile["rates"][g]
            out[g] = (max(r - RATE_SES * se, 0.0), min(r + RATE_SES * se, 1.0))
    for g, r in ((profile.get("em") or {}).get("rates") or {}).items():
        low, high = out.get(g, (profile["rates"][g],) * 2) if g in profile["mix"] else (r, r)
        if defined(r) and min(low, r) < max(high, r):
            out[g] = (min(low, r), max(high, r))
    return out


def six_corners(oof: pd.DataFrame, profile: dict) -> list[float] | None:
    """The six-language estimate with each moved rate (rate_spans) at either end of its span, every combination
    in one fixed order: the range under the validation-rate assumption (its min to max; two experiments whose
    order differs at some corner are a tie), EM's rates taken in; None where no rate is a prior."""
    spans = rate_spans(profile)
    if not spans:
        return None
    out = []
    for corner in itertools.product(*spans.values()):
        moved = {**profile, "rates": {**profile["rates"], **dict(zip(spans, corner))}}
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
    """The Brier score of a model's probabilities: a trained fold's kept weights' (`best`), since `pred` takes
    each half of a fold at another step, two models' probabilities side by side; `pred` where the rows have no
    `best` (the baseline's, whose one model is `pred`)."""
    at = on_validation(rows)
    if not at.any():
        return math.nan
    p = rows["best"] if "best" in rows else rows["pred"]
    return float(np.mean((p[at].to_numpy(np.float64) - rows["toxic"][at].to_numpy(np.float64)) ** 2))


SIX = Metric("six", "6-lang AUC", "the estimate of the test's pooled AUC: every test language's stand-in rows "
             "weighted to its share of the test, its toxic rate there and, where the rows carry token counts, its "
             "length mix (what best steps, blends and the board choose by); `-` where a test language has no "
             "stand-in rows of both classes (without `data.held_out`: fr, pt, ru)", six_auc)  # fmt: skip
METRICS = (
    SIX,
    Metric("valid_auc", "valid AUC", "ROC AUC on validation.csv's rows (es, it, tr)", valid_auc),
    Metric("brier", "Brier", "mean squared error of the kept model's probabilities on validation.csv's rows (each "
           "fold's `best`, not `pred`, whose halves come from two steps; lower is better; calibration shows here, "
           "not in an AUC)", valid_brier, probabilities=True),
)  # fmt: skip
BY_KEY = {m.key: m for m in METRICS}
RANKED_BY = (SIX, BY_KEY["valid_auc"])  # an experiment is ranked by the first of these it has


def judged_by(record: dict) -> str:
    """The name of the metric an evaluation (a metrics.jsonl record) was judged by; 'AUC' for one made before
    evaluations said so (the six-language estimate over whichever test languages the fold's rows stood for)."""
    metric = BY_KEY.get(record.get("metric") or "") if isinstance(record, dict) else None
    return metric.header if metric else "AUC"


def fold_own(done: dict) -> str:
    """A complete fold's own figure (its done.json `auc`), named apart from the fold table's: the best step's,
    chosen on the rows it is scored on, reads high; the fold table's takes each half of the fold at the step its
    other half chose (docs/recipes.md, "No figure chosen on the rows it is scored on")."""
    if done.get("eval_ensemble"):  # train.eval_ensemble: the last evaluations' mean, no step chosen
        n = len(done.get("ensemble_steps") or [])
        return f"{judged_by(done)} {done['auc']:.4f} with the mean of its last {n} evaluations"
    own = f"{judged_by(done)} {done['auc']:.4f} with its best step, chosen on the rows it is scored on"
    if done.get("held_out_steps"):  # a fold made before the halves: its OOF is its best step's, one figure
        own += "; the fold table's takes each half at the step its other half chose"
    return own


def headline(figures: dict) -> tuple[Metric, float] | None:
    """The figure an experiment is ranked by (the first of RANKED_BY that `figures`, a cv.json's `metrics`,
    has), with its metric; None without one."""
    for m in RANKED_BY:
        value = figures.get(m.key) if isinstance(figures, dict) else None
        if defined(value):
            return m, float(value)
    return None


def defined(value) -> bool:
    """A figure that is there: a number, not NaN (cv.json holds null for one that is not; older ones NaN)."""
    return isinstance(value, int | float) and not math.isnan(value)


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
    """The test profile of cfg's prepared tables (validation rows of folds.csv, langs of test.csv, and the test
    rows' token counts where lengths.csv has them); None without them."""
    return folder_profile(layout.prepared_dir(cfg))


def folder_profile(folder: Path) -> dict | None:
    """The test profile of the prepared tables in `folder` (read_profile); None without them."""
    try:
        table = pd.read_csv(folder / layout.TABLE, usecols=["lang", "toxic", "source"], dtype={"lang": str,
                            "source": str}, keep_default_na=False)  # fmt: skip
        test = pd.read_csv(folder / layout.TEST_TABLE, usecols=["lang"], dtype=str, keep_default_na=False)
    except (OSError, ValueError):
        return None
    return with_test_lengths(test_profile(table[table["source"] == VALID_SOURCE], test["lang"]), folder)


def with_test_lengths(profile: dict | None, folder: Path) -> dict | None:
    """`profile` with what a prepared folder's lengths.csv says where it lacks it (one recorded by folds made
    before it was counted): the test's length mix (`lengths`: no labels needed) and validation.csv's class x
    length counts (`valid_lengths`, from folds.csv's labels: the rows the estimate scores anyway); as it is
    without the file."""
    lengths = tables.read_lengths(folder)
    if not profile or lengths is None:
        return profile
    out = dict(profile)
    test = lengths[lengths["split"] == "test"]
    if not out.get("lengths") and len(test):
        out["lengths"] = length_mix(test["lang"], test["tokens"])
    if not out.get("valid_lengths"):
        counted = valid_counts(folder, lengths)
        out.update({"valid_lengths": counted} if counted else {})
    return out


def valid_counts(folder: Path, lengths: pd.DataFrame) -> dict | None:
    """validation.csv's rows' class x length counts (buckets.class_length_counts) of a prepared folder: folds.csv's
    labels, lengths.csv's token counts; None where neither holds such a row."""
    try:
        table = pd.read_csv(folder / layout.TABLE, usecols=["id", "toxic", "source"], dtype={"id": str, "source": str},
                            keep_default_na=False)  # fmt: skip
    except (OSError, ValueError):
        return None
    valid = table[table["source"] == VALID_SOURCE]
    counts = lengths.loc[(lengths["split"] == "train") & (lengths["source"] == VALID_SOURCE), ["id", "tokens"]]
    rows = valid.merge(counts.drop_duplicates("id"), on="id")
    return class_length_counts(rows["toxic"], rows["tokens"]) if len(rows) else None


def fold_score(rows: pd.DataFrame, preds, profile: dict | None) -> tuple[str, float, dict[str, float]]:
    """What a fold's evaluation is judged by, its value and its AUC per language: the six-language AUC where
    the fold's rows stand for every test language (the best step is chosen by what the board ranks by);
    else (no held-out translated rows, or a stage without prepared test rows) the validation AUC; a fold without
    validation.csv rows (a specialist of fr, pt or ru: its held-out translations) the AUC of its rows ("AUC")."""
    rows = rows.assign(pred=np.asarray(preds))
    six = six_language(rows, profile) if profile else None  # once: it is every evaluation's work
    # the labels of a fold's rows never change: every evaluation of a fold is judged by one metric
    if six and not six["missing"]:
        return SIX.key, six["auc"], six["per_lang"]
    per_lang = six["per_lang"] if six else per_language(rows, None)
    if not on_validation(rows).any():  # held-out translations alone (a fr, pt or ru specialist): their own AUC
        return "auc", auc(rows["toxic"], rows["pred"]), per_lang
    return "valid_auc", valid_auc(rows), per_lang


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
