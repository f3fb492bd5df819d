"""Weight averaging in a fold (`train.average`): `ema`, an exponential moving average of the trained weights, or
`swa`, their equal average over the steps after `train.average_start` of the fold's optimizer steps.

The average is updated after every optimizer step that updated the weights (a step skipped for non-finite
gradients leaves it alone), in fp32 whatever the precision, by torch.optim.swa_utils' multi-tensor updates (one
fused lerp, or add, over the list). Before `swa`'s start it follows the weights, so an evaluation there scores the
weights as they are. It is what an evaluation scores and what the best evaluation keeps, so what predict and
export read (`applied`); the optimizer goes on from the live weights. Under LoRA only what trains is averaged (the
adapters and the head). Under DDP every rank holds the same weights after each step, so the same average. It is
part of the resume state (`state`, `load`): a resumed fold averages on as an uninterrupted one. It lives beside
the weights on their device (one fp32 copy of what trains: 2.2 GB for XLM-R large; the Kaggle memory plan counts
it), or in host memory with `train.average_device=cpu`: each step then copies the weights to the host (the price
of the GPU memory saved), and an evaluation copies the average in and the weights back out.
"""

from __future__ import annotations

import contextlib
import math

import torch
from torch.optim.swa_utils import get_ema_multi_avg_fn, get_swa_multi_avg_fn


class WeightAverage:
    def __init__(self, model: torch.nn.Module, kind: str = "ema", decay: float = 0.999, start: float = 0.0,
                 device: str = "weights") -> None:  # fmt: skip
        """`start`: for `swa`, the fraction of the fold's optimizer steps after which the average begins (it follows
        the weights until then); `device`: `weights` (beside them) or `cpu` (host memory)."""
        self.params = [p for p in model.parameters() if p.requires_grad]
        if any(p.dtype != torch.float32 for p in self.params):
            raise ValueError("train.average: the trained weights are not fp32")
        self.kind, self.start, self.host = kind, start, device == "cpu"
        where = "cpu" if self.host else None
        self.average = [p.detach().to(where, copy=True) for p in self.params]  # starts at the fold's first weights
        self.updates = 0  # the steps inside the average
        self._update = get_ema_multi_avg_fn(decay) if kind == "ema" else get_swa_multi_avg_fn()

    @torch.no_grad()
    def update(self, step: int, steps: int) -> None:
        """Optimizer step `step` (1-based) of the fold's `steps` into the average. `ema`: average = decay x average
        + (1 - decay) x weights; `swa`: the weights' mean over the steps after `start` of them, the weights before."""
        weights = [p.detach().to(self.average[0].device) for p in self.params]  # on the host: one copy out
        if self.kind == "swa" and step <= math.floor(self.start * steps):
            for a, w in zip(self.average, weights, strict=True):
                a.copy_(w)
            return
        self._update(self.average, weights, self.updates)
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
        """The weights and the average trade places. Beside the weights they trade storage: nothing copied, no
        second copy held while an evaluation runs (both fp32 on one device: what trains is fp32 master weights,
        core/modeling). On the host the average is copied in and the weights out, the host holding theirs."""
        for i, p in enumerate(self.params):
            if self.host:
                live = p.data.to("cpu", copy=True)
                p.data.copy_(self.average[i])
                self.average[i] = live
            else:
                p.data, self.average[i] = self.average[i], p.data

    def state(self) -> dict:
        """What the resume state keeps: the average's kind, its tensors (on the CPU) and its count of updates."""
        return {"kind": self.kind, "tensors": [a.cpu() for a in self.average], "updates": self.updates}

    def load(self, state: dict) -> None:
        kind = state.get("kind", "ema")  # states saved before `swa` existed held an ema
        if kind != self.kind or len(state["tensors"]) != len(self.average):
            raise ValueError(f"the resume state's weight average ({kind}) does not fit this one ({self.kind})")
        for a, saved in zip(self.average, state["tensors"], strict=True):
            a.copy_(saved)
        self.updates = int(state["updates"])


def make(model: torch.nn.Module, train) -> WeightAverage | None:
    """The fold's weight average (`train`: the config's train section), or None for `none`."""
    if train.average == "none":
        return None
    return WeightAverage(model, train.average, train.average_decay, train.average_start, train.average_device)


@contextlib.contextmanager
def applied(average: WeightAverage | None):
    """average.applied(), or nothing without an average."""
    if average is None:
        yield
    else:
        with average.applied():
            yield
