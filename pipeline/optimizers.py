"""Every optimizer, declared once: how it is built, what it costs in memory, where it runs, and its name in
transformers' Trainer.

An optimizer is one record. `train.optimizer`'s choices and doc are made from OPTIMIZERS (pipeline.schema);
training, auto-fit's memory probe and `make bench` build it through pipeline.core.optim; the Kaggle plans price
its state (`state_bytes`) and check the image for what it `needs`; the bench's Trainer row asks Trainer for
`trainer_optim`. A new optimizer is its record and its test.

Standard library only at import: torch and bitsandbytes are imported where an optimizer is built, so
pipeline.schema can read the names.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass


def adamw(groups: list[dict], lr: float, device):
    import torch

    # fused: one kernel per step, with no parameter-sized temporaries (the for-loop version makes two the
    # size of the 250k-row embedding at once); torch has it for CUDA and CPU
    return torch.optim.AdamW(groups, lr=lr, fused=device.type in ("cuda", "cpu"))


def adamw8bit(groups: list[dict], lr: float, device):
    import bitsandbytes as bnb

    return bnb.optim.AdamW8bit(groups, lr=lr)


@dataclass(frozen=True)
class Optimizer:
    name: str  # train.optimizer's value
    doc: str  # what it is, in a few words: train.optimizer's doc
    build: Callable  # (named parameter groups, lr, device) -> a torch optimizer
    # bytes of optimizer state a trained parameter holds: AdamW's two fp32 moments are 8, 8-bit AdamW's 2
    state_bytes: int
    trainer_optim: str | None = None  # TrainingArguments.optim of the bench's Trainer row (None: Trainer's default)
    needs: str | None = None  # a module it imports, refused in one line where it is missing
    cuda_only: bool = False


OPTIMIZERS = {
    o.name: o
    for o in (
        Optimizer("adamw", "AdamW, fused", adamw, state_bytes=8),
        Optimizer(
            "adamw8bit",
            "bitsandbytes' 8-bit AdamW, CUDA only",
            adamw8bit,
            state_bytes=2,
            trainer_optim="adamw_bnb_8bit",
            needs="bitsandbytes",
            cuda_only=True,
        ),  # fmt: skip
    )
}


def setting_doc() -> str:
    """train.optimizer's doc: every optimizer with what it is."""
    return " or ".join(f"`{o.name}` ({o.doc})" for o in OPTIMIZERS.values())


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def refusal(name: str, device_type: str | None, has: Callable[[str], bool] | None = None) -> str | None:
    """Why train.optimizer=`name` cannot run on a `device_type` device (None: any device) where `has(module)` says
    which modules are installed (by default, whether this Python can import it), in one line; None where it can."""
    o, has = OPTIMIZERS[name], has or installed
    if o.cuda_only and device_type not in (None, "cuda"):
        return f"train.optimizer={name} runs only on a CUDA GPU ({o.needs}); use adamw here"
    if o.needs and not has(o.needs):
        return f"train.optimizer={name} needs {o.needs}, which is not installed here; use adamw"
    return None
