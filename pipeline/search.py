"""Stage `make search`: an Optuna study over `search.space`, each trial an experiment of its own.

Reads   the config's data source, as `make data` does (each trial's tables are its own; the token cache is shared)
        models/<name>/search/study.db (or search.storage): the study so far, where there is one
Writes  models/<name>/search/study.db        the study: each trial's values, evaluations, figure and state
        input/prepared/<name>-t<n>/           trial n's tables (`make data` with its values)
        models/<name>-t<n>/                   trial n: `make train` of search.folds with its values
        models/<name>/search/history.png      each trial's figure and the best so far

A trial draws a value for every line of search.space, checked by the config's own validation, and trains
search.folds in this process (pipeline.data.run, then pipeline.train.run). In process rather than as a
`python -m pipeline train` subprocess: the pruner is asked at every in-epoch evaluation (the fold's
FoldInputs.on_evaluation), which is then a call, not a message between processes, and a pruned trial stops at
once by raising from it. The trial's figure is the one the board ranks by (metrics.headline of its OOF: the
six-language estimate where the folds stand for every test language, else the validation AUC); no test label is
read. A pruned trial's folder keeps what its evaluations wrote (metrics.jsonl, oof.csv, the best weights so far)
and no done.json: not a complete fold.

Workers: a second `make search` of the same study (load_if_exists) is another worker; search.trials counts the
study's complete and pruned trials over all of them. A worker killed mid-trial leaves its trial RUNNING: the
next worker on the same machine marks it failed (its process is gone), one elsewhere once its heartbeat is
GRACE seconds old. A failed trial's folder is left as it was and never reused: a new trial takes a new number.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import socket
import time
import warnings
from dataclasses import dataclass

import optuna
from optuna.trial import TrialState

from pipeline import config as config_mod
from pipeline import data as data_stage
from pipeline import experiments, layout
from pipeline import train as train_stage
from pipeline.core.resume import Interrupted
from pipeline.errors import ConfigError, PipelineError, run_stage
from pipeline.schema import Config, plain
from pipeline.schema.search import KINDS
from pipeline.scoring import metrics, plots

# a worker's heartbeat while it runs a trial; a RUNNING trial whose heartbeat is older than GRACE is failed by the
# next worker (one on the trial's own machine fails it at once when its process is gone)
HEARTBEAT, GRACE = 60, 180
COUNTED = (TrialState.COMPLETE, TrialState.PRUNED)  # what search.trials counts
# set by the search for each trial, never drawn: a trial is its own experiment, trained on search.folds
OWN_KEYS = ("name", "input_dir", "models_dir", "submissions_dir", "train.folds")


# ---------------------------------------------------------------- the space


@dataclass(frozen=True)
class Dim:
    """One line of search.space: a key and what its values are drawn from."""

    line: str
    key: str
    kind: str  # one of KINDS
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    choices: tuple[str, ...] = ()

    def texts(self) -> list[str]:
        """The values that bound the draw, as an override writes them: each choice, or both ends."""
        return list(self.choices) if self.kind == "choice" else [value_text(self.low), value_text(self.high)]


def value_text(value) -> str:
    """A drawn value as an override's text (`train.lr=0.00031`): repr keeps every digit of a float."""
    return repr(value) if isinstance(value, float) else str(value)


def parse_line(line: str) -> Dim:
    """`KEY float LOW HIGH [log]`, `KEY int LOW HIGH [log]` or `KEY choice A B ...`; anything else is one line."""
    words = str(line).split()
    bad = f"search.space: {line!r}: "
    if len(words) < 3 or words[1] not in KINDS:
        raise ConfigError(bad + f"write `KEY KIND ...` with KIND one of {', '.join(KINDS)}")
    key, kind, rest = words[0], words[1], words[2:]
    if kind == "choice":
        return Dim(line, key, kind, choices=tuple(dict.fromkeys(rest)))
    log = rest[-1:] == ["log"]
    ends = rest[:-1] if log else rest
    number = int if kind == "int" else float
    try:
        low, high = (number(w) for w in ends) if len(ends) == 2 else (None, None)
    except ValueError:
        low = high = None
    if low is None or not (math.isfinite(low) and math.isfinite(high)):
        raise ConfigError(bad + f"a {kind} range is `{key} {kind} LOW HIGH` or `... log`, in {kind} numbers")
    if low >= high:
        raise ConfigError(bad + f"LOW ({low}) must be below HIGH ({high})")
    if log and low <= 0:
        raise ConfigError(bad + "a log range starts above 0")
    return Dim(line, key, kind, low, high, log)


def parse_space(cfg: Config) -> list[Dim]:
    """search.space, each line checked before any work: a known key the search does not set itself, each once,
    and every bound (each end of a range, each choice) allowed by the key's own rules (config.with_overrides)."""
    if not cfg.search.space:
        raise ConfigError("search.space is empty: name what a trial draws, e.g. search.space=[train.lr float 1e-5 "
                          "1e-3 log]")  # fmt: skip
    dims = [parse_line(line) for line in cfg.search.space]
    seen: set[str] = set()
    for dim in dims:
        if dim.key in OWN_KEYS or dim.key.startswith("search."):
            raise ConfigError(f"search.space: {dim.line!r}: {dim.key} is set by the search itself, not drawn")
        if dim.key in seen:
            raise ConfigError(f"search.space: {dim.key} is named twice")
        seen.add(dim.key)
        for text in dim.texts():
            try:
                config_mod.with_overrides(cfg, [f"{dim.key}={text}"], device=False)
            except ConfigError as e:
                raise ConfigError(f"search.space: {dim.line!r}: {e}") from None
    return dims


def draw(trial: optuna.Trial, dims: list[Dim]) -> list[str]:
    """A trial's values as overrides (`key=value`), drawn in the space's order."""
    out = []
    for dim in dims:
        if dim.kind == "choice":
            value = trial.suggest_categorical(dim.key, list(dim.choices))
        elif dim.kind == "int":
            value = trial.suggest_int(dim.key, int(dim.low), int(dim.high), log=dim.log)
        else:
            value = trial.suggest_float(dim.key, dim.low, dim.high, log=dim.log)
        out.append(f"{dim.key}={value_text(value)}")
    return out


def trial_config(cfg: Config, number: int, values: list[str]) -> Config:
    """The config trial `number` trains: its own name, search.folds, its values; checked like any loaded config."""
    folds = ",".join(str(f) for f in cfg.search.folds)
    fixed = [f"name={layout.trial_name(cfg, number)}", f"train.folds=[{folds}]"]
    try:
        return config_mod.with_overrides(cfg, [*fixed, *values])
    except ConfigError as e:
        raise ConfigError(f"trial {number} ({' '.join(values)}): {e}") from None


def check_folds(cfg: Config) -> None:
    bad = [f for f in cfg.search.folds if f >= cfg.data.folds]
    if bad:
        raise ConfigError(f"search.folds: fold {bad[0]} does not exist (data.folds={cfg.data.folds})")


# ---------------------------------------------------------------- the study


def storage_url(cfg: Config) -> str:
    """search.storage, else SQLite in models/<name>/search/study.db (its folder made here)."""
    if cfg.search.storage:
        return cfg.search.storage
    path = layout.search_dir(cfg) / layout.STUDY_DB
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path.resolve()}"


def open_storage(url: str) -> optuna.storages.RDBStorage:
    """The study's storage, or one line saying why it cannot be opened."""
    try:
        with warnings.catch_warnings():  # the heartbeat is marked experimental: a warning a run, not a user's to act on
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(url, heartbeat_interval=HEARTBEAT, grace_period=GRACE)
    except Exception as e:  # sqlalchemy's many errors (no driver, no such folder, refused) as one line
        why = (str(e).strip().splitlines() or [""])[0][:200]
        raise PipelineError(f"search.storage={url}: cannot open it ({type(e).__name__}: {why})") from None


def identity(cfg: Config) -> dict[str, object]:
    """What a study's trials are comparable by, as dotted keys: every setting but where files are and how the
    search runs (trials, pruner, startup, storage, seed); the space and search.folds count."""
    tree = plain(cfg.to_dict())
    search = tree.pop("search")
    tree["search"] = {"space": search["space"], "folds": search["folds"]}
    for key in ("input_dir", "models_dir", "submissions_dir"):
        tree.pop(key)
    return dict(flatten(tree))


def flatten(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def check_same_config(study: optuna.Study, cfg: Config, url: str) -> None:
    """The study is this config's (its first worker recorded the config), else one line naming what differs."""
    mine = json.loads(json.dumps(identity(cfg)))  # as the storage gives it back: lists, not tuples
    theirs = study.user_attrs.get("config")
    if theirs is None:
        study.set_user_attr("config", mine)
        return
    differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    if differ:
        k = differ[0]
        raise PipelineError(f"the study {study.study_name!r} in {url} was made by another config ({k}: "
                            f"{theirs.get(k)!r} there, {mine.get(k)!r} here; {len(differ)} setting(s) differ): "
                            "run with its settings, or under another name= or search.storage")  # fmt: skip


def make_pruner(cfg: Config) -> optuna.pruners.BasePruner:
    s = cfg.search
    if s.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=s.startup, n_warmup_steps=0)
    if s.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_early_stopping_rate=0)
    return optuna.pruners.NopPruner()


def open_study(cfg: Config) -> optuna.Study:
    """The config's study (named as the config), made or loaded, checked to be this config's."""
    url = storage_url(cfg)
    storage = open_storage(url)
    try:
        study = optuna.create_study(storage=storage, study_name=cfg.name, direction="maximize",
                                    pruner=make_pruner(cfg), load_if_exists=True)  # fmt: skip
    except ValueError as e:  # a study of that name made to minimise, or of several objectives
        raise PipelineError(f"search.storage={url}: {e}") from None
    check_same_config(study, cfg, url)
    # each worker its own seed: two workers with one seed would draw the same values; TPE models the space after 4
    # random trials (Optuna's default 10 would leave a search of the sample's 8 trials all random)
    study.sampler = optuna.samplers.TPESampler(seed=cfg.search.seed + len(study.trials), n_startup_trials=4)
    return study


def alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return True  # another user's process, or no pid recorded: not known to be gone
    return True


def fail_dead_workers(study: optuna.Study) -> list[int]:
    """Mark failed the RUNNING trials of this machine whose worker process is gone (a killed `make search`); their
    folders are left as they were. Returns their numbers."""
    host, gone = socket.gethostname(), []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = t.user_attrs.get("worker") or {}
        if worker.get("host") == host and not alive(worker.get("pid")):
            # the storage's own id of the trial: FrozenTrial keeps it as _trial_id (as optuna's heartbeat code reads it)
            study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            gone.append(t.number)
            print(f"trial {t.number}: its worker (pid {worker.get('pid')}) is gone; marked failed, "
                  f"{t.user_attrs.get('experiment', 'its folder')} left as it was")  # fmt: skip
    return gone


def counted(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=COUNTED))


# ---------------------------------------------------------------- a trial


class Reporter:
    """FoldInputs.on_evaluation of a trial: each evaluation reported to the study, at the step counted over the
    trial's folds in order; a trial the pruner stops raises TrialPruned there, at once."""

    def __init__(self, trial: optuna.Trial) -> None:
        self.trial, self.fold, self.offset, self.last = trial, None, 0, 0

    def __call__(self, fold: int, record: dict) -> None:
        if fold != self.fold:  # a later fold's steps follow the earlier fold's last one
            self.fold, self.offset = fold, self.offset + self.last
        self.last, step = record["step"], self.offset + record["step"]
        value, name = record["auc"], metrics.judged_by(record)
        if value is None or not math.isfinite(value):
            return
        self.trial.report(value, step)
        self.trial.set_user_attr("metric", name)
        if self.trial.should_prune():
            raise optuna.TrialPruned(f"fold {fold} step {record['step']}: {name} {value:.4f}")


def objective(cfg: Config, dims: list[Dim]):
    def run_trial(trial: optuna.Trial) -> float:
        values = draw(trial, dims)
        tcfg = trial_config(cfg, trial.number, values)
        folder = layout.experiment_dir(tcfg)
        trial.set_user_attr("worker", {"host": socket.gethostname(), "pid": os.getpid()})
        trial.set_user_attr("experiment", str(folder))
        trial.set_user_attr("overrides", values)
        if folder.exists():  # never this study's: a trial's number is new. A removed study.db's trial, then
            raise PipelineError(f"trial {trial.number}: {folder} exists and is no trial of this study (of one whose "
                                "study.db was removed?); move it away, or search under another name=")  # fmt: skip
        print(f"\n=== trial {trial.number}: {' '.join(values)} ===", flush=True)
        data_stage.run(tcfg)
        try:
            summary = train_stage.run(tcfg, on_evaluation=Reporter(trial))
        except Interrupted as e:  # the fold says `make train` resumes it: a search fails the trial instead
            where = str(e).split(";")[0]
            raise Interrupted(f"trial {trial.number} stopped ({where}): it counts as failed and its folder is never "
                              "reused; `make search` again goes on with a new trial") from None  # fmt: skip
        found = metrics.headline((summary or {}).get("metrics", {}))
        if found is None:
            raise PipelineError(f"trial {trial.number}: {folder} has no figure to rank it by")
        trial.set_user_attr("metric", found[0].header)
        return found[1]

    return run_trial


# ---------------------------------------------------------------- what a user sees


def minutes(t: optuna.trial.FrozenTrial) -> float | None:
    return t.duration.total_seconds() / 60 if t.duration is not None else None


def values_text(t: optuna.trial.FrozenTrial) -> str:
    return " ".join(t.user_attrs.get("overrides") or [f"{k}={value_text(v)}" for k, v in t.params.items()])


def best_complete(study: optuna.Study) -> optuna.trial.FrozenTrial | None:
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return max(done, key=lambda t: t.value) if done else None


def trial_line(study: optuna.Study, t: optuna.trial.FrozenTrial) -> str:
    """`trial 3 pruned: valid AUC 0.6123 at step 4, 0.3 min; train.lr=... | best: trial 1, valid AUC 0.7012`."""
    name = t.user_attrs.get("metric", "figure")
    figure = f"{name} {t.value:.4f}" if t.value is not None else "no figure"
    if t.state == TrialState.PRUNED and t.last_step is not None:
        figure += f" at step {t.last_step} (its folder keeps the evaluations so far; no done.json)"
    took = minutes(t)
    line = f"trial {t.number} {t.state.name.lower()}: {figure}, {took:.1f} min; {values_text(t)}"
    best = best_complete(study)
    if best is not None:
        line += f" | best: trial {best.number}, {best.user_attrs.get('metric', 'figure')} {best.value:.4f}"
    return line


def trial_table(study: optuna.Study) -> str:
    rows = ["| trial | state | figure | minutes | values |", "|---|---|---|---|---|"]
    for t in study.get_trials(deepcopy=False):
        took = minutes(t)
        rows.append(f"| {t.number} | {t.state.name.lower()} | {metrics.shown(t.value, '.4f')} | "
                    f"{metrics.shown(took, '.1f')} | {values_text(t)} |")  # fmt: skip
    return "\n".join(rows)


def importance_lines(study: optuna.Study) -> list[str]:
    """Each key's importance (optuna.importance) where two trials or more are complete."""
    if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) < 2:
        return ["importance: fewer than 2 complete trials"]
    try:
        found = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError) as e:  # e.g. every complete trial drew the same values
        return [f"importance: not computed ({e})"]
    return ["importance (fANOVA, of the complete trials):", *[f"  {k:<28} {v:.3f}" for k, v in found.items()]]


def best_command(cfg: Config, config_name: str, user_args: list[str], best) -> str:
    """The command that trains the best trial on every fold: its experiment, whose trained folds are kept."""
    keys = [a.split("=", 1)[0].strip() for a in user_args]
    kept = [a for a, k in zip(user_args, keys) if not k.startswith("search.") and k not in ("name", "train.folds")]
    # the drawn values after the user's own: a later override wins
    args = [*kept, *best.user_attrs.get("overrides", []), f"name={layout.trial_name(cfg, best.number)}"]
    return f'make train CONFIG={config_name} ARGS="{shlex.join(args)}"'


def report(cfg: Config, study: optuna.Study, config_name: str, user_args: list[str]) -> None:
    """The table of trials, each key's importance, history.png and the best trial's command."""
    trials = study.get_trials(deepcopy=False)
    print(f"\nthe study {study.study_name!r}: {len(trials)} trial(s), {counted(study)} counted of "
          f"search.trials={cfg.search.trials}")  # fmt: skip
    print(trial_table(study))
    print("\n".join(importance_lines(study)))
    marks = [(t.number, t.value, t.state == TrialState.COMPLETE) for t in trials if t.state in COUNTED]
    names = {t.user_attrs.get("metric") for t in trials} - {None}
    path = layout.search_dir(cfg) / layout.SEARCH_HISTORY
    plots.plot_search(marks, path, " / ".join(sorted(names)) or "figure", cfg.name)
    print(f"wrote {path}")
    best = best_complete(study)
    if best is None:
        print("no complete trial yet")
        return
    print(f"best: trial {best.number}, {best.user_attrs.get('metric', 'figure')} {best.value:.4f}: "
          f"{values_text(best)}")  # fmt: skip
    print(f"train it on every fold: {best_command(cfg, config_name, user_args, best)}")


# ---------------------------------------------------------------- the stage


def run(cfg: Config, config_name: str = "sample", user_args: list[str] | tuple[str, ...] = ()) -> None:
    """Check the space and the study first, then run trials until search.trials are counted, then report."""
    experiments.preflight(cfg, "search")
    check_folds(cfg)
    dims = parse_space(cfg)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line a trial is ours (trial_line)
    study = open_study(cfg)
    fail_dead_workers(study)
    left = cfg.search.trials - counted(study)
    if left > 0:
        start = time.perf_counter()
        print(f"search {cfg.name}: {left} trial(s) to go of {cfg.search.trials}, folds {list(cfg.search.folds)}, "
              f"pruner {cfg.search.pruner}")  # fmt: skip
        stop_at = optuna.study.MaxTrialsCallback(cfg.search.trials, states=COUNTED)  # over every worker
        study.optimize(objective(cfg, dims), n_trials=left, gc_after_trial=True,
                       callbacks=[stop_at, lambda s, t: print(trial_line(s, t), flush=True)])  # fmt: skip
        print(f"this worker's trials took {(time.perf_counter() - start) / 60:.1f} min")
    report(cfg, study, config_name, list(user_args))


def main(argv=None) -> int:
    args = config_mod.parser("An Optuna study over search.space; writes models/<name>/search/.").parse_args(argv)
    user_args = config_mod.join_overrides([*config_mod.split_args(args.args), *args.overrides])
    return run_stage(lambda: run(config_mod.from_args(args), args.config, user_args))


if __name__ == "__main__":
    raise SystemExit(main())
