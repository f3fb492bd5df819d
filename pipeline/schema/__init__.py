"""Every setting, declared once: its type and default (the frozen dataclass field), its one-line doc, its
allowed values (choices, or a range the loader checks) and its role in what a result is made from.

The role is read for the sections a fold is made from: `model` and `train` (the fold's fingerprint, in
pipeline.fingerprint) and `data` (the signature of the prepared tables, in pipeline.validity). A setting
there either changes the result (WEIGHTS), never does (NEVER: where files are read from, the device, log
cadence), counts only away from its default (LATER: added after folds were trained with that default, so
adding it left them current), or counts only while another setting has a given value (`when`: a setting
that means nothing without the other). CHOICES and RANGES (in root), fingerprint.NOT_WEIGHTS and
fingerprint.LATER, and the key tables of docs/configs.md (`python -m pipeline.configdoc docs/configs.md`) are
all read from these fields; nothing repeats them.

One module a concern, each name importable from here: base (what a setting is: `setting`, `section`, the
roles, the ranges), a module a section (data, model, train, predict with blend, kaggle, bench, search, mlm), and
root (the Config that holds them, in the order docs/configs.md lists them, and what is read from every field: `walk`,
`of`, CHOICES, RANGES, `roles`).
"""

from pipeline.schema.base import (
    CONDITIONS,
    FRACTION,
    LATER,
    NEVER,
    NON_NEGATIVE,
    POSITIVE,
    SEED,
    WEIGHTS,
    Above,
    Given,
    OneOf,
    Setting,
    at_least,
    is_section,
    plain,
    section,
    setting,
    value_of,
)
from pipeline.schema.bench import BENCH_MODELS, BENCH_ROWS, BenchConfig
from pipeline.schema.data import DataConfig
from pipeline.schema.kaggle import KaggleConfig
from pipeline.schema.mlm import MlmConfig
from pipeline.schema.model import LoraConfig, ModelConfig, TinyConfig
from pipeline.schema.predict import BlendConfig, PredictConfig
from pipeline.schema.root import CHOICES, RANGES, Config, fields_of, of, roles, unknown_keys, walk
from pipeline.schema.search import SearchConfig
from pipeline.schema.train import TrainConfig

__all__ = [
    "BENCH_MODELS",
    "BENCH_ROWS",
    "CHOICES",
    "FRACTION",
    "LATER",
    "NEVER",
    "NON_NEGATIVE",
    "POSITIVE",
    "RANGES",
    "SEED",
    "WEIGHTS",
    "Above",
    "CONDITIONS",
    "Given",
    "OneOf",
    "BenchConfig",
    "BlendConfig",
    "Config",
    "DataConfig",
    "KaggleConfig",
    "LoraConfig",
    "MlmConfig",
    "ModelConfig",
    "PredictConfig",
    "SearchConfig",
    "Setting",
    "TinyConfig",
    "TrainConfig",
    "at_least",
    "fields_of",
    "is_section",
    "of",
    "plain",
    "roles",
    "section",
    "setting",
    "unknown_keys",
    "value_of",
    "walk",
]
