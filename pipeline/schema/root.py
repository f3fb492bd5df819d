"""The config's root (`Config`: the top-level keys and every section), and what is read from its fields: every
setting in declaration order (`walk`), one by key (`of`), the loader's CHOICES and RANGES, a section's roles."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pipeline.schema.base import Setting, is_section, plain, section, setting
from pipeline.schema.bench import BenchConfig
from pipeline.schema.data import DataConfig
from pipeline.schema.kaggle import KaggleConfig
from pipeline.schema.mlm import MlmConfig
from pipeline.schema.model import ModelConfig
from pipeline.schema.predict import BlendConfig, PredictConfig
from pipeline.schema.search import SearchConfig
from pipeline.schema.train import TrainConfig


@dataclass(frozen=True)
class Config:
    name: str = setting(
        "sample",
        "the experiment's name: `input/prepared/<name>/`, `models/<name>/`, "
        "`submissions/<name>.csv`; a plain folder name (not empty, `.`, `..` or a path)",
    )
    input_dir: str = setting("input", "the input folder (raw files, prepared tables, token caches, locks)")
    models_dir: str = setting("models", "the models folder")
    submissions_dir: str = setting("submissions", "the submissions folder")
    data: DataConfig = section(DataConfig, "the competition's files and the tables made from them")
    model: ModelConfig = section(ModelConfig, "the model every fold trains")
    train: TrainConfig = section(TrainConfig, "how a fold trains")
    predict: PredictConfig = section(PredictConfig, "how the folds' test predictions become a submission")
    bench: BenchConfig = section(BenchConfig, "`make bench`")
    blend: BlendConfig = section(BlendConfig, "`make blend`")
    kaggle: KaggleConfig = section(KaggleConfig, "the Kaggle notebook and `make submit`")
    search: SearchConfig = section(SearchConfig, "`make search`: an Optuna study of trials ([search.md](search.md))")
    mlm: MlmConfig = section(
        MlmConfig, "`make mlm`: the encoder's masked-language-model stage ([training.md](training.md))"
    )

    def to_dict(self) -> dict:
        return plain(dataclasses.asdict(self))

    def digest(self, *sections: str) -> str:
        """A short hash of the whole config, or of the named sections only."""
        d = self.to_dict()
        if sections:
            d = {s: d[s] for s in sections}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


# ---------------------------------------------------------------- read from the fields


def walk(cls=Config, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Setting]]:
    """Every setting under `cls` as (dotted key, its field, its Setting), in declaration order, sections inline."""
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if is_section(f):
            yield from walk(f.default_factory, f"{key}.")
        else:
            yield key, f, f.metadata["setting"]


def unknown_keys(tree: dict, cls=Config, prefix: str = "") -> list[str]:
    """The dotted keys of a config tree (a saved pipeline.yaml) that no field declares: a newer version's settings."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    found = []
    for name, value in tree.items():
        f = fields.get(name)
        if f is None:
            found.append(f"{prefix}{name}")
        elif is_section(f) and isinstance(value, dict):
            found += unknown_keys(value, f.default_factory, f"{prefix}{name}.")
    return found


def of(key: str) -> Setting:
    """The Setting of a dotted key."""
    return next(meta for k, _, meta in walk() if k == key)


CHOICES: dict[str, tuple] = {key: meta.choices for key, _, meta in walk() if meta.choices}
# checked when a config loads, so a setting that would train nothing (micro_batch=-4 runs zero steps) or crash
# after an epoch stops before any work
RANGES: tuple[tuple[str, Callable[[typing.Any], bool], str], ...] = tuple(
    (key, meta.check, meta.allowed) for key, _, meta in walk() if meta.check is not None
)


def fields_of(section_name: str) -> dict[str, dataclasses.Field]:
    """The fields directly in a section of Config (`data`, `model`, `train`), by key."""
    return {f.name: f for f in dataclasses.fields(typing.get_type_hints(Config)[section_name])}


def roles(section_name: str) -> dict[str, Setting]:
    """The settings directly in a section, by key, with their roles."""
    return {k: f.metadata["setting"] for k, f in fields_of(section_name).items()}
