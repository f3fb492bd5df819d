"""How far apart two experiments' six-language estimates are, beyond sampling noise: a paired bootstrap interval of
their difference.

The estimate (metrics.six_language) is of a few thousand labelled rows; another draw of them would move it, and it
would move two experiments scored on the same rows mostly together. So the interval resamples held-out groups
with replacement (every OOF row of one source comment together: a translated comment's versions in several
languages, a validation comment's near-copies: the prepared table's `group`; a row without one is its own
group), scores BOTH experiments on the same draw (rows matched by id), recomputes the rows' weights for each
draw (metrics.row_weights: the draw's own class and length counts) and the weighted AUC of each, and takes the
LEVEL percentile interval of the draws' differences. A difference whose interval covers 0 is a tie: the rows
cannot tell the two apart. Seeded: a board reads the same every time, and every pair is scored on the same draws.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline import layout
from pipeline.scoring import metrics

# resamples per interval: on 3,000 synthetic rows (tests/scoring/test_paired.py's world) an interval 0.02 wide had
# its ends move by about 0.001 (sd over seeds) at 200 draws, 0.0004 at 1,000; a board redraws every pair
DRAWS = 200
LEVEL = 0.95
SEED = 0
KEY = ["id", "lang", "source", "fold"]  # one OOF row (an id may recur: a translation keeps its original's)


@dataclass(frozen=True)
class Interval:
    """a - b on the rows (`diff`) and the LEVEL percentile interval of it over the draws."""

    diff: float
    low: float
    high: float

    @property
    def covers_zero(self) -> bool:
        return self.low <= 0.0 <= self.high

    def shown(self) -> str:
        """`+0.0042 [-0.0011, +0.0093]`: a table cell."""
        return f"{self.diff:+.4f} [{self.low:+.4f}, {self.high:+.4f}]"


def group_keys(oof: pd.DataFrame, groups: pd.DataFrame | None = None) -> np.ndarray:
    """Each OOF row's group: the prepared table's `group` of its id where it has one (`groups`: id, group), else
    the row's own id (every row its own group: then draws resample rows)."""
    ids = oof["id"].astype(str).to_numpy()
    if groups is None or groups.empty:
        return np.array(["row:" + i for i in ids], dtype=object)
    named = groups[groups["group"].astype(str) != ""].drop_duplicates("id").set_index("id")["group"].astype(str)
    given = pd.Series(ids).map(named).fillna("").to_numpy(dtype=object)
    return np.where(given != "", "group:" + given, "row:" + ids)


def draws_of(keys: np.ndarray, draws: int = DRAWS, seed: int = SEED) -> list[np.ndarray]:
    """Each draw's rows, by position: as many groups as there are, drawn with replacement, each with all its rows
    (a group drawn twice: its rows twice)."""
    codes, _ = pd.factorize(pd.Series(keys))
    members = np.argsort(codes, kind="stable")  # the rows of group g: members[starts[g] : starts[g] + sizes[g]]
    sizes = np.bincount(codes)
    starts = np.cumsum(sizes) - sizes
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        picked = rng.integers(0, len(sizes), len(sizes))
        n = sizes[picked]
        ends = np.cumsum(n)
        # position within the draw, less where its group begins in the draw, plus where it begins in members
        out.append(members[np.arange(ends[-1]) - np.repeat(ends - n, n) + np.repeat(starts[picked], n)])
    return out


def draw_weights(rows: pd.DataFrame, profile: dict, draws: list[np.ndarray]) -> np.ndarray:
    """(draws, rows): each row's weight in each draw's estimate, its multiplicity included: the draw's rows
    weighted as metrics.row_weights weights any rows, the copies of a row summed onto it (copies score alike,
    so the draw's AUC is the AUC of the rows with these weights)."""
    out = np.zeros((len(draws), len(rows)))
    for d, at in enumerate(draws):
        out[d] = np.bincount(at, weights=metrics.row_weights(rows.iloc[at], profile), minlength=len(rows))
    return out


def aucs(y: np.ndarray, p: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The weighted ROC AUC of `p` under each row of `weights` (draws x rows) at once: metrics.auc's sum, ties
    counted half, from one sort."""
    order = np.argsort(p, kind="stable")
    scores, pos, w = p[order], y[order], weights[:, order]
    starts = np.flatnonzero(np.r_[True, scores[1:] != scores[:-1]])  # rows of equal score: one group
    w_pos = w * pos
    w_neg = w - w_pos
    if len(starts) < len(scores):  # ties: each group's rows summed (without them every row is its own group)
        w_pos, w_neg = np.add.reduceat(w_pos, starts, axis=1), np.add.reduceat(w_neg, starts, axis=1)
    beaten = np.cumsum(w_neg, axis=1) - 0.5 * w_neg
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w_pos * beaten).sum(axis=1) / (w_pos.sum(axis=1) * w_neg.sum(axis=1))


def aligned(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame | None:
    """a's rows with b's prediction beside its own (`pred`, `pred_b`), matched row for row; None where the two
    are not of the same rows."""
    if len(a) != len(b) or not set(KEY) <= set(a) or not set(KEY) <= set(b):
        return None
    key_a, key_b = row_keys(a), row_keys(b)
    other = pd.Series(b["pred"].to_numpy(np.float64), index=key_b.to_numpy())
    if not other.index.is_unique or set(key_a) != set(other.index):
        return None
    return a.assign(pred_b=other.loc[key_a.to_numpy()].to_numpy())


def row_keys(frame: pd.DataFrame) -> pd.Series:
    """One string per row of its KEY columns; an id recurring in one fold, language and source numbered, so that
    its n-th row is matched with the other's n-th."""
    key = frame["id"].astype(str)
    for c in KEY[1:]:
        key = key + "\x00" + frame[c].astype(str)
    return (key + "\x00" + key.groupby(key).cumcount().astype(str)).reset_index(drop=True)


def interval(a: pd.DataFrame, b: pd.DataFrame, profile: dict, groups: pd.DataFrame | None = None,
             draws: int = DRAWS, seed: int = SEED, cache: dict | None = None) -> Interval | None:  # fmt: skip
    """The paired interval of a's six-language estimate less b's, both weighted by `profile` (a's OOF rows `a`,
    b's `b`: the same rows, each with its `pred`); None where they are not of the same rows or the estimate has
    no figure. `cache`: a dict kept across calls, so that pairs of the same rows share the draws' weights and an
    experiment in several pairs is scored on the draws once (the costly parts)."""
    rows = aligned(a, b)
    if rows is None:
        return None
    rows = rows[metrics.stand_in_mask(rows, profile["mix"])].reset_index(drop=True)  # the others weigh 0
    if rows.empty:
        return None
    cache = {} if cache is None else cache
    key = drawn_key(rows, profile, groups, draws, seed)
    if key not in cache:
        keys = group_keys(rows, groups)
        cache[key] = (metrics.row_weights(rows, profile), draw_weights(rows, profile, draws_of(keys, draws, seed)))
    y = rows["toxic"].to_numpy() >= 0.5
    (one, over), (other, spread) = (scored(y, rows[c].to_numpy(np.float64), key, cache) for c in ("pred", "pred_b"))
    spread = over - spread
    spread = spread[np.isfinite(spread)]
    if np.isnan(one - other) or not len(spread):
        return None
    tail = 100 * (1 - LEVEL) / 2
    low, high = np.percentile(spread, [tail, 100 - tail])
    return Interval(float(one - other), float(low), float(high))


def drawn_key(rows: pd.DataFrame, profile: dict, groups, draws: int, seed: int) -> tuple:
    """What the draws' weights depend on: the rows (id, language, class, tokens, group), the profile and the
    draws; rows alike in these share them."""
    keep = rows[[c for c in (*KEY, "toxic", "tokens") if c in rows]].astype(str).assign(group=group_keys(rows, groups))
    return (fingerprint(keep), repr(profile), draws, seed)


def scored(y: np.ndarray, p: np.ndarray, key: tuple, cache: dict) -> tuple[float, np.ndarray]:
    """One experiment's estimate on the rows of `key` and its AUC on each of their draws, from `cache` where the
    same predictions were scored on them before (an experiment sits in several pairs of a board)."""
    mine = (key, fingerprint(pd.DataFrame({"p": p})))
    if mine not in cache:
        weights, drawn = cache[key]
        cache[mine] = (metrics.auc(y, p, weights) if weights.any() else float("nan"), aucs(y, p, drawn))
    return cache[mine]


def fingerprint(frame: pd.DataFrame) -> str:
    return hashlib.sha256(pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes()).hexdigest()


def read_groups(folder) -> pd.DataFrame | None:
    """The id and `group` of every row of a prepared folder's table (folds.csv); None where it cannot be read or
    has no groups (tables prepared before them: every row is then drawn alone)."""
    if folder is None:
        return None
    try:
        table = pd.read_csv(folder / layout.TABLE, usecols=["id", "group"], dtype=str, keep_default_na=False)
    except (OSError, ValueError):
        return None
    return table
