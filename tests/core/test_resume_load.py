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
