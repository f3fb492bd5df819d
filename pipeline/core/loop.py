"""One epoch of training and one pass of prediction: where the three memory techniques meet.

- Mixed precision (pipeline.core.precision): the forward runs under torch.autocast (bf16 or fp16); the loss
  is computed in fp32 from the logits with BCE-with-logits. fp16 needs a GradScaler; bf16 and fp32 do not.
- Gradient accumulation: micro-batches are grouped into windows of `accumulation`; each micro-batch's
  summed loss is divided by the number of examples in the whole window (on all ranks), so the window's
  gradient is exactly that of one big batch, the last shorter window included. One optimizer step
  (and one scheduler step) per window; under DDP only the window's last micro-batch all-reduces.
- Gradient checkpointing: switched on in pipeline.core.modeling; it acts only in train mode.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from pipeline.core.batching import accumulation_windows, collate, halve_window, pad_multiple, to_device
from pipeline.core.optim import optimizer_step, reset_scaler
from pipeline.core.precision import autocast
from pipeline.errors import PipelineError
from pipeline.inputs.tokens import Ragged
from pipeline.losses import LOSSES
from pipeline.progress import bar as progress_bar
from pipeline.schema import TrainConfig


class NonFiniteError(PipelineError):
    pass


@dataclass
class StepState:
    """Where the epoch is; a resume state carries it so that a restart skips finished windows."""

    window: int = 0  # windows (optimizer steps) done in this epoch
    loss_sum: float = 0.0  # summed per-example loss over the examples seen this epoch
    examples: int = 0
    bad_steps: int = 0  # consecutive optimizer steps skipped for non-finite gradients
    skipped: int = 0  # all skipped steps this epoch
    halvings: int = 0  # times an out-of-memory error halved this epoch's micro-batches
    seconds: float = 0.0  # time spent training this epoch, over every process that ran part of it


@dataclass(frozen=True)
class Window:
    """One optimizer step as it happened on this rank: what the step records (core.steps) are made of."""

    loss: float  # summed per-example loss of this rank's rows
    examples: int  # this rank's rows
    tokens: int  # this rank's padded tokens (rows x each micro-batch's longest row)
    grad_norm: float  # before clipping; inf or nan for a step skipped for it
    stepped: bool  # the weights were updated
    seconds: float


@dataclass(frozen=True)
class Job:
    """What every window of an epoch needs and none changes."""

    model: torch.nn.Module
    data: Ragged
    labels: np.ndarray
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    cfg: TrainConfig
    precision: str
    device: torch.device
    pad_id: int
    rank: int
    world: int

    @property
    def multiple(self) -> int:
        return pad_multiple(self.precision)


def plan_windows(steps: list[list[np.ndarray]], accumulation: int, halvings: int) -> list[list[list[np.ndarray]]]:
    """Each window as its list of micro-steps, with the out-of-memory halvings an epoch had made replayed."""
    windows = [[steps[k] for k in win] for win in accumulation_windows(len(steps), accumulation)]
    for _ in range(halvings):
        windows = [halve_window(win) for win in windows]
    return windows


def forward_backward(job: Job, window: list[list[np.ndarray]]) -> tuple[float, int, int]:
    """Forward and backward over one window's micro-steps: (summed loss, examples, padded tokens) on this rank."""
    loss_total, examples, tokens = 0.0, 0, 0
    # examples in this whole window on all ranks: every rank knows the plan, so no communication
    n_window = sum(len(b) for ms in window for b in ms)
    for j, ms in enumerate(window):
        batch = to_device(collate(job.data, ms[job.rank], job.pad_id, job.multiple, job.labels), job.device)
        last = j == len(window) - 1
        # DDP all-reduces in backward; inside no_sync it only accumulates locally, so the gradients
        # cross the network once per window (forward and backward both inside the context)
        sync = job.model.no_sync() if job.world > 1 and not last else contextlib.nullcontext()
        with sync:
            with autocast(job.precision, job.device):  # the model's head gives fp32 logits outside autocast
                logits = job.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
            loss_sum = LOSSES[job.cfg.loss].summed(logits, batch["labels"])  # fp32, from the logits
            # sum / examples in the window makes the window's gradient the mean over all its examples;
            # x world undoes DDP's averaging over ranks, which would otherwise divide a second time
            job.scaler.scale(loss_sum * (job.world / n_window)).backward()
        loss_total += float(loss_sum.detach())
        examples += len(ms[job.rank])
        tokens += batch["input_ids"].numel()
    return loss_total, examples, tokens


def step_window(job: Job, windows: list, w: int, state: StepState, desc: str) -> Window:
    """Window `w` to its optimizer step, as it happened (its seconds left for the caller to fill in).

    Out of memory in one process: the window's micro-batches (and every later window's) are halved, the
    same rows in twice the micro-steps, so the same gradient, and the window is redone.
    """
    while True:
        try:
            loss, examples, tokens = forward_backward(job, windows[w])
            # the step is inside the retry too: the dense embedding gradient and, at the first step, the
            # AdamW moments are allocated here. AdamW allocates its state before it updates any weight,
            # so an out-of-memory error here leaves the weights as they were
            stepped, norm = optimizer_step(job.model, job.optimizer, job.scaler, job.cfg.max_grad_norm)
            return Window(loss, examples, tokens, norm, stepped, 0.0)
        except torch.OutOfMemoryError:
            # one process alone can redo its window; under DDP the other ranks would wait forever
            if job.world > 1 or all(len(b) < 2 for ms in windows[w] for b in ms):
                raise
        # here, outside the except block, the failed window's tensors have been released
        job.optimizer.zero_grad(set_to_none=True)  # drop the half-accumulated window
        reset_scaler(job.scaler)  # a step that failed after unscale_ must not count as unscaled
        if job.device.type == "cuda":
            torch.cuda.empty_cache()
        windows[w:] = [halve_window(win) for win in windows[w:]]
        state.halvings += 1
        micro = max(len(b) for ms in windows[w] for b in ms)
        print(
            f"{desc}: out of memory at step {w + 1}; micro-batches halved to {micro} rows and accumulation "
            f"doubled (same effective batch); redoing the step",
            file=sys.stderr,
        )


def count_step(state: StepState, stepped: bool, scheduler, max_bad_steps: int, desc: str, at: str) -> None:
    """The schedule counts optimizer steps that happened; too many skipped in a row stop the fold."""
    if stepped:
        scheduler.step()
        state.bad_steps = 0
        return
    state.bad_steps += 1
    state.skipped += 1
    if state.bad_steps >= max_bad_steps:
        raise NonFiniteError(
            f"{desc}: non-finite loss or gradients for {state.bad_steps} optimizer steps in a row ({at}). "
            f"Try train.precision=bf16, a lower train.lr, or a smaller train.max_grad_norm; the last good state is kept"
        )


def train_epoch(
    job: Job,
    steps: list[list[np.ndarray]],
    scheduler,
    *,
    state: StepState | None = None,
    after_window: Callable[[StepState, Window], bool] | None = None,
    progress: bool = True,
    desc: str = "train",
    max_bad_steps: int = 20,
) -> StepState:
    """Train over the micro-steps, one optimizer step per accumulation window.

    `after_window(state, window)` runs after each optimizer step (`window`: that step as it happened); it
    returns True to stop early (an interrupt, or a fold stopped early), leaving `state.window` at the number
    of windows completed.
    """
    job.model.train()
    state = state or StepState()
    windows = plan_windows(steps, job.cfg.accumulation, state.halvings)  # a resumed epoch replays its halvings
    bar = progress_bar(total=len(windows), initial=state.window, desc=desc, unit="step", disable=not progress,
                       dynamic_ncols=True, leave=False)  # fmt: skip
    start, seen = time.perf_counter(), 0
    for w in range(state.window, len(windows)):
        window_start = time.perf_counter()
        done = step_window(job, windows, w, state, desc)
        state.loss_sum += done.loss
        state.examples += done.examples
        seen += done.examples
        job.optimizer.zero_grad(set_to_none=True)
        count_step(state, done.stepped, scheduler, max_bad_steps, desc, f"at step {w + 1} of {len(windows)}")
        state.window = w + 1
        done = replace(done, seconds=time.perf_counter() - window_start)
        state.seconds += done.seconds
        if progress:
            bar.update(1)
            bar.set_postfix(loss=f"{state.loss_sum / max(state.examples, 1):.4f}",
                            ex_s=f"{seen / (time.perf_counter() - start):.0f}")  # fmt: skip
        if after_window is not None and after_window(state, done):
            break
    bar.close()
    return state


@torch.no_grad()
def predict(
    model: torch.nn.Module,
    data: Ragged,
    idx: np.ndarray,
    batch_size: int,
    precision: str,
    device: torch.device,
    pad_id: int,
    progress: bool = False,
    desc: str = "predict",
) -> np.ndarray:
    """Probabilities for rows `idx` (in that order), batched by length for speed."""
    model.eval()
    idx = np.asarray(idx)
    out = np.empty(len(idx), dtype=np.float64)
    order = np.argsort(-data.lengths[idx], kind="stable")
    multiple = pad_multiple(precision)
    for s in progress_bar(range(0, len(order), batch_size), desc=desc, unit="batch", disable=not progress, leave=False):
        pos = order[s : s + batch_size]
        batch = to_device(collate(data, idx[pos], pad_id, multiple), device)
        logits = predict_logits(model, batch, precision, device)
        out[pos] = torch.sigmoid(logits).cpu().numpy()
    return out


def predict_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor], precision: str, device: torch.device):
    """fp32 logits [batch]: the model's one forward path (the encoder under autocast, its head in fp32)."""
    with autocast(precision, device):
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).float()
