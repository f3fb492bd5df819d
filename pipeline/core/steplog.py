"""A fold's step records: a line in fold<k>/steps.jsonl every train.log_every_steps optimizer steps, and with
train.tensorboard the same scalars (and each evaluation's) in models/<name>/tb/fold<k>/.

A record covers the optimizer steps since the one before it: the mean training loss over their rows (every
rank's), every parameter group's learning rate by name (`lr`: core.optim.learning_rates) and the gradient norm
(before clipping) at its last step, the fp16 loss scale, the steps skipped for non-finite gradients, examples/s
and padded tokens/s, and the epoch's peak memory so far. Rank 0 writes it, a line at a time and flushed, so the
file can be read while the fold runs.

Resume-safe: what the steps since the last record add up to travels in the resume state, and a resumed
fold drops the lines past the step it resumes at (they are written again), so the file holds every
record once, as an uninterrupted run writes it; TensorBoard is told the same (purge_step), and a fold
trained again from its start leaves no events of the earlier run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path

from pipeline import files, layout
from pipeline.core import distributed
from pipeline.core.loop import Window
from pipeline.errors import PipelineError
from pipeline.files import atomic_write_text
from pipeline.schema import Config


@dataclasses.dataclass
class Since:
    """What the optimizer steps since the last record add up to, on this rank."""

    loss: float = 0.0
    examples: int = 0
    tokens: int = 0
    skipped: int = 0
    seconds: float = 0.0


def require_tensorboard() -> None:
    """train.tensorboard=true needs the tensorboard package: one line that names it, before any fold trains."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        raise PipelineError(
            "train.tensorboard=true needs the tensorboard package, which is not installed: "
            "pip install tensorboard (requirements.txt pins it), or set train.tensorboard=false"
        ) from None


def keep_until(path: Path, step: int) -> None:
    """Drop the records past `step` (and a line a crash cut short): they will be written again."""
    if step == 0:
        path.unlink(missing_ok=True)
        return
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and record["step"] <= step:
            kept.append(line + "\n")
    atomic_write_text(path, "".join(kept))


def finite(x: float | None) -> float | None:
    """JSON has no inf or nan: a skipped step's gradient norm is recorded as null."""
    return x if x is not None and math.isfinite(x) else None


class StepLog:
    """The step records of one fold; every rank calls add() at every optimizer step (a record sums all ranks)."""

    def __init__(self, cfg: Config, fold: int, d: distributed.Dist, step: int, carry: dict | None,
                 smoke: bool = False) -> None:  # fmt: skip
        # a smoke run (train.max_steps) is a few steps: each one a record, or its curves would be a point or none
        self.every, self.d = 1 if smoke and cfg.train.log_every_steps else cfg.train.log_every_steps, d
        self.path = layout.fold_dir(cfg, fold) / layout.STEPS
        self.since = Since(**carry) if carry else Since()
        self.start, self.tb, self.opened = step, None, False
        self.tb_folder = layout.tensorboard_dir(cfg, fold) if cfg.train.tensorboard else None

    def open(self) -> None:
        """Rank 0, before the first record or resume state (not before: a run stopped at its first step leaves an
        earlier run's records as they were): drop the records past the step the fold starts at, open TensorBoard."""
        if self.opened:
            return
        self.opened = True
        keep_until(self.path, self.start)
        if self.tb_folder is not None:
            from torch.utils.tensorboard import SummaryWriter

            if self.start == 0:  # a fold trained again from its start: the events of the earlier run go
                shutil.rmtree(self.tb_folder, ignore_errors=True)
            # purge_step: events a crashed run wrote past the resumed step are hidden, not shown twice. The resumed
            # step itself was recorded before its state was saved and is not recorded again: it is kept
            self.tb = SummaryWriter(str(self.tb_folder), purge_step=self.start + 1 if self.start else None)

    def add(
        self, step: int, epoch: int, window: Window, lr: dict[str, float], scale: float | None, peak_mb: float
    ) -> None:
        """Optimizer step `step` (counted over the whole fold) is done; every `every` steps, a record."""
        s = self.since
        s.loss, s.examples, s.tokens = s.loss + window.loss, s.examples + window.examples, s.tokens + window.tokens
        s.skipped += not window.stepped
        s.seconds += window.seconds
        if not self.every or step % self.every:
            return
        # every rank's rows; the time is rank 0's (the ranks step together)
        sums = distributed.gather_objects(self.d, (s.loss, s.examples, s.tokens))
        loss, examples, tokens = (sum(x) for x in zip(*sums))
        seconds = max(s.seconds, 1e-9)
        record = {
            "step": step,
            "epoch": epoch + 1,
            "loss": loss / max(examples, 1),
            "lr": lr,
            "grad_norm": finite(window.grad_norm),
            "loss_scale": scale,
            "skipped": s.skipped,
            "examples_per_second": round(examples / seconds, 2),
            "tokens_per_second": round(tokens / seconds, 1),
            "peak_memory_mb": round(peak_mb, 1),
        }
        self.since = Since()
        if self.d.is_main:
            self.open()
            with files.disk_full(self.path), open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
            self.scalars("train", step, {k: v for k, v in record.items() if k not in ("step", "epoch")})

    def evaluation(self, record: dict) -> None:
        """An evaluation's AUC (overall and per language) beside the training scalars."""
        if self.d.is_main and record.get("auc") is not None:
            per = {f"auc_{lang}": v for lang, v in record["auc_per_lang"].items()}
            self.scalars("valid", record["step"], {"auc": record["auc"], **per})

    def scalars(self, group: str, step: int, values: dict) -> None:
        self.open()
        if self.tb is None:
            return
        for key, value in values.items():
            for name, v in value.items() if isinstance(value, dict) else [("", value)]:  # lr: one a group
                if v is not None:
                    self.tb.add_scalar(f"{group}/{key}/{name}".rstrip("/"), v, step)
        self.tb.flush()

    def carry(self) -> dict:
        """For the resume state: the steps since the last record."""
        return dataclasses.asdict(self.since)

    def close(self) -> None:
        if self.d.is_main:
            self.open()  # a fold that wrote no record keeps none of an earlier run's
        if self.tb is not None:
            self.tb.close()
