"""The `train` section: how a fold trains."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline import losses, optimizers
from pipeline.schema.base import FRACTION, LATER, NEVER, NON_NEGATIVE, POSITIVE, SEED, OneOf, at_least, setting


@dataclass(frozen=True)
class TrainConfig:
    folds: tuple[int, ...] = setting((), "the folds to train, e.g. `[0,2]`; empty means every fold; `[-1]` a stage-1 "
                                     "model on the training-only rows", role=NEVER,
                                     within=(lambda v: all(f >= -1 for f in v),
                                             "a list of fold numbers >= 0, or -1 (a stage-1 model)"))  # fmt: skip
    epochs: int = setting(2, "the best epoch's weights are kept", within=at_least(1))
    micro_batch: int = setting(16, "examples per forward/backward on one device", within=at_least(1))
    accumulation: int = setting(
        2, "micro-batches per optimizer step; effective batch = micro × accumulation × world (GPUs)", within=at_least(1)
    )
    token_budget: int = setting(
        0,
        "> 0: micro-batches of rows of similar length whose padded size (rows × the longest row) is at most this "
        "many tokens, and at most `micro_batch` rows: short comments come many to a batch, long ones few, and a row "
        "longer than the budget alone; the memory plans price this, not micro_batch × max_length; 0: off, "
        "`micro_batch` rows each ([encoders.md](encoders.md#reading-long-comments-whole))",
        within=at_least(0, " (0: off)"),
        role=LATER,
    )
    lr: float = setting(5e-4, "learning rate (of the head and, without layer_decay, of every layer)", within=POSITIVE)
    layer_decay: float = setting(
        1.0,
        "layer-wise learning-rate decay: each encoder layer's rate is this times the rate of the layer above it, the "
        "head's is `lr`, the embeddings' the lowest (1: off, every parameter at `lr`)",
        within=((lambda v: 0 < v <= 1), "a number in (0, 1] (1: off)"),
        role=LATER,
    )
    weight_decay: float = setting(0.01, "AdamW weight decay", within=NON_NEGATIVE)
    warmup: float = setting(
        0.1,
        "fraction of optimizer steps spent warming up (the schedule counts optimizer steps, not micro-batches)",
        within=FRACTION,
    )
    max_grad_norm: float = setting(1.0, "gradient clipping norm", within=POSITIVE)
    precision: str = setting(
        "auto",
        "`auto` (bf16 where the device computes it natively: CUDA compute capability 8.0+; on a CPU with "
        "AVX512-BF16/AMX the faster of bf16 and fp32, one step each measured at the fold's start; else fp16 + "
        "GradScaler on CUDA, fp32 on CPU), `bf16` (refused on a GPU that only emulates it, such as Kaggle's T4), "
        "`fp16` or `fp32` ([training.md](training.md#mixed-precision))",
        choices=("fp32", "fp16", "bf16", "auto"),
    )
    checkpointing: bool | str = setting(
        "auto",
        "gradient checkpointing (the same gradients, about 1.5x the time); `auto`: on only where the micro-batch "
        "would not fit without it (measured at the fold's start; on a CPU without `max_memory_gb`: off)",
        within=((lambda v: v in (True, False, "auto")), "true, false or auto"),
        role=NEVER,
    )
    optimizer: str = setting("adamw", optimizers.setting_doc(), choices=tuple(optimizers.OPTIMIZERS))
    loss: str = setting("bce", losses.setting_doc(), choices=tuple(losses.LOSSES), role=LATER)
    average: str = setting(
        "none",
        "weight averaging in a fold, in fp32, updated each optimizer step: `none`, `ema` (an exponential moving "
        "average of the trained weights) or `swa` (their equal average over the steps after `train.average_start`); "
        "what evaluation scores and the best evaluation keeps ([training.md](training.md#weight-averaging))",
        choices=("none", "ema", "swa"),
        role=LATER,
    )
    average_decay: float = setting(
        0.999, "`ema`'s decay a step: the average's memory is about 1 / (1 - decay) steps", role=LATER,
        within=((lambda v: 0 < v < 1), "a number in (0, 1)"), when=("train.average", "ema"),
    )  # fmt: skip
    average_start: float = setting(
        0.5, "`swa` averages the steps after this fraction of the fold's optimizer steps; before, evaluations score "
        "the weights as they are", role=LATER, within=FRACTION, when=("train.average", "swa"),
    )  # fmt: skip
    average_device: str = setting(
        "weights", "where the average lives: `weights` (beside them: one fp32 copy of what trains on the GPU) or "
        "`cpu` (host memory: a copy of the weights to the host each step instead)", choices=("weights", "cpu"),
        role=NEVER, when=("train.average", OneOf(("ema", "swa"))),
    )  # fmt: skip
    device: str = setting(
        "auto",
        "`auto`, `cpu`, `cuda` or `cuda:N`; one this machine does not have is refused. `auto` without CUDA refuses "
        "a pretrained model over 200M parameters (xlm-roberta-base and up; e5-small runs): `cpu` insists",
        role=NEVER,
    )
    eval_batch: int = setting(
        64, "rows per batch when scoring the validation rows and predicting test", within=at_least(1), role=NEVER
    )
    seed: int = setting(
        42,
        "seed of training (each fold's run), of the TF-IDF baseline and of `make bench`'s random data",
        within=SEED,
    )
    deterministic: bool = setting(
        False,
        "bit-for-bit repeatable training on a GPU: deterministic kernels only (an op without one stops the run, "
        "naming it), cuBLAS's fixed workspace, no cuDNN autotuning; slower "
        "([training.md](training.md#bit-for-bit-on-a-gpu))",
        role=NEVER,
    )
    save_every_steps: int = setting(
        0,
        "also save a resume state every N optimizer steps (0: at epoch ends only)",
        within=at_least(0, " (0: at epoch ends only)"),
        role=NEVER,
    )
    max_bad_steps: int = setting(
        20, "consecutive non-finite optimizer steps before the fold stops", within=at_least(1), role=NEVER
    )
    max_memory_gb: float = setting(
        0.0,
        "> 0: auto-fit, the largest micro-batch whose whole optimizer step (forward, backward, the dense embedding "
        "gradient, clipping, the AdamW moments, DDP's buckets) fits under this many GB, accumulation raised to keep "
        "the effective batch; 0: off ([training.md](training.md#auto-fit))",
        within=(NON_NEGATIVE[0], "a finite number >= 0 (0: off)"),
    )
    training_only_rows: bool = setting(
        True, "fold -1 rows (English and translated) train every fold; `false`: only the other folds' validation rows"
    )
    # a training setting, not a data one: the rows are chosen at train time (tables.training_rows), so the
    # prepared tables and folds stay those of the experiment a specialist starts from (model.init_folds)
    langs: tuple[str, ...] = setting((), "a per-language specialist: the languages (`[es]`) whose rows alone train "
                                     "each fold (the other folds' validation rows or held-out stand-ins, training-only "
                                     "and pseudo-labelled rows of them) and score it, and whose test rows alone "
                                     "`make predict` predicts (no submission: route it, [recipes.md](recipes.md#per-"
                                     "language-specialists)); empty: every language", role=LATER)  # fmt: skip
    eval_every_steps: int = setting(
        0,
        "also evaluate every N optimizer steps (0: at epoch ends only); the best is kept",
        within=at_least(0, " (0: at epoch ends only)"),
        role=LATER,
        resumable=True,
    )
    eval_ensemble: int = setting(
        0,
        "checkpoint ensembling: N >= 1 makes a fold's OOF and test predictions the mean of the probabilities of its "
        "last N evaluations (every evaluation then predicts the test rows too; `make predict` uses the fold's "
        "stored mean, the kept weights stay the best evaluation's); 0: the best evaluation's predictions "
        "([recipes.md](recipes.md#checkpoint-ensembling))",
        within=at_least(0, " (0: off)"),
        role=LATER,
    )
    patience: int = setting(
        0,
        "evaluations without a better AUC before the fold stops (0: never)",
        within=at_least(0, " (0: never stop early)"),
        role=LATER,
        resumable=True,
    )
    max_steps: int = setting(
        0,
        "a smoke run: each fold (and a stage-1 model) stops after N optimizer steps, evaluated and saved, a complete "
        "fold of its own fingerprint that a full run trains again (0: off)",
        within=at_least(0, " (0: off)"),
        role=LATER,
        resumable=True,
    )
    log_every_steps: int = setting(
        10,
        "a line in `fold<k>/steps.jsonl` every N optimizer steps (0: none; a smoke run, `train.max_steps`: every step)",
        within=at_least(0, " (0: no step records)"),
        role=NEVER,
    )
    tensorboard: bool = setting(
        False, "the same records as TensorBoard scalars in `models/<name>/tb/fold<k>/`", role=NEVER
    )
