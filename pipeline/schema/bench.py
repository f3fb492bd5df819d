"""The `bench` section: `make bench`'s memory and speed table, and the models and rows it knows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.schema.base import POSITIVE, at_least, setting

BENCH_MODELS = ("xlm-roberta-base", "xlm-roberta-large", "xlm-roberta-xl", "tiny")  # benchmark.runner's architectures
BENCH_ROWS = ("fp32", "mp", "mp_acc", "mp_ckpt", "all3", "trim", "adamw8bit", "autofit", "lora", "lora_trim")


def _bench_model(v: str) -> bool:
    # a path that is not here yet passes: make bench refuses it before its first row, and a config packed for
    # another machine (the Kaggle notebook) still loads there
    return v in BENCH_MODELS or "/" in v or Path(v).expanduser().is_dir()


@dataclass(frozen=True)
class BenchConfig:
    """`make bench`: the memory and speed table (random weights and token ids, no download; [bench.md](bench.md))."""

    model: str = setting("xlm-roberta-base", "`xlm-roberta-base`, `xlm-roberta-large` or `xlm-roberta-xl` (the "
                         "architecture only, random weights), `tiny` (the sample's tiny XLM-R, `model.tiny`) or a "
                         "model folder (its own weights)",
                         within=(_bench_model, f"one of {', '.join(BENCH_MODELS)} or a model folder"))  # fmt: skip
    seq_len: int = setting(256, "sequence length of the random token ids", within=at_least(8))
    effective_batch: int = setting(32, "the effective batch of every row", within=at_least(1))
    micro_batch: int = setting(
        4,
        "the accumulation rows: micro_batch × (effective_batch / micro_batch); it divides `effective_batch`",
        within=at_least(1),
    )
    steps: int = setting(
        3,
        "timed optimizer steps per row, after an untimed warm-up: the median and spread of these",
        within=at_least(3, " (a median and a spread)"),
    )
    trainer: bool = setting(True, "also run each row with Hugging Face Trainer")
    vocab_used: int = setting(
        60000,
        "distinct token ids in the data (what the trimming row keeps), more than the 4 special ones",
        within=at_least(5),
    )
    max_memory_gb: float = setting(11.0, "the cap of the auto-fit row", within=POSITIVE)
    rows: tuple[str, ...] = setting(
        (),
        f"only these rows (`{' '.join(BENCH_ROWS)}`); empty: all",
        within=((lambda v: set(v) <= set(BENCH_ROWS)), f"a list of {', '.join(BENCH_ROWS)}"),
    )
    baseline: bool = setting(
        True,
        "the fp32 baseline row runs beside whatever `rows` chooses; `false` skips it (it runs only if `rows` names "
        "it; empty `rows`: every row but it), for a model whose fp32 baseline the machine cannot hold; the ratios "
        "to it then read `-`",
    )
    profile: bool = setting(
        False, "`torch.profiler` over the timed steps: top ops per row in `<model>.profile.md` (slower)"
    )
    sparse: bool = setting(
        True, "ours with sparse word-embedding gradients (as `make train`); `false`: dense, as Trainer's"
    )
    lora_r: int = setting(
        8, "the adapters' rank in the LoRA rows (their other settings are `model.lora`'s)", within=at_least(1)
    )
