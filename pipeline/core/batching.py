"""Micro-batches: grouped by length, the same number on every rank, cut into accumulation windows, padded.

Two ways to cut them (`epoch_batches`): `train.micro_batch` rows each (`length_grouped_batches`), or, under
`train.token_budget`, as many rows of similar length as fit a padded size (`token_budget_batches`): short
comments come many to a batch and long ones few, so a long comment can be read whole without pricing every batch
at the longest (`worst_batch`: the shapes the memory plan prices).

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
    return _pad_to_world(batches, world)


def _pad_to_world(batches: list[np.ndarray], world: int) -> list[np.ndarray]:
    """The list padded by repeating its first batches to a multiple of `world`."""
    if len(batches) % world:  # cycling: fewer batches than ranks still gives every rank one
        batches += [batches[i % len(batches)] for i in range(world - len(batches) % world)]
    return batches


def pad_multiple(precision: str) -> int:
    """What `collate` rounds a batch's width up to: tensor cores like widths that are multiples of 8."""
    return 8 if precision != "fp32" else 1


def padded_width(length, multiple: int):
    """A row's (or an array of rows') width once `collate` pads it: rounded up to `multiple`."""
    return -(-length // multiple) * multiple


def budget_rows(width: int, micro_batch: int, token_budget: int) -> int:
    """Rows a micro-batch of padded `width` holds: as many as fit the budget, at most micro_batch, at least one (a
    row longer than the budget is read whole, alone)."""
    return max(1, min(micro_batch, token_budget // width))


def token_budget_batches(
    lengths: np.ndarray, micro_batch: int, token_budget: int, multiple: int, seed: int, epoch: int, world: int = 1
) -> list[np.ndarray]:
    """Micro-batches of at most `token_budget` padded tokens (rows x their longest row, rounded as `collate`
    rounds) and at most `micro_batch` rows, in a new random order each epoch.

    Rows are sorted by padded width, longest first, rows of one width in a random order; each batch takes its
    first row's width and as many rows as fit (`budget_rows`); the batches are then shuffled and padded to a
    multiple of `world` as `length_grouped_batches` pads them. The count depends on the widths alone, so every
    epoch has as many micro-batches, as the schedule and the resume state's step counts assume.
    """
    rng = np.random.default_rng([seed, epoch])
    widths = padded_width(lengths, multiple)
    # lexsort's last key sorts first: width descending, then a random tie-break inside each width
    order = np.lexsort((rng.permutation(len(lengths)), -widths))
    batches, start = [], 0
    while start < len(order):
        rows = budget_rows(int(widths[order[start]]), micro_batch, token_budget)  # the first row is the widest
        batches.append(order[start : start + rows])
        start += rows
    batches = [batches[i] for i in rng.permutation(len(batches))]
    return _pad_to_world(batches, world)


def epoch_batches(lengths: np.ndarray, train, multiple: int, seed: int, epoch: int, world: int = 1):
    """An epoch's micro-batches as `train` (a TrainConfig) cuts them: by its token budget where one is set, else
    micro_batch rows each."""
    if train.token_budget > 0:
        return token_budget_batches(lengths, train.micro_batch, train.token_budget, multiple, seed, epoch, world)
    return length_grouped_batches(lengths, train.micro_batch, seed, epoch, world)


def worst_batch(micro_batch: int, token_budget: int, max_length: int, multiple: int = 8) -> tuple[int, int]:
    """(width, tokens) that price a micro-batch's memory: the longest padded width, and the most padded tokens any
    batch holds. Activations grow with the tokens, attention's scores with tokens x width (each row's scores are
    width^2), so a batch of these two bounds every batch the budget cuts. Without a budget: micro_batch rows at
    max_length."""
    width = padded_width(max_length, multiple)
    if token_budget <= 0:
        return width, micro_batch * width
    # a row longer than the budget is read alone (width tokens); else a batch of rows of w holds at most the budget,
    # and never more than micro_batch rows of the longest
    return width, max(width, min(token_budget, micro_batch * width))


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
    width = padded_width(max(len(r) for r in rows), multiple)
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
