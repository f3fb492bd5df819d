"""pipeline.progress: sparse redraws when nobody watches, errors on their own line, no transformers bars, and
work in a child process (the tokenizer's training) whose errors come back."""

from __future__ import annotations

import io
import os
import signal
import threading
import time
import warnings
from pathlib import Path

import pytest

from pipeline import progress
from pipeline.errors import PipelineError, run_stage
from tests.helpers import ROOT


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def redraws(stream, seconds: float = 1.0) -> int:
    """Redraws of a bar over a `seconds`-long loop, written to `stream`."""
    steps = 20
    with progress.bar(range(steps), desc="work", file=stream) as it:
        for i in it:
            time.sleep(seconds / steps)
            it.set_postfix(loss=f"{1 / (i + 1):.3f}")  # tqdm redraws on each new postfix, unless told not to
    return stream.getvalue().count("\r")


def test_a_log_gets_few_redraws_a_terminal_gets_many() -> None:
    log, tty = io.StringIO(), Tty()
    in_log = redraws(log)
    on_tty = redraws(tty)
    assert in_log <= 3, log.getvalue()  # the first and the final state
    assert on_tty >= 5, tty.getvalue()  # tqdm's own 0.1 s
    assert "20/20" in log.getvalue()  # the end of a bar still reaches the log
    assert progress.bar(total=1, file=log).mininterval == progress.LOG_INTERVAL


def test_an_error_never_ends_a_bar_line(capsys: pytest.CaptureFixture) -> None:
    def stage() -> None:
        bar = progress.bar(total=10, desc="work", mininterval=0)  # a bar not closed by a `with`
        bar.update(5)
        raise PipelineError("train.lr: broken")

    assert run_stage(stage) == 2
    err = capsys.readouterr().err
    assert "\nerror: train.lr: broken\n" in err or err.startswith("error: "), repr(err)


def test_a_log_reads_line_by_line_and_each_bar_ends_at_its_total() -> None:
    """`make train > log 2>&1`: no `\\r` redraws joined into one physical line, and an epoch's last line reads
    N/N (a bar that leaves nothing on a terminal, leave=False, included)."""
    log = io.StringIO()
    with progress.bar(range(6), desc="fold 0 epoch 1/2", file=log, leave=False) as it:
        for i in it:
            it.set_postfix(loss=f"{1 / (i + 1):.3f}")
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text and text.endswith("\n"), repr(text)
    lines = text.splitlines()
    assert lines[0].startswith("fold 0 epoch 1/2:   0%") and len(lines) == 2, lines
    assert lines[-1].startswith("fold 0 epoch 1/2: 100%") and "6/6" in lines[-1], lines
    every = io.StringIO()  # a redraw every update (mininterval=0): one line each, the final one not repeated
    with progress.bar(range(3), desc="x", file=every, mininterval=0, miniters=1, leave=False) as it:
        for _ in it:
            pass
    assert [line.split("| ")[-1].split(" ")[0] for line in every.getvalue().splitlines()] == [
        "0/3",
        "1/3",
        "2/3",
        "3/3",
    ]


def test_an_error_starts_its_own_line_in_a_log(capsys: pytest.CaptureFixture) -> None:
    def stage() -> None:
        bar = progress.bar(total=10, desc="work", mininterval=0, leave=False)  # as the epoch's bar
        bar.update(5)
        raise PipelineError("train.lr: broken")

    assert run_stage(stage) == 2
    err = capsys.readouterr().err
    assert "\r" not in err, repr(err)  # glued to the bar by a `\r` before
    lines = err.split("\n")
    assert "5/10" in lines[-3] and lines[-2] == "error: train.lr: broken", lines


def test_a_stop_the_user_asked_for_is_said_as_a_stop_with_130(capsys: pytest.CaptureFixture) -> None:
    from pipeline.core.resume import Interrupted

    def stage() -> None:
        raise Interrupted("fold 0 stopped at epoch 1, step 3; `make train` again resumes from there")

    assert run_stage(stage) == 130  # as shells expect of Ctrl-C
    err = capsys.readouterr().err
    assert err == "stopped: fold 0 stopped at epoch 1, step 3; `make train` again resumes from there\n", err
    doc = " ".join((ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8").split()).replace("\\`", "`")
    assert f'("{err.strip()}")' in doc  # what the page quotes


def test_stages_silence_transformers_bars() -> None:
    from transformers.utils import logging as hf_logging

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # set by an earlier stage, HF_HUB_DISABLE_PROGRESS_BARS has priority
        hf_logging.enable_progress_bar()
    run_stage(lambda: None)
    assert not hf_logging.is_progress_bar_enabled()


def test_ticker_shows_slow_work_only(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    quick = progress.Ticker("train tokenizer", log)
    quick.tick()
    quick.close()
    assert log.getvalue() == ""  # under two seconds: nothing
    monkeypatch.setattr(progress.Ticker, "DELAY", 0.0)
    slow = progress.Ticker("train tokenizer", log)
    for _ in range(5):
        slow.tick()  # in a log: one line, then one a minute
    slow.close("stopped after")
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("train tokenizer: ") and "stopped after" in lines[1]


def test_tokenizer_child_errors_come_back(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="boom"):
        progress.run_in_child(_raise_boom, desc="x")
    assert progress.run_in_child(divmod, 7, 2, desc="x") == (3, 1)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the hook's own, meant
def test_a_ctrl_c_while_the_child_forks_still_stops_it() -> None:
    """A Ctrl-C that lands while the parent runs the fork's own hooks (as logging's lock release after a fork) is
    raised inside the hook, where Python ignores it: unless the wait sees that it came, the wait runs on.

    Another thread stays open to the signal throughout, as a test worker's or a tokenizer's threads are: the
    kernel may hand it the signal, so masking the signal in the main thread alone does not hold it."""
    armed, done = [True], threading.Event()
    other = threading.Thread(target=done.wait, daemon=True)
    other.start()  # made before anything masks SIGINT: it takes the signal whenever the main thread holds it

    def ctrl_c_in_the_forks_hook() -> None:  # registered for the process's life: it fires once
        if armed:
            armed.clear()
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(20):  # the hook runs on a while, as a slow one does: a signal let in arrives inside it
                time.sleep(0.01)

    os.register_at_fork(after_in_parent=ctrl_c_in_the_forks_hook)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        start = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            progress.run_in_child(time.sleep, 10, desc="sleep")
        assert time.perf_counter() - start < 5
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the caller's handler is back
    finally:
        armed.clear()
        done.set()
        signal.signal(signal.SIGINT, old)


def _raise_boom():
    raise ValueError("boom")
