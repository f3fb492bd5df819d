"""What runs inside the Kaggle notebook: the data, train and predict stages on Kaggle's folders.

Reads   /kaggle/input/...        the competition, the code bundle, the model's weights (read in place)
Writes  /kaggle/temp/input/      the prepared table and the token cache (scratch, not kept)
        /kaggle/temp/models/     every fold as training leaves it, resume.pt included (scratch)
        /kaggle/working/         only what the user downloads: kernel-run.yaml, submission.csv,
                                 <name>.csv and models/<name>/ (each fold without its resume state,
                                 and without its weights when kaggle.keep_weights=false); with
                                 model.init_from also kernel-run-stage1.yaml and models/<init_from>/fold-1/

`kaggle_paths` is the one place that decides the three roots; KAGGLE_INPUT_ROOT, KAGGLE_WORKING_ROOT
and KAGGLE_TEMP_ROOT move them, so that tests run the notebook on temporary folders. Kaggle keeps at
most 20 GB of /kaggle/working: an XLM-R large fold leaves a 2.24 GB model.safetensors and, while it
trains, a 6.7 GB resume.pt (two for a moment while it is replaced), so the resume states and caches
must never be there. Each fold is copied into working as soon as it is complete: a session that runs
out of time keeps the folds it finished.

The train stage runs once per fold, under torchrun with one process per GPU when there are several
(`kaggle.gpus`, default every visible GPU): the same DDP code path as `make train GPUS=N`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline import config as config_mod
from pipeline import lineage
from pipeline.config import Config
from pipeline.kaggle_meta import KernelError, make_plan

PACKAGE = Path(__file__).resolve().parent  # the pipeline package, as mounted from the code bundle
INPUT_ENV, WORKING_ENV, TEMP_ENV = "KAGGLE_INPUT_ROOT", "KAGGLE_WORKING_ROOT", "KAGGLE_TEMP_ROOT"
INPUT_DEFAULT, WORKING_DEFAULT, TEMP_DEFAULT = "/kaggle/input", "/kaggle/working", "/kaggle/temp"
RUN_CONFIG = "kernel-run.yaml"  # the config the notebook ran with (Kaggle paths filled in), in working
STAGE1_CONFIG = "kernel-run-stage1.yaml"  # the stage-1 experiment's, when model.init_from names one
NOT_KEPT = {"resume.pt"}  # what never goes to working: the resume state (6.7 GB for XLM-R large)
WEIGHTS = "model.safetensors"
PYTORCH_WEIGHTS = (
    "model.safetensors",
    "pytorch_model.bin",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
OTHER_WEIGHTS = {"tf_model.h5": "TensorFlow", "flax_model.msgpack": "Flax", "model.keras": "Keras"}


@dataclass(frozen=True)
class KagglePaths:
    input: Path  # /kaggle/input: the competition and the attached datasets, read-only
    working: Path  # /kaggle/working: kept as the kernel's output (at most 20 GB)
    temp: Path  # /kaggle/temp: scratch for caches, fold states and weights; not kept


def on_kaggle(env=None) -> bool:
    """Whether this process runs inside a Kaggle notebook."""
    env = os.environ if env is None else env
    return bool(env.get("KAGGLE_KERNEL_RUN_TYPE")) or Path(INPUT_DEFAULT).is_dir()


def kaggle_paths(env=None) -> KagglePaths:
    """The notebook's three roots: the KAGGLE_*_ROOT variables, else Kaggle's /kaggle/... ."""
    env = os.environ if env is None else env
    return KagglePaths(
        Path(env.get(INPUT_ENV) or INPUT_DEFAULT),
        Path(env.get(WORKING_ENV) or WORKING_DEFAULT),
        Path(env.get(TEMP_ENV) or TEMP_DEFAULT),
    )


def find_mount(root: Path, name: str) -> Path | None:
    """The folder where `name` (a slug, or model/framework/instance/version) is mounted under `root`.

    Older images mount a source at /kaggle/input/<slug>; newer ones at competitions/<slug>,
    datasets/<owner>/<slug> or models/<owner>/<model>/<framework>/<variation>/<version>.
    """
    for pattern in (name, f"*/{name}", f"*/*/{name}"):
        found = sorted(p for p in root.glob(pattern) if p.is_dir())
        if found:
            return found[0]
    return None


def _weights_format(folder: Path) -> str:
    """ "" when `folder` holds PyTorch or safetensors weights, else the format it holds ("none" if no weights)."""
    if any((folder / name).is_file() for name in PYTORCH_WEIGHTS):
        return ""
    formats = [fmt for name, fmt in OTHER_WEIGHTS.items() if (folder / name).is_file()]
    return " and ".join(formats) or "none"


def find_model_dir(folder: Path) -> Path:
    """The one folder holding config.json: `folder` itself, else the only one below it; PyTorch weights required."""
    found = [folder] if (folder / "config.json").is_file() else sorted(p.parent for p in folder.rglob("config.json"))
    if not found:
        raise KernelError(f"{folder}: no config.json in the attached model (set kaggle.model_subdir)")
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(folder)) for p in found)
        raise KernelError(f"{folder} holds several models ({names}): choose one with kaggle.model_subdir=<folder>")
    fmt = _weights_format(found[0])
    if fmt:
        held = "no weights" if fmt == "none" else f"{fmt} weights only"
        raise KernelError(
            f"{found[0]}: {held}; the pipeline loads PyTorch weights (model.safetensors or pytorch_model.bin): "
            "attach a dataset or Kaggle Model variation in the PyTorch / Transformers format"
        )
    return found[0]


def _locate(root: Path, name: str, what: str) -> Path:
    found = find_mount(root, name)
    if found is None:
        raise KernelError(f"{what} {name!r} is not attached under {root} (add it to the notebook's inputs)")
    return found


def _extra_file(name: str, places: list[Path]) -> str:
    hits = [p / name for p in places if (p / name).is_file()]
    hits = hits or [h for p in places[1:] for h in sorted(p.rglob(name)) if h.is_file()]
    if not hits:
        raise KernelError(f"extra training file {name!r} not found in {', '.join(map(str, places))}")
    return str(hits[0])


def notebook_config(cfg: Config, paths: KagglePaths) -> Config:
    """`cfg` with Kaggle's paths: raw files read in place, scratch in temp, the submission in working."""
    tree = cfg.to_dict()
    competition = _locate(paths.input, cfg.data.competition, "the competition")
    tree.update(
        input_dir=str(paths.temp / "input"),
        models_dir=str(paths.temp / "models"),
        submissions_dir=str(paths.working),
    )
    tree["data"].update(source="dir", dir=str(competition))
    if cfg.model.name != "tiny":
        mount = make_plan(cfg, "owner").model_mount  # the owner is not part of the mount path
        # model.path: where the files are; model.name stays what they are, so the folds count locally too
        tree["model"]["path"] = str(find_model_dir(_locate(paths.input, mount, "the model")))
    places = [competition] + [_locate(paths.input, d.split("/")[-1], "the dataset") for d in cfg.data.datasets]
    tree["data"]["extra_files"] = [_extra_file(name, places) for name in cfg.data.extra_files]
    return config_mod.from_dict(tree)


def visible_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def processes(cfg: Config, gpus: int | None = None) -> int:
    """Train processes: kaggle.gpus, else one per visible GPU; one on a machine without GPUs.

    Without GPUs kaggle.gpus=N still starts N processes (gloo on CPU): the tests' stand-in for N GPUs.
    """
    visible = visible_gpus() if gpus is None else gpus
    if visible and cfg.kaggle.gpus > visible:
        raise KernelError(f"kaggle.gpus={cfg.kaggle.gpus}, but {visible} GPU(s) are visible: set kaggle.gpus=0 (all)")
    return cfg.kaggle.gpus or max(1, visible)


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


def sync(src: Path, dest: Path, keep_weights: bool) -> list[Path]:
    """Copy the files of `src` into `dest`, but for resume states (and weights unless kept); returns those copied.

    A file already in `dest` with the same size and time is left alone, so syncing again is cheap.
    """
    copied = []
    for item in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = item.relative_to(src)
        if item.name in NOT_KEPT or item.name.startswith(".") or (item.name == WEIGHTS and not keep_weights):
            continue
        target = dest / rel
        st = item.stat()
        if target.is_file() and (target.stat().st_size, target.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        shutil.copy2(item, tmp)  # copy2 keeps the time that the next sync compares
        os.replace(tmp, target)  # never a half-copied file under the final name
        copied.append(target)
    return copied


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def notebook_main(config_text: str, env=None) -> Path | None:
    """Run data, train (fold by fold) and predict on Kaggle's folders; return the submission's path.

    A config that starts from a stage-1 model (`model.init_from`) trains that model first, in the same
    session, as `make stage1` would; a stage-1 config alone (train.folds=[-1]) has no submission: None.
    """
    from pipeline.kaggle_disk import human

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
        stage1 = lineage.stage1_config(cfg, device=False)
        print(f"kernel: stage 1: {stage1.name} (one model on the training-only rows), then stage 2: {cfg.name}")
        run_experiment(stage1, paths.working / STAGE1_CONFIG, paths, nproc)
    submission = run_experiment(cfg, paths.working / RUN_CONFIG, paths, nproc)
    made = f"submission at {submission}" if submission else f"stage-1 model in {paths.working / 'models' / cfg.name}"
    print(f"kernel: done; {made}; working holds {human(folder_bytes(paths.working))}")
    return submission


def attached_stage1(cfg: Config, paths: KagglePaths) -> Path | None:
    """The stage-1 model in kaggle.init_kernel's output, linked where the folds read it; None without one."""
    if not (cfg.kaggle.init_kernel and cfg.model.init_from):
        return None
    mount = _locate(paths.input, cfg.kaggle.init_kernel.split("/")[-1], "the stage-1 kernel")
    src = mount / "models" / cfg.model.init_from / f"fold{lineage.STAGE1}"
    if not (src / "done.json").is_file() or not (src / WEIGHTS).is_file():
        raise KernelError(
            f"{src}: kernel {cfg.kaggle.init_kernel}'s output holds no complete stage-1 model {cfg.model.init_from} "
            "(done.json and model.safetensors): run that kernel to the end with kaggle.keep_weights=true"
        )
    dest = Path(cfg.models_dir) / cfg.model.init_from / src.name
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.symlink_to(src, target_is_directory=True)  # read in place: 2.24 GB for XLM-R large, not copied
    return dest


def run_experiment(cfg: Config, run_cfg: Path, paths: KagglePaths, nproc: int) -> Path | None:
    """One experiment's data, folds and (with any k-fold) predictions; each fold kept in working once done."""
    from pipeline import data, predict
    from pipeline.kaggle_disk import human

    config_mod.save(cfg, run_cfg)
    print(f"kernel: {cfg.name}: config {run_cfg}")
    _stage(data, run_cfg)
    exp_temp = Path(cfg.models_dir) / cfg.name
    exp_kept = paths.working / "models" / cfg.name
    folds = list(cfg.train.folds) or list(range(cfg.data.folds))
    for fold in folds:
        train_fold(run_cfg, fold, nproc)
        sync(exp_temp / f"fold{fold}", exp_kept / f"fold{fold}", cfg.kaggle.keep_weights)
        print(f"kernel: {cfg.name} fold {fold} kept in {exp_kept}; working holds {human(folder_bytes(paths.working))}")
    if folds == [lineage.STAGE1]:
        return None  # a stage-1 model alone: nothing to predict with
    _stage(predict, run_cfg)
    sync(exp_temp, exp_kept, cfg.kaggle.keep_weights)  # cv.json, oof.csv, cv.png and each fold's test.csv
    submission = paths.working / "submission.csv"
    if not submission.is_file():
        raise RuntimeError(f"{submission} was not written")
    return submission


def _stage(module, run_cfg: Path) -> None:
    code = module.main(["--config", str(run_cfg)])
    if code:
        raise RuntimeError(f"{module.__name__} failed (exit status {code}); see the messages above")
