"""A resume state read back (pipeline.core.resume.read_state): with torch.load(weights_only=True), never plain
pickle. A crafted file runs no code and stops the run in one line naming it; a state this version saves loads
whole, its random states and predictions as they were."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline import layout
from pipeline.core import foldstate, resume
from pipeline.core.resume import FoldState
from pipeline.errors import PipelineError
from tests.helpers.pickles import write_crafted_state, write_older_state


def test_the_crafted_state_really_runs_code_when_unpickled(tmp_path: Path) -> None:
    """The payload the next test refuses is real: plain pickle (weights_only=False) creates its marker."""
    write_crafted_state(tmp_path / layout.RESUME, tmp_path / "ran")
    torch.load(tmp_path / layout.RESUME, weights_only=False)
    assert (tmp_path / "ran").exists()


@pytest.mark.parametrize("mmap", [False, True])  # make train's look before any fold starts maps it
def test_a_crafted_resume_state_runs_no_code_and_is_refused_in_one_line(tmp_path: Path, mmap: bool) -> None:
    path = tmp_path / "models" / "sample" / "fold0" / layout.RESUME
    write_crafted_state(path, tmp_path / "ran")
    with pytest.raises(PipelineError) as err:
        resume.read_state(path, mmap=mmap)
    assert not (tmp_path / "ran").exists()
    assert str(path) in str(err.value) and "not a resume state this version can load safely" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(PipelineError, match="load safely"):  # the fold's own load: the same refusal
        resume.load_resume(path, "digest", 1)
    assert not (tmp_path / "ran").exists()


def test_a_state_an_older_version_saved_is_refused_not_unpickled(tmp_path: Path) -> None:
    path = tmp_path / layout.RESUME
    write_older_state(path)
    with pytest.raises(PipelineError, match=f"{path} is not a resume state .* delete it to train that fold"):
        resume.read_state(path)


def test_a_saved_state_loads_safely_with_its_random_states_and_predictions(tmp_path: Path) -> None:
    resume.set_seed(3)
    saved = resume.rng_state()
    want = (random.random(), np.random.rand(), torch.rand(1).item())
    progress = FoldState(epoch=1, predictions={4: np.linspace(0, 1, 5, dtype=np.float32)})
    progress.history.append({"auc": np.float64(0.75)})  # a numpy number: stored as a Python float
    model = torch.nn.Linear(2, 1)
    state = foldstate.resume_state(progress, {"model": model.state_dict(), "seconds": 2.0}, None, [{}], [saved])
    foldstate.write_state(tmp_path / layout.RESUME, state, model)

    loaded = resume.read_state(tmp_path / layout.RESUME)
    assert torch.load(tmp_path / layout.RESUME, weights_only=True)["epoch"] == 1  # no class allowed beyond torch's
    resume.set_rng_state(resume.own_rng(loaded, 0))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == want
    back = resume.fold_state(loaded)
    assert isinstance(back.predictions[4], np.ndarray)
    np.testing.assert_array_equal(back.predictions[4], progress.predictions[4])
    assert back.history == [{"auc": 0.75}] and type(back.history[0]["auc"]) is float


class FakeCuda:
    """torch.cuda's random-state calls on `visible` devices, each device's state a tensor holding its index; setting
    a device that is not visible fails as torch's does (IndexError)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, visible: int, current: int = 0) -> None:
        self.visible, self.set = visible, {}
        for name, fake in [("is_available", lambda: True), ("current_device", lambda: current),
                           ("get_rng_state", self.get), ("set_rng_state", self.put),
                           ("get_rng_state_all", lambda: [self.get(i) for i in range(self.visible)]),
                           ("set_rng_state_all", self.put_all)]:  # fmt: skip
            monkeypatch.setattr(torch.cuda, name, fake)

    def index(self, device) -> int:
        index = device if isinstance(device, int) else torch.device(device).index
        index = 0 if index is None else index
        if index >= self.visible:
            raise IndexError(f"device {index} of {self.visible}")
        return index

    def get(self, device="cuda") -> torch.Tensor:
        return torch.full((4,), self.index(device), dtype=torch.uint8)

    def put(self, state: torch.Tensor, device="cuda") -> None:
        self.set[self.index(device)] = state.clone()

    def put_all(self, states) -> None:
        for i, state in enumerate(states):
            self.put(state, i)


def test_a_state_saved_with_more_gpus_visible_restores_on_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Saved where 4 GPUs were visible, resumed where 1 is: its own device's state is restored, no IndexError."""
    FakeCuda(monkeypatch, visible=4)
    saved = resume.rng_state()  # the current device (a process on cuda:0)
    model = torch.nn.Linear(2, 1)
    state = foldstate.resume_state(FoldState(), {"model": model.state_dict(), "seconds": 0.0}, None, [{}], [saved])
    foldstate.write_state(tmp_path / layout.RESUME, state, model)
    loaded = resume.read_state(tmp_path / layout.RESUME)  # weights_only=True: the CUDA state is a plain tensor

    one = FakeCuda(monkeypatch, visible=1)
    resume.set_rng_state(resume.own_rng(loaded, 0))
    assert list(one.set) == [0]
    assert one.set[0].tolist() == [0] * 4


@pytest.mark.parametrize("device, restored", [(torch.device("cuda:2"), 2), (torch.device("cuda"), 1), (None, 1)])
def test_an_older_state_of_every_device_restores_only_this_processes_own(
    monkeypatch: pytest.MonkeyPatch, device, restored: int
) -> None:
    """An older state held every visible device's state: a process reads its own device's entry (`cuda` alone:
    the current device), and sets that device only."""
    resume.set_seed(1)
    state = resume.rng_state()  # no CUDA here: its CPU states
    state["cuda"] = [torch.full((4,), i, dtype=torch.uint8) for i in range(4)]
    cuda = FakeCuda(monkeypatch, visible=4, current=1)
    resume.set_rng_state(state, device)
    assert list(cuda.set) == [restored] and cuda.set[restored].tolist() == [restored] * 4


def test_an_older_state_without_this_devices_entry_leaves_its_cuda_state(monkeypatch: pytest.MonkeyPatch) -> None:
    state = {**resume.rng_state(), "cuda": [torch.zeros(4, dtype=torch.uint8)]}
    cuda = FakeCuda(monkeypatch, visible=4)
    resume.set_rng_state(state, torch.device("cuda:3"))
    assert cuda.set == {}


def test_a_rank_besides_the_first_maps_the_resume_state_and_leaves_its_weights(tmp_path: Path, monkeypatch) -> None:
    """Under DDP only rank 0 reads the state whole (its weights are what DDP copies); the others map it, so the host
    holds one copy, not one a process, and keep no view of the mapped file once their fold has started."""
    from pipeline.core import distributed

    path = tmp_path / layout.RESUME
    torch.save({"digest": "d", "token": "t", "world": 2, "model": {"w": torch.ones(4)},
                "predictions": {4: torch.arange(5.0)}}, path)  # fmt: skip
    reads, real = [], resume.read_state
    monkeypatch.setattr(resume, "read_state", lambda p, mmap=False: reads.append(mmap) or real(p, mmap=mmap))
    monkeypatch.setattr(distributed, "broadcast_object", lambda d, obj: "t")  # rank 0's token
    monkeypatch.setattr(distributed, "any_rank", lambda d, flag: flag)
    state = resume.load_resume_everywhere(path, "d", distributed.Dist(rank=1, world=2))
    assert reads == [True] and state["token"] == "t" and "model" not in state
    kept = resume.predictions(state)[4]
    np.testing.assert_array_equal(kept, np.arange(5.0))
    assert not np.shares_memory(kept, state["predictions"][4].numpy())
    reads.clear()
    assert "model" in resume.load_resume_everywhere(path, "d", distributed.Dist(rank=0, world=2)) and reads == [False]
