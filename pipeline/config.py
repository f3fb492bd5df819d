"""One frozen, typed config for every stage.

A config is the dataclass defaults, then a YAML file from pipeline/configs/ (or any path), then
`key.sub=value` overrides from the command line. An unknown key or a value of the wrong type is an
error that names the key. `save` writes the resolved config next to an artifact; `load_file` reads
it back, so every checkpoint carries the settings that made it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import re
import shlex
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pipeline.errors import PipelineError

CONFIG_DIR = Path(__file__).parent / "configs"


@dataclass(frozen=True)
class DataConfig:
    source: str = "sample"  # sample | dir | kaggle
    dir: str = ""  # for source=dir: a folder holding the competition's files
    competition: str = "jigsaw-multilingual-toxic-comment-classification"
    datasets: tuple[str, ...] = ()  # extra Kaggle datasets (owner/slug) downloaded with source=kaggle
    # translated train CSVs (comment_text, toxic; the language given as `file.csv:es`, else a lang column, else
    # the file name's, as in jigsaw-toxic-comment-train-google-es-cleaned.csv): paths or names, glob patterns
    extra_files: tuple[str, ...] = ()
    bias_rows: int = 0  # rows of jigsaw-unintended-bias-train.csv to add (0: none), toxic >= 0.5 as 1
    english_negatives: int = 20000  # non-toxic English train rows kept (all toxic rows are kept)
    folds: int = 5
    seed: int = 42
    sample_scale: float = 1.0  # size of the built-in sample competition
    # an experiment or blend whose fold-k test predictions label the test rows for this experiment's fold k
    pseudo_from: str = ""
    pseudo_labels: str = "soft"  # soft: the teacher's probability; hard: 0/1 at the confident ends only
    pseudo_low: float = 0.1  # hard labels: at most this is 0 ...
    pseudo_high: float = 0.9  # ... at least this is 1; the middle is dropped
    # a share of the translated rows' source comments made validation rows (grouped by source comment), so
    # that the OOF covers every test language (see pipeline.inputs.groups); 0: every translated row trains
    held_out: float = 0.0
    # a sentence encoder folder (Hugging Face) that finds the translations of one comment in translated files
    # without the English comment's id, for data.held_out; empty: matched by what translation keeps (rough)
    group_encoder: str = ""


@dataclass(frozen=True)
class TinyConfig:
    """The XLM-R architecture at toy size, built from a config (no download)."""

    layers: int = 2
    hidden: int = 128
    heads: int = 4
    intermediate: int = 512
    vocab: int = 4000  # SentencePiece-style unigram vocabulary trained on the competition's texts


@dataclass(frozen=True)
class ModelConfig:
    name: str = "tiny"  # "tiny", a hub name (xlm-roberta-large) or a local folder
    # a folder holding model.name's files (an attached Kaggle dataset, a local copy): where they are read from,
    # while model.name says what they are, so a fold trained from a copy counts wherever the same name is used
    path: str = ""
    max_length: int = 128
    # what the head reads of the encoder's last hidden states: mean (over the attention mask) or cls (the first
    # token); see pipeline.core.modeling
    pooling: str = "mean"
    dropout: float = 0.1
    trim_vocab: bool = False  # keep only the embedding rows of tokens the competition's texts use
    init_from: str = ""  # an experiment whose stage-1 model (its fold -1) every fold starts from
    # how that stage-1 model is trained where the run makes it (`make stage1`, the Kaggle notebook): overrides
    # of this config, e.g. [train.epochs=1, train.lr=2e-5]; name, init_from and folds are set for it
    init_args: tuple[str, ...] = ()
    tiny: TinyConfig = field(default_factory=TinyConfig)


@dataclass(frozen=True)
class TrainConfig:
    folds: tuple[int, ...] = ()  # () means every fold
    epochs: int = 2
    micro_batch: int = 16  # examples per forward/backward on one device
    accumulation: int = 2  # micro-batches per optimizer step; effective batch = micro x accumulation x world
    lr: float = 5e-4
    weight_decay: float = 0.01
    warmup: float = 0.1  # fraction of optimizer steps spent warming up
    max_grad_norm: float = 1.0
    precision: str = "auto"  # fp32 | fp16 | bf16 | auto
    checkpointing: bool = True  # gradient checkpointing
    optimizer: str = "adamw"  # adamw | adamw8bit
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    eval_batch: int = 64
    seed: int = 42
    save_every_steps: int = 0  # also save a resume state every N optimizer steps (0: at epoch ends only)
    max_bad_steps: int = 20  # consecutive non-finite optimizer steps before the fold stops
    max_memory_gb: float = 0.0  # > 0: pick the largest micro-batch that fits (same effective batch)
    # fold -1 rows (English and translated) train every fold; false: only the other folds' validation rows
    training_only_rows: bool = True
    eval_every_steps: int = 0  # also evaluate every N optimizer steps (0: at epoch ends only); the best is kept
    patience: int = 0  # evaluations without a better AUC before the fold stops (0: never)
    log_every_steps: int = 10  # a line in fold<k>/steps.jsonl every N optimizer steps (0: none)
    tensorboard: bool = False  # the same records as TensorBoard scalars in models/<name>/tb/fold<k>/


@dataclass(frozen=True)
class PredictConfig:
    ensemble: str = "mean"  # mean | rank
    # none | lang: a Platt scaling per language fit on the OOF | lang+prior: and each language moved to its
    # toxic rate in the test, estimated from the unlabelled test predictions (pipeline.scoring.calibration)
    calibration: str = "none"


@dataclass(frozen=True)
class BlendConfig:
    """`make blend`: experiments combined with rank-average weights fit on their OOF (see pipeline/blend.py)."""

    members: tuple[str, ...] = ()  # experiment names under models/ (make blend BLEND="a b" sets this)
    name: str = ""  # the blend's folder and submission name; "" means the members joined by "+"
    step: float = 0.05  # weight grid step of the coordinate search on the simplex


@dataclass(frozen=True)
class KaggleConfig:
    """`make kernel`: the pipeline run in a Kaggle GPU notebook (see pipeline/kernel.py)."""

    dry_run: bool = False  # write the kernel folder and code bundle, push nothing
    dir: str = "kernel"  # where the kernel folder, code bundle and downloaded output are written
    user: str = ""  # Kaggle user name; "" means the authenticated one (KAGGLE_USERNAME, kaggle.json, token)
    kernel_slug: str = ""  # "" means jigsaw-<name>
    title: str = ""  # "" means a title whose slug is kernel_slug (Kaggle derives the URL from the title)
    dataset_slug: str = ""  # the code bundle's dataset; "" means <kernel_slug>-code
    kernel_type: str = "script"  # script | notebook
    is_private: bool = True
    enable_gpu: bool = True
    model_source: str = ""  # weights for model.name: a dataset owner/slug, or a Kaggle Model owner/model/fw/inst/ver
    model_subdir: str = ""  # folder inside model_source holding config.json ("" means found by search)
    timeout: int = 0  # session limit in seconds passed to kernels_push (0: Kaggle's default)
    accelerator: str = "NvidiaTeslaT4"  # machine_shape / kernels_push(acc=): two T4s; "" leaves Kaggle's default
    docker_image_pinning: str = ""  # docker_image_pinning_type: original (the image of the first run) | latest | ""
    gpus: int = 0  # train processes in the notebook (torchrun, one per GPU); 0 means every visible GPU
    keep_weights: bool = True  # copy each fold's model.safetensors into /kaggle/working (the kept output)
    # with model.init_from: a kernel (owner/slug, or a slug of yours) whose output holds models/<init_from>/fold-1/,
    # attached so that the notebook starts from that stage-1 model instead of training it in the same session
    init_kernel: str = ""
    working_gb: float = 20.0  # what /kaggle/working may keep; `make kernel` refuses a larger disk plan
    time_limit_h: float = 12.0  # a session's limit: no fold or epoch starts that cannot end before it
    # kept free at the session's end besides the measured costs of saving, copying and predicting (kaggle/clock.py)
    margin_minutes: float = 20.0
    weekly_quota_h: float = 30.0  # the GPU hours a week Kaggle gives: the plan says what share a run takes
    # the throughput the time plan assumes, in padded tokens a second for the whole run (0: an estimate for two
    # T4s from the model's size, or the one `make bench-gpu` measured)
    tokens_per_second: float = 0.0
    # an earlier session's output to continue from: "self", <kernel>, <owner>/<kernel> or <owner>/<kernel>/<version>
    # (the newest version that finished with folds, checked at the push); its complete folds count, a fold it cut
    # off resumes from its resume state
    continue_from: str = ""
    keep_resume: bool = True  # keep a cut-off fold's resume state in /kaggle/working (6.7 GB for XLM-R large)
    has_bitsandbytes: bool = False  # the image carries bitsandbytes: train.optimizer=adamw8bit may run there
    submit_file: str = ""  # `make submit`: the file to submit; "" means submissions/<name>.csv
    submit_timeout: int = 1800  # `make submit`: seconds to wait for the score (0: do not wait)


@dataclass(frozen=True)
class BenchConfig:
    """`make bench`: the memory and speed table (random weights and token ids, no download)."""

    model: str = "xlm-roberta-base"  # xlm-roberta-base | xlm-roberta-large (architecture only)
    seq_len: int = 256
    effective_batch: int = 32
    micro_batch: int = 4  # the accumulation rows: micro_batch x (effective_batch / micro_batch)
    steps: int = 3  # timed optimizer steps per row, after an untimed warm-up: the median and spread of these
    trainer: bool = True  # also run each row with Hugging Face Trainer
    vocab_used: int = 60000  # distinct token ids in the data (what trimming keeps); see bench.py
    max_memory_gb: float = 11.0  # the cap of the auto-fit row
    rows: tuple[str, ...] = ()  # only these rows (fp32 mp mp_acc mp_ckpt all3 trim adamw8bit autofit); () all
    profile: bool = False  # torch.profiler over the timed steps: top ops per row in <model>.profile.md (slower)
    sparse: bool = True  # ours with sparse word-embedding gradients (as make train); false: dense, as Trainer's


@dataclass(frozen=True)
class Config:
    name: str = "sample"  # experiment name: models/<name>/, submissions/<name>.csv
    input_dir: str = "input"
    models_dir: str = "models"
    submissions_dir: str = "submissions"
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    predict: PredictConfig = field(default_factory=PredictConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)
    blend: BlendConfig = field(default_factory=BlendConfig)
    kaggle: KaggleConfig = field(default_factory=KaggleConfig)

    def to_dict(self) -> dict:
        return _plain(dataclasses.asdict(self))

    def digest(self, *sections: str) -> str:
        """A short hash of the whole config, or of the named sections only."""
        d = self.to_dict()
        if sections:
            d = {s: d[s] for s in sections}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


CHOICES = {
    "data.source": ("sample", "dir", "kaggle"),
    "data.pseudo_labels": ("soft", "hard"),
    "train.precision": ("fp32", "fp16", "bf16", "auto"),
    "train.optimizer": ("adamw", "adamw8bit"),
    "predict.ensemble": ("mean", "rank"),
    "model.pooling": ("mean", "cls"),
    "predict.calibration": ("none", "lang", "lang+prior"),
    "kaggle.kernel_type": ("script", "notebook"),
    "kaggle.docker_image_pinning": ("", "original", "latest"),  # kaggle 2.2.5's valid_push_pinning_types
}


class ConfigError(PipelineError, ValueError):
    pass


def _finite(x: float) -> bool:
    return math.isfinite(x)


# (key, test, the allowed range as the error states it): checked when a config loads, so a setting that
# would train nothing (micro_batch=-4 runs zero steps) or crash after an epoch stops before any work
RANGES: tuple[tuple[str, typing.Callable[[typing.Any], bool], str], ...] = (
    ("data.folds", lambda v: v >= 2, "an integer >= 2"),
    ("data.english_negatives", lambda v: v >= 0, "an integer >= 0"),
    ("data.bias_rows", lambda v: v >= 0, "an integer >= 0"),
    ("data.sample_scale", lambda v: _finite(v) and v > 0, "a number > 0"),
    ("data.held_out", lambda v: 0 <= v < 1, "a number in [0, 1) (0: no translated row held out)"),
    ("model.max_length", lambda v: v >= 8, "an integer >= 8"),
    ("model.dropout", lambda v: 0 <= v < 1, "a number in [0, 1)"),
    ("model.tiny.layers", lambda v: v >= 1, "an integer >= 1"),
    ("model.tiny.heads", lambda v: v >= 1, "an integer >= 1"),
    ("model.tiny.hidden", lambda v: v >= 1, "an integer >= 1"),
    ("model.tiny.intermediate", lambda v: v >= 1, "an integer >= 1"),
    ("model.tiny.vocab", lambda v: v >= 16, "an integer >= 16"),
    ("train.epochs", lambda v: v >= 1, "an integer >= 1"),
    ("train.micro_batch", lambda v: v >= 1, "an integer >= 1"),
    ("train.accumulation", lambda v: v >= 1, "an integer >= 1"),
    ("train.eval_batch", lambda v: v >= 1, "an integer >= 1"),
    ("train.lr", lambda v: _finite(v) and v > 0, "a finite number > 0"),
    ("train.weight_decay", lambda v: _finite(v) and v >= 0, "a finite number >= 0"),
    ("train.warmup", lambda v: 0 <= v < 1, "a number in [0, 1)"),
    ("train.max_grad_norm", lambda v: _finite(v) and v > 0, "a finite number > 0"),
    ("train.save_every_steps", lambda v: v >= 0, "an integer >= 0 (0: at epoch ends only)"),
    ("train.max_bad_steps", lambda v: v >= 1, "an integer >= 1"),
    ("train.eval_every_steps", lambda v: v >= 0, "an integer >= 0 (0: at epoch ends only)"),
    ("train.patience", lambda v: v >= 0, "an integer >= 0 (0: never stop early)"),
    ("train.log_every_steps", lambda v: v >= 0, "an integer >= 0 (0: no step records)"),
    ("train.max_memory_gb", lambda v: _finite(v) and v >= 0, "a finite number >= 0 (0: off)"),
    ("train.folds", lambda v: all(f >= -1 for f in v), "a list of fold numbers >= 0, or -1 (a stage-1 model)"),
    ("blend.step", lambda v: 0 < v <= 0.5, "a number in (0, 0.5], e.g. 0.05"),
    ("kaggle.gpus", lambda v: v >= 0, "an integer >= 0 (0: every visible GPU)"),
    ("kaggle.timeout", lambda v: v >= 0, "an integer >= 0 (seconds; 0: Kaggle's default)"),
    ("kaggle.submit_timeout", lambda v: v >= 0, "an integer >= 0 (seconds; 0: do not wait)"),
    ("kaggle.working_gb", lambda v: _finite(v) and v > 0, "a finite number > 0"),
    ("kaggle.time_limit_h", lambda v: _finite(v) and v > 0, "a finite number of hours > 0"),
    ("kaggle.margin_minutes", lambda v: _finite(v) and v >= 0, "a finite number of minutes >= 0"),
    ("kaggle.weekly_quota_h", lambda v: _finite(v) and v > 0, "a finite number of hours > 0"),
    ("kaggle.tokens_per_second", lambda v: _finite(v) and v >= 0, "a finite number >= 0 (0: the estimate)"),
)


def _get(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


NAME_MAX = 100  # a name becomes a folder, a .csv and a .lock, and temporary names longer than those
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")  # never a path, hidden, an option or a shell word


def check_name(name: str, key: str = "name") -> str:
    """A name that becomes a folder under input/prepared/ and models/ (an experiment, a blend, a member, a
    teacher, a stage-1 model): a plain folder name, never empty, `.`, `..`, hidden, a path or overlong.

    `name=` would make input/prepared/ itself the experiment's folder, and `make data` replaces that folder
    whole; `blend.name=..` would make the blend's folder models/ itself. `key` is the setting that carries it.
    """
    if not NAME_RE.fullmatch(name) or name in (".", ".."):
        raise ConfigError(
            f"{key}={name[:40]!r}: a name must be a plain folder name: letters, digits and . _ + - only, "
            f"starting with a letter or digit (e.g. {key}=my-exp)"
        )
    if len(name) > NAME_MAX:
        raise ConfigError(f"{key}={name[:20]}...: a name of {len(name)} characters; at most {NAME_MAX}")
    return name


def check_names(cfg: Config) -> None:
    """Every setting that names a folder under models/ or input/prepared/, each checked as check_name says."""
    check_name(cfg.name)
    named = [("model.init_from", cfg.model.init_from), ("data.pseudo_from", cfg.data.pseudo_from)]
    named += [("blend.name", cfg.blend.name)] + [("blend.members", m) for m in cfg.blend.members]
    for key, value in named:
        if value:  # "" means none
            check_name(value, key)
    if cfg.data.pseudo_from == cfg.name:
        raise ConfigError(
            f"data.pseudo_from={cfg.name}: an experiment cannot label its own training rows; "
            "name another experiment or blend as the teacher"
        )


def check_device(device: str) -> None:
    """`auto`, `cpu`, `cuda` or `cuda:N` that exists on this machine (torch is imported only for cuda)."""
    if device in ("auto", "cpu"):
        return
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"train.device={device!r}: not a device; use auto, cpu, cuda or cuda:N") from None
    if dev.type not in ("cpu", "cuda"):
        raise ConfigError(f"train.device={device!r}: only auto, cpu, cuda or cuda:N are supported")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"train.device={device!r}: this machine has no CUDA device; use train.device=cpu or auto")
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ConfigError(f"train.device={device!r}: this machine has {count} CUDA device(s) (cuda:0..{count - 1})")


def validate(cfg: Config, device: bool = True) -> Config:
    """Every setting in its allowed range; the first that is not becomes a one-line ConfigError naming it.

    device=False skips the check that train.device exists here (a config packed to run on another machine).
    """
    check_names(cfg)
    if cfg.model.init_args:  # stage 1's settings: a bad one stops here, not when stage 1 starts hours later
        try:
            with_overrides(cfg, [*cfg.model.init_args, "model.init_args=[]"], device=False)
        except ConfigError as e:
            raise ConfigError(f"model.init_args: {e}") from None
    if not 0 <= cfg.data.pseudo_low < cfg.data.pseudo_high <= 1:
        raise ConfigError(
            f"data.pseudo_low={cfg.data.pseudo_low}, data.pseudo_high={cfg.data.pseudo_high}: "
            f"need 0 <= pseudo_low < pseudo_high <= 1"
        )
    for key, ok, allowed in RANGES:
        value = _get(cfg, key)
        if not ok(value):
            raise ConfigError(f"{key}={_plain(value)!r} is out of range: must be {allowed}")
    missing = [f for f in cfg.train.folds if f >= cfg.data.folds]
    if missing:
        raise ConfigError(
            f"train.folds={list(cfg.train.folds)}: fold {missing[0]} does not exist with data.folds={cfg.data.folds} "
            f"(folds are 0..{cfg.data.folds - 1}, and -1 for a stage-1 model)"
        )
    if cfg.model.tiny.hidden % cfg.model.tiny.heads:
        raise ConfigError(
            f"model.tiny.hidden={cfg.model.tiny.hidden} must be a multiple of model.tiny.heads={cfg.model.tiny.heads}"
        )
    if device:
        check_device(cfg.train.device)
    return cfg


def _plain(x):
    """Tuples as lists, so that the dict is plain JSON/YAML."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _coerce(value, tp, key: str):
    """Check `value` against the annotated type `tp`; ints widen to floats, lists become tuples."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, key)
            except ConfigError:
                continue
        raise ConfigError(f"{key}: {value!r} is not a {tp}")
    if origin is tuple:
        item_tp = typing.get_args(tp)[0]
        if isinstance(value, str):
            items = [v.strip() for v in value.split(",") if v.strip()]
            # `0,2` on the command line is a list too: non-text items are parsed as YAML, like a whole override
            value = items if item_tp is str else [yaml.safe_load(v) for v in items]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return tuple(_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value))
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 3e-3 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # a YAML scalar like `name: 2020` is still a name
    elif dataclasses.is_dataclass(tp):
        if isinstance(value, dict):
            return _build(tp, value, key)
    else:  # pragma: no cover - only the types above are used in the tree
        raise ConfigError(f"{key}: unsupported type {tp}")
    raise ConfigError(f"{key}: expected {tp.__name__}, got {value!r}")


def _build(cls, values: dict, prefix: str = ""):
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(f"unknown config key {where}{unknown[0]} (known: {', '.join(sorted(names))})")
    default = cls()
    kwargs = {}
    for name in names:
        key = f"{prefix}.{name}" if prefix else name
        if name in values:
            v = values[name]
            if dataclasses.is_dataclass(hints[name]) and isinstance(v, dict):
                # nested sections merge over their defaults, key by key
                merged = {**dataclasses.asdict(getattr(default, name)), **v}
                kwargs[name] = _build(hints[name], merged, key)
            else:
                kwargs[name] = _coerce(v, hints[name], key)
            if key in CHOICES and kwargs[name] not in CHOICES[key]:
                raise ConfigError(f"{key}: {kwargs[name]!r} is not one of {', '.join(CHOICES[key])}")
    return cls(**kwargs)


def _set(tree: dict, dotted: str, value) -> None:
    parts = dotted.split(".")
    node = tree
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: {p} is not a section")
    node[parts[-1]] = value


def config_path(name: str) -> Path:
    """A config name (sample, xlmr-large) or a path to a YAML file."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    p = CONFIG_DIR / f"{name}.yaml"
    if not p.exists():
        known = ", ".join(sorted(q.stem for q in CONFIG_DIR.glob("*.yaml")))
        raise ConfigError(f"no config named {name!r} (known: {known})")
    return p


def _yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error as one line: what is wrong and where (line and column, counted from 1)."""
    mark = getattr(e, "problem_mark", None)
    what = getattr(e, "problem", None) or str(e).splitlines()[0]
    return f"{what} at line {mark.line + 1}, column {mark.column + 1}" if mark else what


def read_yaml(path: Path) -> dict:
    """A config file's tree; a syntax error or a file that is not a mapping is one line naming the file."""
    try:
        tree = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({_yaml_problem(e)}); fix the file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the config ({e.__class__.__name__}: {e})") from None
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: a config is a mapping of keys (name: ..., train: ...), not {type(tree).__name__}")
    return tree


def _open_brackets(text: str) -> int:
    return text.count("[") + text.count("{") - text.count("]") - text.count("}")


def join_overrides(items: list[str] | tuple[str, ...]) -> list[str]:
    """Rejoin overrides the shell split at spaces: `make train ARGS="train.folds=[0, 7]"` arrives as the two
    words `train.folds=[0,` and `7]`; a word without `=` that follows an unclosed bracket continues it."""
    out: list[str] = []
    for item in items:
        if out and "=" in out[-1] and _open_brackets(out[-1]) > 0:
            out[-1] = f"{out[-1]} {item}"
        elif "=" not in item:
            hint = " (a list with spaces? write it without: train.folds=[0,7])" if out else ""
            raise ConfigError(f"override {item!r} is not key=value{hint}")
        else:
            out.append(item)
    return out


def _parse_value(key: str, raw: str):
    if not raw.strip():
        return ""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ConfigError(
            f"{key}={raw!r}: cannot parse the value ({_yaml_problem(e)}); lists are written like train.folds=[0,2]"
        ) from None


def _apply(tree: dict, overrides: list[str] | tuple[str, ...]) -> dict:
    for item in join_overrides(overrides):
        key, raw = item.split("=", 1)
        _set(tree, key.strip(), _parse_value(key.strip(), raw))
    return tree


def load(name: str = "sample", overrides: list[str] | tuple[str, ...] = (), device: bool = True) -> Config:
    """Defaults, then the YAML file, then `key.sub=value` overrides (values parsed as YAML); then validated."""
    return validate(_build(Config, _apply(read_yaml(config_path(name)), overrides)), device=device)


def with_overrides(cfg: Config, overrides: list[str] | tuple[str, ...], device: bool = True) -> Config:
    """`cfg` with `key.sub=value` overrides applied, validated like a loaded config."""
    return validate(_build(Config, _apply(cfg.to_dict(), overrides)), device=device)


def stage1_config(cfg: Config, device: bool = True) -> Config | None:
    """The stage-1 experiment `model.init_from` names, as this config trains it: `model.init_args` applied, then
    its name, fold -1, no init of its own and no pseudo-labels (test rows are never a stage-1 row anyway)."""
    name = cfg.model.init_from
    if not name:
        return None
    fixed = [f"name={name}", "train.folds=[-1]", "model.init_from=", "model.init_args=[]", "data.pseudo_from="]
    fixed.append("train.training_only_rows=true")  # the default, though fold -1 reads only those rows anyway
    return with_overrides(cfg, [*cfg.model.init_args, *fixed], device=device)


def from_dict(d: dict) -> Config:
    return _build(Config, d)


def save(cfg: Config, path: Path) -> None:
    from pipeline.files import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))


def load_file(path: Path) -> Config:
    return from_dict(read_yaml(Path(path)))


def parser(description: str) -> argparse.ArgumentParser:
    """The command line every stage shares: --config NAME and key=value overrides."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--config", default="sample", help="a name in pipeline/configs/ or a YAML path")
    # the Makefile passes ARGS as one word, so that the shell never splits or runs what it holds
    p.add_argument("--args", default="", help='overrides as one string, e.g. --args "train.epochs=3 name=x"')
    p.add_argument("overrides", nargs="*", help="key.sub=value, e.g. train.epochs=3")
    return p


def split_args(text: str) -> list[str]:
    """The overrides in one string, split as a shell would split words (quotes kept together), never run."""
    try:
        return shlex.split(text)
    except ValueError as e:  # an unclosed quote
        raise ConfigError(f"ARGS={text!r}: cannot split it into key=value words ({e})") from None


def from_args(args: argparse.Namespace, device: bool = True) -> Config:
    return load(args.config, [*split_args(getattr(args, "args", "")), *args.overrides], device=device)
