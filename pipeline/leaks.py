"""Stage `make leaks`: does a fold train on a version of a comment it validates on? Validation rows (held-out
translated rows and validation.csv's) checked by content, by tests that do not share the grouping's rule.

Reads   input/prepared/<name>/folds.csv (the table and its folds), data.group_encoder
Writes  nothing; prints, for each test, the validation rows that have a twin among their fold's training rows

A twin, four ways: the same text once case, spaces and punctuation are set aside; a rare number (five
digits or more, or an IP address) that exactly one other row of another language holds (an IP names an
author, not a comment, so a hit is a lead to read, not a proof); the same words (word 1-2-gram TF-IDF cosine of
at least SAME_WORDS within a language: a template with another name in it, where validation.csv is grouped by
characters); and each other's nearest row of all the table's rows, of another language, at a cosine of at least
NEAREST in the encoder's space: the nearest neighbour of everything, unlike the grouping, which matches only
rows of one label and one language pair.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict

import numpy as np
import pandas as pd

from pipeline import config as config_mod
from pipeline import layout
from pipeline.errors import run_stage
from pipeline.inputs import encoder, groups, tables
from pipeline.schema import Config

NEAREST = 0.85
SAME_WORDS = 0.8
_RARE = re.compile(r"\d{5,}|\d+\.\d+\.\d+\.\d+")


def number_pairs(texts: list[str], langs: np.ndarray) -> list[tuple[int, int]]:
    """Rows of two languages that alone hold one rare number."""
    holders = defaultdict(list)
    for i, t in enumerate(texts):
        for number in set(_RARE.findall(t)):
            holders[number].append(i)
    return [(a, b) for a, b in (v for v in holders.values() if len(v) == 2) if langs[a] != langs[b]]


def nearest_pairs(vectors: np.ndarray, langs: np.ndarray) -> list[tuple[int, int]]:
    """Rows of two languages that are each other's nearest of every row, at least NEAREST apart in cosine."""
    best = np.empty(len(vectors), dtype=np.int64)
    score = np.empty(len(vectors))
    for start in range(0, len(vectors), 2048):  # a block of rows against all of them
        sim = vectors[start : start + 2048] @ vectors.T
        sim[np.arange(len(sim)), np.arange(start, start + len(sim))] = -1.0
        best[start : start + len(sim)], score[start : start + len(sim)] = sim.argmax(axis=1), sim.max(axis=1)
    return [(i, int(j)) for i, j in enumerate(best)
            if i < j and best[j] == i and score[i] >= NEAREST and langs[i] != langs[j]]  # fmt: skip


def word_pairs(texts: list[str], langs: np.ndarray) -> list[tuple[int, int]]:
    """Rows of one language whose word 1-2-gram TF-IDF vectors are at least SAME_WORDS alike: a copy with a
    name or a few words changed (the grouping matches characters, this test words)."""
    return groups.alike_pairs(texts, langs, SAME_WORDS, ngram_range=(1, 2))


def leaked(pairs: list[tuple[int, int]], table: pd.DataFrame) -> tuple[set[int], set[int]]:
    """(held-out rows of a pair, those whose twin trains in their fold): a twin with another fold, or a
    training-only row (fold -1), trains in it."""
    fold = table["fold"].to_numpy()
    held, bad = set(), set()
    for a, b in pairs:
        for x, y in ((a, b), (b, a)):
            if fold[x] >= 0:
                held.add(x)
                if fold[y] != fold[x]:
                    bad.add(x)
    return held, bad


def audit(cfg: Config, table: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """{test: (held-out rows it finds a twin of, of those whose twin trains in their fold)}."""
    rows = table[table["source"] != "pseudo"].reset_index(drop=True)
    texts, langs = rows["text"].astype(str).tolist(), rows["lang"].to_numpy()
    tests = {"same text": groups.duplicate_links(texts), "rare number": number_pairs(texts, langs),
             "same words": word_pairs(texts, langs)}  # fmt: skip
    if cfg.data.group_encoder:
        tests["nearest row"] = nearest_pairs(encoder.vectors(cfg, texts), langs)
    return {name: tuple(len(s) for s in leaked(pairs, rows)) for name, pairs in tests.items()}


def run(cfg: Config) -> dict:
    table, _, _ = tables.load_table(cfg)
    held = table[table["fold"] >= 0]
    kind = np.where(held["source"] == layout.VALID_SOURCE, "validation.csv", "held out")
    per = held.groupby([kind, "lang", "fold"]).size().unstack(fill_value=0)
    print(f"validation rows per source, language and fold (of {len(held):,}):\n{per.to_string()}")
    found = audit(cfg, table)
    for name, (twins, bad) in found.items():
        print(f"{name:>12}: {bad:,} of {twins:,} validation rows with a twin have it among their fold's training rows")
    return found


def main(argv=None) -> int:
    args = config_mod.parser("Check held-out translated rows for twins among their folds' training rows.").parse_args(
        argv
    )
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
