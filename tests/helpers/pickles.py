"""A resume.pt whose unpickling runs code: what a file from another user's Kaggle kernel output could hold."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch


class Payload:
    """Unpickled, it creates `marker`: any other code would run the same way."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")  # pickle calls open(marker, "w") to rebuild it


def write_crafted_state(path: Path, marker: Path) -> None:
    """A state that looks like a resume state (an epoch, a world) with the payload inside."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 0, "world": 2, "step": {"window": 1}, "rng": Payload(marker)}, path)


def write_older_state(path: Path) -> None:
    """A state as versions before the safe load saved it: numpy's random state as numpy's own array."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 0, "world": 1, "step": {"window": 1}, "rng": {"numpy": np.random.get_state()}}, path)
