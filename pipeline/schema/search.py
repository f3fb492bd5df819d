"""The `search` section: `make search`, an Optuna study of trials, each an experiment of its own."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.schema.base import NEVER, SEED, at_least, setting

KINDS = ("float", "int", "choice")  # what a line of search.space draws (pipeline.search.parse_space)


@dataclass(frozen=True)
class SearchConfig:
    trials: int = setting(
        8,
        "trials of the study in all, complete or pruned, over every worker (a second `make search` of the same "
        "study is one more worker; one that finds them done only reports)",
        within=at_least(1),
        role=NEVER,
    )
    folds: tuple[int, ...] = setting(
        (0,),
        "the folds each trial trains (the best trial's command trains the rest)",
        within=((lambda v: len(v) > 0 and all(f >= 0 for f in v)), "a non-empty list of fold numbers >= 0"),
        role=NEVER,
    )
    space: tuple[str, ...] = setting(
        (),
        "what a trial draws, one line a key: `KEY float LOW HIGH [log]`, `KEY int LOW HIGH [log]` or `KEY choice A "
        "B ...`, e.g. `[train.lr float 1e-5 1e-3 log, model.pooling choice cls mean]`; every value is checked by "
        "the key's own rules",
        role=NEVER,
    )
    pruner: str = setting(
        "median",
        "what stops a trial at an evaluation: `median` (below the median of earlier trials at that step), "
        "`halving` (successive halving) or `none`",
        choices=("median", "halving", "none"),
        role=NEVER,
    )
    startup: int = setting(2, "trials that finish before any is pruned", within=at_least(0), role=NEVER)
    storage: str = setting(
        "",
        "the study's Optuna storage (any RDB URL, e.g. `postgresql://...`); empty: SQLite in "
        "`models/<name>/search/study.db`",
        role=NEVER,
    )
    seed: int = setting(0, "seed of the sampler that draws the trials", within=SEED, role=NEVER)
