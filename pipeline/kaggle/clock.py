"""A Kaggle session's clock: when the session ends, what must still fit after training stops, and the deadline
the train stage gets from it.

The session ends `kaggle.time_limit_h` after the notebook starts, or at `kaggle.timeout` when that is shorter.
When training stops (at a fold's end, or cut at the deadline) the notebook still has to save the resume state,
copy it and the fold's weights into /kaggle/working, and predict test with a fold that just completed; so
training stops early enough for those, plus `kaggle.margin_minutes` kept free for what cannot be measured here
(Kaggle saving the output after the code ends). Each cost is estimated from the model's size and the time plan
until the session measures it: the copy rate at each copy into working, a fold's predict when it runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pipeline.core import eta
from pipeline.kaggle import disk, hours
from pipeline.schema import Config

MEASURABLE_BYTES = 100e6  # a copy this large or larger measures the disk; a smaller one is mostly overhead
# how long past its deadline a train stage under torchrun may run (besides saving its resume state) before it is taken
# for hung and stopped: the deadline check is itself a collective, so a hang in NCCL never reaches it
HANG_GRACE_S = 300.0


@dataclass
class SessionClock:
    start: float  # when the notebook started (eta.now())
    end: float  # when the session ends
    margin: float  # seconds kept free besides the measured costs (kaggle.margin_minutes)
    state_bytes: float  # a resume state (12 bytes a trained parameter)
    weights_bytes: float  # a fold's weights (4 bytes a trained parameter)
    predict_seconds: float  # one fold's test predictions: the time plan's estimate until one is measured
    copy_rate: float = hours.WRITE_BYTES_PER_SECOND  # bytes a second written into working: assumed until measured
    measured: tuple[str, ...] = ()  # which of the costs above were measured in this session
    trained: bool = False  # a train stage of this session has trained: its first epoch is behind it

    @classmethod
    def begin(cls, cfg: Config, start: float) -> SessionClock:
        k, limit = cfg.kaggle, hours.session_seconds(cfg)
        arch = disk.model_architecture(cfg)
        params = disk.trained_parameters(cfg, arch) if arch else 0  # a LoRA fold saves its adapters and head
        predict = hours.plan_time(cfg, 1).predict_seconds
        return cls(start, start + limit, k.margin_minutes * 60, 12.0 * params, 4.0 * params, predict)

    def costs(self) -> dict[str, float]:
        """What must fit between the deadline and the session's end, in seconds."""
        return {
            "saving a resume state": self.state_bytes / self.copy_rate,
            "copying it and the weights into working": (self.state_bytes + self.weights_bytes) / self.copy_rate,
            "predicting test with a fold": self.predict_seconds,
        }

    def reserve(self) -> float:
        return self.margin + sum(self.costs().values())

    def deadline(self) -> float:
        return self.end - self.reserve()

    def arm(self) -> None:
        """The deadline, a whole session's training time and whether the session has trained yet, for the train
        stage (read by pipeline.core.eta)."""
        os.environ[eta.DEADLINE_ENV] = repr(self.deadline())
        os.environ[eta.SESSION_ENV] = repr(max(0.0, self.end - self.start - self.reserve()))
        os.environ[eta.TRAINED_ENV] = "1" if self.trained else ""

    def train_timeout(self) -> float:
        """Seconds from now a train stage under torchrun may run: to the deadline, then the time its resume state
        takes to save, plus HANG_GRACE_S; past that it is hung (pipeline.notebook stops it with every worker)."""
        return max(0.0, self.deadline() - eta.now()) + self.costs()["saving a resume state"] + HANG_GRACE_S

    def copied(self, nbytes: int, seconds: float) -> None:
        if nbytes >= MEASURABLE_BYTES and seconds > 0:
            self.copy_rate = nbytes / seconds
            self.measured = tuple(dict.fromkeys([*self.measured, "copy rate"]))

    def predicted(self, seconds: float) -> None:
        self.predict_seconds = seconds
        self.measured = tuple(dict.fromkeys([*self.measured, "predict"]))

    def describe(self) -> str:
        """`training stops 34m before the session's end (...)`: the reserve and what it is made of."""
        parts = [f"{eta.hours(s)} {what}" for what, s in self.costs().items()]
        how = f"measured: {', '.join(self.measured)}" if self.measured else "estimates until measured"
        return (
            f"training stops {eta.hours(self.reserve())} before the session's end ({eta.hours(self.end - self.start)} "
            f"after its start): {eta.hours(self.margin)} kept free (kaggle.margin_minutes), {', '.join(parts)} "
            f"({how}, copies at {self.copy_rate / 1e6:.0f} MB/s)"
        )
