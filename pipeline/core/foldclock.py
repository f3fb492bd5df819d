"""A fold's time budget: whether the deadline has passed, whether an epoch may start before it, the stop it
makes, and what is left of the run (the ETA of the evaluation lines and eta.json).

The estimates are pipeline.core.eta's; these functions apply them to one fold (pipeline.core.fold.FoldRun), whose
rates, token counts and batch plan they take as arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from pipeline import layout
from pipeline.core import distributed, eta
from pipeline.core.foldmodel import smoke_steps
from pipeline.core.resume import TimeUp
from pipeline.files import write_json
from pipeline.schema import Config


def deadline_passed(d: distributed.Dist) -> bool:
    """The deadline: the session's time is up on any rank, so every rank stops together."""
    left = eta.left()
    return distributed.any_rank(d, left is not None and left <= 0)


def time_up(cfg: Config, d: distributed.Dist, fold: int, why: str, started: bool = True) -> NoReturn:
    """Stop for the deadline, saying so in time_up.json (the Kaggle notebook reads it: which fold, why, and
    whether it had started, i.e. left a resume state) and in one line."""
    if d.is_main:
        record = {"fold": fold, "why": why, "started": started}
        write_json(layout.experiment_dir(cfg) / layout.TIME_UP, record)
    raise TimeUp(why)


def check_time(d: distributed.Dist, epoch: int, verdict: Callable[[], tuple[str, bool] | None],
               stop: Callable[..., None]) -> None:  # fmt: skip
    """Never start an epoch that cannot end before the deadline (its state is saved at the last one's end),
    unless refusing it would refuse it in every session (eta.epoch_verdict): then it starts, and the deadline
    cuts it with its state saved, so that every session makes progress. Rank 0 decides for every rank (`verdict`
    is asked there only): on clocks and rates of their own, two ranks could decide apart, and one would wait for
    ever at a collective. `stop(why, started=...)` stops the fold (time_up)."""
    if eta.left() is None:  # no deadline (the same environment on every rank): nothing to decide
        return
    said_refused = distributed.broadcast_object(d, verdict() if d.is_main else None)
    if said_refused is None:
        return
    said, refused = said_refused
    if not refused:
        if d.is_main:
            print(said)
        return
    # an epoch ends with a resume state saved; before the first one nothing has been trained
    saved = "its resume state is saved" if epoch > 0 else "nothing trained yet, it starts in the next session"
    stop(f"{said}; {saved}", started=epoch > 0)


def time_verdict(fold: int, epoch: int, rate: eta.Rate, measured: eta.Rate, epoch_tokens: float,
                 epoch_eval_tokens: float) -> tuple[str, bool] | None:  # fmt: skip
    """eta.epoch_verdict on this rank's clock and `rate` for an epoch of `epoch_tokens` (and its evaluations'
    `epoch_eval_tokens`); the first epoch of the session when neither this process (`measured`: its own rates)
    nor an earlier train stage of the session has trained."""
    left, train = eta.left(), rate.train(epoch_tokens)
    if left is None or train is None:
        return None
    need = train + rate.eval(epoch_eval_tokens)
    first = not measured.train_tokens and not eta.session_trained()  # measured: by this process only
    return eta.epoch_verdict(f"fold {fold}: epoch {epoch + 1}", need, left, first)


def plan(cfg: Config, windows: int, epoch: int, window: int, tokens: tuple[float, float], folds_after: int) -> eta.Plan:
    """What is left of the run from window `window` of epoch `epoch`, in padded tokens (`tokens`: an epoch's
    training and its evaluations'; `windows`: the optimizer steps of an epoch)."""
    t = cfg.train
    smoke = smoke_steps(cfg, t.epochs * windows)
    # a smoke run's folds each stop at train.max_steps: the estimate counts those steps, not the schedule's
    return eta.Plan(*tokens, t.epochs - epoch - 1, folds_after, t.epochs, done_fraction=window / windows,
                    cap=smoke / windows if smoke else None)  # fmt: skip


def eta_line(cfg: Config, d: distributed.Dist, where: str, left: eta.Plan, rates: tuple[eta.Rate, eta.Rate]) -> str:
    """` | ETA 1h05m for the run`, written to eta.json with a fold's estimate (the Kaggle guard reads it);
    '' until something has been measured. `rates`: this run's measured and an earlier run's; `where`: the fold
    and epoch, as eta.json names them."""
    rate = rates[0].over(rates[1])
    seconds = left.seconds(rate)
    if d.is_main:
        eta.write_eta(layout.experiment_dir(cfg), rates, seconds, where, left.fold_seconds(rate))
    return "" if seconds is None else f" | ETA {eta.hours(seconds)} for the run"
