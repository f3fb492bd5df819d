"""Stage `make recipe`: a chain of stages, read as data, run to its end in dependency order, side by side.

Reads   pipeline/configs/recipes/<CONFIG>.yaml          the steps: stage, config, args, needs (docs/recipes.md)
        what each step's stage reads and writes          whether a step is done is asked of its own files
                                                          (pipeline.validity), never of a record of the chain's
Writes  input/recipes/<recipe>/<step>.log               each step's output
        what each step's stage writes; at the end the board (models/board.md)

The plan comes first: every step, which are done already and why the others are not, and an ETA from the
minutes of the folds already trained (done.json) or the recipe's own figures, scheduled on the cores. Then
the steps whose needs are done run as `python -m pipeline <stage>` processes, `recipe.jobs` at a time (one
torch thread each: docs/results.md measured that faster than two threads for one), a train step's folds each
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
from pathlib import Path

from pipeline import config as config_mod
from pipeline import files, layout
from pipeline.chain import plan
from pipeline.chain.steps import RECIPE_SHAPE, Step, done_why, experiment_of, needs_of, read_recipe, step_config
from pipeline.core import headroom
from pipeline.core.resume import Interrupted
from pipeline.errors import ConfigError, PipelineError, run_stage
from pipeline.schema import Config
from pipeline.scoring import summary as run_summary


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
    env = {**os.environ, **headroom.alloc_env(os.environ), **threads, "PYTHONUNBUFFERED": "1"}  # allocator: unless set
    parent = os.getpid()
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(command(step))}\n".encode())
        out.flush()
        # a session of its own: a Ctrl-C at the terminal reaches the chain, which passes one SIGINT on (a second
        # one, straight from the terminal, would stop a fold without saving its progress)
        return subprocess.Popen(command(step), stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, preexec_fn=lambda: _stop_with(parent))  # fmt: skip


def last_line(log: Path) -> str:
    """The last line this run's process of the step wrote: the log holds every run's, each after its `$` line."""
    text = log.read_text(encoding="utf-8", errors="replace").rsplit("\n$ ", 1)[-1]
    lines = [line for line in text.splitlines()[1:] if line.strip()]  # the first line: the command itself
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
        self.took: list[tuple[float, float]] = plan.recorded(steps, done)
        self.longest = plan.longest_after(steps)

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
            if not done_why(step):  # asked again now that its needs ran: its files may match what they made
                self.done[step.id] = ""
                print(f"current  {step.id} ({step.stage}): its files match what the steps it needs made", flush=True)
                continue
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
                self.took.append((plan.finished_minutes(step, minutes), step.minutes))
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
        now, rate = time.perf_counter(), plan.pace(self.took)
        running = [step for _, _, step in self.running.values()]
        minutes = plan.step_minutes([*running, *self.left], self.steps, self.done, self.took)
        for _, began, step in self.running.values():
            minutes[step.id] = max(minutes[step.id] - (now - began) / 60, 0.0)
        at = f", the recipe's minutes x {rate:.2f} on this machine" if rate != 1.0 else ""
        return f"; ETA {plan.wall_minutes([*running, *self.left], self.steps, minutes, self.jobs):.0f} min left{at}"

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
        # every step done: a Ctrl-C from here stops the chain's own work (the closing board) as it stops any stage
        # (a stopped chain keeps its handler: a second signal while it says so is no traceback)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def end_of_run(config: str, extra: tuple[str, ...], steps: list[Step], seconds: float) -> None:
    """After the last step: the board of every experiment under models/ (`make board`; a recipe of data steps
    alone has none to list), then the end-of-run block of the chain's last step (the experiment or blend the
    recipe ends on)."""
    if not all(s.stage == "data" or s.stage == "stage1" and not s.train for s in steps):
        board = subprocess.run(command(Step(id="board", stage="board", config=config, extra=extra)), check=False)
        if board.returncode in (130, -signal.SIGINT, -signal.SIGTERM):  # a Ctrl-C reaches the board's process too
            raise KeyboardInterrupt
        if board.returncode:  # its own line above says why
            raise PipelineError("every step is done, but the board could not be made (its error above); `make board`")
    last = steps[-1]
    print(run_summary.block(step_config(last), "recipe", seconds, name=experiment_of(last)), flush=True)


def check_jobs(jobs: object, where: str) -> int:
    """`jobs:` or --jobs, checked: a whole number of steps at a time, 1 or more."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"{where}={jobs!r}: the steps to run at a time, a whole number from 1 (e.g. 2)")
    return jobs


def run(name: str, extra: tuple[str, ...], jobs: int | None = None) -> None:
    path = config_mod.recipe_path(name)
    raw = config_mod.read_yaml(path, RECIPE_SHAPE)
    steps = read_recipe(path, extra)
    if jobs is not None:
        jobs = check_jobs(jobs, "--jobs")
    elif raw.get("jobs") is not None:
        jobs = check_jobs(raw["jobs"], f"{path.name}: jobs")
    jobs = jobs or os.cpu_count() or 1
    configs = [step_config(s) for s in steps]  # a step's settings that cannot load: one line before any file
    cfg = configs[0]  # is written; then one run of the recipe at a time (its steps' logs and the fold locks are its)
    lock = layout.recipe_lock(cfg, path.stem)
    files.check_writable_dir(lock.parent, "the recipe's logs")
    for where in dict.fromkeys(p for c in configs for p in (c.models_dir, c.submissions_dir)):
        files.check_writable_dir(where, "the models and submissions folders")  # not a failure an hour in
    for step in steps:  # a log that cannot be written: one line now, not a traceback an hour in
        files.check_file_target(layout.recipe_log(cfg, path.stem, step.id), f"step {step.id}'s log")
    files.acquire_lock(lock, f"the recipe {path.stem}", "recipe")
    own = {s.id: done_why(s) for s in steps}
    done = plan.pending(steps, own)
    chain = Chain(path.stem, cfg, steps, done, jobs)  # it reads the pace of the models trained already
    minutes = {s.id: plan.measured_minutes(s, steps, own) for s in steps} | plan.step_minutes(
        [s for s in steps if done[s.id]], steps, own, chain.took
    )
    print(plan.plan_text(path.stem, steps, done, minutes, jobs, plan.pace(chain.took)), flush=True)
    start = time.perf_counter()
    chain.run()
    print(f"recipe {path.stem}: every step done", flush=True)
    end_of_run(str(raw.get("config", "sample")), extra, steps, time.perf_counter() - start)


def main(argv=None) -> int:
    parser = config_mod.parser("Run a recipe's chain of stages (pipeline/configs/recipes/<CONFIG>.yaml) to its end.")
    parser.add_argument("--jobs", type=int, default=None, help="steps at a time (default: the recipe's, or the cores)")
    args = parser.parse_args(argv)
    # ARGS split inside the stage: an unclosed quote is one line too
    return run_stage(lambda: run(args.config, (*config_mod.split_args(args.args), *args.overrides), args.jobs))
