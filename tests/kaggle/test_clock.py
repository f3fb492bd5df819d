"""A Kaggle session's clock (pipeline/kaggle/clock.py) and the time guard it arms (pipeline.core.fold): the deadline
leaves room for what must happen after training, and every session makes progress, even through an epoch longer
than a session. Simulated hours: PIPELINE_FAKE_CLOCK adds seconds to the clock at each optimizer step."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from pipeline import config, data, layout, train, validity
from pipeline.core import eta
from pipeline.inputs import tables
from pipeline.kaggle.clock import SessionClock
from tests.helpers import under
from tests.helpers.tinyrun import TINY, overrides


def test_the_deadline_leaves_room_for_saving_copying_and_predicting(tmp_path: Path, monkeypatch) -> None:
    cfg = config.load("xlmr-large", [*under(tmp_path), "kaggle.margin_minutes=10"])
    clock = SessionClock.begin(cfg, start=1000.0)
    assert clock.end == 1000.0 + 12 * 3600
    costs = clock.costs()
    # XLM-R large: a 6.72 GB resume state and 2.24 GB of weights at an assumed 100 MB/s, and a fold's predict
    assert costs["saving a resume state"] == pytest.approx(67, abs=1)
    assert costs["copying it and the weights into working"] == pytest.approx(90, abs=1)
    assert costs["predicting test with a fold"] > 60
    assert clock.reserve() == pytest.approx(600 + sum(costs.values()))
    for name in (eta.DEADLINE_ENV, eta.SESSION_ENV):  # arm() sets them: put back as they were after the test
        monkeypatch.setenv(name, "")
    clock.arm()
    assert float(os.environ[eta.DEADLINE_ENV]) == pytest.approx(clock.end - clock.reserve())
    assert float(os.environ[eta.SESSION_ENV]) == pytest.approx(12 * 3600 - clock.reserve())
    # measured in the session: a slow disk and a slow predict move the deadline earlier
    before = clock.deadline()
    clock.copied(int(9e9), 300.0)  # 30 MB/s
    clock.predicted(1200.0)
    assert clock.copy_rate == pytest.approx(30e6) and clock.deadline() < before - 900
    assert "measured: copy rate, predict" in clock.describe()
    clock.copied(1000, 100.0)  # too small to measure anything
    assert clock.copy_rate == pytest.approx(30e6)


def test_a_session_timeout_shorter_than_the_limit_is_the_end(tmp_path: Path) -> None:
    clock = SessionClock.begin(config.load("sample", [*under(tmp_path), "kaggle.timeout=3600"]), start=0.0)
    assert clock.end == 3600.0
    long = config.load("sample", [*under(tmp_path), "kaggle.timeout=99999"])
    assert SessionClock.begin(long, start=0.0).end == 12 * 3600


def windows(cfg: config.Config, fold: int) -> int:
    """Optimizer steps an epoch of `fold` takes (micro-batches of the fold's training rows, in windows)."""
    table, _, _ = tables.load_table(cfg)
    rows = len(tables.training_rows(table, fold, cfg.train.training_only_rows))
    return math.ceil(math.ceil(rows / cfg.train.micro_batch) / cfg.train.accumulation)


def session(monkeypatch: pytest.MonkeyPatch, args: list[str], left: float, whole: float | None = None) -> int:
    """`make train` with `left` seconds of training before the deadline, in sessions of `whole` (default: `left`),
    as the notebook arms it."""
    monkeypatch.setenv(eta.DEADLINE_ENV, repr(eta.now() + left))
    monkeypatch.setenv(eta.SESSION_ENV, repr(left if whole is None else whole))
    return train.main(args)


@pytest.mark.slow
def test_an_epoch_longer_than_a_session_progresses_in_every_session(tmp_path: Path, monkeypatch, capsys) -> None:
    """100 simulated seconds a step, sessions of 0.6 epochs: refusing an epoch that cannot end before the deadline
    would refuse epoch 2 in every session from the second on, for ever. It is trained into instead, cut at the
    deadline with its state saved, and the fold completes in its fourth session."""
    clock = tmp_path / "clock"
    clock.write_text("0")
    monkeypatch.setenv(eta.FAKE_CLOCK_ENV, str(clock))
    monkeypatch.setenv(eta.FAKE_STEP_ENV, "100")
    args = ["--config", "sample", *overrides(tmp_path), *TINY, "train.epochs=2", "train.folds=[0]"]
    assert data.main(args) == 0
    cfg = config.load("sample", args[2:])
    length = 0.6 * windows(cfg, 0) * 100
    codes, said = [], []
    for _ in range(6):
        codes.append(session(monkeypatch, args, length))
        said.append(capsys.readouterr())
        if codes[-1] == 0:
            break
    assert codes == [75, 75, 75, 0], [s.err[-500:] for s in said]
    assert "more than a session gives" in said[1].out and "training into it" in said[1].out
    assert "fold 0: resuming at epoch 2, step" in said[2].out  # the second session got into epoch 2
    assert validity.is_complete(layout.fold_dir(cfg, 0), validity.current_fingerprint(cfg))
    assert all(s.err.count("stopped: ") == 1 and "error:" not in s.err for s in said[:3])  # a planned stop

    # an epoch that fits a session but not what is left of this one waits for the next, with nothing trained
    capsys.readouterr()
    epoch = windows(cfg, 1) * 100
    code = session(monkeypatch, [*args, "train.folds=[1]"], 0.5 * epoch, whole=2 * epoch)
    assert code == 75
    err = capsys.readouterr().err
    assert "fold 1: epoch 1 needs about" in err and "nothing trained yet, it starts in the next session" in err
    assert not (layout.fold_dir(cfg, 1) / layout.RESUME).exists()
