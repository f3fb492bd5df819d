"""Comment lengths in tokens: the buckets the six-language estimate weights rows by (pipeline.scoring.metrics),
and the long comments the held-out split keeps for that estimate (data.hold_out_long).

A test language without validation rows (a stand-in language: fr, pt, ru) is scored on held-out translated
rows (data.held_out, pipeline.inputs.groups). A seeded share of source comments holds out few long ones: on
the real slice 11, 20 and 8 rows over LONG tokens, while the test holds about a quarter of its rows there, so
the estimate's last bucket has under MIN_BUCKET_ROWS of a class and is merged away. With data.hold_out_long
every source comment with a stand-in translation over LONG tokens is held out (whole, in one fold), and
`make data` says how many long rows of each class each stand-in language then holds (`long_lines`).
"""

from __future__ import annotations

import numpy as np

# the token counts that end a length bucket (the last holds the longer rows): fixed, never an experiment's own
# max_length, so that every row of a board is weighted alike
LENGTH_EDGES = (32, 64, 96, 128)
# a length bucket with fewer stand-in rows than this of either class merges into a neighbour: a handful of rows
# carrying a quarter of a language's weight would make the estimate their noise
MIN_BUCKET_ROWS = 10
LONG = LENGTH_EDGES[-1]  # a comment longer than this is in the estimate's last bucket


def standin_langs(test_langs, valid_langs) -> list[str]:
    """The test's languages that validation.csv has no row of: held-out translated rows stand in for them."""
    return sorted(set(test_langs) - set(valid_langs))


def long_lines(langs: np.ndarray, tokens: np.ndarray, toxic: np.ndarray, held: np.ndarray, standin) -> list[str]:
    """What `make data` says of the held-out rows over LONG tokens: one line per stand-in language, by class,
    and a warning where a class has fewer than MIN_BUCKET_ROWS (the estimate merges that bucket away); none for
    a stand-in language without rows.
    `tokens`: untruncated counts (negative where not counted), `held`: the rows held out."""
    lines = []
    long = held & (tokens > LONG)
    for lang in standin:
        if not (langs == lang).any():  # no translated file of it: nothing stands in for it at all
            continue
        rows = long & (langs == lang)
        bad = int((toxic[rows] >= 0.5).sum())
        good = int(rows.sum()) - bad
        lines.append(f"held out {lang} {int(rows.sum()):,} over {LONG} tokens (toxic {bad:,} / clean {good:,})")
        thin = [name for name, n in (("toxic", bad), ("clean", good)) if n < MIN_BUCKET_ROWS]
        if thin:
            lines.append(f"warning: held out {lang} has under {MIN_BUCKET_ROWS} {' and '.join(thin)} rows over {LONG} "
                         f"tokens: the estimate merges its >{LONG} bucket for {lang} into a shorter one")  # fmt: skip
    return lines
