"""Every training loss, declared once: training's, auto-fit's memory probe's and `make bench`'s (both the
pipeline's rows and the Trainer row's) are the record `train.loss` names, so a loss changed here is the loss
everywhere a step is taken or measured.

A loss is one record: `train.loss`'s choices and doc are made from LOSSES (pipeline.schema). Its function takes
fp32 logits and float targets (a hard 0/1 label or a soft one in [0, 1]) and returns the loss summed over the
rows: the caller divides by the window's examples (accumulation makes the mean over the whole window).

Standard library only at import: the functions use torch where they are called, so pipeline.schema can read
the names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def bce(logits, targets):
    import torch.nn.functional as F

    # from logits, in fp32 (never sigmoid then BCE: it saturates and underflows in half precision)
    return F.binary_cross_entropy_with_logits(logits.float(), targets.float(), reduction="sum")


@dataclass(frozen=True)
class Loss:
    name: str  # train.loss's value
    doc: str  # what it is, in a few words: train.loss's doc
    summed: Callable  # (logits [rows], targets [rows]) -> the loss summed over the rows, a 0-d fp32 tensor


LOSSES = {loss.name: loss for loss in (Loss("bce", "binary cross-entropy from the logits", bce),)}


def setting_doc() -> str:
    """train.loss's doc: every loss with what it is."""
    return "the training loss: " + " or ".join(f"`{x.name}` ({x.doc})" for x in LOSSES.values())
