"""One-line errors (pipeline.errors): under pipeline.core.launcher, the first process's line is said even when
torchrun stops it the moment it is kept."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from pipeline import errors
from pipeline.core import launcher


class Stopped(Exception):
    """What the test's SIGTERM handler raises: where the process would have ended."""


def test_a_stop_between_keeping_the_first_processs_line_and_printing_it_waits_for_the_print(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Once one process has failed, torchrun stops the others with SIGTERM; the first may be between keeping its
    line (which the launcher then takes as said) and printing it. Stopped there, the line was said by no one: a
    run with GPUS=2 ended in silence (seen once in three runs of a test on a loaded machine). The stop is now
    taken once the line is printed, as it would have been taken at that moment."""

    def stop(signum, frame):
        raise Stopped

    def kept_then_stopped(self: Path, *args, **kwargs):
        written = keep(self, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # torchrun's stop, the very moment the line is kept
        return written

    monkeypatch.setenv(errors.LINES_ENV, str(tmp_path))
    monkeypatch.setenv("RANK", "0")
    keep = Path.write_text
    monkeypatch.setattr(Path, "write_text", kept_then_stopped)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(Stopped):  # the stop is not lost: taken after the line, by the handler in place
            errors.say("error: x", 2)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert capsys.readouterr().err == "error: x\n"
    assert launcher.kept_lines(tmp_path) == {0: {"line": "error: x", "code": 2}}
    assert signal.getsignal(signal.SIGTERM) is previous
