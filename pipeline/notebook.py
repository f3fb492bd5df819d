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

import os
import subprocess
import sys
from pathlib import Path

import yaml

from pipeline import config as config_mod
from pipeline import layout
from pipeline.config import Config
from pipeline.kaggle.disk import human
from pipeline.kaggle.plan import KernelError
from pipeline.kaggle.session import (
    INPUT_ENV,
    PACKAGE,
    RUN_CONFIG,
    STAGE1_CONFIG,
    WEIGHTS,
    KagglePaths,
    folder_bytes,
    kaggle_paths,
    kept_config,
    locate,
    notebook_config,
    on_kaggle,
    processes,
    sync,
)


def train_fold(run_cfg: Path, fold: int, nproc: int) -> None:
    """The train stage on one fold: in this process, or under torchrun with `nproc` processes."""
    args = ["--config", str(run_cfg), f"train.folds=[{fold}]"]
    if nproc == 1:
        from pipeline import train

        code = train.main(args)
    else:
        env = dict(os.environ)
        # the children import the pipeline from the same place as this process: the mounted code bundle
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE.parent), env.get("PYTHONPATH", "")]))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
        code = subprocess.run([*cmd, "-m", "pipeline.train", *args], env=env, check=False).returncode
    if code:
        raise RuntimeError(f"train fold {fold} failed (exit status {code}); see the messages above")


def notebook_main(config_text: str, env=None) -> Path | None:
    """Run data, train (fold by fold) and predict on Kaggle's folders; return the submission's path.

    A config that starts from a stage-1 model (`model.init_from`) trains that model first, in the same
    session, as `make stage1` would; a stage-1 config alone (train.folds=[-1]) has no submission: None.
    """
    paths = kaggle_paths(env)
    if not paths.input.is_dir():
        raise KernelError(f"{paths.input} does not exist: not on Kaggle, and {INPUT_ENV} is not set")
    cfg = notebook_config(config_mod.from_dict(yaml.safe_load(config_text)), paths)
    paths.working.mkdir(parents=True, exist_ok=True)
    nproc = processes(cfg)
    where = "Kaggle" if on_kaggle(env) else "a simulated Kaggle layout"
    print(f"kernel: on {where}; input {paths.input}, working {paths.working}, temp {paths.temp}")
    print(f"kernel: code from {PACKAGE}; competition {cfg.data.dir}; model {cfg.model.name}; {nproc} train processes")
    attached = attached_stage1(cfg, paths)
    if attached is not None:
        print(f"kernel: stage 1: {cfg.model.init_from} from kernel {cfg.kaggle.init_kernel}'s output ({attached})")
    elif cfg.model.init_from:
        stage1 = config_mod.stage1_config(cfg, device=False)
        print(f"kernel: stage 1: {stage1.name} (one model on the training-only rows), then stage 2: {cfg.name}")
        run_experiment(stage1, paths.working / STAGE1_CONFIG, paths, nproc)
    submission = run_experiment(cfg, paths.working / RUN_CONFIG, paths, nproc)
    kept = layout.experiment_dir(kept_config(cfg, paths))
    made = f"submission at {submission}" if submission else f"stage-1 model in {kept}"
    print(f"kernel: done; {made}; working holds {human(folder_bytes(paths.working))}")
    return submission


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


def run_experiment(cfg: Config, run_cfg: Path, paths: KagglePaths, nproc: int) -> Path | None:
    """One experiment's data, folds and (with any k-fold) predictions; each fold kept in working once done."""
    from pipeline import data, predict

    config_mod.save(cfg, run_cfg)
    print(f"kernel: {cfg.name}: config {run_cfg}")
    _stage(data, run_cfg)
    kept = kept_config(cfg, paths)  # the same layout under working: what the user downloads
    exp_kept = layout.experiment_dir(kept)
    folds = list(cfg.train.folds) or list(range(cfg.data.folds))
    for fold in folds:
        train_fold(run_cfg, fold, nproc)
        sync(layout.fold_dir(cfg, fold), layout.fold_dir(kept, fold), cfg.kaggle.keep_weights)
        print(f"kernel: {cfg.name} fold {fold} kept in {exp_kept}; working holds {human(folder_bytes(paths.working))}")
    if folds == [layout.STAGE1]:
        return None  # a stage-1 model alone: nothing to predict with
    _stage(predict, run_cfg)
    sync(layout.experiment_dir(cfg), exp_kept, cfg.kaggle.keep_weights)  # cv.json, oof.csv, cv.png, test.csv
    submission = layout.submission_csv(cfg)
    if not submission.is_file():
        raise RuntimeError(f"{submission} was not written")
    return submission


def _stage(module, run_cfg: Path) -> None:
    code = module.main(["--config", str(run_cfg)])
    if code:
        raise RuntimeError(f"{module.__name__} failed (exit status {code}); see the messages above")
