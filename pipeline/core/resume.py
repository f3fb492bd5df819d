"""Resume states: where a fold is, saved so that an interrupted run continues exactly where it stopped.

A state (fold<k>/resume.pt) holds the weights (a LoRA fold's adapters and head, never its frozen base, which is
built again), the optimizer, the schedule, the GradScaler, where the epoch is (`FoldState`) and every rank's
random state, so that a resumed run ends with the same weights and OOF as an uninterrupted one, under DDP too.
It is saved at each epoch end, every `train.save_every_steps` optimizer steps, and at the next optimizer step
after SIGINT or SIGTERM. It holds only tensors and plain Python values (saved_form), so that it is read back with
torch.load(weights_only=True): a resume.pt from elsewhere (another user's kernel output) never runs code.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import random
import signal
import sys
from pathlib import Path

import numpy as np
import torch

from pipeline import fingerprint
from pipeline.core import distributed
from pipeline.core.loop import StepState
from pipeline.errors import PipelineError


class Interrupted(PipelineError):
    """A stop the user asked for (Ctrl-C, SIGTERM), the resume state saved: said as a stop, not as an error."""

    exit_code = 130  # what shells expect of a run stopped by Ctrl-C
    asked = True  # pipeline.errors.run_stage: `stopped: ...`


class TimeUp(Interrupted):
    """The run's deadline came (a Kaggle session's limit): the state is saved; the next session continues."""

    exit_code = 75  # eta.TIME_UP_EXIT: tells the notebook a stop for time from a failure
    planned = True  # pipeline.errors.run_stage says it once, as a stop and not an error


@dataclasses.dataclass
class FoldState:
    """Where a fold is: a resume state is this, the weights, the optimizer and the random states.

    `step.window == windows` with no evaluation at the epoch's last step means: trained, not yet evaluated.
    `history` holds every evaluation; `best` the best one's AUC, epoch and step (counted over the fold) and
    `since`: the evaluations after it without a better AUC (train.patience stops the fold).
    """

    epoch: int = 0
    step: StepState = dataclasses.field(default_factory=StepState)
    history: list = dataclasses.field(default_factory=list)
    best: dict = dataclasses.field(default_factory=lambda: {"auc": -1.0, "epoch": -1, "step": -1, "since": 0})
    steplog: dict = dataclasses.field(default_factory=dict)  # core.steplog's sums since its last record
    seconds: float = 0.0  # the time the fold ran before this process, up to the state's save
    # each evaluation's predictions of the fold's rows, by its step: the OOF's held-out choice is made from them
    predictions: dict = dataclasses.field(default_factory=dict)
    # train.eval_ensemble = N: the test predictions of the last N evaluations, by step (their mean is the fold's)
    test_predictions: dict = dataclasses.field(default_factory=dict)


class StopFlag:
    """SIGINT and SIGTERM set a flag; the loop saves a resume state at the next optimizer step and exits. So does
    distributed.LAUNCHER_GONE (torchrun's launcher died), however often it comes."""

    def __init__(self) -> None:
        self.raised = False
        self.previous = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM, distributed.LAUNCHER_GONE):
            self.previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        gone = signum == distributed.LAUNCHER_GONE
        if self.raised and gone:
            return  # sent once for each thread of the launcher that ended
        if self.raised:  # a second Ctrl-C means now
            raise KeyboardInterrupt
        self.raised = True
        if os.environ.get("RANK", "0") == "0":  # every process of a torchrun group gets it: one says so
            why = "the launcher is gone" if gone else signal.Signals(signum).name
            print(f"\n{why}: saving a resume state at the next optimizer step", file=sys.stderr)

    def __exit__(self, *exc) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds CUDA too


# cuBLAS's fixed workspace, which its deterministic mode needs: read once, when cuBLAS first runs
CUBLAS_WORKSPACE = ("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def set_deterministic(on: bool) -> None:
    """train.deterministic: on a GPU, repeatable training (a resumed fold bit for bit an uninterrupted one, as on a
    CPU). Deterministic kernels only, and torch says which op has none; cuBLAS's workspace fixed (set before CUDA
    first runs a product: a user's own value kept); no cuDNN autotuning, whose choice of kernel varies. Off leaves
    torch's defaults: fast kernels whose sums may differ in the last bits from run to run."""
    if on:
        os.environ.setdefault(*CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.benchmark = False  # autotuning may pick another kernel from run to run; off by default too


def cuda_index(device: torch.device | None = None) -> int:
    """The CUDA device whose random state a process saves and restores: its own (`device`, else the current one)."""
    if device is not None and device.type == "cuda" and device.index is not None:
        return device.index
    return torch.cuda.current_device()


def rng_state(device: torch.device | None = None) -> dict:
    """This process's random states; on CUDA its own device's only (`device`): a state saved where more GPUs were
    visible than where it is resumed still restores (every device's state could not be set on fewer)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    # numpy's keys as a list of ints: a numpy array in the state would need numpy's classes to load (read_state)
    numpy_state = (name, keys.tolist(), pos, has_gauss, gauss)
    state = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state(cuda_index(device))
    return state


def set_rng_state(state: dict, device: torch.device | None = None) -> None:
    torch.set_rng_state(state["torch"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    if "cuda" not in state or not torch.cuda.is_available():
        return
    index, cuda = cuda_index(device), state["cuda"]
    if isinstance(cuda, (list, tuple)):  # saved by an older version: every visible device's, this one's by index
        cuda = cuda[index] if index < len(cuda) else None
    if cuda is not None:
        torch.cuda.set_rng_state(cuda, index)


def saved_form(value):
    """`value` as a resume state stores it: numpy arrays as tensors, numpy scalars as Python numbers, so that
    read_state loads it with weights_only=True and no numpy class allowed (fold_state turns predictions back)."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))  # from_numpy refuses negative strides
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: saved_form(v) for k, v in value.items()}
    if type(value) in (list, tuple):  # exactly these: a named tuple is not rebuilt from a generator
        return type(value)(saved_form(v) for v in value)
    return value


def read_state(path: Path, mmap: bool = False) -> dict | None:
    """The resume state at `path`, or None where there is none; a damaged one is refused, never half-loaded.
    `mmap`: its tensors mapped, not read (a look at what it holds, whatever its size).

    Loaded with weights_only=True, never by plain pickle: a file holding anything but tensors and plain values
    (one an older version saved, or a crafted one from another user's kernel output) stops the run in one line.
    """
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError:  # the safe loader refused a class: unpickling it could run any code
        raise PipelineError(
            f"{path} is not a resume state this version can load safely (it holds more than tensors and plain "
            "values: saved by an older version, or not by this pipeline); delete it to train that fold from its start"
        ) from None
    except Exception as e:  # a damaged state is refused, not half-loaded
        print(f"warning: {path} is unreadable ({type(e).__name__}); starting the fold again", file=sys.stderr)
        return None


def verdict(state: dict, digest: str, made: dict | None, world: int) -> tuple[bool, str]:
    """(whether this run continues `state`, what to say): the settings it carries over that differ (a
    fingerprint.RESUMABLE one, as 'train.patience (8 here, 6 when saved)'), or why it cannot be continued."""
    same = state.get("digest") == digest
    carried = made is not None and state.get("resume_key") == fingerprint.resume_key(made)
    if not same and not carried:
        return False, f"{what_changed(state.get('made_from'), made)}, which changes the weights trained so far"
    saved_world = state.get("world", 1)
    if saved_world != world:  # the batch plan (and so a step's rows) depends on the world size
        saved = f"{saved_world} process{'es' if saved_world > 1 else ''}"
        return False, f"it was saved by {saved} and this run has {world} (run with GPUS={saved_world} to resume)"
    return True, "" if same else fingerprint.differ(made["settings"], state["made_from"]["settings"], "when saved")


def what_changed(saved: dict | None, made: dict | None, when: str = "saved") -> str:
    """Why what a state (or a complete fold: `when` "trained") was made from, `saved`, is not this run's `made`."""
    if not isinstance(saved, dict) or made is None:  # saved before it recorded what it was made from
        return f"it was {when} with other data or settings"
    if saved.get("table") != made["table"]:
        return f"the training table changed since it was {when} (`make data` rebuilt it)"
    if saved.get("model") != made["model"]:
        return f"the model the fold starts from changed since it was {when}"
    if saved.get("relabel") != made.get("relabel"):
        return f"the relabelled targets (data.relabel_from, data.relabel_weight) changed since it was {when}"
    return fingerprint.differ(made["settings"], saved.get("settings") or {}, f"when {when}") or "other settings"


def load_resume(path: Path, digest: str, world: int, made: dict | None = None, mmap: bool = False) -> dict | None:
    """The saved state of an interrupted fold, or None where there is none this run can continue (`make
    train` says why before any fold starts: pipeline.train). `mmap`: its tensors mapped, not read."""
    state = read_state(path, mmap=mmap)
    return state if state is not None and verdict(state, digest, made, world)[0] else None


def load_resume_everywhere(path: Path, digest: str, d: distributed.Dist, made: dict | None = None) -> dict | None:
    """Rank 0's resume state on every rank, the model weights left out (DDP copies rank 0's weights).

    Rank 0 decides whether there is a state; a rank that sees the same file (a shared folder) maps it
    itself, and only when some rank cannot (another node) does rank 0 send it. The other ranks map it (mmap):
    what they use of it (the optimizer's moments, their random state) is read page by page as it is copied,
    and the weights, a third of it, are never read, so the host holds one copy of the state (rank 0's), not
    one a process (2 x 6.7 GB for XLM-R large on a 29 GB Kaggle notebook: pipeline.kaggle.memory counts it).
    """
    state = load_resume(path, digest, d.world, made) if d.is_main else None
    if not d.enabled:
        return state
    token = distributed.broadcast_object(d, state.get("token", "") if state else None)
    if token is None:
        return None
    if not d.is_main:
        mine = load_resume(path, digest, d.world, made, mmap=True)
        state = mine if mine is not None and mine.get("token") == token else None
        if state is not None:
            state = {k: v for k, v in state.items() if k != "model"}  # DDP copies rank 0's weights
    if distributed.any_rank(d, state is None):
        sent = distributed.broadcast_object(d, {k: v for k, v in state.items() if k != "model"} if d.is_main else None)
        state = state or sent
    return state


def fold_state(state: dict, rank: int = 0) -> FoldState:
    """The FoldState a saved state holds, with this rank's step-record sums."""
    best = {**FoldState().best, **state["best"]}
    carries = state.get("steplog") or []
    step = StepState(**state["step"])
    if "seconds" in state:
        seconds = state["seconds"]
    else:  # saved before states kept their time: each earlier epoch's last record, and this epoch's training
        last = {h["epoch"]: h["seconds"] for h in state["history"] if h["epoch"] <= state["epoch"]}
        seconds = sum(last.values()) + step.seconds
    return FoldState(state["epoch"], step, state["history"], best,
                     carries[rank] if rank < len(carries) else {}, seconds,
                     predictions(state), predictions(state, "test_predictions"))  # fmt: skip


def predictions(state: dict, key: str = "predictions") -> dict:
    """A state's predictions by step (`key`: of the fold's rows, or test_predictions) as numpy arrays (saved_form
    stored them as tensors)."""
    saved = state.get(key) or {}
    # copies: a view of a mapped state (another rank's: load_resume_everywhere) would keep its file, and the disk
    # space of every state saved since, held until the fold ends
    return {step: p.numpy().copy() if isinstance(p, torch.Tensor) else p for step, p in saved.items()}


def own_rng(state: dict, rank: int) -> dict:
    """This rank's random state from a saved state (each rank its own: dropout differs from rank to rank)."""
    return state["rng"][rank] if isinstance(state["rng"], list) else state["rng"]  # older states: one
