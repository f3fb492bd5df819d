"""`make search`: the space checked before any work, the study's storage and config, a search of trials on the
tiny sample with pruning, and a worker killed mid-trial."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import TrialState

from pipeline import config, layout, search
from pipeline.errors import ConfigError
from tests.helpers import digests, one_line_error, stage_args
from tests.helpers.tinyrun import TINY

# a trial of the tiny model: four optimizer steps, each one evaluated (four reports to the pruner)
FAST = [*TINY, "train.max_steps=4", "train.eval_every_steps=1", "search.space=[train.lr float 1e-5 1e-1 log]"]


def args(tmp_path: Path, *more: str) -> list[str]:
    return stage_args(tmp_path, *FAST, *more)


def load(tmp_path: Path, *more: str):
    return config.load("sample", args(tmp_path, *more))


def study_of(tmp_path: Path) -> optuna.Study:
    url = f"sqlite:///{tmp_path / 'models' / 'sample' / 'search' / 'study.db'}"
    return optuna.load_study(study_name="sample", storage=url)


def trial_folders(tmp_path: Path) -> list[str]:
    models = tmp_path / "models"
    return sorted(p.name for p in models.glob("sample-t*")) if models.is_dir() else []


# ---------------------------------------------------------------- the space, before any work


def test_a_space_line_reads_as_its_kind_and_range() -> None:
    assert search.parse_line("train.lr float 1e-5 1e-3 log") == search.Dim(
        "train.lr float 1e-5 1e-3 log", "train.lr", "float", 1e-5, 1e-3, True
    )
    assert search.parse_line("train.epochs int 1 3").kind == "int"
    assert search.parse_line("model.pooling choice cls mean cls").choices == ("cls", "mean")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("train.lr", "KEY KIND"),
        ("train.lr uniform 0 1", "KEY KIND"),
        ("train.lr float 1e-3", "LOW HIGH"),
        ("train.lr float a b", "LOW HIGH"),
        ("train.lr float 1e-3 1e-5", "must be below"),
        ("train.lr float 0 1e-3 log", "above 0"),
        ("train.epochs int 1 2.5", "LOW HIGH"),
    ],
)
def test_a_space_line_that_cannot_be_read_is_one_line(line: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        search.parse_line(line)


@pytest.mark.parametrize(
    ("space", "says"),
    [
        ("[train.lrr float 1e-5 1e-3]", "unknown config key train.lrr"),
        ("[train.warmup float 0 1.5]", "train.warmup"),  # warmup is a fraction in [0, 1)
        ("[train.epochs float 1 3]", "train.epochs"),  # an integer setting drawn as a float
        ("[train.optimizer choice adamw nosuch]", "train.optimizer"),
        ("[name choice a b]", "set by the search itself"),
        ("[search.trials int 1 3]", "set by the search itself"),
        ("[train.lr float 1e-5 1e-3, train.lr float 1e-4 1e-3]", "named twice"),
        ("[]", "search.space is empty"),
    ],
)
def test_a_bad_space_stops_in_one_line_before_any_work(tmp_path: Path, capsys, space: str, says: str) -> None:
    assert search.main(["--config", "sample", *args(tmp_path, f"search.space={space}")]) == 2
    assert says in one_line_error(capsys)
    assert trial_folders(tmp_path) == [] and not (tmp_path / "models" / "sample" / "search").exists()


def test_search_folds_outside_the_data_s_folds_stop_before_any_work(tmp_path: Path, capsys) -> None:
    assert search.main(["--config", "sample", *args(tmp_path, "search.folds=[2]")]) == 2  # data.folds=2: 0 and 1
    assert "search.folds: fold 2 does not exist" in one_line_error(capsys)


@pytest.mark.parametrize("url", ["sqlite:////nonexistent-folder/x/study.db", "nosuchdb://somewhere/study"])
def test_a_storage_that_cannot_be_opened_is_one_line(tmp_path: Path, capsys, url: str) -> None:
    assert search.main(["--config", "sample", *args(tmp_path, f"search.storage={url}")]) == 2
    line = one_line_error(capsys)
    assert f"search.storage={url}: cannot open it" in line
    assert trial_folders(tmp_path) == []


def test_a_study_of_another_config_is_refused_before_any_trial(tmp_path: Path, capsys) -> None:
    search.open_study(load(tmp_path, "train.epochs=2"))  # a first worker, of other settings
    assert search.main(["--config", "sample", *args(tmp_path)]) == 2
    line = one_line_error(capsys)
    assert "made by another config (train.epochs: 2 there, 1 here" in line
    assert trial_folders(tmp_path) == []


def test_how_the_search_runs_is_no_part_of_the_study_s_config(tmp_path: Path) -> None:
    """More trials, another pruner or seed: the same study, a worker more."""
    a = search.identity(load(tmp_path))
    assert a == search.identity(load(tmp_path, "search.trials=20", "search.pruner=halving", "search.seed=3"))
    assert a != search.identity(load(tmp_path, "search.folds=[1]"))


def test_a_drawn_value_is_checked_by_the_config_s_own_rules(tmp_path: Path) -> None:
    cfg = load(tmp_path)
    assert search.trial_config(cfg, 3, ["train.lr=0.002"]).name == "sample-t3"
    assert search.trial_config(cfg, 3, ["train.lr=0.002"]).train.folds == (0,)
    with pytest.raises(ConfigError, match="trial 3 .*train.warmup"):
        search.trial_config(cfg, 3, ["train.warmup=1.5"])


# ---------------------------------------------------------------- what each evaluation reports


class FakeTrial:
    def __init__(self, prune_at: int | None = None) -> None:
        self.reports: list[tuple[float, int]] = []
        self.prune_at, self.user_attrs = prune_at, {}

    def report(self, value: float, step: int) -> None:
        self.reports.append((value, step))

    def set_user_attr(self, key: str, value) -> None:
        self.user_attrs[key] = value

    def should_prune(self) -> bool:
        return self.reports[-1][1] == self.prune_at


def test_each_evaluation_is_reported_at_its_step_counted_over_the_trial_s_folds() -> None:
    trial = FakeTrial()
    report = search.Reporter(trial)
    for fold, step in ((0, 2), (0, 4), (1, 2), (1, 4)):
        report(fold, {"step": step, "auc": 0.5 + step / 100, "metric": "valid_auc"})
    assert [s for _, s in trial.reports] == [2, 4, 6, 8]
    assert trial.user_attrs["metric"] == "valid AUC"


def test_a_trial_the_pruner_stops_raises_at_that_evaluation() -> None:
    report = search.Reporter(FakeTrial(prune_at=4))
    report(0, {"step": 2, "auc": 0.6, "metric": "valid_auc"})
    with pytest.raises(optuna.TrialPruned, match="fold 0 step 4"):
        report(0, {"step": 4, "auc": 0.55, "metric": "valid_auc"})


def test_the_best_trial_s_command_trains_its_experiment_on_every_fold(tmp_path: Path) -> None:
    cfg = load(tmp_path, "name=x")
    best = SimpleNamespace(number=5, user_attrs={"overrides": ["train.lr=0.002"]})
    mine = ["train.lr=1", "search.trials=8", "train.folds=[0]", "name=x", "train.epochs=2"]
    line = search.best_command(cfg, "sample", mine, best)
    assert line == 'make train CONFIG=sample ARGS="train.lr=1 train.epochs=2 train.lr=0.002 name=x-t5"'


# ---------------------------------------------------------------- searches on the tiny sample


@pytest.mark.slow
@pytest.mark.usefixtures("torch_one_thread")
def test_a_search_of_eight_trials_prunes_reports_and_says_the_best(tmp_path: Path, capsys) -> None:
    assert search.main(["--config", "sample", *args(tmp_path, "search.trials=8")]) == 0
    out = capsys.readouterr().out
    trials = study_of(tmp_path).trials
    states = [t.state for t in trials]
    assert len(trials) == 8 and set(states) <= {TrialState.COMPLETE, TrialState.PRUNED}
    assert TrialState.PRUNED in states, out
    for t in trials:
        fold = tmp_path / "models" / f"sample-t{t.number}" / "fold0"
        evaluations = [json.loads(line) for line in (fold / "metrics.jsonl").read_text().splitlines()]
        if t.state == TrialState.PRUNED:  # stopped at once: its last evaluation is the one it was pruned at
            assert not (fold / "done.json").exists()
            assert evaluations[-1]["step"] == t.last_step < 4
            assert f"trial {t.number} pruned: valid AUC {t.value:.4f} at step {t.last_step}" in out
        else:
            assert (fold / "done.json").exists() and f"trial {t.number} complete: valid AUC" in out
    best = max((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert f"best: trial {best.number}, valid AUC {best.value:.4f}" in out
    assert "importance (fANOVA" in out and "train.lr" in out.split("importance (fANOVA")[1]
    assert f'name=sample-t{best.number}"' in out.split("train it on every fold: make train CONFIG=sample")[1]
    assert (tmp_path / "models" / "sample" / "search" / "history.png").stat().st_size > 0
    # a second worker finds the study's trials done: it only reports
    assert search.main(["--config", "sample", *args(tmp_path, "search.trials=8")]) == 0
    assert len(study_of(tmp_path).trials) == 8


def dead_pid() -> int:
    """The id of a process that has ended."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


@pytest.mark.slow
@pytest.mark.usefixtures("torch_one_thread")
@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_worker_killed_mid_trial_leaves_it_failed_and_the_study_goes_on(tmp_path: Path, capsys) -> None:
    cfg = load(tmp_path)
    study = search.open_study(cfg)
    killed = study.ask()  # RUNNING, as a killed worker leaves it, with the folder it had begun
    folder = tmp_path / "models" / layout.trial_name(cfg, killed.number)
    (folder / "fold0").mkdir(parents=True)
    (folder / "fold0" / "metrics.jsonl").write_text('{"step": 1, "auc": 0.6}\n')
    before = digests(folder)
    killed.set_user_attr("worker", {"host": socket.gethostname(), "pid": dead_pid()})
    killed.set_user_attr("experiment", str(folder))
    assert search.main(["--config", "sample", *args(tmp_path, "search.trials=2")]) == 0
    out = capsys.readouterr().out
    trials = study_of(tmp_path).trials
    assert trials[0].state == TrialState.FAIL and "trial 0: its worker" in out and "marked failed" in out
    assert [t.state in search.COUNTED for t in trials] == [False, True, True]  # new numbers, none counted twice
    assert digests(folder) == before  # the killed trial's folder as it was
    assert trial_folders(tmp_path) == ["sample-t0", "sample-t1", "sample-t2"]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
def test_a_running_trial_of_a_live_worker_is_left_running(tmp_path: Path) -> None:
    study = search.open_study(load(tmp_path))
    trial = study.ask()
    trial.set_user_attr("worker", {"host": socket.gethostname(), "pid": search.os.getpid()})
    assert search.fail_dead_workers(study) == []
    assert study.trials[0].state == TrialState.RUNNING


def test_a_trial_whose_folder_exists_stops_before_it_trains_there(tmp_path: Path, capsys) -> None:
    """A folder of the name a new trial takes is no trial of this study (a removed study.db's): left as it was."""
    folder = tmp_path / "models" / "sample-t0"
    (folder / "fold0").mkdir(parents=True)
    (folder / "fold0" / "done.json").write_text("{}")
    before = digests(folder)
    assert search.main(["--config", "sample", *args(tmp_path, "search.trials=1")]) == 2
    assert "sample-t0 exists and is no trial of this study" in one_line_error(capsys)
    assert digests(folder) == before and not (tmp_path / "input" / "prepared" / "sample-t0").exists()


@pytest.mark.parametrize(
    ("name", "kind"),
    [("median", optuna.pruners.MedianPruner), ("halving", optuna.pruners.SuccessiveHalvingPruner),
     ("none", optuna.pruners.NopPruner)],
)  # fmt: skip
def test_search_pruner_names_the_pruner(tmp_path: Path, name: str, kind: type) -> None:
    assert isinstance(search.make_pruner(load(tmp_path, f"search.pruner={name}")), kind)


def test_a_search_stopped_mid_trial_says_the_trial_failed_not_that_make_train_resumes(tmp_path, capsys, monkeypatch):
    from pipeline.core.resume import Interrupted

    def stopped(*_a, **_k):
        raise Interrupted("fold 0 stopped at epoch 1, step 2; `make train` again resumes from there")

    monkeypatch.setattr(search.train_stage, "run", stopped)
    assert search.main(["--config", "sample", *args(tmp_path, "search.trials=2")]) == 130
    said = capsys.readouterr()
    text = said.out + said.err
    assert "trial 0 stopped (fold 0 stopped at epoch 1, step 2): it counts as failed" in text
    assert "`make train` again resumes" not in text
    assert [t.state for t in study_of(tmp_path).get_trials()] == [TrialState.FAIL]
