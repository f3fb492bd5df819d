"""The stage a Kaggle notebook runs: `make data train predict` on Kaggle's folders, fold by fold.

Reads   /kaggle/input/...        the competition, the code bundle, the model's weights (read in place)
Writes  /kaggle/temp/input/      the prepared table and the token cache (scratch, not kept)
        /kaggle/temp/models/     every fold as training leaves it, resume.pt included (scratch)
        /kaggle/working/         only what the user downloads: kernel-run.yaml, submission.csv,
                                 <name>.csv and models/<name>/ (each fold without its resume state,
                                 and without its weights when kaggle.keep_weights=false); with
                                 model.init_from also kernel-run-stage1.yaml and models/<init_from>/fold-1/

`make kernel` pushes this; the kernel's code file (pipeline/kaggle/launch.py) finds the code bundle and
calls `notebook_main`. Kaggle's folders, mounts and GPUs are pipeline/kaggle/session.py's business. Each
fold is copied into working as soon as it is complete: a session that runs out of time keeps the folds
it finished. The train stage runs once per fold, under torchrun with one process per GPU when there are
several (`kaggle.gpus`, default every visible GPU): the same DDP code path as `make train GPUS=N`.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pipeline import config as config_mod
from pipeline import layout
from pipeline.config import Config
from pipeline.core import eta
from pipeline.files import read_json
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


def torchrun(module: str, args: list[str], nproc: int, timeout: float | None = None) -> int:
    """`python -m <module> args` under torchrun with `nproc` processes; its exit status."""
    env = dict(os.environ)
    # the children import the pipeline from the same place as this process: the mounted code bundle
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE.parent), env.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m", module]
    return subprocess.run([*cmd, *args], env=env, timeout=timeout, check=False).returncode


def run_module(module: str, args: list[str], nproc: int) -> int:
    """`python -m pipeline.<module> args` in this process, or under torchrun with `nproc` processes; its status."""
    if nproc == 1:
        return importlib.import_module(f"pipeline.{module}").main(args)
    return torchrun(f"pipeline.{module}", args, nproc)


def train_fold(cfg: Config, run_cfg: Path, fold: int, nproc: int, folds_after: int = 0) -> str:
    """The train stage on one fold: 'done', or 'time' when it stopped for the session's limit (its state saved).
    `folds_after`: the folds to train after it, which its ETA lines count too."""
    marker = layout.experiment_dir(cfg) / layout.TIME_UP
    marker.unlink(missing_ok=True)
    os.environ[eta.FOLDS_AFTER_ENV] = str(folds_after)  # read in this process, or inherited by torchrun's
    code = run_module("train", ["--config", str(run_cfg), f"train.folds=[{fold}]"], nproc)
    if code == 0:
        return "done"
    if marker.is_file():  # under torchrun the status is torchrun's own: the file tells a stop for time
        print(f"kernel: {read_json(marker)['why']}")
        return "time"
    raise RuntimeError(f"train fold {fold} failed (exit status {code}); see the messages above")


def checked_processes(cfg: Config, nproc: int) -> int:
    """`nproc`, after one all-reduce across them works (NCCL on two T4s); else one process, said so."""
    if nproc == 1 or not visible_gpus():
        return nproc
    try:
        code = torchrun("pipeline.core.distributed", [], nproc, timeout=240)
    except subprocess.TimeoutExpired:
        code = "a hang of 4 minutes"
    if code == 0:
        print(f"kernel: an all-reduce across {nproc} GPUs works")
        return nproc
    print(f"kernel: an all-reduce across {nproc} GPUs failed ({code}); training on one GPU instead")
    return 1


def notebook_main(config_text: str, env=None) -> Path | None:
    """Run data, train (fold by fold) and predict on Kaggle's folders; return the submission's path.

    A config that starts from a stage-1 model (`model.init_from`) trains that model first, in the same
    session, as `make stage1` would; a stage-1 config alone (train.folds=[-1]) has no submission: None.
    The session's clock starts here: no fold or epoch starts that cannot end before its limit
    (kaggle.time_limit_h, less kaggle.margin_minutes for predicting and copying the output).
    """
    start = eta.now()
    paths = kaggle_paths(env)
    if not paths.input.is_dir():
        raise KernelError(f"{paths.input} does not exist: not on Kaggle, and {INPUT_ENV} is not set")
    cfg = notebook_config(config_mod.from_dict(yaml.safe_load(config_text)), paths)
    for line in machine_report():
        print(f"kernel: {line}")
    check_machine(cfg)
    k = cfg.kaggle
    os.environ[eta.DEADLINE_ENV] = str(start + k.time_limit_h * 3600 - k.margin_minutes * 60)
    paths.working.mkdir(parents=True, exist_ok=True)
    nproc = checked_processes(cfg, processes(cfg))
    where = "Kaggle" if on_kaggle(env) else "a simulated Kaggle layout"
    print(f"kernel: on {where}; input {paths.input}, working {paths.working}, temp {paths.temp}")
    print(f"kernel: code from {PACKAGE}; competition {cfg.data.dir}; model {cfg.model.name}; {nproc} train processes")
    print(f"kernel: session limit {k.time_limit_h:g} h: folds stop {k.margin_minutes:g} minutes before it")
    continue_from(cfg, paths)
    run = stage1_then(cfg, paths, nproc)
    print(run.summary(cfg, paths))
    return run.submission


def stage1_then(cfg: Config, paths: KagglePaths, nproc: int) -> Run:
    """Stage 1 when the config starts from one it does not attach, then the experiment itself."""
    attached = attached_stage1(cfg, paths)
    if attached is not None:
        print(f"kernel: stage 1: {cfg.model.init_from} from kernel {cfg.kaggle.init_kernel}'s output ({attached})")
    elif cfg.model.init_from:
        stage1 = config_mod.stage1_config(cfg, device=False)
        print(f"kernel: stage 1: {stage1.name} (one model on the training-only rows), then stage 2: {cfg.name}")
        first = run_experiment(stage1, paths.working / STAGE1_CONFIG, paths, nproc)
        if first.stopped:
            return first
    return run_experiment(cfg, paths.working / RUN_CONFIG, paths, nproc)


def attached_stage1(cfg: Config, paths: KagglePaths) -> Path | None:
    """The stage-1 model in kaggle.init_kernel's output, linked where the folds read it; None without one."""
    if not (cfg.kaggle.init_kernel and cfg.model.init_from):
        return None
    mount = locate(paths.input, cfg.kaggle.init_kernel.split("/")[-1], "the stage-1 kernel")
    src = mount / "models" / cfg.model.init_from / layout.fold_name(layout.STAGE1)
    if layout.fold_status(src, needs=(WEIGHTS,)):
        raise KernelError(
            f"{src}: kernel {cfg.kaggle.init_kernel}'s output holds no complete stage-1 model {cfg.model.init_from} "
            "(done.json and model.safetensors): run that kernel to the end with kaggle.keep_weights=true"
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

    def summary(self, cfg: Config, paths: KagglePaths) -> str:
        """The one line a session ends with: what is done, and the command that continues."""
        held = f"working holds {human(folder_bytes(paths.working))}"
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


def run_experiment(cfg: Config, run_cfg: Path, paths: KagglePaths, nproc: int) -> Run:
    """One experiment's data, folds and (with any k-fold complete) predictions; each fold kept in working once
    done. A fold that cannot end before the session's limit is not started (with kaggle.keep_resume it may
    start when one epoch can: its state carries to the next session)."""
    from pipeline import data

    config_mod.save(cfg, run_cfg)
    print(f"kernel: {cfg.name}: config {run_cfg}")
    _stage(data, run_cfg)
    kept = kept_config(cfg, paths)  # the same layout under working: what the user downloads
    run = Run(list(cfg.train.folds) or list(range(cfg.data.folds)))
    took: list[float] = []  # seconds of the folds trained from their start in this session
    for n, fold in enumerate(run.folds):
        if run.stopped or not fits(cfg, took):
            run.not_started.append(fold)
            continue
        fresh, begin = not layout.fold_dir(cfg, fold).exists(), eta.now()
        outcome = train_fold(cfg, run_cfg, fold, nproc, folds_after=len(run.folds) - n - 1)
        keep_resume = outcome == "time" and cfg.kaggle.keep_resume
        sync(layout.fold_dir(cfg, fold), layout.fold_dir(kept, fold), cfg.kaggle.keep_weights, keep_resume)
        (run.complete if outcome == "done" else run.cut).append(fold)
        took += [eta.now() - begin] if fresh and outcome == "done" else []
        print(f"kernel: {cfg.name} fold {fold} kept in {layout.experiment_dir(kept)}; "
              f"working holds {human(folder_bytes(paths.working))}")  # fmt: skip
    if run.folds != [layout.STAGE1] and run.complete:
        run.submission = predict_and_keep(cfg, run_cfg, kept, nproc)
    return run


def fits(cfg: Config, took: list[float]) -> bool:
    """Whether the next fold can start: it ends before the limit (or, with kaggle.keep_resume, its first
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
    print(f"kernel: the next fold needs about {eta.hours(need)}; {eta.hours(left)} are left before the limit")
    return False


def predict_and_keep(cfg: Config, run_cfg: Path, kept: Config, nproc: int) -> Path:
    """The submission from the complete folds (each GPU predicting its share), kept in working with the report."""
    if run_module("predict", ["--config", str(run_cfg)], nproc):
        raise RuntimeError("predict failed; see the messages above")
    sync(layout.experiment_dir(cfg), layout.experiment_dir(kept), cfg.kaggle.keep_weights)  # cv.json, test.csv
    submission = layout.submission_csv(cfg)
    if not submission.is_file():
        raise RuntimeError(f"{submission} was not written")
    return submission


def continue_from(cfg: Config, paths: KagglePaths) -> None:
    """kaggle.continue_from: an earlier session's output, attached; its folds (complete, or cut off with a resume
    state) copied where this session trains, so that complete ones are skipped and a cut one resumes."""
    ref = cfg.kaggle.continue_from
    if not ref:
        return
    mount = previous_output(cfg, paths, make_plan(cfg, "owner").continue_kernel or ref)
    for name in [cfg.name] + ([cfg.model.init_from] if cfg.model.init_from else []):
        for fold, src in layout.fold_dirs(mount / "models" / name).items():
            dest = layout.fold_dir(cfg, fold, name)
            shutil.copytree(src, dest, dirs_exist_ok=True)
            state = "complete" if (src / layout.DONE).is_file() else "with a resume state" if (
                src / layout.RESUME).is_file() else "incomplete"  # fmt: skip
            print(f"kernel: {name} fold {fold} from the earlier session ({state})")


def _stage(module, run_cfg: Path) -> None:
    code = module.main(["--config", str(run_cfg)])
    if code:
        raise RuntimeError(f"{module.__name__} failed (exit status {code}); see the messages above")
