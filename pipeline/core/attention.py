"""Which attention kernel the encoder runs (`model.attn_implementation`), checked where it cannot run.

`auto` leaves transformers its own choice: PyTorch's scaled_dot_product_attention (`sdpa`) for every family that
has it (XLM-R, BERT, ModernBERT), `eager` (the matrix products written out) for the others. `flash_attention_2`
(the flash_attn package) is asked for by name: it runs only on a CUDA GPU of compute capability 8.0 or more
(Ampere: A100, A10, RTX 30xx and newer; a Kaggle T4 is 7.5) and computes in fp16 or bf16, which autocast gives it.

All three compute the same exact attention, softmax(q k^T / sqrt(d)) v over the unmasked keys; they differ in
the order of their sums, so their results differ in rounding alone, as checkpointing's and another GPU's do. The
setting is therefore no part of a fold's fingerprint: a fold trained with sdpa on a T4 counts, resumes and predicts
with flash_attention_2 on an A100, and the reverse.
"""

from __future__ import annotations

import importlib.util

import torch

from pipeline.errors import PipelineError

FLASH = "flash_attention_2"
FLASH_CAPABILITY = (8, 0)  # flash_attn 2's kernels: Ampere and newer


class AttentionError(PipelineError):
    pass


def implementation(choice: str, device: torch.device | None) -> str | None:
    """transformers' attn_implementation for `choice` on `device` (None: `auto`, transformers' own), or one line
    saying why it cannot run there."""
    if choice == "auto":
        return None
    if choice != FLASH:
        return choice
    fix = "use model.attn_implementation=sdpa (or auto)"
    if device is None or device.type != "cuda":
        raise AttentionError(f"model.attn_implementation={FLASH} runs only on a CUDA GPU, not on the "
                             f"{device.type if device is not None else 'cpu'}; {fix}")  # fmt: skip
    capability = torch.cuda.get_device_capability(device)
    if tuple(capability) < FLASH_CAPABILITY:
        raise AttentionError(f"model.attn_implementation={FLASH} needs a GPU of compute capability 8.0 or more "
                             f"(Ampere); {torch.cuda.get_device_name(device)} is {capability[0]}.{capability[1]}: "
                             f"{fix}")  # fmt: skip
    if importlib.util.find_spec("flash_attn") is None:  # else transformers' ImportError, mid-load, as a traceback
        raise AttentionError(f"model.attn_implementation={FLASH} needs the flash_attn package, which is not "
                             f"installed here; {fix}")  # fmt: skip
    return choice


def apply(encoder: torch.nn.Module, choice: str, device: torch.device | None) -> None:
    """Switch `encoder` (a transformers model, or peft's over one) to `choice`'s attention; `auto` keeps its own."""
    wanted = implementation(choice, device)
    if wanted is None or encoder.config._attn_implementation == wanted:
        return
    encoder.set_attn_implementation(wanted)  # every layer's attention reads the config's choice at its call
