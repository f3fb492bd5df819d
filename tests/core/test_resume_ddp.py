"""A DDP run (2 gloo processes) stopped mid-epoch and resumed ends exactly where an uninterrupted one does, its
weight average (train.average, scored by each rank on its share of the rows) included.

Rank 1 writes to a models folder of its own, as a rank on another node without a shared folder would:
it never sees rank 0's resume.pt or done.json, so it must get the decisions and the state from rank 0.
Dropout is on, so each rank's own random state matters: restoring rank 0's on both would differ.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = [
    "data.sample_scale=0.3",
    "data.folds=2",
    "train.folds=[0]",
    "model.tiny.hidden=32",
    "model.tiny.intermediate=64",
    "model.tiny.vocab=500",
    "model.max_length=48",
    "train.epochs=2",
    "train.micro_batch=8",
    "train.accumulation=1",
    "train.precision=fp32",
    "train.save_every_steps=2",
    "train.eval_every_steps=3",  # evaluations inside epochs: each rank scores its share, rank 0 decides
    "train.log_every_steps=2",
]

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def launch(base: Path, inputs: Path, extra: tuple[str, ...] = ()) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for rank in (0, 1):
        models = base / ("models" if rank == 0 else "models-rank1")
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "TQDM_DISABLE": "1",
        }
        args = [f"input_dir={inputs}", f"models_dir={models}", f"submissions_dir={base / 'subs'}", *SETTINGS, *extra]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "pipeline.train", "--config", "sample", *args],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def finish(procs: list[subprocess.Popen], ok: bool = True) -> str:
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:  # a rank waiting forever at a collective
            for q in procs:
                q.kill()
            pytest.fail("the ranks hung: they disagree about what to run")
        outs.append(out)
        assert (p.returncode == 0) == ok, out[-3000:]
    return outs[0]


def metrics_lines(base: Path) -> list[dict]:
    return [json.loads(x) for x in (base / "models" / "sample" / "fold0" / "metrics.jsonl").read_text().splitlines()]


def epoch_ends(history: list[dict]) -> list[dict]:
    """Each epoch's last evaluation (its end): its steps_run counts the epoch's steps this process ran."""
    return [h for i, h in enumerate(history) if i + 1 == len(history) or history[i + 1]["epoch"] != h["epoch"]]


def oof(base: Path) -> pd.DataFrame:
    return pd.read_csv(base / "models" / "sample" / "fold0" / "oof.csv", dtype={"id": str}).sort_values("id")


def prepare(tmp_path: Path) -> Path:
    """`make data` for SETTINGS under tmp_path: the inputs folder."""
    inputs = tmp_path / "input"
    subprocess.run(
        [sys.executable, "-m", "pipeline.data", "--config", "sample", f"input_dir={inputs}", *SETTINGS],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env={**os.environ, "TQDM_DISABLE": "1"},
    )
    return inputs


AVERAGE = ("train.average=swa", "train.average_start=0.25")  # scored at every evaluation, kept in the resume state


def test_resumed_ddp_run_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    inputs = prepare(tmp_path)
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    finish(launch(reference, inputs, AVERAGE))

    procs = launch(resumed, inputs, AVERAGE)
    state = resumed / "models" / "sample" / "fold0" / "resume.pt"
    end = time.time() + 240
    while not state.exists() and time.time() < end and procs[0].poll() is None:
        time.sleep(0.05)
    assert procs[0].poll() is None, "training ended before it could be stopped"
    for p in procs:  # as a job scheduler stops every process of a job
        p.send_signal(signal.SIGTERM)
    out = finish(procs, ok=False)
    assert "resumes from there" in out

    out = finish(launch(resumed, inputs, AVERAGE))
    assert "fold 0: resuming at epoch" in out
    assert not (resumed / "models-rank1" / "sample" / "fold0" / "resume.pt").exists()  # rank 1 never saw one
    history, full = (metrics_lines(b) for b in (resumed, reference))
    # the resumed epoch ran only the steps after the saved one
    assert sum(h["steps_run"] for h in epoch_ends(history)) < sum(h["steps_run"] for h in epoch_ends(full))
    assert [(h["step"], round(h["auc"], 9)) for h in history] == [(h["step"], round(h["auc"], 9)) for h in full]
    got, want = oof(resumed), oof(reference)
    assert list(got["id"]) == list(want["id"])
    assert (got["pred"] - want["pred"]).abs().max() < 1e-6
    done = [json.loads((b / "models" / "sample" / "fold0" / "done.json").read_text()) for b in (resumed, reference)]
    assert done[0]["best_step"] == done[1]["best_step"]
    records = [b / "models" / "sample" / "fold0" / "steps.jsonl" for b in (resumed, reference)]
    steps = [[json.loads(x) for x in r.read_text().splitlines()] for r in records]
    assert [r["step"] for r in steps[0]] == [r["step"] for r in steps[1]]  # every record once, none missing
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(*steps)) < 1e-6  # the loss of both ranks' rows

    out = finish(launch(resumed, inputs, AVERAGE))  # rank 1 has no done.json: rank 0's decides
    assert "fold 0: complete with these settings" in out


def test_ranks_agree_on_an_ensembled_folds_test_predictions(tmp_path: Path) -> None:
    """train.eval_ensemble under DDP: each rank predicts its share of the test rows at every evaluation, gathered
    so that both hold every row; rank 0 alone writes the mean, one prediction for each test row."""
    inputs = prepare(tmp_path)
    finish(launch(tmp_path, inputs, ("train.eval_ensemble=2",)))
    folder = tmp_path / "models" / "sample" / "fold0"
    test = pd.read_csv(folder / "test.csv", dtype={"id": str}, keep_default_na=False)
    table = pd.read_csv(inputs / "prepared" / "sample" / "test.csv", dtype={"id": str}, keep_default_na=False)
    assert list(test["id"]) == list(table["id"])
    assert test["toxic"].between(0, 1).all() and test["toxic"].nunique() > 1
    done = json.loads((folder / "done.json").read_text())
    assert done["ensemble_steps"] == [h["step"] for h in metrics_lines(tmp_path)][-2:]
    assert not (tmp_path / "models-rank1" / "sample" / "fold0" / "test.csv").exists()  # rank 0 writes
