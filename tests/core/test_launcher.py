"""`make train GPUS=N` (pipeline.core.launcher): a stage's error is one line said once, never followed by torchrun's
ChildFailedError report; a process that died without a word is named; and when the launcher dies, even by SIGKILL,
its processes stop (saving a resume state) instead of training on unseen."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline import data
from pipeline.core import launcher
from tests.helpers.tinyrun import TINY, overrides

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def launch(base: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    cmd = [sys.executable, "-m", "pipeline.core.launcher", "2", "train", "--config", "sample", *overrides(base), *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_what_the_launcher_says_after_its_processes_ended() -> None:
    same = {"line": "error: train.lr=-1.0 is out of range", "code": 2}
    # every process failed alike: the first printed its line, nothing more is said
    assert launcher.report({0: same, 1: same}, {1: 2, 0: 2}, 2) == ([], 2)
    # the second failed first; torchrun stopped the first before it said anything: its line, said once
    assert launcher.report({1: same}, {1: 2, 0: -15}, 2) == ([same["line"]], 2)
    # the second was killed without a word; the first stopped, saying so itself
    stopped = {"line": "stopped: fold 0 stopped at epoch 2, step 3; `make train` again resumes from there", "code": 130}
    assert launcher.report({0: stopped}, {1: -9, 0: 130}, 2) == (
        ["error: process 1 of 2 was killed by SIGKILL (out of memory?)"], 137)  # fmt: skip
    assert launcher.report({}, {0: 1}, 2) == (["error: process 0 of 2 ended with exit status 1 (its output above says "
                                               "why)"], 1)  # fmt: skip
    assert launcher.report({0: {"line": "x", "code": 75}}, {}, 2) == ([], 75)  # the session's time is up


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["train.lr=-1"], "error: train.lr=-1.0 is out of range: must be a finite number > 0"),
        (["name=nosuch"], "/prepared/nosuch: no prepared data; run `make data CONFIG=...` with the same config first"),
    ],
    ids=["bad-setting", "no-data"],
)
def test_an_error_under_two_processes_is_one_line(tmp_path: Path, args: list[str], words: str) -> None:
    p = launch(tmp_path, *args)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 2, err
    assert err.count("\n") == 1 and words in err, err  # once, not once a process
    assert "Traceback" not in err and "ChildFailedError" not in err


def test_a_second_run_under_two_processes_stops_in_one_line(tmp_path: Path) -> None:
    import fcntl

    lock = tmp_path / "input" / "locks" / "sample.lock"
    lock.parent.mkdir(parents=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)  # the first run's lock, held through another open file
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, b"pid 4242 (train: python -m pipeline train)\n")
    try:
        p = launch(tmp_path)
        _, err = p.communicate(timeout=300)
    finally:
        os.close(fd)
    assert p.returncode == 2
    assert err.count("\n") == 1 and err.startswith("error: experiment 'sample' is in use by pid 4242"), err


def test_the_processes_stop_when_the_launcher_is_killed(tmp_path: Path) -> None:
    """SIGKILL of the launcher: its processes are told (Linux sends the signal once for each of the launcher's
    threads), save a resume state at the next step and end; they must not train on to the end with nobody to
    report to (and holding the experiment's lock), nor stop without saving as after a second Ctrl-C."""
    assert data.main(["--config", "sample", *overrides(tmp_path), *TINY]) == 0
    p = launch(tmp_path, *TINY, "train.epochs=200", "train.save_every_steps=2")
    resume = tmp_path / "models" / "sample" / "fold0" / "resume.pt"
    end = time.time() + 240
    while not resume.exists() and p.poll() is None and time.time() < end:
        time.sleep(0.1)
    assert p.poll() is None, p.communicate()
    workers = [
        int(x) for x in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    ]
    assert len(workers) == 2
    os.kill(p.pid, signal.SIGKILL)
    _, err = p.communicate(timeout=120)  # the pipes close when the processes that inherited them have ended
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert "the launcher is gone: saving a resume state at the next optimizer step" in err, err
    assert "fold 0 stopped at epoch" in err and "`make train` again resumes from there" in err, err
    assert resume.exists() and not (resume.parent / "done.json").exists()


def test_a_process_killed_mid_run_is_named_and_the_run_resumes(tmp_path: Path) -> None:
    """SIGKILL of one of the processes (out of memory, a node's OOM killer): the launcher names it in one line,
    the other one stops too, nothing is marked complete, and the next `make train` resumes from the resume
    state saved before and completes the fold."""
    assert data.main(["--config", "sample", *overrides(tmp_path), *TINY]) == 0
    args = (*TINY, "train.epochs=3", "train.save_every_steps=2", "train.folds=[0]")
    p = launch(tmp_path, *args)
    fold = tmp_path / "models" / "sample" / "fold0"
    end = time.time() + 240
    while not (fold / "resume.pt").exists() and p.poll() is None and time.time() < end:
        time.sleep(0.1)
    assert p.poll() is None, p.communicate()
    workers = sorted(
        int(x) for x in subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
    )
    os.kill(workers[-1], signal.SIGKILL)
    _, err = p.communicate(timeout=180)
    assert p.returncode != 0 and "Traceback" not in err and "ChildFailedError" not in err, err
    assert "was killed by SIGKILL" in err, err
    assert not (fold / "done.json").exists()
    again = launch(tmp_path, *args)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert "fold 0: resuming at epoch" in out + err and (fold / "done.json").exists(), out + err


@pytest.mark.parametrize(("users", "workers"), [(None, "expandable_segments:True"), ("max_split_size_mb:64", None)])
def test_the_workers_allocator_has_expandable_segments_unless_the_user_set_one(monkeypatch, users, workers) -> None:
    """Less fragmentation over a fold of varied lengths; a user's own PYTORCH_CUDA_ALLOC_CONF is left alone."""
    from torch.distributed import run as torchrun

    for name in ("PYTORCH_CUDA_ALLOC_CONF", launcher.LINES_ENV, launcher.SHUTDOWN_ENV):  # the launcher sets them
        monkeypatch.setenv(name, "restored after the test")
        monkeypatch.delenv(name)
    if users:
        monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", users)
    seen = []
    monkeypatch.setattr(torchrun, "run", lambda args: seen.append(os.environ["PYTORCH_CUDA_ALLOC_CONF"]))
    assert launcher.run(2, ["train"]) == 0
    assert seen == [workers or users]
