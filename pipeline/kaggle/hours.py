"""The time plan of a Kaggle run: minutes an epoch and a fold, the folds against the session and the week.

Kaggle gives a GPU session 12 hours and an account about 30 GPU hours a week; XLM-R large, five folds, is
many hours. `make kernel` prints this plan beside the disk plan, and warns when the folds do not fit one
session (the notebook's time guard then stops before a fold it cannot finish; `kaggle.continue_from=self`
continues in the next session). It is an estimate and says so; the ETA lines of the run's log are measured.

The throughput is stated with its source: `kaggle.tokens_per_second` when given; else what `make bench-gpu`
measured on a T4 (models/bench/<model>.json; a figure from another GPU says nothing of Kaggle's and is not
used); else an estimate for the two T4s from the model's size (its weights outside the embedding, as the
architecture built on the meta device has them: ModernBERT's GLU Wi counted at its 2 x intermediate width): 10%
of a T4's 65 TFLOPS fp16 peak, at 8 FLOPs a weight a token with checkpointing (forward, backward, the forward
again) and 6 without; under LoRA 6 and 4 (the frozen matrices' backward computes no weight gradient, and the
adapters' products are next to nothing).
Eager PyTorch on a 70 W T4, with the whole gradient all-reduced over PCIe at every step, is far from peak: public
figures for XLM-R large put two T4s at 4-7k padded tokens a second, which this estimate sits in (not measured
here).
Token counts come from the prepared token cache when `make data` has run here, else from the competition's
row counts (and the extra files' sizes, where they are here) at an assumed 60% of model.max_length a row.
Besides training and evaluating, the plan counts what a fold writes (a resume state at each epoch's end and
every train.save_every_steps, the weights at each better evaluation; a LoRA fold's: its adapters and head) and a
LoRA fold's frozen base read from the model input (when the fold starts and when it predicts: the size of the
source's weight files where model.name is a folder here, else 4 bytes a parameter as fp32) at an assumed 100 MB/s,
every evaluation of train.eval_every_steps, a stage-1 model trained in the same session, and predicting. An epoch's
optimizer steps (which train.eval_every_steps and train.save_every_steps count) are its rows over
micro_batch x accumulation x GPUs, or under train.token_budget at least its padded tokens over the budget's.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline import config as config_mod
from pipeline import layout, validity
from pipeline.core.eta import hours
from pipeline.errors import PipelineError
from pipeline.files import read_json
from pipeline.kaggle import disk
from pipeline.schema import Config

T4_FP16_FLOPS, T4_UTILISATION = 65e12, 0.10
T4_GPUS = 2  # kaggle.accelerator NvidiaTeslaT4
# the names torch gives a T4 ("Tesla T4", "NVIDIA T4"): the whole name, since a Quadro T4000 or an NVIDIA T400 contains
# "T4" too and is another card
T4_NAME = re.compile(r"(NVIDIA )?(Tesla )?T4", re.IGNORECASE)
FILL = 0.6  # an assumed mean row length, as a share of model.max_length, where the token cache is not here
PADDING = 1.1  # length-grouped batches pad about a tenth
EVAL_SPEEDUP = 3.0  # a forward pass is about a third of a training step
WRITE_BYTES_PER_SECOND = 100e6  # an assumed write (and copy) rate of Kaggle's disks, until the notebook measures it
LOAD_SECONDS = 60.0  # starting predict and loading a fold's weights, assumed
SAMPLE_BYTES = 1_000_000  # read from an extra file to estimate its row count from its size
# the least training a session must leave (its length less what it keeps free at its end): a session starts with
# minutes of data, tokens and loading the model, so one that trains less moves a run next to nothing
MIN_TRAINING_S = 600.0


@dataclass(frozen=True)
class TimePlan:
    tokens_per_second: float
    source: str  # where the throughput comes from, in words
    epoch_tokens: float  # padded tokens a fold trains in one epoch
    eval_tokens: float  # a fold's validation rows, once
    test_tokens: float  # the test table, once per fold at predict
    folds: int
    epochs: int
    evals_per_epoch: float = 1.0  # the epoch's end, and every train.eval_every_steps inside it
    save_bytes: float = 0.0  # what one fold writes at most: resume states and the weights of better evaluations
    stage1_seconds: float = 0.0  # a stage-1 model trained first, in the same session
    uncounted: tuple[str, ...] = ()  # extra files whose rows are not known here (not in the counts)
    load_bytes: float = 0.0  # a LoRA fold's frozen base, read from the model input when it trains and predicts
    load_source: str = ""  # where load_bytes comes from, in words (disk.source_bytes)
    eval_test: bool = False  # train.eval_ensemble: each evaluation predicts the test too, predict reads what it kept

    @property
    def epoch_seconds(self) -> float:
        return self.epoch_tokens / self.tokens_per_second

    @property
    def eval_seconds(self) -> float:
        """One evaluation of a fold's validation rows (and its test rows under train.eval_ensemble)."""
        tokens = self.eval_tokens + (self.test_tokens if self.eval_test else 0.0)
        return tokens / (self.tokens_per_second * EVAL_SPEEDUP)

    @property
    def save_seconds(self) -> float:
        return self.save_bytes / WRITE_BYTES_PER_SECOND

    @property
    def fold_seconds(self) -> float:
        train = self.epochs * (self.epoch_seconds + self.evals_per_epoch * self.eval_seconds)
        return train + self.save_seconds + self.load_bytes / WRITE_BYTES_PER_SECOND

    @property
    def predict_seconds(self) -> float:
        """One fold's test predictions, its weights loaded; none under train.eval_ensemble (its training made them)."""
        if self.eval_test:
            return 0.0
        load = LOAD_SECONDS + self.load_bytes / WRITE_BYTES_PER_SECOND  # the read rate assumed as the write one
        return self.test_tokens / (self.tokens_per_second * EVAL_SPEEDUP) + load

    @property
    def total_seconds(self) -> float:
        return self.stage1_seconds + self.folds * (self.fold_seconds + self.predict_seconds)


def non_embedding_parameters(cfg: Config) -> int:
    arch = disk.model_architecture(cfg) or {}
    total = disk.transformer_parameters(arch) if arch else 0
    return max(total - arch.get("vocab_size", 0) * arch.get("hidden_size", 0), 1)


def throughput(cfg: Config) -> tuple[float, str]:
    """Padded tokens a second for the whole run, and where that figure comes from."""
    if cfg.kaggle.tokens_per_second > 0:
        return cfg.kaggle.tokens_per_second, "kaggle.tokens_per_second"
    measured, why_not = measured_throughput(cfg)
    if measured is not None:
        return measured
    flops = 6 if cfg.train.checkpointing is False else 8  # `auto` may turn it on on a T4: the slower figure
    flops -= 2 if cfg.model.lora.r > 0 else 0  # LoRA: the frozen matrices' backward computes no weight gradient
    rate = T4_GPUS * T4_FP16_FLOPS * T4_UTILISATION / (flops * non_embedding_parameters(cfg))
    return rate, (
        f"an estimate for {T4_GPUS} T4s from the model's size, {T4_UTILISATION:.0%} of their fp16 peak, not measured; "
        f"make bench-gpu on a T4 measures one{f' ({why_not})' if why_not else ''}"
    )


def measured_throughput(cfg: Config) -> tuple[tuple[float, str] | None, str]:
    """(what `make bench-gpu` measured for this model on a T4: the all-three row, ours, samples/s x sequence length,
    doubled for the two T4s; or None, why it is not used)."""
    name = Path(cfg.model.name).name.lower()
    path = layout.bench_dir(cfg) / f"{name}.json"
    try:
        bench = read_json(path)
        ours = next(r for r in bench["rows"] if r["spec"]["key"] == "all3")["ours"]
        rate = ours["samples_per_second"] * bench.get("seq_len", 256) * T4_GPUS
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None, ""
    gpu = str(ours.get("gpu") or "")
    if not T4_NAME.fullmatch(gpu.strip()):  # another GPU (or one that did not record its name) is not Kaggle's
        return None, f"{path} was measured on {gpu or 'a GPU it does not name'}, not a T4: not used"
    how = f"measured by make bench-gpu on one {gpu} ({path}), x {T4_GPUS} T4s (the all-reduce between them not counted)"
    return (rate, how), ""


def extra_rows(cfg: Config) -> tuple[float, tuple[str, ...]]:
    """(rows of data.extra_files, estimated from the size of each file found here; the names not found here)."""
    rows, missing = 0.0, []
    try:
        raw = layout.raw_dir(cfg)
    except PipelineError:
        raw = Path(".")
    for entry in cfg.data.extra_files:
        name, _ = layout.split_extra(entry)
        try:
            paths = layout.find_extra(cfg, raw, name)
        except PipelineError:
            missing.append(Path(name).name)
            continue
        rows += sum(estimated_rows(p) for p in paths)
    return rows, tuple(missing)


def estimated_rows(path: Path) -> float:
    """A CSV's rows from its size and the rows its first megabyte holds (comments hold newlines: a real parser)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(SAMPLE_BYTES)
    rows = list(csv.reader(io.StringIO(head.decode("utf-8", errors="replace"), newline="")))
    if len(head) >= size:  # the whole file: every row but the header
        return float(max(0, len(rows) - 1))
    return max(0, len(rows) - 2) * size / len(head)  # less the header and the row the megabyte cuts


def table_counts(cfg: Config) -> tuple[dict, float, tuple[str, ...]]:
    """({train, valid, test, stage1}: rows a fold trains on, a fold's validation rows, test rows, the stage-1 rows),
    tokens a row, the extra files not counted."""
    k = cfg.data.folds
    per_row = prepared_tokens_per_row(cfg) or FILL * cfg.model.max_length
    try:  # the tables `make data` prepared here with these very data settings: their own row counts
        meta = validity.read_data_json(cfg)
        if meta["signature"]["data"] != validity.data_settings(cfg):
            raise ValueError("prepared with other data settings")
        summary = meta["summary"]
        valid = sum(v for f, v in summary["folds"].items() if int(f) >= 0)
        rows = {"train": summary["rows"] - valid / k, "valid": valid / k, "test": summary["test_rows"],
                "stage1": summary["rows"] - valid}  # fmt: skip
        return rows, per_row, ()
    except (PipelineError, OSError, ValueError, KeyError, TypeError):
        pass
    extra, missing = extra_rows(cfg)
    bound = disk.training_row_bound(cfg) + extra
    rows = {"train": bound - disk.VALID_ROWS / k, "valid": disk.VALID_ROWS / k, "test": disk.TEST_ROWS,
            "stage1": bound - disk.VALID_ROWS}  # fmt: skip
    return rows, per_row, missing


def token_counts(cfg: Config) -> tuple[float, float, float]:
    """(padded tokens of a fold's training epoch, of its validation rows, of the test table)."""
    rows, per_row, _ = table_counts(cfg)
    return rows["train"] * per_row * PADDING, rows["valid"] * per_row, rows["test"] * per_row


def prepared_tokens_per_row(cfg: Config) -> float | None:
    """Tokens a row in the token cache here, when it was made by this model's tokenizer at this max_length."""
    from pipeline.inputs.tokens import prepared_cache  # imports torch: `make kernel` starts without it

    cache = prepared_cache(cfg)
    try:
        if cache is None or cache["max_length"] != cfg.model.max_length:
            return None
        return cache["tokens"] / (cache["rows"]["train"] + cache["rows"]["test"])
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def epoch_windows(cfg: Config, train_rows: float, per_row: float) -> int:
    """Optimizer steps an epoch: micro-batches of train.micro_batch rows, or under train.token_budget at least as
    many as the epoch's padded tokens fill (a batch holds at most the budget), over accumulation x GPUs."""
    t = cfg.train
    per_step = t.accumulation * (cfg.kaggle.gpus or T4_GPUS)  # micro-batches an optimizer step
    steps = train_rows / (t.micro_batch * per_step)
    if t.token_budget > 0:
        steps = max(steps, train_rows * per_row * PADDING / (t.token_budget * per_step))
    return max(1, math.ceil(steps))


def fold_writes(cfg: Config, train_rows: float, per_row: float, stage1: bool = False) -> tuple[float, float]:
    """(evaluations an epoch, bytes a fold writes at most): a resume state at each epoch's end and every
    train.save_every_steps steps, the weights at each evaluation (at most: only a better one saves them)."""
    from pipeline.core import evaluation  # imports torch: `make kernel` starts without it

    t = cfg.train
    arch = disk.model_architecture(cfg)
    params = disk.trained_parameters(cfg, arch) if arch else 0  # a LoRA fold writes its adapters and head
    windows = epoch_windows(cfg, train_rows, per_row)
    evals = 1.0 if stage1 else evaluation.per_epoch(t.eval_every_steps, windows)
    states = 1 + (windows - 1) // t.save_every_steps if t.save_every_steps else 1
    return evals, t.epochs * (states * 12 * params + evals * 4 * params)


def plan_time(cfg: Config, folds: int) -> TimePlan:
    rate, source = throughput(cfg)
    rows, per_row, missing = table_counts(cfg)
    evals, writes = fold_writes(cfg, rows["train"], per_row)
    stage1 = 0.0
    if cfg.model.init_from and not cfg.kaggle.init_kernel:  # trained first, in the same session, on fold -1's rows
        first = config_mod.stage1_config(cfg, device=False)
        _, first_writes = fold_writes(first, rows["stage1"], per_row, stage1=True)
        stage1 = first.train.epochs * rows["stage1"] * per_row * PADDING / rate + first_writes / WRITE_BYTES_PER_SECOND
    arch = disk.model_architecture(cfg)
    read, read_source = disk.source_bytes(cfg, arch) if arch else (0.0, "")  # as the source stores it, not the GPU
    return TimePlan(
        rate, source, rows["train"] * per_row * PADDING, rows["valid"] * per_row, rows["test"] * per_row, folds,
        cfg.train.epochs, evals, writes, stage1, missing, read, read_source, cfg.train.eval_ensemble > 0,
    )  # fmt: skip


def session_seconds(cfg: Config) -> float:
    """A session's length: kaggle.time_limit_h, or kaggle.timeout when shorter (kernels_push's
    session_timeout_seconds ends the session first)."""
    limit = cfg.kaggle.time_limit_h * 3600
    return float(cfg.kaggle.timeout) if 0 < cfg.kaggle.timeout < limit else limit


def session_words(cfg: Config) -> str:
    """`12 h`, or `2 h (kaggle.timeout=7200)` when the timeout is what ends the session."""
    limit = session_seconds(cfg)
    shorter = f" (kaggle.timeout={cfg.kaggle.timeout})" if limit < cfg.kaggle.time_limit_h * 3600 else ""
    return f"{limit / 3600:.3g} h{shorter}"


def training_refusal(cfg: Config, reserve: float) -> str:
    """The one line that refuses a session whose training time (its length less the `reserve` kept free at its end)
    is under MIN_TRAINING_S: the first epoch always starts, so each session would train a few steps, for ever; ""
    otherwise."""
    usable = session_seconds(cfg) - reserve
    if usable >= MIN_TRAINING_S:
        return ""
    return (
        f"a {session_words(cfg)} session keeps {hours(reserve)} free at its end (kaggle.margin_minutes, saving, "
        f"copying and predicting), which leaves {hours(usable)} to train, under the {hours(MIN_TRAINING_S)} a session "
        "must train to be worth its start: each would train a few steps, for ever; raise kaggle.time_limit_h (or "
        "kaggle.timeout), or lower kaggle.margin_minutes"
    )


def must_resume(plan: TimePlan, cfg: Config, reserve: float) -> bool:
    """A fold (or the stage-1 model) longer than the training a session gives: only a resume state carried into
    the next session lets it end."""
    return max(plan.fold_seconds, plan.stage1_seconds) > session_seconds(cfg) - reserve


def resume_refusal(plan: TimePlan, cfg: Config, reserve: float) -> str:
    """The one line that refuses kaggle.keep_resume=false with a fold longer than a session; "" otherwise."""
    if cfg.kaggle.keep_resume or not must_resume(plan, cfg, reserve):
        return ""
    longest = max(plan.fold_seconds, plan.stage1_seconds)
    return (
        f"kaggle.keep_resume=false with a fold of about {hours(longest)}, more than the "
        f"{hours(session_seconds(cfg) - reserve)} a {session_words(cfg)} session trains: every session would start "
        "it again and none could finish it; keep kaggle.keep_resume=true (the default), or train fewer rows a fold"
    )


def format_time(plan: TimePlan, cfg: Config, reserve: float | None = None) -> str:
    """The plan in lines; `reserve`: the seconds the notebook keeps free at the session's end (its clock's)."""
    k = cfg.kaggle
    reserve = k.margin_minutes * 60 if reserve is None else reserve
    usable = session_seconds(cfg) - reserve
    evals = f"{plan.evals_per_epoch:g} evaluations" if plan.evals_per_epoch != 1 else "evaluating it"
    lines = [
        f"kernel: time plan, an estimate (the log's ETA lines are measured), at {plan.tokens_per_second:,.0f} padded "
        f"tokens/s ({plan.source}):",
        f"    {plan.epoch_tokens / 1e6:10.1f}M  padded tokens a training epoch of a fold",
        f"    {hours(plan.epoch_seconds):>11}  an epoch, {hours(plan.evals_per_epoch * plan.eval_seconds)} {evals}",
        f"    {hours(plan.save_seconds):>11}  a fold's resume states and weights written, at most "
        f"({plan.save_bytes / disk.GB:.1f} GB at {WRITE_BYTES_PER_SECOND / 1e6:.0f} MB/s)",
        f"    {hours(plan.fold_seconds):>11}  a fold of {plan.epochs} epoch(s), then {hours(plan.predict_seconds)} "
        "predicting test with it",
    ]
    if plan.load_bytes:
        lines.insert(-1, f"    {hours(plan.load_bytes / WRITE_BYTES_PER_SECOND):>11}  reading the frozen LoRA base "
                         f"({plan.load_bytes / disk.GB:.1f} GB, {plan.load_source}) when a fold starts, and again "
                         "when it predicts")  # fmt: skip
    if plan.stage1_seconds:
        lines.append(f"    {hours(plan.stage1_seconds):>11}  the stage-1 model {cfg.model.init_from}, first")
    lines += [
        f"    {hours(plan.total_seconds):>11}  {plan.folds} fold(s) and predicting, of a {session_words(cfg)} session "
        f"({hours(reserve)} kept free at its end)",
        f"    {plan.total_seconds / 3600 / k.weekly_quota_h:11.0%}  of a {k.weekly_quota_h:g} h weekly GPU quota",
    ]
    if plan.uncounted:
        lines.append(
            f"kernel: warning: data.extra_files {', '.join(plan.uncounted)} not found here, so their rows are not "
            "counted: every figure above is too low (put them where `make data` finds them, or run it here)"
        )
    if plan.total_seconds > usable:
        per_fold = plan.fold_seconds + plan.predict_seconds
        fit = max(0, int((usable - plan.stage1_seconds) // per_fold)) if per_fold else 0
        lines.append(
            f"kernel: warning: the folds need about {hours(plan.total_seconds)}, more than one session; about {fit} "
            f"fold(s) fit one. The notebook stops before a fold it cannot finish and keeps what it has; push again "
            f'with ARGS="kaggle.continue_from=self" to train the rest (or push train.folds=[0,...] per session)'
        )
    return "\n".join(lines)
