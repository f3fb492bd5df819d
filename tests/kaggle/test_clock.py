"""A Kaggle session's clock (pipeline/kaggle/clock.py) and the time guard it arms (core/foldclock.py): the deadline
leaves room for what must happen after training, and every session makes progress, even through an epoch longer
than a session. Simulated hours: PIPELINE_FAKE_CLOCK adds seconds to the clock at each optimizer step."""

from __future__ import annotations

import functools
import json
import math
import os
from datetime import timedelta
from pathlib import Path

import pytest

from pipeline import config, data, layout, train, validity
from pipeline.core import distributed, eta, foldclock
from pipeline.core.resume import TimeUp
from pipeline.inputs import tables
from pipeline.kaggle.clock import SessionClock
from tests.helpers import free_port, under
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


def check_time(need: float, epoch: int, trained_here: bool = False, d: distributed.Dist | None = None) -> None:
    """foldclock.check_time for a fold whose epoch (with its evaluations) takes `need` seconds at the run's rate;
    `trained_here`: this process has trained already. Its stop raises TimeUp as the fold's does."""

    def time_up(why: str, started: bool = True) -> None:
        raise TimeUp(why)

    rate, measured = eta.Rate(1.0, need, 1.0, 0.0), eta.Rate(float(trained_here), 1.0)
    verdict = functools.partial(foldclock.time_verdict, 0, epoch, rate, measured, 1.0, 0.0)
    foldclock.check_time(d or distributed.Dist(), epoch, verdict, time_up)


def keep_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (eta.DEADLINE_ENV, eta.SESSION_ENV, eta.TRAINED_ENV):  # arm() sets them: put back after the test
        monkeypatch.setenv(name, "")


def test_an_epoch_that_fits_a_session_but_not_after_its_setup_is_trained_into(tmp_path: Path, monkeypatch) -> None:
    """XLM-R large, 8 minutes of setup (data, the all-reduce check, loading the model) before the first epoch, an
    epoch that fits a whole session but not what is left after that setup: refusing it would refuse it in every
    session, each burning its setup. The first epoch a session trains is never refused; a later one is."""
    keep_env(monkeypatch)
    cfg = config.load("xlmr-large", [*under(tmp_path)])
    setup = 8 * 60
    for _ in range(3):  # session after session: the same setup, the same epoch
        clock = SessionClock.begin(cfg, start=eta.now() - setup)
        clock.arm()
        whole, left = eta.session_seconds(), eta.left()
        need = left + (whole - left) / 2  # more than is left, less than a whole session
        check_time(need, 0)  # trained into: no TimeUp
    clock.trained = True  # an earlier fold of this session trained: this epoch waits for the next session
    clock.arm()
    with pytest.raises(TimeUp, match="fold 0: epoch 1 needs about .* are left before the session's limit"):
        check_time(need, 0)
    clock.trained = False
    clock.arm()
    with pytest.raises(TimeUp, match="fold 0: epoch 2 needs about"):  # this process trained epoch 1 already
        check_time(need, 1, trained_here=True)


def _guard_worker(rank: int, world: int, port: int, out: str) -> None:
    """One rank of two deciding the time guard near the boundary, each on its own clock."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=120))
    # rank 0's clock leaves the epoch time, rank 1's (a little later, or another rate) does not
    os.environ[eta.DEADLINE_ENV] = repr(eta.now() + (1000 if rank == 0 else 900))
    os.environ[eta.SESSION_ENV], os.environ[eta.TRAINED_ENV] = repr(36000.0), "1"
    try:
        check_time(950, 1, d=distributed.Dist(rank, world))
        said = "trains"
    except TimeUp:
        said = "stops"
    seen: list = [None] * world
    dist.all_gather_object(seen, said)  # where each rank went (without a shared decision, one would wait here)
    if rank == 0:
        Path(out).write_text(json.dumps(seen))
    dist.destroy_process_group()


@pytest.mark.e2e  # two processes
@pytest.mark.usefixtures("torch_one_thread")
def test_the_ranks_decide_the_time_guard_together(tmp_path: Path) -> None:
    """Two gloo processes whose clocks fall either side of the boundary: rank 0 decides for both, so neither stops
    alone and leaves the other waiting for ever at the next all-reduce."""
    import torch.multiprocessing as mp

    out = tmp_path / "seen.json"
    mp.spawn(_guard_worker, args=(2, free_port(), str(out)), nprocs=2, join=True)
    assert json.loads(out.read_text()) == ["trains", "trains"]
