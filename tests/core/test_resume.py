"""Nothing lost: `make train` killed at several moments, run again, ends with the uninterrupted OOF."""

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
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
# five trainings of a tiny model: about a minute each here, several on a loaded machine. The test's timeout is the
# one limit, set high, so that a slow machine passes slowly; no wait below gives up on its own first (a fixture
# that did errored, where nothing was wrong)
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]


def overrides(base: Path) -> list[str]:
    return [
        f"input_dir={base / 'input'}",
        f"models_dir={base / 'models'}",
        f"submissions_dir={base / 'submissions'}",
        "data.sample_scale=0.3",
        "data.folds=2",
        "model.tiny.hidden=32",
        "model.tiny.intermediate=64",
        "model.tiny.vocab=500",
        "model.max_length=48",
        "train.epochs=2",
        "train.precision=fp32",
        "train.save_every_steps=3",
        "train.eval_every_steps=4",  # evaluations inside epochs too: the best of them is kept
        "train.log_every_steps=2",
    ]


STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def no_run_left_behind():
    """A test stopped by its timeout leaves no training running on the machine."""
    yield
    for p in STARTED:
        if p.poll() is None:
            p.kill()
            p.wait()
    STARTED.clear()


def stage(module: str, base: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    STARTED.append(
        p := subprocess.Popen(
            [sys.executable, "-m", module, "--config", "sample", *overrides(base)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    )
    return p


def run_to_end(module: str, base: Path) -> str:
    p = stage(module, base)
    out, _ = p.communicate()  # however long it takes: the test's timeout is the limit
    assert p.returncode == 0, out
    return out


def oof(base: Path) -> pd.DataFrame:
    return pd.read_csv(base / "models" / "sample" / "oof.csv", dtype={"id": str}).sort_values("id")


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("reference")
    run_to_end("pipeline.data", base)
    run_to_end("pipeline.train", base)
    return base


def records(base: Path, fold: int, name: str) -> list[dict]:
    return [json.loads(x) for x in (base / "models" / "sample" / f"fold{fold}" / name).read_text().splitlines()]


def steps_run(base: Path, fold: int) -> int:
    """Optimizer steps the fold's final history says were run by the processes that ended each epoch."""
    history = records(base, fold, "metrics.jsonl")
    ends = [h for i, h in enumerate(history) if i + 1 == len(history) or history[i + 1]["epoch"] != h["epoch"]]
    return sum(h["steps_run"] for h in ends)


def wait_for(path_glob: str, base: Path, proc: subprocess.Popen) -> None:
    """Until the file appears, however slow the machine; a run that ends first is the caller's to report."""
    while proc.poll() is None:
        if list(base.glob(path_glob)):
            return
        time.sleep(0.05)


def check_artifacts(base: Path) -> None:
    """Every artifact parses: no half-written file survived the kills."""
    exp = base / "models" / "sample"
    for fold_dir in sorted(exp.glob("fold*")):
        if not fold_dir.is_dir() or fold_dir.name.endswith(".model"):
            continue
        load_file(fold_dir / "model.safetensors")
        json.loads((fold_dir / "done.json").read_text())
        for line in (fold_dir / "metrics.jsonl").read_text().splitlines():
            json.loads(line)
        assert not (fold_dir / "resume.pt").exists()
    leftovers = [p for p in exp.rglob(".*tmp-*")]
    assert not leftovers, leftovers


@pytest.mark.parametrize(
    "moments",
    [
        # SIGKILL mid-epoch (after the first step-level resume state), then at an epoch end of fold 1
        [("fold0/resume.pt", signal.SIGKILL, 0.0), ("fold1/resume.pt", signal.SIGKILL, 0.3)],
        # SIGTERM and SIGINT save a state themselves before exiting
        [("fold0/metrics.jsonl", signal.SIGTERM, 0.0), ("fold1/resume.pt", signal.SIGINT, 0.0)],
    ],
    ids=["sigkill", "sigterm-sigint"],
)
def test_killed_training_resumes_to_the_same_oof(reference: Path, tmp_path: Path, moments):
    run_to_end("pipeline.data", tmp_path)
    exp = tmp_path / "models" / "sample"
    for target, sig, delay in moments:
        p = stage("pipeline.train", tmp_path)
        wait_for(str(Path("models/sample") / target), tmp_path, p)
        time.sleep(delay)
        assert p.poll() is None, "training ended before it could be interrupted"
        p.send_signal(sig)
        out, _ = p.communicate()
        assert p.returncode != 0
        if sig != signal.SIGKILL:
            assert "resumes from there" in out, out  # a clean message, not a stack trace
            assert "Traceback" not in out
    done_before = {d: d.stat().st_mtime_ns for d in exp.glob("fold*/done.json")}
    out = run_to_end("pipeline.train", tmp_path)
    # the fold killed last continues from its saved step: not trained again from the start, not skipped
    assert "fold 1: resuming at epoch" in out, out
    if sig != signal.SIGKILL:  # SIGTERM and SIGINT save at the step they stop: mid-epoch, fewer steps remain
        assert steps_run(tmp_path, 1) < steps_run(reference, 1)
    for done, mtime in done_before.items():  # finished folds are left alone
        assert done.stat().st_mtime_ns == mtime
    got, want = oof(tmp_path), oof(reference)
    assert list(got["id"]) == list(want["id"])
    assert (got["pred"] - want["pred"]).abs().max() < 1e-5
    for fold in (0, 1):  # the same evaluations, the same best, every step record once
        evals = [records(b, fold, "metrics.jsonl") for b in (tmp_path, reference)]
        assert [(h["step"], round(h["auc"], 6)) for h in evals[0]] == [
            (h["step"], round(h["auc"], 6)) for h in evals[1]
        ]
        steps = [records(b, fold, "steps.jsonl") for b in (tmp_path, reference)]
        assert (
            [r["step"] for r in steps[0]] == [r["step"] for r in steps[1]] == list(range(2, 2 * len(steps[1]) + 1, 2))
        )
        assert max(abs(a["loss"] - b["loss"]) for a, b in zip(*steps)) < 1e-5
        done = [
            json.loads((b / "models" / "sample" / f"fold{fold}" / "done.json").read_text())
            for b in (tmp_path, reference)
        ]
        assert done[0]["best_step"] == done[1]["best_step"]
    check_artifacts(tmp_path)
