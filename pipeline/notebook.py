"""The stage a Kaggle notebook runs: `make data train predict` on Kaggle's folders, fold by fold.

Reads   /kaggle/input/...        the competition, the code bundle, the model's weights (read in place), and
                                 with kaggle.continue_from the earlier session's output (read in place)
Writes  /kaggle/temp/input/      the prepared table and the token cache (scratch, not kept)
        /kaggle/temp/models/     every fold as training leaves it, resume.pt included (scratch)
        /kaggle/working/         only what the user downloads: kernel-run.yaml, submission.csv,
                                 <name>.csv and models/<name>/ (each fold without its resume state, unless
                                 cut off by the time limit, and without its weights when
                                 kaggle.keep_weights=false); kernel-session.json (what the next session
                                 continues from); with model.init_from also kernel-run-stage1.yaml and
                                 models/<init_from>/fold-1/

`make kernel` pushes this; the kernel's code file (pipeline/kaggle/launch.py) finds the code bundle and
calls `notebook_main`. Kaggle's folders, mounts and GPUs are pipeline/kaggle/session.py's business, the
session's deadline pipeline/kaggle/clock.py's, an earlier session's output pipeline/kaggle/continuation.py's.
Each fold is copied into working as soon as it is complete and predicted with at once: a session that runs
out of time keeps the folds it finished and a submission from all of them. The train stage runs once per
fold, under torchrun with one process per GPU when there are several (`kaggle.gpus`, default every visible
GPU): the same DDP code path as `make train GPUS=N`, stopped with every worker when it runs past the session's
deadline by more than saving its state takes (a hang: SessionClock.train_timeout).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pipeline import config as config_mod
from pipeline import layout, validity
from pipeline.core import eta, headroom
from pipeline.files import read_json
from pipeline.kaggle import continuation
from pipeline.kaggle.clock import SessionClock
from pipeline.kaggle.disk import human
from pipeline.kaggle.plan import KernelError, make_plan
from pipeline.kaggle.session import (
    INPUT_ENV,
    PACKAGE,
    RUN_CONFIG,
    STAGE1_CONFIG,
    WEIGHTS,
    KagglePaths,
    check_machine,
    folder_bytes,
    kaggle_paths,
    kept_config,
    locate,
    machine_report,
    notebook_config,
    on_kaggle,
    previous_output,
    processes,
    sync,
    visible_gpus,
)
from pipeline.schema import Config
from pipeline.scoring import metrics

P2P_OFF = {"NCCL_P2P_DISABLE": "1"}  # the usual cure for an all-reduce that hangs on PCIe peer-to-peer (T4s)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process: this one's, the code bundle importable, output unbuffered."""
    env = dict(os.environ)
    # the children import the pipeline from the same place as this process: the mounted code bundle
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE.parent), env.get("PYTHONPATH", "")]))
    env["PYTHONUNBUFFERED"] = "1"  # each line reaches the log when printed, not when a buffer fills (or never)
    env.update(headroom.alloc_env(env))  # expandable segments: less fragmentation on the T4s, unless set
    return {**env, **(extra or {})}


def torchrun(module: str, args: list[str], nproc: int, timeout: float | None = None, extra_env=None) -> int:
    """`python -m <module> args` under torchrun with `nproc` processes; its exit status. Past `timeout` seconds the
    launcher and every worker are stopped (stop_tree) and subprocess.TimeoutExpired is raised."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m", module]
    if timeout is None:
        return subprocess.run([*cmd, *args], env=child_env(extra_env), check=False).returncode
    proc = subprocess.Popen([*cmd, *args], env=child_env(extra_env), start_new_session=True)  # a group of its own
    try:
        return proc.wait(timeout=timeout)
    except BaseException:  # the timeout, or a stop asked of this process: nothing of it may outlive the call
        stop_tree(proc)
        raise


STOP_GRACE_S = 15.0  # seconds a stopped launcher and its workers get between SIGTERM and SIGKILL, and after it


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux /proc). torchrun starts each worker in a session of its own, so a signal to
    the launcher's group misses them, and once the launcher is gone they are init's: found before it is stopped."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def alive(pid: int) -> bool:
    """The process runs (a zombie holds no GPU: it only waits to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_tree(proc: subprocess.Popen, grace: float | None = None) -> None:
    """Stop `proc` (started in a process group of its own), its group and every process below it: SIGTERM (torchrun
    then stops its workers itself), SIGKILL to whatever still runs after `grace` seconds, then wait for them all. A
    worker blocked in an all-reduce would otherwise hold its GPU for the rest of the session."""
    grace = STOP_GRACE_S if grace is None else grace
    pids = descendants(proc.pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = list(dict.fromkeys(pids + descendants(proc.pid)))
        for target in (proc.pid, *pids):
            kill = os.killpg if target == proc.pid else os.kill  # the launcher's whole group; each worker
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(target, sig)
        end = time.monotonic() + grace
        while time.monotonic() < end and (proc.poll() is None or any(alive(p) for p in pids)):
            time.sleep(0.1)
    proc.wait()


def run_module(module: str, args: list[str], nproc: int, timeout: float | None = None) -> int:
    """`python -m pipeline.<module> args` in this process, or under torchrun with `nproc` processes; its status.
    Under torchrun, past `timeout` seconds every process is stopped and subprocess.TimeoutExpired raised (one
    process has no collective to hang in)."""
    if nproc == 1:
        return importlib.import_module(f"pipeline.{module}").main(args)
    return torchrun(f"pipeline.{module}", args, nproc, timeout=timeout)


def train_fold(cfg: Config, run_cfg: Path, fold: int, nproc: int, folds_after: int = 0, timeout=None) -> str:
    """The train stage on one fold: 'done'; 'time' when it stopped for the session's limit with its state saved;
    'later' when it stopped before its first epoch (nothing to keep). `folds_after`: the folds to train after
    it, which its ETA lines count too. `timeout`: the seconds after which a torchrun stage is hung (an NCCL hang
    never reaches the deadline check, itself a collective): stopped with every worker, then one error."""
    marker = layout.experiment_dir(cfg) / layout.TIME_UP
    marker.unlink(missing_ok=True)
    os.environ[eta.FOLDS_AFTER_ENV] = str(folds_after)  # read in this process, or inherited by torchrun's
    try:
        code = run_module("train", ["--config", str(run_cfg), f"train.folds=[{fold}]"], nproc, timeout)
    except subprocess.TimeoutExpired:
        code = None  # torchrun and its workers are stopped (stop_tree): the GPUs are free again
    if marker.is_file():  # first: under torchrun a planned stop exits 0 (pipeline.errors.run_stage)
        record = read_json(marker)
        print(f"kernel: {record['why']}")
        return "time" if record.get("started", True) else "later"
    if code is None:
        raise RuntimeError(
            f"train fold {fold} still ran {eta.hours(timeout or 0)} after it started, past the session's deadline: "
            f"hung (an all-reduce that never returns?); stopped with its {nproc} workers"
        )
    if code == 0:
        return "done"
    raise RuntimeError(f"train fold {fold} failed (exit status {code}); see the messages above")


def checked_processes(cfg: Config, nproc: int) -> int:
    """`nproc`, after one all-reduce across them works (NCCL on two T4s; tried again with PCIe peer-to-peer off);
    else one process, said so with the effective batch that halves."""
    if nproc == 1 or not visible_gpus():
        return nproc
    for extra in ({}, P2P_OFF):
        how = " with NCCL_P2P_DISABLE=1" if extra else ""
        try:
            code = torchrun("pipeline.core.distributed", [], nproc, timeout=240, extra_env=extra)
        except subprocess.TimeoutExpired:
            code = "a hang of 4 minutes"
        if code == 0:
            os.environ.update(extra)  # every later torchrun inherits it
            print(f"kernel: an all-reduce across {nproc} GPUs works{how}")
            return nproc
        print(f"kernel: an all-reduce across {nproc} GPUs failed{how} ({code})")
    per = cfg.train.micro_batch * cfg.train.accumulation
    print(f"kernel: training on one GPU instead: effective batch {per} instead of {per * nproc} "
          "(micro-batch x accumulation x processes)")  # fmt: skip
    return 1


def session_processes(cfg: Config, earlier: int | None) -> int:
    """This session's train processes: one per GPU (kaggle.gpus), the all-reduce checked. Continuing an earlier
    session, as many as trained its folds (the batch plan, the resume state and the effective batch depend on
    it), or one line before anything is trained: a cut fold would start again and the folds mix two batches."""
    wanted = processes(cfg)
    if earlier is not None and earlier < wanted and not cfg.kaggle.gpus:
        print(f"kernel: the earlier session's folds were trained by {earlier} process(es): so are this session's")
        wanted = earlier
    got = checked_processes(cfg, wanted)
    if earlier is not None and got != earlier:
        raise KernelError(
            f"the earlier session's folds were trained by {earlier} process(es) and this session runs {got} "
            f"({visible_gpus()} GPU(s) visible, kaggle.gpus={cfg.kaggle.gpus}): the cut fold would start again and "
            f"the folds would mix two effective batches; push again for a session with {earlier} working GPU(s) "
            "(kaggle.gpus=0: all), or start afresh under another name="
        )
    return got


@dataclass
class Session:
    """What one notebook run knows beyond the config: Kaggle's folders, its processes, its clock, and the record
    it leaves in working for the session that continues it."""

    paths: KagglePaths
    nproc: int
    clock: SessionClock
    id: str = field(default_factory=continuation.new_session_id)
    folds: dict = field(default_factory=dict)  # experiment -> {"complete": [...], "cut": [...]}

    def note(self, name: str, fold: int, state: str | None) -> None:
        """A fold kept in working: noted in kernel-session.json at once (a killed session's record stays true)."""
        entry = self.folds.setdefault(name, {"complete": [], "cut": []})
        if state:
            entry[state].append(fold)
        continuation.write_record(self.paths.working, self.id, self.nproc, self.folds)


def notebook_main(config_text: str, env=None, continues: str = "") -> Path | None:
    """Run data, train (fold by fold) and predict on Kaggle's folders; return the submission's path.

    A config that starts from a stage-1 model (`model.init_from`) trains that model first, in the same
    session, as `make stage1` would; a stage-1 config alone (train.folds=[-1]) has no submission: None.
    The session's clock starts here: no fold or epoch starts that cannot end before its deadline (the
    session's end less what must fit after training: pipeline/kaggle/clock.py). `continues`: the id of the
    earlier session `make kernel` checked (kaggle.continue_from), which the mounted output must carry.
    """
    start = eta.now()
    paths = kaggle_paths(env)
    if not paths.input.is_dir():
        raise KernelError(f"{paths.input} does not exist: not on Kaggle, and {INPUT_ENV} is not set")
    cfg = notebook_config(config_mod.from_dict(yaml.safe_load(config_text)), paths)
    for line in machine_report():
        print(f"kernel: {line}")
    check_machine(cfg)
    clock = SessionClock.begin(cfg, start)
    paths.working.mkdir(parents=True, exist_ok=True)
    earlier = earlier_output(cfg, paths, continues)  # in the first minute: one line when it holds nothing
    world = continuation.earlier_world(earlier[0], cfg, earlier[1]) if earlier else None
    session = Session(paths, session_processes(cfg, world), clock)
    where = "Kaggle" if on_kaggle(env) else "a simulated Kaggle layout"
    print(f"kernel: on {where}; input {paths.input}, working {paths.working}, temp {paths.temp}")
    print(f"kernel: code from {PACKAGE}; competition {cfg.data.dir}; model {cfg.model.name}; "
          f"{session.nproc} train processes")  # fmt: skip
    print(f"kernel: {clock.describe()}")
    for line in continuation.link_folds(earlier[0], cfg) if earlier else []:
        print(f"kernel: {line}")
    run = stage1_then(cfg, session)
    print(run.summary(cfg, session))
    return run.submission


def earlier_output(cfg: Config, paths: KagglePaths, expected: str) -> tuple[Path, dict] | None:
    """kaggle.continue_from: the earlier session's mounted output and its record, checked (continuation.py)."""
    if not cfg.kaggle.continue_from:
        return None
    mount = previous_output(cfg, paths, make_plan(cfg, "owner").continue_kernel or cfg.kaggle.continue_from)
    return mount, continuation.check_mounted(cfg, mount, expected)


def stage1_then(cfg: Config, session: Session) -> Run:
    """Stage 1 when the config starts from one it does not attach, then the experiment itself."""
    attached = attached_stage1(cfg, session.paths)
    if attached is not None:
        print(f"kernel: stage 1: {cfg.model.init_from} from kernel {cfg.kaggle.init_kernel}'s output ({attached})")
    elif cfg.model.init_from:
        stage1 = config_mod.stage1_config(cfg, device=False)
        print(f"kernel: stage 1: {stage1.name} (one model on the training-only rows), then stage 2: {cfg.name}")
        first = run_experiment(stage1, session.paths.working / STAGE1_CONFIG, session)
        if first.stopped:
            return first
    return run_experiment(cfg, session.paths.working / RUN_CONFIG, session)


def attached_stage1(cfg: Config, paths: KagglePaths) -> Path | None:
    """The stage-1 model in kaggle.init_kernel's output, linked where the folds read it; None without one."""
    if not (cfg.kaggle.init_kernel and cfg.model.init_from):
        return None
    mount = locate(paths.input, cfg.kaggle.init_kernel.split("/")[-1], "the stage-1 kernel")
    src = mount / "models" / cfg.model.init_from / layout.fold_name(layout.STAGE1)
    if validity.fold_status(src, needs=(WEIGHTS,)):
        raise KernelError(
            f"{src}: kernel {cfg.kaggle.init_kernel}'s output holds no complete stage-1 model {cfg.model.init_from} "
            "(done.json and model.safetensors): run that kernel to the end"
        )
    dest = layout.fold_dir(cfg, layout.STAGE1, cfg.model.init_from)
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.symlink_to(src, target_is_directory=True)  # read in place: 2.24 GB for XLM-R large, not copied
    return dest


@dataclass
class Run:
    """What a session did with one experiment's folds."""

    folds: list[int]
    complete: list[int] = field(default_factory=list)
    cut: list[int] = field(default_factory=list)  # stopped for time, the resume state kept (or lost)
    not_started: list[int] = field(default_factory=list)
    submission: Path | None = None

    @property
    def stopped(self) -> bool:
        return bool(self.cut or self.not_started)

    def summary(self, cfg: Config, session: Session) -> str:
        """The one line a session ends with: what is done, by how many processes, and the command that continues."""
        paths, t = session.paths, cfg.train
        held = f"working holds {human(folder_bytes(paths.working))}"
        eff = t.micro_batch * t.accumulation * session.nproc
        held += f"; trained by {session.nproc} process(es), effective batch {eff}"
        made = f"submission at {self.submission} from folds {names(self.complete)}" if self.submission else ""
        made = made or f"stage-1 model in {layout.experiment_dir(kept_config(cfg, paths))}"
        if not self.stopped:
            return f"kernel: done; {made}; {held}"
        kept = "resume state kept" if cfg.kaggle.keep_resume else "resume state not kept (kaggle.keep_resume=false)"
        parts = [f"folds {names(self.complete)} complete" if self.complete else "no fold complete"]
        parts += [f"fold {names(self.cut)} cut off ({kept})"] if self.cut else []
        parts += [f"folds {names(self.not_started)} not started"] if self.not_started else []
        return (
            f"kernel: stopped for the session's time limit: {'; '.join(parts)}; "
            f"{made if self.submission else 'no submission'}; {held}. Continue with the same CONFIG and ARGS "
            f'plus ARGS="kaggle.continue_from=self": make kernel'
        )


def names(folds: list[int]) -> str:
    return ", ".join(str(f) for f in folds)


def run_experiment(cfg: Config, run_cfg: Path, session: Session) -> Run:
    """One experiment's data and folds, each kept in working once done and, once complete, predicted with at once
    (the submission then always holds every complete fold). A fold an earlier session completed is kept and never
    trained again; a fold that cannot end before the deadline is not started (with kaggle.keep_resume it may start
    when one epoch can: its state carries to the next session)."""
    from pipeline import data

    config_mod.save(cfg, run_cfg)
    print(f"kernel: {cfg.name}: config {run_cfg}")
    _stage(data, run_cfg)
    kept = kept_config(cfg, session.paths)  # the same layout under working: what the user downloads
    run = Run(list(cfg.train.folds) or list(range(cfg.data.folds)))
    digest, predicts = validity.current_fingerprint(cfg), run.folds != [layout.STAGE1]
    took: list[float] = []  # seconds of the folds trained from their start in this session
    unpredicted = False  # complete folds kept since the last predict
    for n, fold in enumerate(run.folds):
        if counted(cfg, fold, digest):
            keep_fold(cfg, kept, fold, session, "complete")
            run.complete.append(fold)
            unpredicted = True
            continue
        session.clock.arm()
        if run.stopped or not fits(cfg, took):
            run.not_started.append(fold)
            continue
        fresh, begin = not layout.fold_dir(cfg, fold).exists(), eta.now()
        outcome = train_fold(cfg, run_cfg, fold, session.nproc, len(run.folds) - n - 1, session.clock.train_timeout())
        session.clock.trained = session.clock.trained or outcome != "later"  # its first epoch was never refused
        if outcome == "later":
            run.not_started.append(fold)
            continue
        keep_fold(cfg, kept, fold, session, "complete" if outcome == "done" else "cut")
        (run.complete if outcome == "done" else run.cut).append(fold)
        took += [eta.now() - begin] if fresh and outcome == "done" else []
        unpredicted = unpredicted or outcome == "done"
        if predicts and outcome == "done":
            try:
                run.submission, unpredicted = predict_and_keep(cfg, run_cfg, kept, session), False
            except RuntimeError as e:  # the folds left are worth more than stopping here: tried again at the end
                print(f"kernel: warning: {e} (after fold {fold}); training goes on, predict runs again at the end")
    if predicts and run.complete and unpredicted:
        run.submission = predict_and_keep(cfg, run_cfg, kept, session)
    return run


def counted(cfg: Config, fold: int, digest: str) -> bool:
    """A fold an earlier session completed with these settings (linked here by continuation.link_folds): kept and
    predicted with, never trained again. Kept without its weights (kaggle.keep_weights=false), its test
    predictions made with them stand for them; a stage-1 model needs its weights (every fold starts from them)."""
    folder = layout.fold_dir(cfg, fold)
    if not (folder / layout.DONE).is_file():
        return False
    needs = (WEIGHTS,) if fold == layout.STAGE1 else (layout.TESTED, layout.ALL)
    why = validity.fold_status(folder, digest, needs)
    if why:
        print(f"kernel: {cfg.name} fold {fold} from the earlier session does not count ({why}): trained again")
        return False
    done = validity.read_done(folder) or {}
    auc = f" ({metrics.fold_own(done)})" if isinstance(done.get("auc"), float) else ""
    print(f"kernel: {cfg.name} fold {fold}: complete from the earlier session{auc}; not trained again")
    return True


def keep_fold(cfg: Config, kept: Config, fold: int, session: Session, state: str) -> None:
    """The fold copied into working (timed: the clock's copy rate) and noted in the session's record. A stage-1
    model keeps its weights whatever kaggle.keep_weights says: every fold of a later session starts from them."""
    keep_resume = state == "cut" and cfg.kaggle.keep_resume
    keep_weights = cfg.kaggle.keep_weights or fold == layout.STAGE1
    begin = time.perf_counter()
    copied = sync(layout.fold_dir(cfg, fold), layout.fold_dir(kept, fold), keep_weights, keep_resume)
    session.clock.copied(sum(p.stat().st_size for p in copied), time.perf_counter() - begin)
    session.note(cfg.name, fold, state if state == "complete" or keep_resume else None)
    print(f"kernel: {cfg.name} fold {fold} kept in {layout.experiment_dir(kept)}; "
          f"working holds {human(folder_bytes(session.paths.working))}")  # fmt: skip


def fits(cfg: Config, took: list[float]) -> bool:
    """Whether the next fold can start: it ends before the deadline (or, with kaggle.keep_resume, its first
    epoch does), by the run's own estimate of a fold (eta.json: the one its ETA lines print), else by the
    folds this session timed; the first fold always starts, its epochs guarded in training."""
    left = eta.left()
    if not took or left is None:
        return True
    need = eta.fold_estimate(layout.experiment_dir(cfg)) or sum(took) / len(took)
    if cfg.kaggle.keep_resume:
        need /= cfg.train.epochs
    if need <= left:
        return True
    print(f"kernel: the next fold needs about {eta.hours(need)}; {eta.hours(left)} are left before the deadline")
    return False


def predict_and_keep(cfg: Config, run_cfg: Path, kept: Config, session: Session) -> Path:
    """The submission from the complete folds (each GPU predicting its share; folds predicted before are read from
    their cache), kept in working with the report; the time it took is the clock's predict cost."""
    begin = time.perf_counter()
    if run_module("predict", ["--config", str(run_cfg)], session.nproc):
        raise RuntimeError("predict failed; see the messages above")
    session.clock.predicted(time.perf_counter() - begin)
    sync(layout.experiment_dir(cfg), layout.experiment_dir(kept), cfg.kaggle.keep_weights)  # cv.json, test.csv
    submission = layout.submission_csv(cfg)
    if not submission.is_file():
        raise RuntimeError(f"{submission} was not written")
    return submission


def _stage(module, run_cfg: Path) -> None:
    code = module.main(["--config", str(run_cfg)])
    if code:
        raise RuntimeError(f"{module.__name__} failed (exit status {code}); see the messages above")
