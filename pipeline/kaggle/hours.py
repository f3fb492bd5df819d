"""The time plan of a Kaggle run: minutes an epoch and a fold, the folds against the session and the week.

Kaggle gives a GPU session 12 hours and an account about 30 GPU hours a week; XLM-R large, five folds, is
many hours. `make kernel` prints this plan beside the disk plan, and warns when the folds do not fit one
session (the notebook's time guard then stops before a fold it cannot finish; `kaggle.continue_from=self`
continues in the next session).

The throughput is stated with its source: `kaggle.tokens_per_second` when given; else what `make bench-gpu`
measured (models/bench/<model>.json, on that GPU); else an estimate for the T4s from the model's size:
about 20% of a T4's 65 TFLOPS fp16 peak, at 8 FLOPs a weight a token with checkpointing (forward, backward,
the forward again) and 6 without. Token counts come from the prepared token cache when `make data` has
run here, else from the competition's row counts at an assumed 60% of model.max_length a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline import layout
from pipeline.config import Config
from pipeline.core.eta import hours
from pipeline.errors import PipelineError
from pipeline.files import read_json
from pipeline.kaggle import disk

T4_FP16_FLOPS, T4_UTILISATION = 65e12, 0.20
T4_GPUS = 2  # kaggle.accelerator NvidiaTeslaT4
FILL = 0.6  # an assumed mean row length, as a share of model.max_length, where the token cache is not here
PADDING = 1.1  # length-grouped batches pad about a tenth
EVAL_SPEEDUP = 3.0  # a forward pass is about a third of a training step


@dataclass(frozen=True)
class TimePlan:
    tokens_per_second: float
    source: str  # where the throughput comes from, in words
    epoch_tokens: float  # padded tokens a fold trains in one epoch
    eval_tokens: float  # a fold's validation rows, once
    test_tokens: float  # the test table, once per fold at predict
    folds: int
    epochs: int

    @property
    def epoch_seconds(self) -> float:
        return self.epoch_tokens / self.tokens_per_second

    @property
    def eval_seconds(self) -> float:
        return self.eval_tokens / (self.tokens_per_second * EVAL_SPEEDUP)

    @property
    def fold_seconds(self) -> float:
        return self.epochs * (self.epoch_seconds + self.eval_seconds)

    @property
    def total_seconds(self) -> float:
        predict = self.folds * self.test_tokens / (self.tokens_per_second * EVAL_SPEEDUP)
        return self.folds * self.fold_seconds + predict


def non_embedding_parameters(cfg: Config) -> int:
    arch = disk.model_architecture(cfg) or {}
    total = disk.transformer_parameters(arch) if arch else 0
    return max(total - arch.get("vocab_size", 0) * arch.get("hidden_size", 0), 1)


def throughput(cfg: Config) -> tuple[float, str]:
    """Padded tokens a second for the whole run, and where that figure comes from."""
    if cfg.kaggle.tokens_per_second > 0:
        return cfg.kaggle.tokens_per_second, "kaggle.tokens_per_second"
    measured = measured_throughput(cfg)
    if measured is not None:
        return measured
    flops = 8 if cfg.train.checkpointing else 6
    rate = T4_GPUS * T4_FP16_FLOPS * T4_UTILISATION / (flops * non_embedding_parameters(cfg))
    return rate, f"an estimate for {T4_GPUS} T4s from the model's size; make bench-gpu measures one"


def measured_throughput(cfg: Config) -> tuple[float, str] | None:
    """What `make bench-gpu` measured for this model: the all-three row, ours, samples/s x sequence length."""
    name = Path(cfg.model.name).name.lower()
    path = layout.bench_dir(cfg) / f"{name}.json"
    try:
        bench = read_json(path)
        ours = next(r for r in bench["rows"] if r["spec"]["key"] == "all3")["ours"]
        rate = ours["samples_per_second"] * bench.get("seq_len", 256) * T4_GPUS
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None
    return rate, f"measured by make bench-gpu on {ours.get('device', 'a GPU')} ({path}), x {T4_GPUS} processes"


def token_counts(cfg: Config) -> tuple[float, float, float]:
    """(padded tokens of a fold's training epoch, of its validation rows, of the test table)."""
    k = cfg.data.folds
    per_row = prepared_tokens_per_row(cfg) or FILL * cfg.model.max_length
    try:  # the tables `make data` prepared here with these very data settings: their own row counts
        meta = layout.read_data_json(cfg)
        if meta["signature"]["data"] != layout.data_settings(cfg):
            raise ValueError("prepared with other data settings")
        summary = meta["summary"]
        valid = sum(v for f, v in summary["folds"].items() if int(f) >= 0)
        train_rows, test_rows = summary["rows"] - valid / k, summary["test_rows"]
    except (PipelineError, OSError, ValueError, KeyError, TypeError):
        valid = disk.VALID_ROWS
        train_rows, test_rows = disk.training_row_bound(cfg) - valid / k, disk.TEST_ROWS
    return train_rows * per_row * PADDING, valid / k * per_row, test_rows * per_row


def prepared_tokens_per_row(cfg: Config) -> float | None:
    """Tokens a row in the token cache here, when it was made by this model's tokenizer at this max_length."""
    from pipeline.inputs.tokens import tokenizer_source  # imports torch: `make kernel` starts without it

    try:
        pointer = read_json(layout.prepared_dir(cfg) / layout.TOKENS_POINTER)
        cache = read_json(layout.cache_root(cfg) / pointer["key"] / layout.CACHE_META)
        if cache["max_length"] != cfg.model.max_length or cache["tokenizer"] != str(tokenizer_source(cfg)):
            return None
        return cache["tokens"] / (cache["rows"]["train"] + cache["rows"]["test"])
    except (PipelineError, OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None


def plan_time(cfg: Config, folds: int) -> TimePlan:
    rate, source = throughput(cfg)
    epoch, evaluation, test = token_counts(cfg)
    return TimePlan(rate, source, epoch, evaluation, test, folds, cfg.train.epochs)


def format_time(plan: TimePlan, cfg: Config) -> str:
    k = cfg.kaggle
    usable = k.time_limit_h * 3600 - k.margin_minutes * 60
    lines = [
        f"kernel: time plan, at {plan.tokens_per_second:,.0f} padded tokens/s ({plan.source}):",
        f"    {plan.epoch_tokens / 1e6:10.1f}M  padded tokens a training epoch of a fold",
        f"    {hours(plan.epoch_seconds):>11}  an epoch, {hours(plan.eval_seconds)} evaluating it",
        f"    {hours(plan.fold_seconds):>11}  a fold of {plan.epochs} epochs",
        f"    {hours(plan.total_seconds):>11}  {plan.folds} fold(s) and predicting, of a {k.time_limit_h:g} h session "
        f"({k.margin_minutes:g} min kept free at its end)",
        f"    {plan.total_seconds / 3600 / k.weekly_quota_h:11.0%}  of a {k.weekly_quota_h:g} h weekly GPU quota",
    ]
    if plan.total_seconds > usable:
        fit = max(0, int(usable // plan.fold_seconds)) if plan.fold_seconds else 0
        lines.append(
            f"kernel: warning: the folds need about {hours(plan.total_seconds)}, more than one session; about {fit} "
            f"fold(s) fit one. The notebook stops before a fold it cannot finish and keeps what it has; push again "
            f'with ARGS="kaggle.continue_from=self" to train the rest (or push train.folds=[0,...] per session)'
        )
    return "\n".join(lines)
