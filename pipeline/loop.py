"""One epoch of training and one pass of prediction. The three memory techniques live here.

- Mixed precision: the forward runs under torch.autocast (bf16 or fp16); the loss is computed in
  fp32 from the logits with BCE-with-logits. fp16 needs a GradScaler; bf16 and fp32 do not.
- Gradient accumulation: micro-batches are grouped into windows of `accumulation`; each micro-batch's
  summed loss is divided by the number of examples in the whole window (on all ranks), so the window's
  gradient is exactly that of one big batch, the last shorter window included. One optimizer step
  (and one scheduler step) per window; under DDP only the window's last micro-batch all-reduces.
- Gradient checkpointing: switched on in pipeline.modeling; it acts only in train mode.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from pipeline.config import TrainConfig
from pipeline.errors import PipelineError
from pipeline.progress import bar as progress_bar
from pipeline.tokens import Ragged

PRECISIONS = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


class NonFiniteError(PipelineError):
    pass


# ---------------------------------------------------------------- precision, optimizer


def cpu_has_bf16() -> bool:
    """Native bf16 arithmetic (AVX512-BF16 or AMX); elsewhere CPU bf16 is emulated and slower than fp32."""
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # a torch without these probes: trust autocast
        return True


def cuda_has_bf16(device: torch.device) -> bool:
    """Native bf16 tensor-core arithmetic: compute capability 8.0+ (Ampere on).

    torch.cuda.is_bf16_supported() alone says True on a T4 or P100 (Kaggle's GPUs) because a bf16 tensor can
    be made there; the arithmetic is emulated and slow, and fp16 with a GradScaler is the right choice.
    """
    major, _ = torch.cuda.get_device_capability(device)
    return major >= 8 and torch.cuda.is_bf16_supported(including_emulation=False)


def resolve_precision(name: str, device: torch.device) -> str:
    """`auto`: bf16 where the device computes it natively, else fp16 on CUDA and fp32 on CPU."""
    if name == "auto":
        if device.type == "cuda":
            return "bf16" if cuda_has_bf16(device) else "fp16"
        return "bf16" if cpu_has_bf16() else "fp32"
    if name == "bf16" and device.type == "cuda" and not cuda_has_bf16(device):
        cap = ".".join(map(str, torch.cuda.get_device_capability(device)))
        raise PipelineError(
            f"train.precision=bf16: this GPU (compute capability {cap}) only emulates bf16, slowly; "
            f"use train.precision=fp16 or auto"
        )
    return name


def autocast(precision: str, device: torch.device):
    dtype = PRECISIONS[precision]
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def make_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    # only fp16 underflows: its gradients need scaling up before backward and down before the step
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW without decay on biases and LayerNorm weights; fused where the device has it, or 8-bit."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.optimizer == "adamw8bit":
        if device.type != "cuda":
            raise PipelineError("train.optimizer=adamw8bit runs only on a CUDA GPU (bitsandbytes); use adamw here")
        try:
            import bitsandbytes as bnb
        except ImportError as e:
            raise PipelineError(f"train.optimizer=adamw8bit needs bitsandbytes ({e})") from None
        return bnb.optim.AdamW8bit(groups, lr=cfg.lr)
    # fused: one kernel per step, with no parameter-sized temporaries (the for-loop version makes two the
    # size of the 250k-row embedding at once); torch has it for CUDA and CPU
    return torch.optim.AdamW(groups, lr=cfg.lr, fused=device.type in ("cuda", "cpu"))


def make_scheduler(optimizer: torch.optim.Optimizer, warmup: float, total_steps: int):
    """Linear warm-up then linear decay to zero, counted in optimizer steps (not micro-batches)."""
    warm = max(1, int(round(warmup * total_steps))) if warmup > 0 else 0

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total_steps - step) / max(1, total_steps - warm))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# ---------------------------------------------------------------- batches


def length_grouped_batches(
    lengths: np.ndarray, batch_size: int, seed: int, epoch: int, world: int = 1, shuffle: bool = True
) -> list[np.ndarray]:
    """Micro-batches of similar length (little padding), in a new random order each epoch.

    Rows are shuffled, cut into chunks of 50 batches, sorted by length inside each chunk and batched;
    the batches are then shuffled. The list is padded (by repeating its first batches) to a multiple
    of `world` so that every rank gets the same number of micro-batches and none waits at an all-reduce.
    """
    n = len(lengths)
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(n) if shuffle else np.arange(n)
    chunk = batch_size * 50
    batches = []
    for start in range(0, n, chunk):
        part = order[start : start + chunk]
        part = part[np.argsort(-lengths[part], kind="stable")]
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    if len(batches) % world:  # cycling: fewer batches than ranks still gives every rank one
        batches += [batches[i % len(batches)] for i in range(world - len(batches) % world)]
    return batches


def micro_steps(batches: list[np.ndarray], world: int) -> list[list[np.ndarray]]:
    """Micro-step k is batches[k*world : (k+1)*world]: rank r takes the r-th of them."""
    return [batches[k : k + world] for k in range(0, len(batches), world)]


def accumulation_windows(n_micro: int, accumulation: int) -> list[range]:
    """Micro-step indices of each optimizer step: full windows, then one shorter window if any are left."""
    return [range(s, min(s + accumulation, n_micro)) for s in range(0, n_micro, accumulation)]


def collate(
    data: Ragged, idx: np.ndarray, pad_id: int, multiple: int = 1, labels: np.ndarray | None = None
) -> dict[str, torch.Tensor]:
    """Pad a batch to its own longest row (rounded up to `multiple`: tensor cores like multiples of 8)."""
    rows = [data[i] for i in idx]
    width = max(len(r) for r in rows)
    width = -(-width // multiple) * multiple
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1
    out = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
    if labels is not None:
        out["labels"] = torch.from_numpy(labels[idx].astype(np.float32))
    return out


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


# ---------------------------------------------------------------- memory


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> float:
    """Peak allocated GPU memory on CUDA; on CPU the process's peak resident memory (it never resets)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- training


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


def densify_grads(model: torch.nn.Module) -> None:
    for p in model.parameters():
        if p.grad is not None and p.grad.is_sparse:
            p.grad = p.grad.to_dense()


def optimizer_step(model: torch.nn.Module, optimizer, scaler: torch.amp.GradScaler, max_grad_norm: float) -> bool:
    """Densify, unscale, clip, step: the end of an accumulation window. True when the weights were updated."""
    densify_grads(model)  # sparse embedding rows (see modeling.sparse_embedding_grad) -> one dense gradient
    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    if scaler.is_enabled():
        scale = scaler.get_scale()
        scaler.step(optimizer)  # skips the update by itself when fp16 gradients overflowed
        scaler.update()
        return scaler.get_scale() >= scale  # the scale shrinks exactly when the step was skipped
    finite = bool(torch.isfinite(norm))
    if finite:
        optimizer.step()
    return finite


def reset_scaler(scaler: torch.amp.GradScaler) -> None:
    """Forget this window's unscale_ record (the scale itself is kept): the window is redone from the start."""
    # GradScaler refuses a second unscale_ before update(); its per-optimizer record is a defaultdict that
    # starts every optimizer afresh when cleared
    if scaler.is_enabled():
        scaler._per_optimizer_states.clear()


def halve_window(window: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """Each micro-step of a window cut into two of half the rows: the window keeps its rows, so its gradient."""
    out = []
    for ms in window:
        if min(len(b) for b in ms) < 2:  # a one-row batch cannot be cut
            out.append(ms)
            continue
        out += [[b[: (len(b) + 1) // 2] for b in ms], [b[(len(b) + 1) // 2 :] for b in ms]]
    return out


def train_epoch(
    model: torch.nn.Module,
    steps: list[list[np.ndarray]],
    data: Ragged,
    labels: np.ndarray,
    optimizer: torch.optim.Optimizer,
    scheduler,
    scaler: torch.amp.GradScaler,
    cfg: TrainConfig,
    precision: str,
    device: torch.device,
    *,
    pad_id: int,
    rank: int = 0,
    world: int = 1,
    state: StepState | None = None,
    after_window: Callable[[StepState], bool] | None = None,
    progress: bool = True,
    desc: str = "train",
    max_bad_steps: int = 20,
) -> StepState:
    """Train over the micro-steps, one optimizer step per accumulation window.

    `after_window(state)` runs after each optimizer step; it returns True to stop early (an interrupt),
    leaving `state.window` at the number of windows completed.
    """
    model.train()
    state = state or StepState()
    multiple = 8 if precision != "fp32" else 1
    # each window as its list of micro-steps; an out-of-memory error halves them from that window on
    windows = [[steps[k] for k in win] for win in accumulation_windows(len(steps), cfg.accumulation)]
    for _ in range(state.halvings):  # a resumed epoch replays the halvings it had made
        windows = [halve_window(win) for win in windows]
    ddp = world > 1
    bar = progress_bar(
        total=len(windows),
        initial=state.window,
        desc=desc,
        unit="step",
        disable=not progress,
        dynamic_ncols=True,
        leave=False,
    )
    start, seen = time.perf_counter(), 0

    def run_window(window: list[list[np.ndarray]]) -> tuple[float, int]:
        """Forward and backward over one window's micro-steps: (summed loss, examples) on this rank."""
        loss_total, examples = 0.0, 0
        # examples in this whole window on all ranks: every rank knows the plan, so no communication
        n_window = sum(len(b) for ms in window for b in ms)
        for j, ms in enumerate(window):
            batch = to_device(collate(data, ms[rank], pad_id, multiple, labels), device)
            last = j == len(window) - 1
            # DDP all-reduces in backward; inside no_sync it only accumulates locally, so the gradients
            # cross the network once per window (forward and backward both inside the context)
            sync = model.no_sync() if ddp and not last else contextlib.nullcontext()
            with sync:
                with autocast(precision, device):
                    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
                # fp32 loss from logits (never sigmoid then BCE: it saturates and underflows in half precision)
                loss_sum = F.binary_cross_entropy_with_logits(
                    logits.float().squeeze(-1), batch["labels"], reduction="sum"
                )
                # sum / examples in the window makes the window's gradient the mean over all its examples;
                # x world undoes DDP's averaging over ranks, which would otherwise divide a second time
                scaler.scale(loss_sum * (world / n_window)).backward()
            loss_total += float(loss_sum.detach())
            examples += len(ms[rank])
        return loss_total, examples

    for w in range(state.window, len(windows)):
        window_start = time.perf_counter()
        while True:
            try:
                loss_w, examples_w = run_window(windows[w])
                # the step is inside the retry too: the dense embedding gradient and, at the first step, the
                # AdamW moments are allocated here. AdamW allocates its state before it updates any weight,
                # so an out-of-memory error here leaves the weights as they were
                stepped = optimizer_step(model, optimizer, scaler, cfg.max_grad_norm)
                break
            except torch.OutOfMemoryError:
                # one process alone can redo its window; under DDP the other ranks would wait forever
                if ddp or all(len(b) < 2 for ms in windows[w] for b in ms):
                    raise
            # here, outside the except block, the failed window's tensors have been released
            optimizer.zero_grad(set_to_none=True)  # drop the half-accumulated window
            reset_scaler(scaler)  # a step that failed after unscale_ must not count as unscaled
            if device.type == "cuda":
                torch.cuda.empty_cache()
            windows[w:] = [halve_window(win) for win in windows[w:]]
            state.halvings += 1
            micro = max(len(b) for ms in windows[w] for b in ms)
            print(
                f"{desc}: out of memory at step {w + 1}; micro-batches halved to {micro} rows and accumulation "
                f"doubled (same effective batch); redoing the step",
                file=sys.stderr,
            )
        state.loss_sum += loss_w
        state.examples += examples_w
        seen += examples_w
        optimizer.zero_grad(set_to_none=True)
        if stepped:
            scheduler.step()  # the schedule counts optimizer steps that happened
            state.bad_steps = 0
        else:
            state.bad_steps += 1
            state.skipped += 1
            if state.bad_steps >= max_bad_steps:
                raise NonFiniteError(
                    f"{desc}: non-finite loss or gradients for {state.bad_steps} optimizer steps in a row "
                    f"(at step {w + 1} of {len(windows)}). Try train.precision=bf16, a lower train.lr, "
                    f"or a smaller train.max_grad_norm; the last good state is kept"
                )
        state.window = w + 1
        state.seconds += time.perf_counter() - window_start
        if progress:
            bar.update(1)
            bar.set_postfix(
                loss=f"{state.loss_sum / max(state.examples, 1):.4f}",
                ex_s=f"{seen / (time.perf_counter() - start):.0f}",
            )
        if after_window is not None and after_window(state):
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
    multiple = 8 if precision != "fp32" else 1
    for s in progress_bar(range(0, len(order), batch_size), desc=desc, unit="batch", disable=not progress, leave=False):
        pos = order[s : s + batch_size]
        batch = to_device(collate(data, idx[pos], pad_id, multiple), device)
        logits = predict_logits(model, batch, precision, device)
        out[pos] = torch.sigmoid(logits.squeeze(-1)).cpu().numpy()
    return out


def predict_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor], precision: str, device: torch.device):
    """fp32 logits: the encoder under autocast, the classification head outside it.

    A bf16 logit keeps 8 bits of mantissa, so close scores round to the same value and tie; AUC sees only
    the order, and a model whose scores are still close (early epochs) scores exactly 0.5.
    """
    head = getattr(model, "classifier", None)
    # the RoBERTa family's head reads the first token of the last hidden state; other heads (BERT's reads
    # the pooler's output) go through the model's own forward
    if precision == "fp32" or not type(head).__name__.endswith("RobertaClassificationHead"):
        with autocast(precision, device):
            return model(**batch).logits.float()
    with autocast(precision, device):
        hidden = model.base_model(**batch)[0]  # what the model's own forward feeds its head
    return head(hidden.float()).float()
