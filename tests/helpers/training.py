"""`loop.train_epoch` called with a Job's parts one by one, as the loop's tests set them up."""

from __future__ import annotations

from pipeline.core import loop


def train_parts(model, steps, data, labels, optimizer, scheduler, scaler, cfg, precision, device, *, pad_id: int,
                rank: int = 0, world: int = 1, **kw) -> loop.StepState:  # fmt: skip
    job = loop.Job(model, data, labels, optimizer, scaler, cfg, precision, device, pad_id, rank, world)
    return loop.train_epoch(job, steps, scheduler, **kw)
