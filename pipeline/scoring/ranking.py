"""How the rows of `make board` compare: their rank, which pairs compare at all (same test, same folds, same
estimate), and where an order is not to be trusted: a tie (the order flips at a corner of the toxic-rate range,
or the paired interval of the difference covers 0: pipeline.scoring.paired), a disagreement with the test AUC,
and how many pairs the estimate orders as the test does, far pairs apart from close ones.

A row is a dict (pipeline.board.row): `name`, `metrics` (by metrics.METRICS key), `test`, `test_of`,
`scored_folds`, `length`, `corners`, `without`, and `paired` (the OOF rows, profile and groups its 6-lang AUC is
of) where the board read them.
"""

from __future__ import annotations

import math

from pipeline.scoring import metrics, paired


def rank(r: dict) -> tuple:
    """Experiments scored on the most folds first, each set of folds apart (figures compare only over the same
    rows); within one, the six-language AUC first (it ranks experiments as the test does: docs/results.md
    measures it), those weighted to the test's length mix before those without it (another estimate: apart),
    then the validation AUC of experiments without held-out translated rows; NaN last."""
    folds = r.get("scored_folds") or []
    for i, m in enumerate(metrics.RANKED_BY):
        if not math.isnan(r["metrics"][m.key]):
            apart = m is metrics.SIX and r.get("length") is False  # a row made by hand (tests) has no flag
            return (-len(folds), folds, i, apart, -r["metrics"][m.key])
    return (-len(folds), folds, len(metrics.RANKED_BY), False, 0.0)


def mark_no_length(board: list[dict]) -> list[dict]:
    """`no_length`: a row ranked by a 6-lang AUC without the test's length mix on a board where others have it
    (rank puts it below them); on a board where no row has it, nothing is marked: every figure is alike."""
    if any(by_six(r) and r.get("length") for r in board):
        for r in board:
            r["no_length"] = by_six(r) and r.get("length") is False
    return board


def by_six(r: dict) -> bool:
    return not math.isnan(r["metrics"][metrics.SIX.key])


def comparable(r: dict, q: dict) -> bool:
    """Two rows whose figures compare: of the same test, over the same folds' rows, and where they are compared
    by the 6-lang AUC, both weighted to the test's length mix or neither."""
    same_estimate = compared_by(r, q) is not metrics.SIX or r.get("length") == q.get("length")
    return r.get("test_of") == q.get("test_of") and r.get("scored_folds") == q.get("scored_folds") and same_estimate


def pair_interval(r: dict, q: dict, cache: dict | None = None) -> paired.Interval | None:
    """The paired interval of r's 6-lang AUC less q's (paired.interval, on r's profile and groups), kept in r's
    `intervals` by q's name; None where either row lacks the rows it is of."""
    known = r.setdefault("intervals", {})
    if q["name"] not in known:
        a, b = r.get("paired"), q.get("paired")
        known[q["name"]] = (
            paired.interval(a["oof"], b["oof"], a["profile"], a["groups"], cache=cache) if a and b else None
        )
    return known[q["name"]]


def next_below(board: list[dict], i: int) -> dict | None:
    """The first row below the i-th that compares with it by the 6-lang AUC (same test, folds and estimate)."""
    return next(
        (q for q in board[i + 1 :] if comparable(board[i], q) and compared_by(board[i], q) is metrics.SIX), None
    )


def mark_intervals(board: list[dict]) -> list[dict]:
    """`next`: for an experiment ranked by the six-language AUC, the next comparable one below it, by name, and
    the paired interval of their difference (pair_interval; every pair on the same draws of the rows); and the
    intervals of the pairs with a test AUC, which order_agreement reads."""
    cache: dict = {}  # rows of the same OOF and profile: their draws' weights computed once
    for i, r in enumerate(board):
        q = next_below(board, i) if by_six(r) else None
        found = pair_interval(r, q, cache) if q else None
        if found is not None:
            r["next"] = {"name": q["name"], "interval": found}
        for q in board[i + 1 :] if r["test"] is not None and by_six(r) else []:
            if q["test"] is not None and by_six(q) and comparable(r, q):
                pair_interval(r, q, cache)
    return board


def mark_ties(board: list[dict]) -> list[dict]:
    """`tie`: for an experiment ranked by the six-language AUC, the comparable ones ranked below it (every one,
    not only the next: a over c may flip at a corner where b, between them, flips with neither) whose order
    with it flips at some corner of the range (both rows' corners: metrics.six_corners), by name: the estimate
    cannot tell them apart. `close`: the next one below (mark_intervals) where the paired interval of their
    difference covers 0: sampling noise could order them either way."""
    for r in board:
        if r.get("next") and r["next"]["interval"].covers_zero:
            r["close"] = r["next"]["name"]
    for i, r in enumerate(board):
        a = r.get("corners")
        below = [q for q in board[i + 1 :] if comparable(r, q) and a and q.get("corners")
                 and len(a) == len(q["corners"]) and compared_by(r, q) is metrics.SIX]  # fmt: skip
        if below:
            r["tie"] = ", ".join(q["name"] for q in below if any(y > x for x, y in zip(a, q["corners"])))
    return board


def compared_by(r: dict, q: dict) -> metrics.Metric:
    """The metric two rows are ranked by: the first of metrics.RANKED_BY both have."""
    both = [m for m in metrics.RANKED_BY if not (math.isnan(r["metrics"][m.key]) or math.isnan(q["metrics"][m.key]))]
    return both[0] if both else metrics.RANKED_BY[-1]


def mark_disagreements(board: list[dict]) -> list[dict]:
    """`below`: for an experiment ranked above another of the same test while its test AUC is below it, that
    other one (the one with the best test AUC of those): its OOF rose where its test AUC fell. Experiments
    scored on other tests (the sample's and the real slice's) are not compared."""
    for r in board:
        others = [q for q in board if q is not r and q["test"] is not None and r["test"] is not None
                  and comparable(r, q)
                  and q["metrics"][compared_by(r, q).key] < r["metrics"][compared_by(r, q).key]
                  and q["test"] > r["test"]]  # fmt: skip
        r["below"] = max(others, key=lambda q: q["test"])["name"] if others else ""
    return board


def order_agreement(board: list[dict]) -> str:
    """How many pairs of experiments with a test AUC (comparable ones: same test, same folds) the estimate
    orders as the test does, and the estimate without length, far pairs (their paired interval clear of 0) apart
    from close ones (it covers 0: a coin could order them) and from pairs without an interval; '' without such a
    pair. A reading of the test, never a choice: nothing is ranked or fitted by it."""
    six = metrics.SIX.key
    scored = [r for r in board if r["test"] is not None and not math.isnan(r["metrics"][six])]
    pairs = [(r, q) for i, r in enumerate(scored) for q in scored[i + 1 :] if comparable(r, q)]
    if not pairs:
        return ""
    kinds: dict[str, list] = {"far pair(s)": [], "close pair(s)": [], "pair(s) without an interval": []}
    for r, q in pairs:
        iv = pair_interval(r, q)
        kind = "pair(s) without an interval" if iv is None else "close pair(s)" if iv.covers_zero else "far pair(s)"
        kinds[kind].append((r, q))

    def counts(value) -> str:  # "9 of 11 far pair(s) and 2 of 4 close pair(s)"
        parts = []
        for kind, these in kinds.items():
            held = [(value(r), value(q), r["test"], q["test"]) for r, q in these]
            held = [(a, b, ta, tb) for a, b, ta, tb in held if a is not None and b is not None]
            if held:
                parts.append(f"{sum((a - b) * (ta - tb) > 0 for a, b, ta, tb in held)} of {len(held)} {kind}")
        return " and ".join(parts)

    text = f"- order as the test AUC: the {metrics.SIX.header} orders {counts(lambda r: r['metrics'][six])} as the test"
    without = counts(lambda r: r.get("without"))
    # a calibrated row is ranked by its calibrated OOF, its figure without length is the uncalibrated one
    text += f" does, without length {without}" if without else " does"
    return text + (" (experiments with a test AUC, over the same folds; far: the 95% paired interval of their "
                   "difference clear of 0, close: covering it)")  # fmt: skip
