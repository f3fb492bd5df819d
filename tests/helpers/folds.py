"""One fold run in process (pipeline.core.fold.FoldRun), and a stop flag raised at a chosen optimizer step."""

from __future__ import annotations

from pipeline import validity
from pipeline.core import distributed
from pipeline.core.fold import FoldInputs, FoldRun


class StopAt:
    """A stop flag raised when the loop asks for the `at`-th time (once per optimizer step)."""

    def __init__(self, at: int) -> None:
        self.at, self.asked = at, 0

    @property
    def raised(self) -> bool:
        self.asked += 1
        return self.asked >= self.at


def fold_run(cfg, stop, fold=0) -> FoldRun:
    """FoldRun on the inputs `make train` reads (pipeline.train.load_inputs: trimmed with model.trim_vocab)."""
    from pipeline.train import load_inputs

    d = distributed.Dist()
    table, data, tokenizer, keep, meta, tested = load_inputs(cfg, d)
    made = validity.current_made_from(cfg, meta)
    inputs = FoldInputs(cfg, fold, table, data, tokenizer, validity.current_fingerprint(cfg), keep, made_from=made,
                        test=tested)  # fmt: skip
    return FoldRun(inputs, d, stop)
