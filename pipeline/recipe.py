"""Stage `make recipe`: a chain of stages, read as data, run to its end in dependency order, side by side.

Reads   pipeline/configs/recipes/<CONFIG>.yaml          the steps: stage, config, args, needs (docs/recipes.md)
        what each step's stage reads and writes          whether a step is done is asked of its own files
                                                          (pipeline.validity), never of a record of the chain's
Writes  input/recipes/<recipe>/<step>.log               each step's output
        what each step's stage writes; at the end the board (models/board.md)

The plan comes first: every step, which are done already and why the others are not, and an ETA from the
minutes of the folds already trained (done.json) or the recipe's own figures, scheduled on the cores. Then
the steps whose needs are done run as `python -m pipeline <stage>` processes, `recipe.jobs` at a time (one
torch thread each: docs/recipes.md measured that faster than two threads for one), a train step's folds each
in a process of its own (their locks allow it). One line a finished step. A killed chain (Ctrl-C, SIGTERM or
SIGKILL: its processes are stopped as after Ctrl-C, saving their progress) continues where it stopped when
run again: a done step is never run again, a stopped fold resumes from its saved state.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipeline import config as config_mod
from pipeline import experiments, layout, validity
from pipeline.core.resume import Interrupted
from pipeline.errors import ConfigError, PipelineError, run_stage
from pipeline.files import read_json
from pipeline.schema import Config
from pipeline.scoring import summary as run_summary

STEP_STAGES = ("data", "stage1", "train", "cv", "predict", "baseline", "blend")  # the stages a step may run
STEP_KEYS = {"id", "stage", "config", "args", "needs", "members", "train", "folds", "minutes"}


@dataclass(frozen=True)
class Step:
    id: str  # unique in the recipe; a train step's folds are <id>.fold<k>
    stage: str  # one of STAGES
    config: str  # a config name of pipeline/configs/ (the recipe's own by default)
    args: tuple[str, ...] = ()  # key=value overrides, as ARGS gives them
    needs: tuple[str, ...] = ()  # the ids of the steps that must be done first
    members: tuple[str, ...] = ()  # a blend's members (BLEND)
    train: bool = False  # stage1: train the stage-1 model (`make stage1`'s second command), else its data
    fold: int | None = None  # a train step's one fold (train.folds=[fold])
    minutes: float = 0.0  # the recipe's figure: one-core minutes (a train step's: all its folds together)
    group: str = ""  # a fold's train step: the id its folds stand for together
    extra: tuple[str, ...] = field(default=(), compare=False)  # the run's own ARGS, applied after the step's

    @property
    def overrides(self) -> list[str]:
        fold = [f"train.folds=[{self.fold}]"] if self.fold is not None else []
        return [*self.args, *fold, *self.extra]


def _flat(items) -> list[str]:
    """A step's args: strings, or lists of them (a YAML anchor of shared overrides, `*s2`), flattened."""
    out: list[str] = []
    for item in items if isinstance(items, list) else [items]:
        out.extend(_flat(item) if isinstance(item, list) else [str(item)])
    return out


def parse_step(raw: dict, default_config: str, extra: tuple[str, ...]) -> Step:
    """One step of the recipe's list, checked: known keys, a known stage, an id."""
    if not isinstance(raw, dict) or not raw.get("id") or raw.get("stage") not in STEP_STAGES:
        raise ConfigError(f"recipe step {raw!r}: needs an id and a stage of {', '.join(STEP_STAGES)}")
    unknown = sorted(set(raw) - STEP_KEYS)
    if unknown:
        known = ", ".join(sorted(STEP_KEYS))
        raise ConfigError(f"recipe step {raw['id']}: unknown key {unknown[0]!r} (known: {known})")
    return Step(
        id=str(raw["id"]), stage=raw["stage"], config=str(raw.get("config", default_config)),
        args=tuple(_flat(raw.get("args", []))), needs=tuple(_flat(raw.get("needs", []))),
        members=tuple(_flat(raw.get("members", []))), train=bool(raw.get("train", False)),
        minutes=float(raw.get("minutes", 0)), extra=extra,
    )  # fmt: skip


def expand(step: Step) -> list[Step]:
    """A train step as one step a fold (each its own process), or as it is; other steps as they are."""
    if step.stage != "train":
        return [step]
    k = step_config(step).data.folds
    ids = [f"{step.id}.{layout.fold_name(f)}" for f in range(k)]
    return [replace(step, id=i, fold=f, minutes=step.minutes / k, group=step.id) for f, i in enumerate(ids)]


def read_recipe(path: Path, extra: tuple[str, ...] = ()) -> list[Step]:
    """The recipe's steps, train steps one a fold, in the file's order; each need a step above it."""
    raw = config_mod.read_yaml(path)
    if not isinstance(raw.get("steps"), list) or not raw["steps"]:
        raise ConfigError(f"{path}: a recipe lists its steps under `steps:`")
    unknown = sorted(set(raw) - {"config", "shared", "steps", "jobs"})
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} (a recipe has config, shared, steps, jobs)")
    steps: list[Step] = []
    for item in raw["steps"]:
        step = parse_step(item, str(raw.get("config", "sample")), extra)
        known = {s.id for s in steps} | {s.group for s in steps}
        if step.id in known:
            raise ConfigError(f"{path}: step {step.id} is named twice")
        missing = [n for n in step.needs if n not in known]
        if missing:  # so the chain is in an order it can run in, with no cycle
            raise ConfigError(f"{path}: step {step.id} needs {missing[0]}, which no step above it is")
        steps.extend(expand(step))
    return steps


def needs_of(step: Step, steps: list[Step]) -> list[str]:
    """The step ids `step` waits for: a train step's id stands for all its folds."""
    return [s.id for n in step.needs for s in steps if n in (s.id, s.group)]


# ---------------------------------------------------------------- is a step done: asked of its own files


def step_config(step: Step) -> Config:
    cfg = config_mod.load(step.config, step.overrides, device=False)
    if step.stage == "stage1":
        s1 = config_mod.stage1_config(cfg, device=False)
        if s1 is None:
            raise ConfigError(f"recipe step {step.id}: stage1 needs model.init_from in its args")
        return s1
    return cfg


def newer(path: Path, than: list[Path]) -> bool:
    """`path` exists and was written after every one of `than` (a report made from these very files)."""
    return path.is_file() and all(path.stat().st_mtime >= p.stat().st_mtime for p in than if p.exists())


def folds_problem(cfg: Config, name: str, needs: tuple[str, ...]) -> str:
    """Why not every fold of models/<name>/ counts ('' when they all do), as the stages that read them ask it."""
    use, left_out = experiments.experiment_check(cfg, name, needs)
    return validity.describe(left_out) if left_out else ""


def done_why(step: Step) -> str:
    """'' when the step's stage would find nothing to do (its files count now), else why not, in a few words."""
    try:
        cfg = step_config(step)
        if step.stage in ("data", "stage1") and not step.train:
            validity.current_meta(cfg)  # the prepared tables, made from the inputs as they are now
            return ""
        if step.stage in ("train", "stage1"):
            return validity.fold_status(
                layout.fold_dir(cfg, step.fold if step.stage == "train" else layout.STAGE1),
                validity.current_fingerprint(cfg), needs=(layout.WEIGHTS,))  # fmt: skip
        return report_why(step, cfg)
    except ConfigError:  # a step that cannot run at all: said before any step starts
        raise
    except PipelineError as e:  # its inputs are not there yet, or changed: it has to run
        return str(e).split(": ", 1)[-1][:100]


def report_why(step: Step, cfg: Config) -> str:
    """done_why of the steps that read trained folds: cv, predict, baseline, blend."""
    exp = layout.experiment_dir(cfg)
    if step.stage in ("cv", "predict"):
        digest = validity.current_fingerprint(cfg)
        needs = (layout.OOF,) if step.stage == "cv" else (layout.OOF, layout.TEST_PREDS)
        use, left_out = validity.select_folds(exp, digest, cfg.data.folds, needs)
        if left_out:
            return validity.describe(left_out)
        if step.stage == "predict":
            out, made = layout.submission_path(cfg), [d / layout.TEST_KEY for d in use]
        else:  # written after every fold and of every fold: a fold's train may report before another's ends
            out, made = exp / layout.CV_JSON, [d / layout.DONE for d in use]
            if newer(out, made) and reported_folds(out) != list(range(cfg.data.folds)):
                return f"{out.name} not made from every fold"
        return "" if newer(out, made) else f"{out.name} not made from these folds yet"
    name = layout.baseline_name(cfg) if step.stage == "baseline" else blend_name(cfg, step)
    if not layout.experiment_dir(cfg, name).is_dir():
        return "not made"
    why = folds_problem(cfg, name, (layout.OOF, layout.TEST_PREDS))
    return why or ("" if layout.submission_path(cfg, name).is_file() else "no submission")


def reported_folds(cv_json: Path) -> list[int]:
    """The folds a cv.json reports."""
    try:
        return sorted(int(k) for k in read_json(cv_json).get("folds", {}))
    except (OSError, ValueError, AttributeError):
        return []


def blend_name(cfg: Config, step: Step) -> str:
    return layout.blend_name(cfg, list(step.members))


# ---------------------------------------------------------------- the plan and its ETA


def trains(step: Step) -> bool:
    """A step that trains a model: a fold of a train step, or a stage-1 model."""
    return step.fold is not None or (step.stage == "stage1" and step.train)


def fold_minutes(step: Step) -> float | None:
    """The minutes the done.json of a step that trains records (what training took), None without them."""
    fold = step.fold if step.fold is not None else layout.STAGE1
    record = validity.read_done(layout.fold_dir(step_config(step), fold)) or {}
    return float(record["minutes"]) if isinstance(record.get("minutes"), (int, float)) else None


def finished_minutes(step: Step, wall: float) -> float:
    """What a finished step took: a model's training by its done.json (a fold resumed from an earlier run took
    more than this run's `wall` minutes), else `wall`."""
    trained = fold_minutes(step) if trains(step) else None
    return wall if trained is None else trained


def sibling_minutes(step: Step, steps: list[Step], done: dict[str, str]) -> list[float]:
    """For a fold, the minutes of its experiment's folds already trained (their done.json); [] for other steps."""
    if step.fold is None:
        return []
    took = [fold_minutes(s) for s in steps if s.group == step.group and not done.get(s.id, "x")]
    return [t for t in took if t is not None]


def measured_minutes(step: Step, steps: list[Step], done: dict[str, str]) -> float:
    """A step's one-core minutes: for a fold, the mean of its experiment's folds already trained (done.json
    records their minutes), else the recipe's figure."""
    took = sibling_minutes(step, steps, done)
    return sum(took) / len(took) if took else step.minutes


def recorded(steps: list[Step], done: dict[str, str]) -> list[tuple[float, float]]:
    """(minutes, the recipe's figure) of every model trained already (a fold, a stage-1 model), by its done.json:
    this machine's pace."""
    pairs = [(fold_minutes(s), s.minutes) for s in steps if trains(s) and not done[s.id]]
    return [(t, f) for t, f in pairs if t is not None]


def step_minutes(todo: list[Step], steps: list[Step], done: dict[str, str], took: list) -> dict[str, float]:
    """Each step's minutes for the ETA: a fold's experiment's own folds' where some are done, else the recipe's
    figure at this machine's pace (`took`: what finished steps took against their figures)."""
    rate, out = pace(took), {}
    for s in todo:
        mine = sibling_minutes(s, steps, done)  # this machine's own minutes: not scaled again
        out[s.id] = sum(mine) / len(mine) if mine else s.minutes * rate
    return out


PACE_FROM = 2.0  # recipe minutes a finished step must have had to tell this machine's pace (data steps: noise)


def pace(finished: list[tuple[float, float]]) -> float:
    """This machine's minutes per minute of the recipe's figures: the sum of what the finished steps took over the
    sum of their figures (`finished`: (took, figure) of each step whose figure was at least PACE_FROM); 1 before
    one has finished. The figures were measured on one CPU: another kind (no AMX, say) runs them slower."""
    took = [(t, f) for t, f in finished if f >= PACE_FROM]
    return sum(t for t, _ in took) / sum(f for _, f in took) if took else 1.0


def longest_after(steps: list[Step]) -> dict[str, float]:
    """Each step's longest chain of the recipe's minutes to the end (itself and the dependents that wait on it),
    the order ready steps start in, longest first: a pseudo-labelled student's five folds wait on a 0.4-minute
    blend, which in file order would start only after every other fold and leave one core idle at the end. By
    the figures, fixed for a run, so that the chain and its ETA start steps in one order."""
    after: dict[str, list[str]] = {s.id: [] for s in steps}
    for s in steps:
        for n in needs_of(s, steps):
            after[n].append(s.id)
    minutes, longest = {s.id: s.minutes for s in steps}, {}

    def path(sid: str) -> float:
        if sid not in longest:
            longest[sid] = minutes[sid] + max((path(d) for d in after[sid]), default=0.0)
        return longest[sid]

    for s in steps:
        path(s.id)
    return longest


def wall_minutes(todo: list[Step], steps: list[Step], minutes: dict[str, float], jobs: int) -> float:
    """The chain's wall minutes with `jobs` steps at a time, each ready one started as a core frees (the longest
    chain first, as the recipe starts them)."""
    left, finish, running, now = list(todo), {}, [], 0.0
    ids, longest = {s.id for s in todo}, longest_after(steps)
    while left or running:
        ready = sorted((s for s in left if all(n not in ids or n in finish and finish[n] <= now
                                               for n in needs_of(s, steps))),
                       key=lambda s: -longest[s.id])  # fmt: skip
        while ready and len(running) < jobs:
            s = ready.pop(0)
            left.remove(s)
            running.append((now + minutes[s.id], s.id))
        if not running:
            break
        running.sort()
        now, sid = running.pop(0)
        finish[sid] = now
    return now


def state_of(step: Step, steps: list[Step], done: dict[str, str]) -> str:
    """'done', 'after <the needs not done yet>', or 'to do: <why>' (the first clause of what the stage's files say)."""
    if not done[step.id]:
        return "done"
    after = [n for n in step.needs if any(done[i] for i in needs_of(replace(step, needs=(n,)), steps))]
    return f"after {', '.join(after)}" if after else f"to do: {done[step.id].split(';')[0]}"


def plan_text(name: str, steps: list[Step], done: dict[str, str], minutes: dict[str, float], jobs: int,
              rate: float = 1.0) -> str:  # fmt: skip
    """The plan as printed first: every step, its stage, what it waits for, done or why not, its minutes
    (`rate`: the pace they were scaled by)."""
    todo = [s for s in steps if done[s.id]]
    lines = [f"recipe {name}: {len(steps)} steps, {len(steps) - len(todo)} done, {jobs} at a time "
             "(one torch thread each)"]  # fmt: skip
    width = max(len(s.id) for s in steps)
    for s in steps:
        lines.append(f"  {s.id:<{width}}  {s.stage:<8}  {minutes[s.id]:6.1f} min  {state_of(s, steps, done)}")
    one_core = sum(minutes[s.id] for s in todo)
    wall = wall_minutes(todo, steps, minutes, jobs)
    at = f"; the recipe's minutes x {rate:.2f}, this machine's pace in the models trained" if rate != 1.0 else ""
    lines.append(f"ETA: {wall:.0f} min on {jobs} core(s) for the {len(todo)} steps to do "
                 f"({one_core:.0f} min on one core{at})")  # fmt: skip
    return "\n".join(lines)


# ---------------------------------------------------------------- running the steps


def command(step: Step) -> list[str]:
    """The step as the Makefile would run it: `python -m pipeline <stage> --config ... --args "..."`."""
    cmd = [sys.executable, "-m", "pipeline", step.stage, "--config", step.config, "--args", shlex.join(step.overrides)]
    if step.train:
        cmd.append("--train")
    if step.members:
        cmd += ["--members", " ".join(step.members)]
    return cmd


def _stop_with(parent: int) -> None:
    """In a step's process, before it runs: SIGTERM when the chain's process dies (even by SIGKILL), so that a
    killed chain's folds save their progress and stop rather than run on, holding their locks."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the chain died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def start(step: Step, log: Path) -> subprocess.Popen:
    """The step's process, its output in `log`, one torch thread (the steps share the cores)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    threads = {k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env, parent = {**os.environ, **threads, "PYTHONUNBUFFERED": "1"}, os.getpid()
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(command(step))}\n".encode())
        out.flush()
        # a session of its own: a Ctrl-C at the terminal reaches the chain, which passes one SIGINT on (a second
        # one, straight from the terminal, would stop a fold without saving its progress)
        return subprocess.Popen(command(step), stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, preexec_fn=lambda: _stop_with(parent))  # fmt: skip


def last_line(log: Path) -> str:
    lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


class Chain:
    """The steps to do, the processes running them, and what each finished one took."""

    def __init__(self, name: str, cfg: Config, steps: list[Step], done: dict[str, str], jobs: int) -> None:
        self.name, self.cfg, self.steps, self.done, self.jobs = name, cfg, steps, done, jobs
        self.left = [s for s in steps if done[s.id]]
        self.running: dict[str, tuple[subprocess.Popen, float, Step]] = {}
        self.failed: list[str] = []
        self.stopped: list[str] = []  # steps stopped from outside the chain (a signal to the step alone)
        self.stopping = False
        # (minutes, the recipe's figure) of the folds done before this run (their done.json) and of each step done
        # by it: this machine's pace
        self.took: list[tuple[float, float]] = recorded(steps, done)
        self.longest = longest_after(steps)

    def log(self, step: Step) -> Path:
        return layout.recipe_log(self.cfg, self.name, step.id)

    def ready(self) -> list[Step]:
        """The steps whose needs are done, the longest chain after it first (the ETA's order too)."""
        waiting = {s.id for s in self.left} | set(self.running) | set(self.failed) | set(self.stopped)
        ready = [s for s in self.left if not any(n in waiting for n in needs_of(s, self.steps))]
        return sorted(ready, key=lambda s: -self.longest[s.id])  # sorted() is stable: file order among equals

    def launch(self) -> None:
        while not (self.stopping or self.failed or self.stopped) and len(self.running) < self.jobs and self.ready():
            step = self.ready()[0]
            self.left.remove(step)
            self.running[step.id] = (start(step, self.log(step)), time.perf_counter(), step)
            # a step may run for an hour: say at once that it began, and where its progress bars are
            print(f"started  {step.id} ({step.stage}), its output in {self.log(step)}", flush=True)

    def reap(self) -> None:
        """One line for each step that finished: done (its files now count), stopped or failed."""
        for sid, (proc, began, step) in list(self.running.items()):
            if proc.poll() is None:
                continue
            del self.running[sid]
            minutes = (time.perf_counter() - began) / 60
            why = done_why(step) if proc.returncode == 0 else ""
            if proc.returncode == 0 and not why:
                self.done[sid] = ""
                self.took.append((finished_minutes(step, minutes), step.minutes))
                count = sum(not w for w in self.done.values())
                print(f"done     {sid} ({step.stage}) in {minutes:.1f} min  [{count}/{len(self.steps)}]"
                      f"{self.eta_left()}", flush=True)  # fmt: skip
            elif proc.returncode in (130, -signal.SIGINT, -signal.SIGTERM):
                # the chain's own stop, or a signal to this step alone: its progress is saved either way, so
                # nothing more starts, the running steps finish, and `make recipe` continues from there
                if not self.stopping:
                    self.stopped.append(sid)
                print(f"stopped  {sid} ({step.stage}) after {minutes:.1f} min: {last_line(self.log(step))}")
            else:
                self.failed.append(sid)
                what = f"exit {proc.returncode}: {last_line(self.log(step))}" if proc.returncode else f"ran, but {why}"
                print(f"failed   {sid} ({step.stage}), {what} (log: {self.log(step)})", flush=True)

    def eta_left(self) -> str:
        """The wall minutes left, from the folds' minutes measured so far, else the recipe's figures at the pace
        this run's steps have shown on this machine (a running step: what it has left)."""
        if not self.left:
            return ""
        now, rate = time.perf_counter(), pace(self.took)
        running = [step for _, _, step in self.running.values()]
        minutes = step_minutes([*running, *self.left], self.steps, self.done, self.took)
        for _, began, step in self.running.values():
            minutes[step.id] = max(minutes[step.id] - (now - began) / 60, 0.0)
        at = f", the recipe's minutes x {rate:.2f} on this machine" if rate != 1.0 else ""
        return f"; ETA {wall_minutes([*running, *self.left], self.steps, minutes, self.jobs):.0f} min left{at}"

    def stop(self, *_: object) -> None:
        """Ctrl-C or SIGTERM: no step starts, each running one is stopped as after Ctrl-C (its progress saved)."""
        if not self.stopping:
            self.stopping = True
            for proc, _, _ in self.running.values():
                proc.send_signal(signal.SIGINT)

    def run(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self.stop)
        self.launch()
        while self.running:
            time.sleep(0.2)
            self.reap()
            self.launch()
        if self.stopping or self.stopped:
            which = f": {', '.join(self.stopped)} stopped by a signal" if self.stopped and not self.stopping else ""
            raise Interrupted(f"the recipe {self.name} stopped{which}; `make recipe` again continues where it stopped")
        if self.failed:
            raise PipelineError(f"the recipe {self.name} stopped at {', '.join(self.failed)} (its log says why); "
                                "fix it and run `make recipe` again: the steps done are not run again")  # fmt: skip
        if self.left:
            raise PipelineError(f"the recipe {self.name}: {', '.join(s.id for s in self.left)} could not start")


def experiment_of(step: Step) -> str:
    """The experiment a step writes: a blend's name, else its config's."""
    cfg = step_config(step)
    return blend_name(cfg, step) if step.stage == "blend" else cfg.name


def end_of_run(config: str, extra: tuple[str, ...], last: Step, seconds: float) -> None:
    """After the last step: the board of every experiment under models/ (`make board`), then the end-of-run block
    of the chain's last step (the experiment or blend the recipe ends on)."""
    subprocess.run(command(Step(id="board", stage="board", config=config, extra=extra)), check=False)
    print(run_summary.block(step_config(last), "recipe", seconds, name=experiment_of(last)), flush=True)


def run(name: str, extra: tuple[str, ...], jobs: int | None = None) -> None:
    path = config_mod.recipe_path(name)
    raw = config_mod.read_yaml(path)
    steps = read_recipe(path, extra)
    jobs = jobs or int(raw.get("jobs", 0)) or os.cpu_count() or 1
    cfg = step_config(steps[0])
    done = {s.id: done_why(s) for s in steps}
    chain = Chain(path.stem, cfg, steps, done, jobs)  # it reads the pace of the models trained already
    minutes = {s.id: measured_minutes(s, steps, done) for s in steps} | step_minutes(
        [s for s in steps if done[s.id]], steps, done, chain.took
    )
    print(plan_text(path.stem, steps, done, minutes, jobs, pace(chain.took)), flush=True)
    start = time.perf_counter()
    chain.run()
    print(f"recipe {path.stem}: every step done", flush=True)
    end_of_run(str(raw.get("config", "sample")), extra, steps[-1], time.perf_counter() - start)


def main(argv=None) -> int:
    parser = config_mod.parser("Run a recipe's chain of stages (pipeline/configs/recipes/<CONFIG>.yaml) to its end.")
    parser.add_argument("--jobs", type=int, default=0, help="steps at a time (default: the recipe's, or the cores)")
    args = parser.parse_args(argv)
    extra = (*config_mod.split_args(args.args), *args.overrides)
    return run_stage(lambda: run(args.config, tuple(extra), args.jobs or None))
