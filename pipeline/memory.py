"""Memory measurement and auto-fit: the largest micro-batch that fits under `train.max_memory_gb`.

On CUDA the fit is measured: the allocator is capped at max_memory_gb (for the whole run, so the cap
holds like a smaller card), a ballast the size of the optimizer state that does not exist yet is
held, and micro-batches are tried from the largest down with a real forward and backward at the
full sequence length; the first that neither runs out of memory nor passes the cap wins.

On CPU there is no allocator cap to run into, so the fit is an estimate from measurements: peak
resident memory of a forward/backward at micro-batch 1 and 2 (Linux resets the peak through
/proc/self/clear_refs), extrapolated linearly, plus the optimizer state computed from the parameter
count. It is printed as an estimate.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.nn.functional as F

from pipeline import loop

GB = 2**30


def rss_bytes(field: str = "VmRSS") -> int:
    """The process's resident memory (VmRSS) or its peak since the last reset (VmHWM), from /proc."""
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"{field}:\s+(\d+)", text).group(1)) * 1024


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current resident memory (Linux >= 4.0); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def optimizer_state_bytes(model: torch.nn.Module, optimizer: str) -> int:
    """AdamW keeps two fp32 moments per trainable parameter (8 bytes); 8-bit AdamW two bytes."""
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return n * (2 if optimizer == "adamw8bit" else 8)


def divisors_down(n: int) -> list[int]:
    """Micro-batch candidates: the divisors of the effective batch, largest first (accumulation stays whole)."""
    return [m for m in range(n, 0, -1) if n % m == 0]


def probe(model, micro: int, seq_len: int, vocab: int, precision: str, device: torch.device) -> None:
    """One forward and backward at full length, as training runs it; the gradients are dropped."""
    ids = torch.randint(5, vocab, (micro, seq_len), device=device)
    model.train()
    try:
        with loop.autocast(precision, device):
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        F.binary_cross_entropy_with_logits(logits.float().squeeze(-1), torch.zeros(micro, device=device)).backward()
    finally:
        model.zero_grad(set_to_none=True)


def fit_micro_batch(
    model, per_device_batch: int, seq_len: int, max_memory_gb: float, precision: str, device, optimizer: str = "adamw"
) -> tuple[int, str]:
    """(micro-batch, how it was decided): the largest divisor of per_device_batch that fits the cap."""
    vocab = model.get_input_embeddings().num_embeddings
    cap = int(max_memory_gb * GB)
    state = optimizer_state_bytes(model, optimizer)
    # dropout in the probes must not shift the training run's random numbers
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if device.type == "cuda":
            return _fit_cuda(model, per_device_batch, seq_len, cap, state, vocab, precision, device)
        return _fit_cpu(model, per_device_batch, seq_len, cap, state, vocab, precision, device)


def _fit_cuda(model, batch, seq_len, cap, state, vocab, precision, device) -> tuple[int, str]:
    total = torch.cuda.get_device_properties(device).total_memory
    # the cap becomes the allocator's limit: a probe that would pass it fails fast, as on a smaller card
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), device)
    for micro in divisors_down(batch):
        ballast = None
        try:
            ballast = torch.empty(state, dtype=torch.uint8, device=device)  # the optimizer state to come
            torch.cuda.reset_peak_memory_stats(device)
            probe(model, micro, seq_len, vocab, precision, device)
            peak = torch.cuda.max_memory_allocated(device)
        except torch.OutOfMemoryError:
            peak = None
        finally:
            del ballast
            torch.cuda.empty_cache()
        if peak is not None and peak <= cap:
            return micro, f"measured on {device}: peak {peak / GB:.1f} GB with optimizer state, cap {cap / GB:.1f} GB"
    return 1, f"nothing fits under {cap / GB:.1f} GB on {device}; micro-batch 1 (expect out-of-memory retries)"


def _fit_cpu(model, batch, seq_len, cap, state, vocab, precision, device) -> tuple[int, str]:
    if not reset_peak_rss():
        return 1, "cpu: the peak resident memory cannot be reset here, so nothing can be measured; micro-batch 1"
    peaks = []
    for micro in (1, 2):
        before = rss_bytes()
        reset_peak_rss()
        probe(model, micro, seq_len, vocab, precision, device)
        peaks.append(rss_bytes("VmHWM") - before)
    per_example = max(peaks[1] - peaks[0], 0)
    fixed = rss_bytes() + state  # weights and the process now, plus the optimizer state to come
    for micro in divisors_down(batch):
        estimate = fixed + peaks[0] + (micro - 1) * per_example
        if estimate <= cap:
            return micro, (
                f"cpu estimate (no allocator cap on CPU): {estimate / GB:.1f} GB of {cap / GB:.1f} GB "
                f"from probes at micro-batch 1 and 2 ({per_example / 2**20:.0f} MB per example)"
            )
    return 1, f"cpu estimate: even micro-batch 1 needs more than {cap / GB:.1f} GB"
