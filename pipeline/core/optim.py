"""The optimizer, its learning-rate schedule, and the step that ends an accumulation window.

`make_training` is the one factory of both: training (core/fold.py), auto-fit's memory probe (core/memory.py)
and `make bench` (benchmark/runner.py) build them through it. Its parameter groups are named (`param_groups`),
and `learning_rates` is what the step log and metrics.jsonl record: every group's rate under its name, so that
the logged rate never depends on which group happens to come first. The schedule counts optimizer steps, never
micro-batches. A window's step is: densify the sparse
embedding gradient, unscale (fp16), clip the true gradients, step; a step whose gradients are not finite
is skipped (the GradScaler skips it by itself in fp16) and the caller counts it.
"""

from __future__ import annotations

import re

import torch

from pipeline.errors import PipelineError
from pipeline.optimizers import OPTIMIZERS, refusal
from pipeline.schema import TrainConfig


def make_training(model: torch.nn.Module, cfg: TrainConfig, device: torch.device, total_steps: int):
    """(optimizer, scheduler): train.optimizer over the named groups, under the warm-up and linear decay of
    `total_steps`."""
    optimizer = make_optimizer(model, cfg, device)
    return optimizer, make_scheduler(optimizer, cfg.warmup, total_steps)


def param_groups(model: torch.nn.Module, cfg: TrainConfig) -> list[dict]:
    """The optimizer's groups, each with a `name` (the key of its logged rate): weight decay on matrices only;
    with train.layer_decay below 1, one pair of groups a depth, each at its own rate (layer_rates)."""
    if cfg.layer_decay != 1.0:
        return layered_groups(model, cfg)
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]  # biases, LayerNorm weights
    return [
        {"name": "decay", "params": decay, "weight_decay": cfg.weight_decay},
        {"name": "no_decay", "params": no_decay, "weight_decay": 0.0},
    ]


# an encoder layer's parameters: `encoder.layer.3.` (BERT, XLM-R, DeBERTa), `transformer.layer.3.` (DistilBERT),
# `layers.3.` (encoders that name their stack so)
_LAYER = re.compile(r"(?:^|\.)(?:layer|layers)\.(\d+)\.")


def depth(name: str, layers: int) -> int:
    """A parameter's depth: 0 for the embeddings, i + 1 for encoder layer i, layers + 1 for all above them
    (the head, a final norm or pooler)."""
    found = _LAYER.search(name)
    if found:
        return int(found.group(1)) + 1
    return 0 if "embeddings" in name else layers + 1  # DeBERTa's shared rel_embeddings go with the embeddings


def layer_rates(lr: float, decay: float, layers: int) -> list[float]:
    """The rate of each depth 0..layers+1: the top (head) at lr, each layer below it `decay` times the one above."""
    return [lr * decay ** (layers + 1 - k) for k in range(layers + 2)]


def layered_groups(model: torch.nn.Module, cfg: TrainConfig) -> list[dict]:
    """Layer-wise learning-rate decay: one decay/no-decay pair of groups a depth, named by it."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    indices = [int(m.group(1)) for n, _ in named if (m := _LAYER.search(n))]
    if not indices:
        raise PipelineError(
            f"train.layer_decay={cfg.layer_decay:g}: {type(model).__name__} has no numbered encoder layers "
            f"(`layer.N.` in its parameter names); set train.layer_decay=1"
        )
    layers = max(indices) + 1
    rates = layer_rates(cfg.lr, cfg.layer_decay, layers)
    depths = [depth(n, layers) for n, _ in named]  # once, not once a depth
    names = ["embeddings", *(f"layer{k}" for k in range(layers)), "top"]
    groups = []
    for k, rate in enumerate(rates):
        mine = [p for (_, p), at in zip(named, depths, strict=True) if at == k]
        # the decay and no-decay groups of a depth share its name: one logged rate a depth
        groups.append({"name": names[k], "params": [p for p in mine if p.ndim >= 2], "lr": rate,
                       "weight_decay": cfg.weight_decay})  # fmt: skip
        groups.append({"name": names[k], "params": [p for p in mine if p.ndim < 2], "lr": rate, "weight_decay": 0.0})
    return [g for g in groups if g["params"]]


def learning_rates(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """What is logged: every group's current learning rate (the next step's), by the group's name."""
    return {str(g.get("name", i)): float(g["lr"]) for i, g in enumerate(optimizer.param_groups)}


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """train.optimizer's record (pipeline.optimizers) built over param_groups."""
    groups = param_groups(model, cfg)
    check_optimizer(cfg, device)
    return OPTIMIZERS[cfg.optimizer].build(groups, cfg.lr, device)


def check_optimizer(cfg: TrainConfig, device: torch.device) -> None:
    """Refuse, in one line, a train.optimizer this device cannot run: before any fold starts (pipeline.train) as
    well as where the optimizer is made."""
    why = refusal(cfg.optimizer, device.type)
    if why:
        raise PipelineError(why)


def warmup_steps(warmup: float, total_steps: int) -> int:
    """The optimizer steps of the warm-up: train.warmup's fraction of them, at least one when it is above 0."""
    return max(1, int(round(warmup * total_steps))) if warmup > 0 else 0


def trainer_schedule(cfg: TrainConfig) -> str:
    """make_scheduler's schedule as transformers' Trainer names it (`lr_scheduler_type`): the bench's Trainer row
    runs the same one (linear warm-up, then linear decay to zero at the last step)."""
    return "linear"


def make_scheduler(optimizer: torch.optim.Optimizer, warmup: float, total_steps: int):
    """Linear warm-up then linear decay to zero, counted in optimizer steps (not micro-batches)."""
    warm = warmup_steps(warmup, total_steps)

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (total_steps - step) / max(1, total_steps - warm))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def densify_grads(model: torch.nn.Module) -> None:
    for p in model.parameters():
        if p.grad is not None and p.grad.is_sparse:
            p.grad = p.grad.to_dense()


def optimizer_step(
    model: torch.nn.Module, optimizer, scaler: torch.amp.GradScaler, max_grad_norm: float
) -> tuple[bool, float]:
    """Densify, unscale, clip, step: the end of an accumulation window. (whether the weights were updated,
    the gradient norm before clipping: inf or nan when the step was skipped for it)."""
    densify_grads(model)  # sparse embedding rows (see modeling.sparse_embedding_grad) -> one dense gradient
    scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    if scaler.is_enabled():
        scale = scaler.get_scale()
        scaler.step(optimizer)  # skips the update by itself when fp16 gradients overflowed
        scaler.update()
        return scaler.get_scale() >= scale, float(norm)  # the scale shrinks exactly when the step was skipped
    finite = bool(torch.isfinite(norm))
    if finite:
        optimizer.step()
    return finite, float(norm)


def reset_scaler(scaler: torch.amp.GradScaler) -> None:
    """Forget this window's unscale_ record (the scale itself is kept): the window is redone from the start."""
    # GradScaler refuses a second unscale_ before update(); its per-optimizer record is a defaultdict that
    # starts every optimizer afresh when cleared
    if scaler.is_enabled():
        scaler._per_optimizer_states.clear()
