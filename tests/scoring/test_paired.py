"""The paired bootstrap interval of two experiments' six-language estimates (pipeline.scoring.paired)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline import layout
from pipeline.scoring import metrics, paired

LANGS = ("es", "it", "tr", "fr")  # three with validation rows, one whose stand-ins are held-out translated rows


def world(groups: int, seed: int, copies: int = 1, shared: float = 1.0, own: float = 0.3) -> tuple:
    """Rows of `groups` comments, each `copies` rows alike (one label, one noise: near-copies), and two
    experiments' predictions of them: `shared` the noise both make, `own` each one's alone; a is a shade better
    (its signal 1.0, b's 0.9). Returns (a's OOF, b's OOF, the prepared table's id and group)."""
    rng = np.random.default_rng(seed)
    lang = rng.choice(LANGS, groups)
    toxic = (rng.random(groups) < np.where(lang == "fr", 0.5, 0.15)).astype(int)
    both = rng.normal(0, shared, groups)
    g = np.repeat(np.arange(groups), copies)
    rows = pd.DataFrame({"id": [f"r{i}" for i in range(len(g))], "lang": lang[g], "toxic": toxic[g], "fold": g % 5,
                         "source": np.where(lang[g] == "fr", "translated", layout.VALID_SOURCE)})  # fmt: skip
    a = rows.assign(pred=toxic[g] + both[g] + rng.normal(0, own, groups)[g])
    b = rows.assign(pred=0.9 * toxic[g] + both[g] + rng.normal(0, own, groups)[g])
    return a, b, rows[["id"]].assign(group=[f"c{k}" for k in g])


def profile_of(rows: pd.DataFrame) -> dict:
    test = np.repeat(np.array(LANGS), [3, 3, 3, 2])
    return metrics.test_profile(rows[rows["source"] == layout.VALID_SOURCE], test)


def width(iv: paired.Interval) -> float:
    return iv.high - iv.low


def test_the_interval_covers_the_true_difference_in_most_worlds() -> None:
    """The estimates of a population of 200,000 comments differ by the truth; samples of 1,500 draw intervals
    that cover it (95% intervals: at most 3 of 14 missing, by chance about 1 in 2,000 that 3 or more miss)."""
    pop_a, pop_b, _ = world(200_000, 99)
    profile = profile_of(pop_a)
    truth = metrics.six_language(pop_a, profile)["auc"] - metrics.six_language(pop_b, profile)["auc"]
    covered = []
    for seed in range(14):
        a, b, groups = world(1_500, seed)
        iv = paired.interval(a, b, profile, groups, draws=100)
        covered.append(iv.low <= truth <= iv.high)
        assert iv.low <= iv.diff <= iv.high
    assert sum(covered) >= 11, (truth, covered)


def test_pairing_narrows_the_interval_of_two_experiments_that_err_together() -> None:
    """Two experiments whose errors are mostly one noise: the draws move both alike, so the difference is known
    more closely than where each errs alone (the same difference, the same rows)."""
    a, b, groups = world(2_000, 1, shared=1.0, own=0.2)
    alone_a, alone_b, _ = world(2_000, 1, shared=0.0, own=1.02)  # about the same AUCs, errors apart
    profile = profile_of(a)
    together = paired.interval(a, b, profile, groups, draws=100)
    apart = paired.interval(alone_a, alone_b, profile, groups, draws=100)
    assert width(together) < 0.5 * width(apart), (together, apart)


def test_copies_of_one_comment_are_drawn_together() -> None:
    """Rows that are versions of one comment carry one error: drawn as one group, the interval is as wide as
    their number of comments makes it; drawn row by row (no groups), it would be too narrow."""
    a, b, groups = world(600, 2, copies=4)
    profile = profile_of(a)
    by_group = paired.interval(a, b, profile, groups, draws=100)
    by_row = paired.interval(a, b, profile, None, draws=100)
    assert width(by_group) > 1.5 * width(by_row), (by_group, by_row)
    assert list(paired.group_keys(a.head(2), groups)) == ["group:c0", "group:c0"]
    no_group = groups.assign(group="")
    assert list(paired.group_keys(a.head(2), no_group)) == ["row:r0", "row:r1"]  # a row without one: alone


def test_the_draws_weights_are_the_estimates_and_the_aucs_are_metrics_aucs() -> None:
    """Each draw is scored as the estimate scores any rows: metrics.row_weights of the draw's rows, the copies of
    a row summed onto it, and the weighted AUC metrics.auc gives."""
    a, _, groups = world(300, 3, copies=2)
    profile = profile_of(a)
    draws = paired.draws_of(paired.group_keys(a, groups), 3, seed=5)
    weights = paired.draw_weights(a, profile, draws)
    y, p = a["toxic"].to_numpy() == 1, a["pred"].round(1).to_numpy()  # rounded: ties, counted half
    for d, at in enumerate(draws):
        drawn = metrics.auc(a["toxic"].iloc[at], p[at], metrics.row_weights(a.iloc[at], profile))
        assert np.isclose(paired.aucs(y, p, weights[d : d + 1])[0], drawn)


def test_the_interval_is_seeded_and_needs_the_same_rows() -> None:
    a, b, groups = world(400, 4)
    profile = profile_of(a)
    assert paired.interval(a, b, profile, groups, draws=50) == paired.interval(a, b, profile, groups, draws=50)
    shuffled = b.sample(frac=1.0, random_state=0)  # matched by id, not by position
    assert paired.interval(a, shuffled, profile, groups, draws=50) == paired.interval(a, b, profile, groups, draws=50)
    assert paired.interval(a, b.iloc[1:], profile, groups) is None  # other rows: no difference to draw
    iv = paired.Interval(0.0042, -0.0011, 0.0093)
    assert iv.shown() == "+0.0042 [-0.0011, +0.0093]" and iv.covers_zero
    assert not paired.Interval(0.0042, 0.0011, 0.0093).covers_zero


def test_the_groups_are_read_from_the_prepared_table(tmp_path) -> None:
    """folds.csv's id and group, '' kept (a row without a group is drawn alone); None without the table or its
    group column (tables prepared before groups: every row alone)."""
    pd.DataFrame({"id": ["a", "b", "c"], "text": ["x", "y", "z"], "group": ["g1", "g1", ""]}).to_csv(
        tmp_path / layout.TABLE, index=False
    )
    groups = paired.read_groups(tmp_path)
    rows = pd.DataFrame({"id": ["a", "b", "c"]})
    assert list(paired.group_keys(rows, groups)) == ["group:g1", "group:g1", "row:c"]
    assert paired.read_groups(tmp_path / "none") is None and paired.read_groups(None) is None
    pd.DataFrame({"id": ["a"], "text": ["x"]}).to_csv(tmp_path / layout.TABLE, index=False)
    assert paired.read_groups(tmp_path) is None
