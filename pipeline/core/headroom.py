"""The margin a GPU keeps beyond a training step's measured (or planned) peak: standard library only, so the Kaggle
plan reads it without torch.

The allocator's peak counts tensors only. Beside them the card holds the CUDA context (0.3 to 0.5 GB), NCCL's
buffers under DDP (hundreds of MB) and the caching allocator's fragmentation, which grows over a fold as batches
of other lengths come and go. A step whose peak reaches the card's whole memory therefore runs out of memory
later in the fold, and under DDP that stops the fold (pipeline.core.loop halves only one process's window).
The processes the pipeline starts get expandable segments (alloc_env), which keeps the fragmentation small.
"""

from __future__ import annotations

GIB = 2**30
# the margin: 1 GiB or 7% of the card, whichever is more (1.1 GB of a T4's 15.8 GB); an assumption from the
# context and NCCL's sizes above, kept whole so that a step on the edge is refused, not left to fail mid-fold
HEADROOM_MIN_BYTES = 1 * GIB
HEADROOM_SHARE = 0.07


def usable_bytes(total: float) -> float:
    """Of a card of `total` bytes, what a training step's peak may reach: the rest is the margin."""
    return total - max(HEADROOM_MIN_BYTES, HEADROOM_SHARE * total)


ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"
# expandable segments: the caching allocator grows one mapped range instead of keeping fixed blocks, so memory
# freed by a batch of one length serves the next of another: less fragmentation over a fold of varied lengths
EXPANDABLE = "expandable_segments:True"


def alloc_env(env: dict[str, str]) -> dict[str, str]:
    """The allocator setting for the processes the pipeline starts: {} where the user set their own in `env`."""
    return {} if ALLOC_CONF_ENV in env else {ALLOC_CONF_ENV: EXPANDABLE}
