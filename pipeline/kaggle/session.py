"""What the notebook knows about Kaggle's machine: its three folders, where inputs are mounted, the GPUs,
and what is kept.

`kaggle_paths` is the one place that decides the three roots; KAGGLE_INPUT_ROOT, KAGGLE_WORKING_ROOT
and KAGGLE_TEMP_ROOT move them, so that tests run the notebook on temporary folders. Kaggle keeps at
most 20 GB of /kaggle/working: an XLM-R large fold leaves a 2.24 GB model.safetensors and, while it
trains, a 6.7 GB resume.pt (two for a moment while it is replaced), so the resume states and caches
must never be there (`sync` leaves them out).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from pipeline import config as config_mod
from pipeline import layout, optimizers
from pipeline.kaggle.plan import KernelError, make_plan
from pipeline.schema import Config

PACKAGE = Path(__file__).resolve().parents[1]  # the pipeline package, as mounted from the code bundle
INPUT_ENV, WORKING_ENV, TEMP_ENV = "KAGGLE_INPUT_ROOT", "KAGGLE_WORKING_ROOT", "KAGGLE_TEMP_ROOT"
INPUT_DEFAULT, WORKING_DEFAULT, TEMP_DEFAULT = "/kaggle/input", "/kaggle/working", "/kaggle/temp"
RUN_CONFIG = "kernel-run.yaml"  # the config the notebook ran with (Kaggle paths filled in), in working
STAGE1_CONFIG = "kernel-run-stage1.yaml"  # the stage-1 experiment's, when model.init_from names one
NOT_KEPT = {layout.RESUME}  # what never goes to working: the resume state (6.7 GB for XLM-R large)
WEIGHTS = layout.WEIGHTS
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


def locate(root: Path, name: str, what: str) -> Path:
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
    competition = locate(paths.input, cfg.data.competition, "the competition")
    tree.update(
        input_dir=str(paths.temp / "input"),
        models_dir=str(paths.temp / "models"),
        submissions_dir=str(paths.working),
    )
    tree["data"].update(source="dir", dir=str(competition))
    if cfg.model.name != "tiny":
        mount = make_plan(cfg, "owner").model_mount  # the owner is not part of the mount path
        # model.path: where the files are; model.name stays what they are, so the folds count locally too
        tree["model"]["path"] = str(find_model_dir(locate(paths.input, mount, "the model")))
    places = [competition] + [locate(paths.input, layout.dataset_slug(d), "the dataset") for d in cfg.data.datasets]
    tree["data"]["extra_files"] = [_extra_file(name, places) for name in cfg.data.extra_files]
    return config_mod.from_dict(tree)


def kept_config(cfg: Config, paths: KagglePaths) -> Config:
    """`cfg` with its models under /kaggle/working: the kept copy of each experiment, laid out as models/."""
    return dataclasses.replace(cfg, models_dir=str(paths.working / "models"))


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


def sync(src: Path, dest: Path, keep_weights: bool, keep_resume: bool = False) -> list[Path]:
    """Copy the files of `src` into `dest`, but for resume states (unless `keep_resume`: a fold cut off by the
    session's limit, continued by the next) and weights unless kept; returns those copied. A cut fold keeps its
    weights whatever `keep_weights` says: they are its best evaluation's, which the resume state does not hold.

    A file already in `dest` with the same size and time is left alone, so syncing again is cheap. A linked file
    (an earlier session's, read in place) is copied as the file it points to.
    """
    copied = []
    for item in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = item.relative_to(src)
        skip = item.name in NOT_KEPT and not keep_resume
        if skip or item.name.startswith(".") or (item.name == WEIGHTS and not (keep_weights or keep_resume)):
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


# ---------------------------------------------------------------- the machine, checked in the first minute


MIN_TRANSFORMERS = (4, 56)  # from_pretrained(..., dtype=): the fp32 master weights pipeline.core.modeling loads


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def machine_report() -> list[str]:
    """What the notebook runs on: Python, torch, CUDA, transformers and each GPU, for the log's first lines."""
    import platform

    import torch
    import transformers

    lines = [f"python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}, "
             f"transformers {transformers.__version__}"]  # fmt: skip
    for i in range(torch.cuda.device_count()):
        gpu = torch.cuda.get_device_properties(i)
        lines.append(f"GPU {i}: {gpu.name}, {gpu.total_memory / 2**30:.1f} GiB, capability {gpu.major}.{gpu.minor}")
    return lines if torch.cuda.device_count() else [*lines, "no GPU"]


def check_machine(cfg: Config, gpus: int | None = None) -> None:
    """Stop in the first minute, in one line, when the machine or the image lacks what the run needs hours later:
    a GPU (a session without one would train on CPU for its 12 hours), transformers new enough, bitsandbytes."""
    import transformers

    gpus = visible_gpus() if gpus is None else gpus
    if not gpus and cfg.train.device != "cpu":
        raise KernelError(
            "no GPU is visible in this session (the GPU quota used up, or the kernel pushed without one): training "
            "on CPU would take the whole session and more; push again when a GPU session is given (kaggle.enable_gpu="
            "true, kaggle.accelerator), or set train.device=cpu to train on CPU all the same"
        )
    if version_tuple(transformers.__version__) < MIN_TRANSFORMERS:
        want = ".".join(map(str, MIN_TRANSFORMERS))
        raise KernelError(
            f"transformers {transformers.__version__} is too old (the pipeline needs {want} or newer): set "
            "kaggle.docker_image_pinning=latest (the newest image) and push again"
        )
    why = optimizers.refusal(cfg.train.optimizer, None)
    if why:
        raise KernelError(why)
    if cfg.model.lora.r > 0 and importlib.util.find_spec("peft") is None:
        raise KernelError("model.lora needs peft, which this image lacks: set model.lora.r=0 (or another image)")
    if cfg.model.lora.r > 0 and cfg.model.lora.quantize != "none" and importlib.util.find_spec("bitsandbytes") is None:
        raise KernelError(
            "model.lora.quantize needs bitsandbytes, which this image lacks: use model.lora.quantize=none"
        )


def previous_output(cfg: Config, paths: KagglePaths, kernel_ref: str) -> Path:
    """Where the attached output of an earlier version of a kernel (kaggle.continue_from) is mounted."""
    return locate(paths.input, kernel_ref.split("/")[-1], "the earlier kernel's output (kaggle.continue_from)")
