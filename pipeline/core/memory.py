"""Peak memory, measured one way for every reader, and auto-fit: the largest micro-batch under `train.max_memory_gb`.

Peak memory: on CUDA the allocator's peak (torch.cuda.max_memory_allocated) since `reset_peak`; on CPU the
process's peak resident memory (VmHWM) since `reset_peak`, which Linux resets through /proc/self/clear_refs
(where it cannot, the peak since the process started). Training's metrics, auto-fit and `make bench` all
read it here.

A probe is one whole optimizer step as training runs it, on the model as training wraps it (DDP with
its gradient buckets): forward and backward at the full sequence length, then the densified embedding
gradient, clipping and the optimizer step, which allocates the AdamW moments. The probe's optimizer has
a learning rate of 0, so its step leaves the weights exactly as they were; it is dropped afterwards.
Under DDP the probe runs inside no_sync() (no gradient all-reduce) on a model wrapped with
broadcast_buffers=False (no buffer broadcast at its forward: pipeline.core.foldmodel.wrap), so it issues
no collective, and a rank that probes more often than another, or runs out of memory, cannot leave the
others waiting.

On CUDA a step fits where its peak stays under the card's memory less a margin (1 GiB or 7% of the card:
pipeline.core.headroom) for what the allocator's peak does not count. The fit is measured: the allocator is
capped at max_memory_gb (for the whole run, so the cap
holds like a smaller card) and micro-batches are tried from the largest down; the first that neither
runs out of memory nor passes the cap wins.

On CPU there is no allocator cap to run into, so the fit is an estimate from measurements: peak
resident memory of a probe at micro-batch 1 and 2 (Linux resets the peak through /proc/self/clear_refs),
extrapolated linearly. It is printed as an estimate.
"""

from __future__ import annotations

import contextlib
import gc
import re
import resource
import sys
import time
from pathlib import Path

import torch

from pipeline.core import batching, headroom, optim
from pipeline.core import precision as precision_mod
from pipeline.losses import LOSSES
from pipeline.schema import TrainConfig

GB = 2**30
MB = 2**20


def rss_bytes(field: str = "VmRSS") -> int:
    """The process's resident memory (VmRSS) or its peak since the last reset (VmHWM), from /proc."""
    status = Path("/proc/self/status")
    if not status.exists():  # not Linux: only the peak since the process started is known
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, kilobytes elsewhere
    return int(re.search(rf"{field}:\s+(\d+)", status.read_text()).group(1)) * 1024


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current resident memory (Linux >= 4.0); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def reset_peak(device: torch.device) -> None:
    """Start a new peak: what `peak_bytes` reports from here on."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        reset_peak_rss()


def peak_bytes(device: torch.device) -> int:
    """The peak since `reset_peak`: allocated GPU memory on CUDA, resident memory on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return rss_bytes("VmHWM")


def current_bytes(device: torch.device) -> int:
    """What is held now, measured as `peak_bytes` measures a peak."""
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device)
    return rss_bytes()


def peak_memory_mb(device: torch.device) -> float:
    return peak_bytes(device) / MB


def release(device: torch.device) -> None:
    """What a finished fold held, given back before the next fold's memory probe: its optimizer (6.7 GB of AdamW
    moments for XLM-R large) and model sit in reference cycles, freed only when the collector next runs a full
    collection (tested: without this, the optimizer is alive at the next fold's start); then the CUDA allocator's
    cache goes back to the device."""
    gc.collect()  # first: empty_cache can only give back blocks no tensor holds any more
    if device.type == "cuda":
        torch.cuda.empty_cache()


def divisors_down(n: int) -> list[int]:
    """Micro-batch candidates: the divisors of the effective batch, largest first (accumulation stays whole)."""
    return [m for m in range(n, 0, -1) if n % m == 0]


def probe(net, model, micro: int, seq_len: int, precision: str, device: torch.device, train: TrainConfig) -> None:
    """One whole training step at full length on `net` (the model, or DDP around it); weights unchanged."""
    vocab = model.get_input_embeddings().num_embeddings
    ids = torch.randint(5, vocab, (micro, seq_len), device=device)
    net.train()
    opt, _ = optim.make_training(model, train, device, total_steps=1)
    for group in opt.param_groups:
        group["lr"] = 0.0  # AdamW's update and decay are both x lr: the step allocates its state, moves nothing
    scaler = precision_mod.make_scaler(precision, device)
    sync = net.no_sync() if hasattr(net, "no_sync") else contextlib.nullcontext()
    try:
        with sync:
            with precision_mod.autocast(precision, device):
                logits = net(input_ids=ids, attention_mask=torch.ones_like(ids))
            loss = LOSSES[train.loss].summed(logits, torch.zeros(micro, device=device)) / micro
            scaler.scale(loss).backward()
        optim.optimizer_step(model, opt, scaler, max_grad_norm=1.0)
    finally:
        model.zero_grad(set_to_none=True)
        opt.state.clear()


def step_rates(net, model, micro: int, seq_len: int, precisions: tuple[str, ...], device, train: TrainConfig) -> dict:
    """{precision: examples a second} of one whole training step at full length in each (after an untimed one,
    which pays for first-call allocations and kernel choices); weights unchanged, random numbers untouched."""
    rates = {}
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for precision in precisions:
            probe(net, model, micro, seq_len, precision, device, train)
            start = time.perf_counter()
            probe(net, model, micro, seq_len, precision, device, train)
            rates[precision] = round(micro / (time.perf_counter() - start), 2)
    return rates


def probed_rows(micro: int, seq_len: int, precision: str, train: TrainConfig) -> int:
    """Rows of the step that prices a micro-batch of `micro` at `seq_len` tokens: `micro`, or under a token budget
    as many of the longest rows as the budget holds (their attention is the largest a batch of it needs)."""
    if train.token_budget <= 0:
        return micro
    width = batching.padded_width(seq_len, batching.pad_multiple(precision))
    return batching.budget_rows(width, micro, train.token_budget)


def fit_micro_batch(
    model,
    per_device_batch: int,
    seq_len: int,
    max_memory_gb: float,
    precision: str,
    device,
    train: TrainConfig | None = None,
    net=None,
) -> tuple[int, str]:
    """(micro-batch, how it was decided): the largest divisor of per_device_batch that fits the cap.

    `net` is the model as training runs it (DDP-wrapped under torchrun); by default the model itself. `train`: the
    settings whose optimizer and loss the probe steps (by default, the defaults').
    """
    net = model if net is None else net
    train = TrainConfig() if train is None else train
    cap = int(max_memory_gb * GB)
    # dropout in the probes must not shift the training run's random numbers
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if device.type == "cuda":
            return _fit_cuda(net, model, per_device_batch, seq_len, cap, precision, device, train)
        return _fit_cpu(net, model, per_device_batch, seq_len, cap, precision, device, train)


def fits(net, model, micro: int, seq_len: int, max_memory_gb: float, precision: str, device, train: TrainConfig):
    """(whether one training step at `micro` fits, how that was decided): measured on CUDA under the cap
    (max_memory_gb, or the whole card where it is 0, less the card's margin either way: cuda_cap), estimated
    from the micro-batch 1 and 2 probes on CPU."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        if device.type == "cuda":
            cap = cuda_cap(max_memory_gb, device)
            peak = cuda_peak(net, model, micro, seq_len, precision, device, train)
            measured = "out of memory" if peak is None else f"peak {peak / GB:.1f} GB"
            return peak is not None and peak <= cap, f"{measured} of {cap / GB:.1f} GB on {device}"
        cap = int(max_memory_gb * GB)
        if not reset_peak_rss():
            return False, "cpu: the peak resident memory cannot be reset here, so nothing can be measured"
        estimate = cpu_estimate(*cpu_probe_peaks(net, model, seq_len, precision, device, train), micro)
        return estimate <= cap, f"cpu estimate {estimate / GB:.2f} GB of {cap / GB:.2f} GB"


def cuda_cap(max_memory_gb: float, device) -> int:
    """What a step's allocator peak may reach on `device`: max_memory_gb (the whole card where it is 0), and never
    more than the card less its margin for the CUDA context, NCCL and fragmentation (pipeline.core.headroom)."""
    total = torch.cuda.get_device_properties(device).total_memory
    return int(min(max_memory_gb * GB or total, headroom.usable_bytes(total)))


def cuda_peak(net, model, micro: int, seq_len: int, precision: str, device, train: TrainConfig) -> int | None:
    """The allocator's peak of one probe step at `micro`, or None where it ran out of memory."""
    try:
        reset_peak(device)
        probe(net, model, micro, seq_len, precision, device, train)
        return peak_bytes(device)
    except torch.OutOfMemoryError:
        return None
    finally:
        torch.cuda.empty_cache()


def _fit_cuda(net, model, batch, seq_len, cap, precision, device, train) -> tuple[int, str]:
    total = torch.cuda.get_device_properties(device).total_memory
    cap = min(cap, cuda_cap(0, device))  # the card's margin holds under any max_memory_gb
    # the cap becomes the allocator's limit: a probe that would pass it fails fast, as on a smaller card
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), device)
    for micro in divisors_down(batch):  # under a token budget a micro-batch's worst step holds fewer rows
        peak = cuda_peak(net, model, probed_rows(micro, seq_len, precision, train), seq_len, precision, device, train)
        if peak is not None and peak <= cap:
            return micro, f"measured on {device}: whole-step peak {peak / GB:.1f} GB, cap {cap / GB:.1f} GB"
    return 1, f"nothing fits under {cap / GB:.1f} GB on {device}; micro-batch 1 (expect out-of-memory retries)"


def cpu_estimate(base: int, peak1: int, peak2: int, micro: int) -> int:
    """Peak resident bytes at `micro`: the process before the probes plus a linear fit of the probes' peaks."""
    per_example = max(peak2 - peak1, 0)
    return base + peak1 + (micro - 1) * per_example


def cpu_probe_peaks(net, model, seq_len: int, precision: str, device, train: TrainConfig) -> tuple[int, int, int]:
    """(resident bytes before, peak above it at micro-batch 1, at 2); the probes' memory is measured whole."""
    base = current_bytes(device)
    peaks = []
    for micro in (1, 2):
        reset_peak(device)
        probe(net, model, micro, seq_len, precision, device, train)
        # memory freed by the first probe may stay resident; the second reuses it, so both peaks count from base
        peaks.append(peak_bytes(device) - base)
    return base, peaks[0], peaks[1]


def _fit_cpu(net, model, batch, seq_len, cap, precision, device, train) -> tuple[int, str]:
    if not reset_peak_rss():
        return 1, "cpu: the peak resident memory cannot be reset here, so nothing can be measured; micro-batch 1"
    base, peak1, peak2 = cpu_probe_peaks(net, model, seq_len, precision, device, train)
    for micro in divisors_down(batch):
        estimate = cpu_estimate(base, peak1, peak2, probed_rows(micro, seq_len, precision, train))
        if estimate <= cap:
            return micro, (
                f"cpu estimate (no allocator cap on CPU): {estimate / GB:.2f} GB of {cap / GB:.2f} GB "
                f"from whole-step probes at micro-batch 1 and 2 ({(peak2 - peak1) / 2**20:.0f} MB per example)"
            )
    return 1, f"cpu estimate: even micro-batch 1 needs more than {cap / GB:.2f} GB"
