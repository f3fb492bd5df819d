"""Mixed precision: which one a device gets, the autocast around the forward, and fp16's GradScaler.

bf16 only where the device computes it natively (CUDA compute capability 8.0+, or a CPU with AVX512-BF16
or AMX); else fp16 with a GradScaler on CUDA and fp32 on CPU. On a CPU with native bf16, `auto` is decided at
a fold's start by one training step in each (pipeline.core.memory.step_rates): the faster one trains, and the
experiment's other folds take the same rates (shared_choice). The
weights stay fp32 whatever runs under autocast, and the loss is computed in fp32 from the logits.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from pathlib import Path

import torch

from pipeline import files
from pipeline.errors import PipelineError

PRECISIONS = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


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


def measured_on(name: str, device: torch.device) -> bool:
    """Whether `auto` is decided by measuring a step both ways (`choose`) rather than by the device alone: on a CPU
    with native bf16, which without AMX can be slower than fp32 (AVX512-BF16 speeds the matrix products only)."""
    return name == "auto" and device.type == "cpu" and cpu_has_bf16()


def choose(rates: dict[str, float]) -> str:
    """The precision of the highest rate (examples a second); fp32 on a tie, since it rounds nothing."""
    return max(sorted(rates, key=lambda p: p != "fp32"), key=lambda p: rates[p])


def choice_note(rates: dict[str, float], micro: int, seq_len: int, reused: bool = False) -> str:
    """The header's words for a measured choice: which, and both rates (`reused`: an earlier fold's)."""
    both = ", ".join(f"{p} {r:.1f} ex/s" for p, r in sorted(rates.items(), key=lambda kv: -kv[1]))
    note = f"auto, measured faster: {both}, one step each at micro-batch {micro} x {seq_len} tokens"
    return note + (", as this experiment's first fold measured (precision.json)" if reused else "")


def cpu_name() -> str:
    """The CPU's model name, which a measured choice holds for."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def choice_key(model: str, micro: int, seq_len: int, optimizer: str) -> dict:
    """What measured rates depend on: the model (its settings' digest), the step's shapes, the optimizer, the CPU
    and the threads a process computes with."""
    return {"model": model, "micro_batch": micro, "max_length": seq_len, "optimizer": optimizer, "cpu": cpu_name(),
            "threads": torch.get_num_threads()}  # fmt: skip


def shared_choice(path: Path, key: dict, measure: Callable[[], dict[str, float]]) -> tuple[dict[str, float], bool]:
    """The rates `auto` chooses by, measured once an experiment: the first fold to get here measures and writes
    {key, rates} to `path`; the others, side by side or in a later run, read them while the key (the model, the
    shapes, the optimizer, the CPU, the threads) is theirs, and say so (True). Two rates a few percent apart flip
    with noise: measured a fold each, one run's folds (or a rerun) would train in two precisions. The lock makes
    a fold started beside the first wait for its measurement rather than take one of its own."""
    with files.waiting_lock(path.with_name(path.name + ".lock")):
        try:
            saved = files.read_json(path)
        except (OSError, ValueError):
            saved = None
        if isinstance(saved, dict) and saved.get("key") == key and isinstance(saved.get("rates"), dict):
            return {str(p): float(r) for p, r in saved["rates"].items()}, True
        rates = measure()
        files.write_json(path, {"key": key, "rates": rates})
        return rates, False


def autocast(precision: str, device: torch.device):
    dtype = PRECISIONS[precision]
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def make_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    # only fp16 underflows: its gradients need scaling up before backward and down before the step
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")
