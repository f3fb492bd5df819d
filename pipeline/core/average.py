"""Weight averaging in a fold (`train.average=ema`): an exponential moving average of the trained weights.

The average is updated after every optimizer step that updated the weights (a step skipped for non-finite
gradients leaves it alone), in fp32 whatever the precision, by torch.optim.swa_utils' EMA update (one fused lerp
over the list). It is what an evaluation scores and what the best evaluation keeps, so what predict and export
read (`applied`); the optimizer goes on from the live weights. Under LoRA only what trains is averaged (the
adapters and the head). Under DDP every rank holds the same weights after each step, so the same average. It is
part of the resume state (`state`, `load`): a resumed fold averages on as an uninterrupted one. It lives beside
the weights on their device: one fp32 copy of what trains (2.2 GB for XLM-R large; the Kaggle memory plan
counts it).
"""

from __future__ import annotations

import contextlib

import torch
from torch.optim.swa_utils import get_ema_multi_avg_fn


class WeightAverage:
    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        if any(p.dtype != torch.float32 for p in self.params):
            raise ValueError("train.average: the trained weights are not fp32")
        self.average = [p.detach().clone() for p in self.params]  # starts at the fold's first weights
        self.updates = 0
        self._update = get_ema_multi_avg_fn(decay)

    @torch.no_grad()
    def update(self) -> None:
        """One more step into the average: average = decay x average + (1 - decay) x weights."""
        self._update(self.average, [p.detach() for p in self.params], self.updates)
        self.updates += 1

    @contextlib.contextmanager
    def applied(self):
        """The model holds the average inside the block (evaluation, saving the best), its own weights after."""
        self.exchange()
        try:
            yield
        finally:
            self.exchange()

    def exchange(self) -> None:
        """The weights and the average trade storage: nothing copied, no second copy of the weights held while an
        evaluation runs (both fp32 on one device: what trains is fp32 master weights, core/modeling)."""
        for i, p in enumerate(self.params):
            p.data, self.average[i] = self.average[i], p.data

    def state(self) -> dict:
        """What the resume state keeps: the average's tensors (on the CPU) and its count of updates."""
        return {"tensors": [a.cpu() for a in self.average], "updates": self.updates}

    def load(self, state: dict) -> None:
        if len(state["tensors"]) != len(self.average):
            raise ValueError("the resume state's weight average does not fit the model")
        for a, saved in zip(self.average, state["tensors"], strict=True):
            a.copy_(saved)
        self.updates = int(state["updates"])


def make(model: torch.nn.Module, average: str, decay: float) -> WeightAverage | None:
    """The fold's weight average (train.average), or None for `none`."""
    return WeightAverage(model, decay) if average == "ema" else None


@contextlib.contextmanager
def applied(average: WeightAverage | None):
    """average.applied(), or nothing without an average."""
    if average is None:
        yield
    else:
        with average.applied():
            yield
