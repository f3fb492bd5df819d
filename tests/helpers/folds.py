"""One fold run in process (pipeline.core.fold.FoldRun), and a stop flag raised at a chosen optimizer step."""

from __future__ import annotations

from pipeline import validity
from pipeline.core import distributed
from pipeline.core.fold import FoldInputs, FoldRun
from pipeline.inputs import tables, tokens
from pipeline.inputs.tokenizer import load_tokenizer


class StopAt:
    """A stop flag raised when the loop asks for the `at`-th time (once per optimizer step)."""

    def __init__(self, at: int) -> None:
        self.at, self.asked = at, 0

    @property
    def raised(self) -> bool:
        self.asked += 1
        return self.asked >= self.at


def fold_run(cfg, stop, fold=0) -> FoldRun:
    table, _, meta = tables.load_table(cfg)
    splits, _ = tokens.load_cache(cfg, meta)
    tokenizer = load_tokenizer(tokens.tokenizer_source(cfg))
    made = validity.current_made_from(cfg, meta)
    inputs = FoldInputs(cfg, fold, table, splits["train"], tokenizer, validity.current_fingerprint(cfg), made_from=made)
    return FoldRun(inputs, distributed.Dist(), stop)
