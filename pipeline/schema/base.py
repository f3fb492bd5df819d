"""What a setting is: its field and metadata (`setting`, `section`), its role in what a result is made from,
the ranges the loader checks, and the plain reading of a config (`plain`, `value_of`, `is_section`)."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass, field

WEIGHTS, NEVER, LATER = "weights", "never", "later"  # a setting's role in what a result is made from


@dataclass(frozen=True)
class Setting:
    """What a field's metadata holds (see `setting`)."""

    doc: str
    choices: tuple = ()
    check: Callable[[typing.Any], bool] | None = None
    allowed: str = ""  # the range as the error states it
    role: str = WEIGHTS
    # (dotted key, value): counts only while that key has that value (or, an Above or a Given, holds for it)
    when: tuple[str, typing.Any] | None = None
    resumable: bool = False  # decides only when a fold is evaluated and stops: a resume state continues under another


def setting(default, doc: str, *, choices: tuple = (), within: tuple | None = None, role: str = WEIGHTS,
            when: tuple[str, typing.Any] | None = None, resumable: bool = False):  # fmt: skip
    """A config field: its default and everything else about it (`within`: (test, the range in words))."""
    check, allowed = within if within else (None, "")
    meta = Setting(doc, choices, check, allowed, role, when, resumable)
    return field(default=default, metadata={"setting": meta})


def section(cls, doc: str, *, when: tuple[str, typing.Any] | None = None):
    """A nested section of the config (its keys are `<name>.<key>`), in a fingerprint as one value."""
    return field(default_factory=cls, metadata={"setting": Setting(doc, when=when)})


@dataclass(frozen=True)
class Above:
    """A `when` value that is a bound: the setting counts while the other one is above it (LoRA while r > 0)."""

    bound: float

    def holds(self, value) -> bool:
        return value > self.bound

    def __str__(self) -> str:
        return f"> {self.bound:g}"


@dataclass(frozen=True)
class Given:
    """A `when` value: the setting counts while the other one is set, not empty (a teacher's weight while there is
    a teacher)."""

    def holds(self, value) -> bool:
        return bool(value)

    def __str__(self) -> str:
        return "is set"


@dataclass(frozen=True)
class OneOf:
    """A `when` value: the setting counts while the other one is any of these (where an average lives while
    there is one)."""

    values: tuple

    def holds(self, value) -> bool:
        return value in self.values

    def __str__(self) -> str:
        return "in " + ", ".join(map(str, self.values))


CONDITIONS = (Above, Given, OneOf)  # the `when` values that hold or not, beside a plain value that must be equal


def _finite(x: float) -> bool:
    return math.isfinite(x)


def at_least(n: int, note: str = "") -> tuple:
    return (lambda v: v >= n), f"an integer >= {n}{note}"


POSITIVE = (lambda v: _finite(v) and v > 0), "a finite number > 0"
NON_NEGATIVE = (lambda v: _finite(v) and v >= 0), "a finite number >= 0"
FRACTION = (lambda v: 0 <= v < 1), "a number in [0, 1)"
# numpy's and scikit-learn's seeds are 32-bit unsigned: -1 or 2**32 would stop the stage with their traceback
SEED = (lambda v: 0 <= v < 2**32), "an integer in [0, 4294967295]"


def plain(x):
    """Tuples as lists, so that the dict is plain JSON/YAML."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


def value_of(cfg, dotted: str):
    """The value of a dotted key (`train.lr`) in a config."""
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def is_section(f: dataclasses.Field) -> bool:
    return f.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(f.default_factory)
