"""The memory plan of a Kaggle run: what one of its GPUs holds while a fold trains, an estimate with its assumptions.

`make kernel` prints it beside the disk and time plans and warns when it passes what a T4 holds: a run that does
not fit fails at its first step, after the session has started. Computed, not measured, from the architecture
(pipeline.kaggle.disk) and the settings:

- weights: 4 bytes a trained parameter (fp32 master weights; under model.trim_vocab the embedding keeps
  disk.kept_rows: the token cache's distinct ids where `make data` ran here, else an estimate); a LoRA base's
  frozen ones at disk.frozen_bytes (half precision, or 8 or 4 bits); the counts come from the architecture built
  on the meta device (disk.shapes), whatever its family;
- gradients: 4 bytes a trained parameter (DDP's buckets are the gradients themselves: gradient_as_bucket_view);
- the optimizer's state: its record's bytes a trained parameter (pipeline.optimizers: AdamW's two moments 8,
  8-bit AdamW's 2);
- autocast's half-precision copies of the fp32 matrices it multiplies, held for the forward: 2 bytes a layer
  weight when every weight trains (a LoRA base is half precision already: nothing to copy);
- activations of the largest micro-batch: train.micro_batch rows at model.max_length, or under train.token_budget
  the most padded tokens a batch holds, its attention at the longest row (pipeline.core.batching.worst_batch),
  counted per layer as Korthikanti et al. (2022, "Reducing Activation Recomputation in Large Transformer Models")
  count them in half precision, 34 s b h + 5 a s^2 b bytes for a feed-forward of 4 h, here 18 t h + 4 t i + 5 a s t
  for one of i with t = s b tokens (8 t i for a gated one, ModernBERT's GLU: its Wi is 2 i wide; the attention's
  scores are s^2 a row, so s t bounds every batch of t tokens at most s wide), plus 3 bytes an input value of
  each adapter (its half-precision copy and dropout mask). With checkpointing every layer keeps its input (2 s b h
  bytes) and one layer at a time is rebuilt, its gradients beside it (twice its activations); without, every layer
  keeps its own, and one layer's gradients are beside them.
The total is raised by a tenth for the allocator's fragmentation, and compared with a T4's 15.8 GB less the
margin the fold's start-of-fold check keeps (pipeline.core.headroom: 1 GiB or 7% of the card), about 14.7 GB.
Auto-fit (train.max_memory_gb) and `make bench-gpu` measure what this estimates.

Host memory too: each train (and predict) process reads the model on the CPU before it moves to its GPU, all of
them at once, so the notebook's memory (about 29 GB, assumed) holds that many copies: a LoRA base in half precision
(read straight into it: pipeline.core.modeling), every weight in fp32 without LoRA; a quantized base is loaded onto
its GPU directly (device_map) and is not counted. Each process adds Python, torch and CUDA (2.5 GB, assumed). A
fold that resumes reads its resume state in the first process (disk.resume_bytes); the others map it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline import config as config_mod
from pipeline.core import headroom
from pipeline.kaggle import disk
from pipeline.optimizers import OPTIMIZERS
from pipeline.schema import Config

T4_TOTAL = 15.83e9  # a T4's memory as torch reports it (total_memory: 15,095 MiB)
# what a step may plan to reach: the rest is the margin the fold's own check keeps too, for the CUDA context,
# NCCL's buffers and fragmentation (pipeline.core.headroom: 1 GiB or 7% of the card)
T4_USABLE = headroom.usable_bytes(T4_TOTAL)
FRAGMENTATION = 1.10  # the caching allocator's blocks hold more than the tensors in them (assumed)
ADAPTER_INPUT_VALUES = {"qv": (2, 0), "attention": (4, 0), "all": (5, 1)}  # (x hidden, x intermediate) a layer
KAGGLE_HOST_BYTES = 29e9  # a Kaggle GPU notebook's memory (assumed)
PROCESS_HOST_BYTES = 2.5e9  # a process's Python, torch, CUDA context and data besides the model (assumed)


@dataclass
class MemoryPlan:
    items: list[tuple[str, float]] = field(default_factory=list)  # (what, bytes) on one GPU

    @property
    def total(self) -> float:
        return FRAGMENTATION * sum(b for _, b in self.items)


def layer_activations(arch: dict, tokens: int, seq: int, lora) -> float:
    """Bytes one layer keeps for its backward over a micro-batch of `tokens` padded tokens, rows at most `seq` wide:
    attention, feed-forward, LayerNorms and dropout masks, and LoRA's adapter inputs (each adapter its own copy: q,
    k and v read the same hidden states)."""
    h, i = arch["hidden_size"], arch["intermediate_size"]
    heads = arch.get("num_attention_heads") or max(1, h // 64)
    # a GLU keeps its first projection's 2 i values, the gate's activation and their product (8 bytes x i), where
    # a plain feed-forward keeps its projection's and its activation's i each (4 bytes x i)
    ffn = 8 if disk.shapes(arch).glu else 4
    layer = 18 * tokens * h + ffn * tokens * i + 5 * heads * seq * tokens
    if lora.r > 0:
        per_h, per_i = ADAPTER_INPUT_VALUES[lora.targets]
        layer += 3 * tokens * (per_h * h + per_i * i)
    return float(layer)


def batch_shape(cfg: Config) -> tuple[int, int, str]:
    """(width, tokens, in words) of the micro-batch the plan prices: the largest the settings cut
    (batching.worst_batch, its widths rounded as collate rounds them)."""
    from pipeline.core import batching  # imports torch: `make kernel` starts without it

    t, length = cfg.train, cfg.model.max_length
    width, tokens = batching.worst_batch(t.micro_batch, t.token_budget, length, batching.pad_multiple(t.precision))
    if t.token_budget > 0:
        return width, tokens, f"train.token_budget: at most {tokens:,} tokens a micro-batch, rows up to {width}"
    return width, tokens, f"micro-batch {t.micro_batch} x {length} tokens"


def activations(cfg: Config, arch: dict, checkpointed: bool) -> tuple[str, float]:
    """(what, bytes) of the largest micro-batch's activations, with or without checkpointing."""
    n = arch["num_hidden_layers"]
    width, tokens, shape = batch_shape(cfg)
    layer = layer_activations(arch, tokens, width, cfg.model.lora)
    if checkpointed:
        kept = 2.0 * n * tokens * arch["hidden_size"]
        return f"activations, checkpointed: {n} layer inputs, one layer rebuilt with its gradients ({shape})", (
            kept + 2 * layer
        )
    return f"activations: {n} layers' and one layer's gradients ({shape})", (n + 1) * layer


def chosen_activations(cfg: Config, arch: dict, others: float, usable: float) -> tuple[str, float]:
    """The activations as train.checkpointing has them; `auto` turns checkpointing on only where the step would not
    fit without it (what the fold measures at its start, estimated here)."""
    if cfg.train.checkpointing != "auto":
        return activations(cfg, arch, cfg.train.checkpointing is True)
    what, size = activations(cfg, arch, False)
    if FRAGMENTATION * (others + size) <= usable:
        return f"{what}; checkpointing auto: off, it fits without", size
    what, size = activations(cfg, arch, True)
    return f"{what}; checkpointing auto: on", size


def plan_memory(cfg: Config, usable: float = T4_USABLE) -> MemoryPlan | None:
    """What one GPU holds while a fold trains; None where the model's size is not known offline."""
    arch = disk.model_architecture(cfg)
    if not arch:
        return None
    trained = disk.trained_parameters(cfg, arch)
    lora = cfg.model.lora.r > 0
    optimizer = OPTIMIZERS[cfg.train.optimizer]
    plan = MemoryPlan()
    if lora:
        quantize = cfg.model.lora.quantize
        frozen = "fp32" if cfg.train.precision == "fp32" else ("half precision" if quantize == "none" else quantize)
        plan.items.append((f"the frozen base, its matrices in {frozen}", disk.frozen_bytes(cfg, arch)))
    what = "the adapters and the head" if lora else "the weights"
    plan.items += [
        (f"{what} in fp32: {trained / 1e6:,.1f}M parameters", 4.0 * trained),
        ("their gradients (fp32; DDP's buckets are these)", 4.0 * trained),
        (
            f"the optimizer's state ({optimizer.doc}: {optimizer.state_bytes} bytes a parameter)",
            float(optimizer.state_bytes) * trained,
        ),
    ]
    if cfg.train.average != "none" and cfg.train.average_device == "weights":  # core.average: an fp32 copy, beside
        plan.items.append((f"the weight average (train.average={cfg.train.average}, fp32)", 4.0 * trained))
    if not lora and cfg.train.precision != "fp32":
        plan.items.append(("autocast's half-precision copies of the layers' matrices", 2.0 * disk.layer_matrices(arch)))
    plan.items.append(chosen_activations(cfg, arch, sum(b for _, b in plan.items), usable))
    return plan


def format_memory(plan: MemoryPlan, gpu: str = "T4", usable: float = T4_USABLE) -> str:
    lines = [f"kernel: memory plan of one GPU while a fold trains, an estimate (a {gpu}: about {usable / 1e9:.1f} GB "
             "to plan for, its margin for the CUDA context, NCCL and fragmentation kept):"]  # fmt: skip
    lines += [f"    {disk.human(b):>10}  {what}" for what, b in plan.items]
    lines.append(f"    {disk.human(plan.total):>10}  in all, with a tenth for the allocator's fragmentation")
    return "\n".join(lines)


def over_memory(plan: MemoryPlan, cfg: Config, gpu: str = "T4", usable: float = T4_USABLE) -> str:
    """The warning to print when the plan passes what the GPU holds; "" when it fits."""
    if plan.total <= usable:
        return ""
    fixes = "a smaller train.micro_batch (a larger train.accumulation keeps the effective batch)"
    if cfg.train.token_budget > 0:
        fixes = "a smaller train.token_budget (or model.max_length: a longer row is read alone)"
    if cfg.train.checkpointing is False:
        fixes = "train.checkpointing=true (or auto), " + fixes
    if cfg.model.lora.r <= 0:
        fixes += ", or LoRA (model.lora.r=8: the base frozen in half precision)"
    elif cfg.model.lora.quantize == "none":
        fixes += ", or a quantized base (model.lora.quantize=8bit or 4bit, with kaggle.has_bitsandbytes=true)"
    return (
        f"kernel: warning: a GPU would need about {disk.human(plan.total)}, more than the {usable / 1e9:.1f} GB a "
        f"{gpu} gives with its margin: the first step would run out of memory; try {fixes}"
    )


def loaded_bytes(cfg: Config, arch: dict) -> float:
    """What one process holds of the model on the CPU while it loads, before it moves to its GPU: read whole, its
    vocabulary trimmed (model.trim_vocab) only once it is read."""
    if cfg.model.lora.r <= 0:
        return 4.0 * disk.transformer_parameters(arch)  # every weight in fp32
    whole = config_mod.with_overrides(cfg, ["model.trim_vocab=false"], device=False)
    trained = 4.0 * disk.trained_parameters(cfg, arch)
    # a quantized base goes to its GPU as it loads (device_map); a half-precision one is read on the CPU first
    return trained + (disk.frozen_bytes(whole, arch) if cfg.model.lora.quantize == "none" else 0.0)


def resume_host_bytes(cfg: Config, arch: dict) -> float:
    """What a fold that resumes holds of its resume state in host memory while the model loads: the first process
    reads it whole (disk.resume_bytes: fp32 weights and the optimizer's state); the others map it
    (pipeline.core.resume.load_resume_everywhere), which holds no memory of theirs."""
    return float(disk.resume_bytes(cfg, disk.trained_parameters(cfg, arch)))


def host_memory(cfg: Config, processes: int) -> tuple[str, float] | None:
    """(the plan in a line, the bytes) of the notebook's memory while its `processes` load the model at once (when a
    fold starts, and again at predict), a resumed fold's state beside it; None where the model's size is not known
    offline."""
    arch = disk.model_architecture(cfg)
    if not arch:
        return None
    model, state = loaded_bytes(cfg, arch), resume_host_bytes(cfg, arch)
    total = processes * (model + PROCESS_HOST_BYTES) + state
    line = (f"kernel: host memory while the model loads, an estimate: {processes} process(es) x ({disk.human(model)} "
            f"of the model on the CPU before its GPU + {disk.human(PROCESS_HOST_BYTES)} Python, torch and CUDA, "
            f"assumed) + {disk.human(state)} of a resumed fold's state (read by the first process, mapped by the "
            f"others) = {disk.human(total)}, of the notebook's about {KAGGLE_HOST_BYTES / 1e9:g} GB "
            "(assumed)")  # fmt: skip
    return line, total


def over_host(total: float, cfg: Config) -> str:
    """The warning to print when the processes' host memory passes the notebook's; "" when it fits."""
    if total <= KAGGLE_HOST_BYTES:
        return ""
    fixes = "kaggle.gpus=1 (one process, one copy)"
    if cfg.model.lora.r > 0 and cfg.model.lora.quantize == "none":
        fixes += ", or a quantized base (model.lora.quantize=8bit or 4bit: loaded straight onto each GPU)"
    return (
        f"kernel: warning: the processes would hold about {disk.human(total)} of host memory at once while the model "
        f"loads, more than the notebook's {KAGGLE_HOST_BYTES / 1e9:g} GB: the session would be killed; try {fixes}"
    )
