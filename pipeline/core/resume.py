"""Resume states: where a fold is, saved so that an interrupted run continues exactly where it stopped.

A state (fold<k>/resume.pt) holds the weights, the optimizer, the schedule, the GradScaler, where the
epoch is (`FoldState`) and every rank's random state, so that a resumed run ends with the same weights
and OOF as an uninterrupted one, under DDP too. It is saved at each epoch end, every
`train.save_every_steps` optimizer steps, and at the next optimizer step after SIGINT or SIGTERM.
"""

from __future__ import annotations

import dataclasses
import random
import signal
import sys
from pathlib import Path

import numpy as np
import torch

from pipeline.core import distributed
from pipeline.core.loop import StepState
from pipeline.errors import PipelineError


class Interrupted(PipelineError):
    pass


class TimeUp(Interrupted):
    """The run's deadline came (a Kaggle session's limit): the state is saved; the next session continues."""

    exit_code = 75  # eta.TIME_UP_EXIT: tells the notebook a stop for time from a failure
    planned = True  # pipeline.errors.run_stage says it once, as a stop and not an error


@dataclasses.dataclass
class FoldState:
    """Where a fold is: a resume state is this, the weights, the optimizer and the random states.

    `step.window == windows` with no evaluation at the epoch's last step means: trained, not yet evaluated.
    `history` holds every evaluation; `best` the best one's AUC, epoch and step (counted over the fold) and
    `since`: the evaluations after it without a better AUC (train.patience stops the fold).
    """

    epoch: int = 0
    step: StepState = dataclasses.field(default_factory=StepState)
    history: list = dataclasses.field(default_factory=list)
    best: dict = dataclasses.field(default_factory=lambda: {"auc": -1.0, "epoch": -1, "step": -1, "since": 0})
    steplog: dict = dataclasses.field(default_factory=dict)  # core.steplog's sums since its last record


class StopFlag:
    """SIGINT and SIGTERM set a flag; the loop saves a resume state at the next optimizer step and exits."""

    def __init__(self) -> None:
        self.raised = False
        self.previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.raised:  # a second Ctrl-C means now
            raise KeyboardInterrupt
        self.raised = True
        print(f"\n{signal.Signals(signum).name}: saving a resume state at the next optimizer step", file=sys.stderr)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA too


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def load_resume(path: Path, digest: str, world: int) -> dict | None:
    """The saved state of an interrupted fold, or None where there is none this run can continue."""
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # a damaged state is refused, not half-loaded
        print(f"warning: {path} is unreadable ({type(e).__name__}); starting the fold again", file=sys.stderr)
        return None
    if state.get("digest") != digest:
        return None
    if state.get("world", 1) != world:  # the batch plan (and so a step's rows) depends on the world size
        print(
            f"warning: {path} was saved by {state.get('world', 1)} processes and this run has {world}; "
            f"starting the fold again (run with the same GPUS to resume)",
            file=sys.stderr,
        )
        return None
    return state


def load_resume_everywhere(path: Path, digest: str, d: distributed.Dist) -> dict | None:
    """Rank 0's resume state on every rank, the model weights left out (DDP copies rank 0's weights).

    Rank 0 decides whether there is a state; a rank that sees the same file (a shared folder) reads it
    itself, and only when some rank cannot (another node) does rank 0 send it.
    """
    state = load_resume(path, digest, d.world) if d.is_main else None
    if not d.enabled:
        return state
    token = distributed.broadcast_object(d, state.get("token", "") if state else None)
    if token is None:
        return None
    if not d.is_main:
        mine = load_resume(path, digest, d.world)
        state = mine if mine is not None and mine.get("token") == token else None
    if distributed.any_rank(d, state is None):
        sent = distributed.broadcast_object(d, {k: v for k, v in state.items() if k != "model"} if d.is_main else None)
        state = state or sent
    return state


def fold_state(state: dict, rank: int = 0) -> FoldState:
    """The FoldState a saved state holds, with this rank's step-record sums."""
    best = {**FoldState().best, **state["best"]}
    carries = state.get("steplog") or []
    return FoldState(state["epoch"], StepState(**state["step"]), state["history"], best,
                     carries[rank] if rank < len(carries) else {})  # fmt: skip


def own_rng(state: dict, rank: int) -> dict:
    """This rank's random state from a saved state (each rank its own: dropout differs from rank to rank)."""
    return state["rng"][rank] if isinstance(state["rng"], list) else state["rng"]  # older states: one
