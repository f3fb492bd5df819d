"""pipeline.progress: sparse redraws when nobody watches, errors on their own line, no transformers bars, and
work in a child process (the tokenizer's training) whose errors come back."""

from __future__ import annotations

import io
import time
import warnings
from pathlib import Path

import pytest

from pipeline import progress
from pipeline.errors import PipelineError, run_stage


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


def _raise_boom():
    raise ValueError("boom")
