"""The length side of the six-language estimate (pipeline.scoring.metrics): fixed token-count buckets, the test's
share of rows per bucket, and each test language's stand-in weights spread over class x bucket by iterative
proportional fitting (`language_weights`): the class margins the test's toxic rate, the length margins the test's
bucket shares, the link between class and length (the odds ratios inside) from a seed table. The seed is the
stand-ins' own class x bucket counts for a language with validation rows (real comments), and validation.csv's
comments pooled (`class_length_counts`, carried in the test profile as `valid_lengths`) for a language whose
stand-ins are held-out machine-translated training rows: those are toxic by design at about half, and longer
toxic rows than the real comments' (over 128 tokens the toxic rate over the language's is about 1.25 for the
translated fr, pt, ru against about 0.9 for validation.csv's es, it, tr), a link the test's comments do not have.
"""

from __future__ import annotations

import numpy as np

from pipeline.inputs.lengths import LENGTH_EDGES, MIN_BUCKET_ROWS  # owned where the held-out split uses them


def length_buckets(tokens) -> np.ndarray:
    """Each row's length bucket: 0 for at most LENGTH_EDGES[0] tokens, ..., len(LENGTH_EDGES) for longer."""
    return np.searchsorted(np.asarray(LENGTH_EDGES), np.asarray(tokens, dtype=np.float64), side="left")


def bucket_shares(tokens) -> list[float]:
    """The share of rows in each length bucket."""
    counts = np.bincount(length_buckets(tokens), minlength=len(LENGTH_EDGES) + 1).astype(np.float64)
    return (counts / max(counts.sum(), 1.0)).tolist()


def length_mix(langs, tokens) -> dict[str, list[float]]:
    """Each language's bucket shares (of the test's rows: what the estimate's length margins are)."""
    langs, tokens = np.asarray(langs), np.asarray(tokens)
    return {str(g): bucket_shares(tokens[langs == g]) for g in sorted(set(langs))}


def bucket_names() -> list[str]:
    """The buckets as cv.json and `make cv` name them: '<=32', '33-64', ..., '>128'."""
    lows = [1, *(e + 1 for e in LENGTH_EDGES[:-1])]
    return [f"<={LENGTH_EDGES[0]}", *(f"{lo}-{hi}" for lo, hi in zip(lows[1:], LENGTH_EDGES[1:]))] + [
        f">{LENGTH_EDGES[-1]}"
    ]


def language_weights(toxic: np.ndarray, buckets: np.ndarray | None, share: float, rate: float, test_shares,
                     seed=None) -> np.ndarray:  # fmt: skip
    """One language's stand-in rows' weights: `share` of the whole, `rate` of it on the toxic rows; with
    `buckets` (each row's length bucket) and `test_shares` (the test's rows per bucket), fit by iterative
    proportional fitting so that the class margins stay as without length and the length margins are the
    test's, buckets too thin (merged_buckets) merged first. The fit starts from `seed` (a class x bucket count
    table, class_length_counts: its odds ratios are the class-length link kept) where given, else from the rows'
    own counts; each row then gets its cell's fitted mass over the stand-in rows in that cell."""
    toxic = np.asarray(toxic, dtype=bool)
    cls = np.where(toxic, 0, 1)
    mass = np.array([share * rate, share * (1 - rate)])
    if buckets is None or toxic.all() or not toxic.any():  # one class: no margin to keep but its own
        counts = np.bincount(cls, minlength=2).astype(np.float64)
        return mass[cls] / counts[cls]
    counts = np.zeros((2, len(LENGTH_EDGES) + 1))
    np.add.at(counts, (cls, buckets), 1.0)
    start = counts if seed is None else np.asarray(seed, dtype=np.float64)
    if not (start.sum(axis=1) > 0).all():  # a seed without a class's rows holds no link: refused, not fit to 0
        raise ValueError(f"a class x length seed needs rows of both classes, not {start.sum(axis=1).tolist()}")
    group = merged_buckets(np.minimum(counts, start))  # thick enough in the rows weighted and in the seed's link
    cells, seeded = (
        np.stack([np.bincount(group, weights=c, minlength=group.max() + 1) for c in table]) for table in (counts, start)
    )
    target = share * np.bincount(group, weights=np.asarray(test_shares, np.float64), minlength=group.max() + 1)
    fitted = fit_cells(seeded, mass, target)
    of_row = group[buckets]
    return fitted[cls, of_row] / cells[cls, of_row]


def class_length_counts(toxic, tokens) -> dict[str, list[float]]:
    """The rows per class and length bucket (`toxic` and `clean`, a count per bucket) of the rows with a token
    count: validation.csv's comments' table, the seed of a translated language's weights (language_weights)."""
    toxic, tokens = np.asarray(toxic, dtype=np.float64) >= 0.5, np.asarray(tokens, dtype=np.float64)
    known = ~np.isnan(tokens)
    b = length_buckets(tokens[known])
    n = len(LENGTH_EDGES) + 1
    return {name: np.bincount(b[of], minlength=n).astype(float).tolist()
            for name, of in (("toxic", toxic[known]), ("clean", ~toxic[known]))}  # fmt: skip


def seed_table(counts: dict | None) -> np.ndarray | None:
    """A profile's `valid_lengths` (class_length_counts) as language_weights' seed: (toxic, clean) x bucket; None
    without it or where it holds no row of a class (no link to give: the stand-ins' own, as said where printed)."""
    table = np.array([counts["toxic"], counts["clean"]], dtype=np.float64) if counts else None
    return table if table is not None and (table.sum(axis=1) > 0).all() else None


def merged_buckets(counts: np.ndarray) -> np.ndarray:
    """Each length bucket's group: neighbours merged (a thin group with the thinner of its neighbours) until
    every group holds MIN_BUCKET_ROWS rows of each class, or one group is left. `counts`: (2, buckets), the
    rows of each class per bucket."""
    groups = [[b] for b in range(counts.shape[1])]
    while len(groups) > 1:
        held = [counts[:, g].sum(axis=1).min() for g in groups]
        thin = next((i for i, n in enumerate(held) if n < MIN_BUCKET_ROWS), None)
        if thin is None:
            break
        near = [j for j in (thin - 1, thin + 1) if 0 <= j < len(groups)]
        other = min(near, key=lambda j: held[j])
        lo = min(thin, other)
        groups[lo : lo + 2] = [groups[lo] + groups[lo + 1]]
    out = np.zeros(counts.shape[1], dtype=np.int64)
    for i, g in enumerate(groups):
        out[g] = i
    return out


def fit_cells(cells: np.ndarray, rows: np.ndarray, columns: np.ndarray, sweeps: int = 500) -> np.ndarray:
    """Iterative proportional fitting: `cells` (class x bucket counts) scaled until its row sums are `rows` and
    its column sums `columns` (both summing to the same total), keeping the counts' own odds ratios."""
    fitted = cells.astype(np.float64).copy()
    for _ in range(sweeps):
        fitted *= (rows / np.maximum(fitted.sum(axis=1), 1e-300))[:, None]
        col = fitted.sum(axis=0)
        fitted *= np.divide(columns, col, out=np.zeros_like(col), where=col > 0)[None, :]
        if np.allclose(fitted.sum(axis=1), rows, rtol=1e-9, atol=1e-12):
            break
    return fitted
