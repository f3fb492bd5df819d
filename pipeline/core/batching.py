"""Micro-batches: grouped by length, the same number on every rank, cut into accumulation windows, padded.

A micro-step is one micro-batch per rank; a window is `accumulation` micro-steps, the last window of an
epoch shorter when the micro-steps do not divide evenly. An out-of-memory error halves a window's
micro-batches (`halve_window`): the same rows, so the same gradient, in twice as many micro-steps.
"""

from __future__ import annotations

import numpy as np
import torch

from pipeline.inputs.tokens import Ragged


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


def halve_window(window: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """Each micro-step of a window cut into two of half the rows: the window keeps its rows, so its gradient."""
    out = []
    for ms in window:
        if min(len(b) for b in ms) < 2:  # a one-row batch cannot be cut
            out.append(ms)
            continue
        out += [[b[: (len(b) + 1) // 2] for b in ms], [b[(len(b) + 1) // 2 :] for b in ms]]
    return out
