"""How long the rest of a run will take, and the time it must end by: one estimate for every reader.

The rate is seconds per padded token (a batch's rows times its width: what the GPU computes), measured
as a fold trains and evaluates, so that a fold of longer texts is not estimated by a fold of shorter
ones. The same estimate gives the ETA in the banner and in each evaluation line, `eta.json` beside the
experiment (what `make kernel-status` shows), and the Kaggle time guard: a run that has a deadline
(`PIPELINE_DEADLINE`, set by the notebook from its session's start and `kaggle.time_limit_h`) never starts
an epoch it cannot finish, and saves a resume state and stops when the deadline comes mid-epoch.

Tests simulate hours of GPU time with a fake clock: `PIPELINE_FAKE_CLOCK` names a file of seconds added to
the real clock, and `PIPELINE_FAKE_STEP_SECONDS` adds that many to it at each optimizer step.
"""

from __future__ import annotations

import functools
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.files import read_json, write_json

DEADLINE_ENV = "PIPELINE_DEADLINE"  # unix seconds by which the run must have stopped
# the seconds of training a whole session gives (set by the notebook): an epoch longer than that can never end
# inside one, so it is trained into and cut at the deadline instead of refused session after session
SESSION_ENV = "PIPELINE_SESSION_SECONDS"
FOLDS_AFTER_ENV = "PIPELINE_FOLDS_AFTER"  # folds a caller trains after this process's (the notebook, fold by fold)
# set by the notebook once a train stage of this session trained: the session's first epoch is behind it
TRAINED_ENV = "PIPELINE_SESSION_TRAINED"
FAKE_CLOCK_ENV, FAKE_STEP_ENV = "PIPELINE_FAKE_CLOCK", "PIPELINE_FAKE_STEP_SECONDS"
ETA_FILE = "eta.json"  # beside the experiment: the latest estimate and the measured rates
TIME_UP_EXIT = 75  # a stage that stopped for the deadline (EX_TEMPFAIL): its state is saved, continue later


def now() -> float:
    """The clock every time decision reads: the real one, plus the tests' fake seconds when they simulate."""
    fake = os.environ.get(FAKE_CLOCK_ENV)
    extra = float(Path(fake).read_text() or 0) if fake and Path(fake).is_file() else 0.0
    return time.time() + extra


def spend_step() -> None:
    """An optimizer step was taken (by rank 0): under a simulated clock, that much simulated time passes."""
    fake, step = os.environ.get(FAKE_CLOCK_ENV), float(os.environ.get(FAKE_STEP_ENV) or 0)
    if fake and step:
        path = Path(fake)
        before = float(path.read_text() or 0) if path.is_file() else 0.0
        path.write_text(str(before + step))


def deadline() -> float | None:
    value = os.environ.get(DEADLINE_ENV)
    return float(value) if value else None


def session_seconds() -> float | None:
    """The training time of a whole session (the notebook's), or None outside one."""
    value = os.environ.get(SESSION_ENV)
    return float(value) if value else None


def session_trained() -> bool:
    """An earlier train stage of this session has trained (the notebook says so)."""
    return bool(os.environ.get(TRAINED_ENV))


def epoch_verdict(where: str, need: float, left: float, first: bool) -> tuple[str, bool] | None:
    """Whether an epoch that needs `need` seconds may start with `left` before the deadline: None (it fits), or (what
    to say, whether it is refused). `first`: the first epoch this session trains. An epoch that does not fit what is
    left still starts when refusing it would refuse it in every session: the first epoch a session trains (every
    later session has the same setup before it: data, the all-reduce check, loading the model), and an epoch longer
    than a whole session's training. The deadline cuts it and its resume state carries it to the next session."""
    if need <= left:
        return None
    whole = session_seconds()
    if first and whole is not None:
        return (f"{where} needs about {hours(need)} and {hours(left)} are left, the most a session has after its "
                "setup: training into it as the first epoch of the session; the deadline cuts it with its state "
                "saved", False)  # fmt: skip
    if whole is not None and need > whole:
        return (f"{where} needs about {hours(need)}, more than a session gives ({hours(whole)}): training into it; "
                "the deadline cuts it with its state saved", False)  # fmt: skip
    return f"{where} needs about {hours(need)} and {hours(left)} are left before the session's limit", True


def folds_after() -> int:
    """Folds the run trains after this process's own: the notebook trains one fold a process."""
    return int(os.environ.get(FOLDS_AFTER_ENV) or 0)


def left() -> float | None:
    """Seconds until the deadline (negative once it has passed); None without one."""
    end = deadline()
    return None if end is None else end - now()


def hours(seconds: float) -> str:
    """`2h05m`, `14m`, `45s`: how a person reads a duration."""
    seconds = max(0.0, seconds)
    if seconds >= 3600:
        return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    return f"{int(seconds // 60)}m" if seconds >= 60 else f"{int(seconds)}s"


@dataclass
class Rate:
    """Seconds per padded token, learned from what has run: training (forward, backward, step) and evaluation."""

    train_tokens: float = 0.0
    train_seconds: float = 0.0
    eval_tokens: float = 0.0
    eval_seconds: float = 0.0

    def train(self, tokens: float) -> float | None:
        return tokens * self.train_seconds / self.train_tokens if self.train_tokens else None

    def eval(self, tokens: float) -> float | None:
        if self.eval_tokens:
            return tokens * self.eval_seconds / self.eval_tokens
        # no evaluation measured yet: a forward pass is about a third of a training step's work
        return None if not self.train_tokens else tokens * self.train_seconds / self.train_tokens / 3

    def over(self, earlier: Rate) -> Rate:
        """This rate where it has measured (training and evaluation apart), else `earlier`'s: an earlier run's
        rate, made under another load or on another machine, serves only until this run has its own."""
        train = self if self.train_tokens else earlier
        evals = self if self.eval_tokens else earlier
        return Rate(train.train_tokens, train.train_seconds, evals.eval_tokens, evals.eval_seconds)


@dataclass
class Plan:
    """What is left of a run, in padded tokens: the rest of this epoch, then whole epochs and folds."""

    epoch_tokens: float  # one training epoch of this fold
    eval_tokens: float  # one evaluation of this fold
    epochs_left: int  # whole epochs after the current one, in this fold
    folds_left: int  # whole folds after this one
    fold_epochs: int  # epochs a fold trains
    done_fraction: float = 0.0  # of the current epoch
    extra: dict = field(default_factory=dict)
    cap: float | None = None  # a smoke run (train.max_steps): the epochs (a fraction) each fold trains before it stops

    def seconds(self, rate: Rate) -> float | None:
        """The time the rest of the run needs at `rate`; None until something has been measured."""
        epoch, evaluation = rate.train(self.epoch_tokens), rate.eval(self.eval_tokens)
        if epoch is None or evaluation is None:
            return None
        if self.cap is not None:
            at = self.fold_epochs - self.epochs_left - 1 + self.done_fraction  # where this fold is, in epochs
            return capped(self.cap - at, epoch, evaluation) + self.folds_left * capped(self.cap, epoch, evaluation)
        this = (1 - self.done_fraction) * epoch + evaluation
        fold = self.fold_epochs * (epoch + evaluation)
        return this + self.epochs_left * (epoch + evaluation) + self.folds_left * fold

    def fold_seconds(self, rate: Rate) -> float | None:
        """A whole fold like this one at `rate`: what the Kaggle guard weighs before starting the next."""
        epoch, evaluation = rate.train(self.epoch_tokens), rate.eval(self.eval_tokens)
        if epoch is None or evaluation is None:
            return None
        return capped(self.cap, epoch, evaluation) if self.cap is not None else self.fold_epochs * (epoch + evaluation)


def capped(epochs: float, epoch: float, evaluation: float) -> float:
    """`epochs` (a fraction) of training still to run before a smoke run's stop, and an evaluation for each epoch
    end on the way and the stop's own."""
    epochs = max(0.0, epochs)
    return epochs * epoch + max(1, math.ceil(epochs)) * evaluation


@functools.cache
def run_id() -> str:
    """This process's run: eta.json's rate is continued by the folds of the same run only."""
    return f"{os.getpid()}-{time.time_ns()}"


def as_rate(saved) -> Rate:
    try:
        return Rate(**{k: float(saved[k]) for k in Rate.__dataclass_fields__})
    except (ValueError, KeyError, TypeError):
        return Rate()


def read_rates(folder: Path) -> tuple[Rate, Rate]:
    """(what this run measured so far, an earlier run's rate) from eta.json beside the experiment: the folds
    of one run add to one measurement; a new run starts its own and uses the last run's until it has one."""
    try:
        saved = read_json(folder / ETA_FILE)
        rate, earlier = as_rate(saved["rate"]), as_rate(saved.get("earlier"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return Rate(), Rate()
    if saved.get("run") == run_id():
        return rate, earlier
    return Rate(), rate.over(earlier)  # the last run's own measurement where it had one


def write_eta(folder: Path, rates: tuple[Rate, Rate], seconds_left: float | None, where: str,
              fold_seconds: float | None) -> None:  # fmt: skip
    """eta.json: the latest estimate of the whole run and of one fold, where the run is, and the rates (this
    run's, and the earlier one it uses until it has measured)."""
    measured, earlier = rates
    write_json(folder / ETA_FILE, {"at": now(), "where": where, "seconds_left": seconds_left,
                                   "fold_seconds": fold_seconds, "run": run_id(), "rate": vars(measured),
                                   "earlier": vars(earlier)})  # fmt: skip


def fold_estimate(folder: Path) -> float | None:
    """The seconds a fold takes by the run's latest estimate (eta.json), or None before one was made."""
    try:
        value = read_json(folder / ETA_FILE).get("fold_seconds")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) and value > 0 else None
