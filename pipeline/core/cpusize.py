"""A pretrained model too large for a CPU that `train.device: auto` fell back to, refused before any work.

`auto` means CUDA when torch sees it, else the CPU; a torch without CUDA (a CPU wheel, a driver that does not match)
would then train XLM-R large on the CPU for days with nothing but `device cpu` in the banner. The size is the
encoder's parameter count, computed from its config.json on the meta device: nothing is read or allocated.
"""

from __future__ import annotations

import torch

from pipeline import validity
from pipeline.core import modeling
from pipeline.errors import PipelineError
from pipeline.schema import Config

# multilingual-e5-small (118M with its full vocabulary) still trains on a CPU under `auto`; xlm-roberta-base (278M)
# and large (560M) do not
CPU_AUTO_MAX_PARAMS = 200_000_000
CHECK_TORCH = 'python -c "import torch; print(torch.version.cuda, torch.cuda.is_available())"'


def encoder_parameters(name: str) -> int | None:
    """The parameter count of the encoder that `name` (a folder or a cached hub name) describes; None when its
    config cannot be read (building the model later says why, in its own line)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name, trust_remote_code=False)
    except (OSError, ValueError):
        return None
    # shapes only: XLM-R large's 560M parameters cost no memory here
    return sum(p.numel() for p in modeling.meta_encoder(config).parameters())


def check_cpu_auto(cfg: Config, device: torch.device) -> None:
    """Refuse, in one line, a pretrained model over CPU_AUTO_MAX_PARAMS on a CPU that `train.device=auto` chose."""
    if cfg.train.device != "auto" or device.type != "cpu":
        return
    init = validity.init_dir(cfg)
    if init is None and cfg.model.name == "tiny":  # built from model.tiny: small by construction
        return
    name = str(init) if init is not None else cfg.model.name
    n = encoder_parameters(name)
    if n is None or n <= CPU_AUTO_MAX_PARAMS:
        return
    raise PipelineError(
        f"train.device=auto found no CUDA GPU, and {name} ({n / 1e6:.0f}M parameters) would train on the CPU for "
        f"days; check the torch build with `{CHECK_TORCH}` (None or False: a CPU wheel or a driver mismatch), "
        f"or set train.device=cpu to train on the CPU anyway"
    )
