"""The hardware's spec peak a bench row's model FLOP/s is read against, where the device's model makes it known.

The bench measures one more limit itself (runner.matmul_peak: the fastest of ten 2048 x 2048 products in
this run), which is a share of this machine's throughput in one large product, not of its hardware peak.
A spec peak is the maker's dense figure (no 2:4 sparsity) for the row's precision, looked up by the exact
name torch gives the GPU: a name not in SPEC_TFLOPS, a precision the GPU has no figure for, or any CPU
reads as unknown. A CPU's peak depends on its SKU's cores, vector and AMX units and the clock it holds
under them, which neither its model name (a virtual machine's often hides the SKU) nor torch gives.
"""

from __future__ import annotations

# TFLOP/s by precision, dense. fp32 is the CUDA cores' rate: torch leaves TF32 off for matmuls by default.
# Half precision is the tensor cores' rate with fp32 accumulation, what autocast's matmuls use.
SPEC_TFLOPS: dict[str, dict[str, float]] = {
    "Tesla T4": {"fp32": 8.1, "fp16": 65.0},  # NVIDIA T4 datasheet (fp16 mixed precision 65)
    "Tesla P100-PCIE-16GB": {"fp32": 9.3, "fp16": 18.7},  # Tesla P100 PCIe datasheet (no tensor cores)
    "Tesla V100-SXM2-16GB": {"fp32": 15.7, "fp16": 125.0},  # Tesla V100 datasheet, SXM2
    "Tesla V100-SXM2-32GB": {"fp32": 15.7, "fp16": 125.0},
    "Tesla V100-PCIE-16GB": {"fp32": 14.0, "fp16": 112.0},  # Tesla V100 datasheet, PCIe
    "Tesla V100-PCIE-32GB": {"fp32": 14.0, "fp16": 112.0},
    "NVIDIA A100-SXM4-40GB": {"fp32": 19.5, "bf16": 312.0, "fp16": 312.0},  # A100 datasheet (624 sparse)
    "NVIDIA A100-SXM4-80GB": {"fp32": 19.5, "bf16": 312.0, "fp16": 312.0},
    "NVIDIA A100-PCIE-40GB": {"fp32": 19.5, "bf16": 312.0, "fp16": 312.0},
    "NVIDIA A100 80GB PCIe": {"fp32": 19.5, "bf16": 312.0, "fp16": 312.0},
    "NVIDIA H100 80GB HBM3": {"fp32": 66.9, "bf16": 989.4, "fp16": 989.4},  # H100 SXM5 datasheet (1,979 sparse)
    "NVIDIA H100 PCIe": {"fp32": 51.2, "bf16": 756.0, "fp16": 756.0},  # H100 PCIe datasheet (1,513 sparse)
    "NVIDIA H200": {"fp32": 67.0, "bf16": 989.0, "fp16": 989.0},  # H200 SXM datasheet (1,979 sparse)
    "NVIDIA L4": {"fp32": 30.3, "bf16": 121.0, "fp16": 121.0},  # L4 datasheet (242 sparse)
    "NVIDIA GeForce RTX 3090": {"fp32": 35.6, "bf16": 71.0, "fp16": 71.0},  # GA102 whitepaper, fp32 accumulate
    "NVIDIA GeForce RTX 4090": {"fp32": 82.6, "bf16": 165.2, "fp16": 165.2},  # Ada whitepaper, fp32 accumulate
}


def device_name(device) -> str:
    """The GPU's name as torch gives it, or the CPU's model name as the kernel gives it."""
    import platform

    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    except OSError:
        names = []
    return names[0] if names else platform.processor() or "an unnamed CPU"


def spec_peaks(name: str, cuda: bool) -> dict:
    """{device, peaks: FLOP/s by precision (those the maker gives), why: what stands in for an unknown one}."""
    known = SPEC_TFLOPS.get(name, {}) if cuda else {}
    if known:
        why = f"no {name} figure for this precision"
    elif cuda:
        why = f"{name} is not in the bench's table of spec peaks (pipeline/benchmark/peaks.py)"
    else:
        why = f"a CPU's spec peak is not known from its model name ({name})"
    return {"device": name, "peaks": {p: t * 1e12 for p, t in known.items()}, "why": why}
