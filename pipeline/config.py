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
    extra_files: tuple[str, ...] = ()  # translated train CSVs (comment_text, lang, toxic), by file name
    bias_rows: int = 0  # rows of jigsaw-unintended-bias-train.csv to add (0: none), toxic >= 0.5 as 1
    english_negatives: int = 20000  # non-toxic English train rows kept (all toxic rows are kept)
    folds: int = 5
    seed: int = 42
    sample_scale: float = 1.0  # size of the built-in sample competition


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
    max_length: int = 128
    dropout: float = 0.1
    trim_vocab: bool = False  # keep only the embedding rows of tokens the competition's texts use
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


@dataclass(frozen=True)
class PredictConfig:
    ensemble: str = "mean"  # mean | rank


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


@dataclass(frozen=True)
class BenchConfig:
    """`make bench`: the memory and speed table (random weights and token ids, no download)."""

    model: str = "xlm-roberta-base"  # xlm-roberta-base | xlm-roberta-large (architecture only)
    seq_len: int = 256  # on 2 CPU cores the whole table takes about 20 minutes at 256 (bench.seq_len=128: 8)
    effective_batch: int = 32
    micro_batch: int = 4  # the accumulation rows: micro_batch x (effective_batch / micro_batch)
    steps: int = 1  # timed optimizer steps per row, after an untimed warm-up
    trainer: bool = True  # also run each row with Hugging Face Trainer
    vocab_used: int = 60000  # distinct token ids in the data (what trimming keeps); see bench.py
    max_memory_gb: float = 11.0  # the cap of the auto-fit row
    rows: tuple[str, ...] = ()  # only these rows (fp32 mp mp_acc mp_ckpt all3 trim adamw8bit autofit); () all


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
    "train.precision": ("fp32", "fp16", "bf16", "auto"),
    "train.optimizer": ("adamw", "adamw8bit"),
    "predict.ensemble": ("mean", "rank"),
    "kaggle.kernel_type": ("script", "notebook"),
}


class ConfigError(PipelineError, ValueError):
    pass


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


def load(name: str = "sample", overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults, then the YAML file, then `key.sub=value` overrides (values parsed as YAML)."""
    tree = yaml.safe_load(config_path(name).read_text()) or {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not key=value")
        key, raw = item.split("=", 1)
        _set(tree, key.strip(), yaml.safe_load(raw) if raw.strip() else "")
    return _build(Config, tree)


def from_dict(d: dict) -> Config:
    return _build(Config, d)


def save(cfg: Config, path: Path) -> None:
    from pipeline.io import atomic_write_text

    atomic_write_text(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))


def load_file(path: Path) -> Config:
    return from_dict(yaml.safe_load(Path(path).read_text()))


def parser(description: str) -> argparse.ArgumentParser:
    """The command line every stage shares: --config NAME and key=value overrides."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--config", default="sample", help="a name in pipeline/configs/ or a YAML path")
    p.add_argument("overrides", nargs="*", help="key.sub=value, e.g. train.epochs=3")
    return p


def from_args(args: argparse.Namespace) -> Config:
    return load(args.config, args.overrides)
