"""What a result was made from, by content, never by where the files were read from.

A fold's fingerprint covers what its weights depend on: the training table (its content digest, from
data.json), the model it starts from (the tiny architecture and its tokenizer's files, a pretrained
model's name, or a model folder's content, and a stage-1 model's own fingerprint) and the settings that
change the weights. It leaves out what does not: the device, the evaluation batch, the resume cadence,
which folds a run trains, checkpointing (the same gradients), and paths (`data.dir`, `model.path`, the
folders). So a fold trained in a Kaggle notebook is complete on a laptop that holds the same inputs.

Everything here is a pure function of values; pipeline.validity reads the files these values come from
and decides, with them, whether a fold counts.
"""

from __future__ import annotations

from pathlib import Path

from pipeline import schema
from pipeline.files import json_digest, tree_digest
from pipeline.schema import Config

FOLD_SECTIONS = ("train", "model")  # the config sections a fold's weights are made from (data: by its table)


def _roles(role: str) -> dict[str, dict[str, object]]:
    """{section: {key: default}} of the settings of `role` in the data, model and train sections (pipeline.schema)."""
    found = {s: schema.fields_of(s) for s in ("data", *FOLD_SECTIONS)}
    return {s: {k: f.default for k, f in fs.items() if f.metadata["setting"].role == role} for s, fs in found.items()}


# settings that never change a fold's weights (everything else in `train` and `model` does): in pipeline.schema,
# the role NEVER. The model is named by `model_identity`, not by where it was read from; a stage-1 model's
# settings (init_args) reach the fold through that model's own fingerprint
NOT_WEIGHTS = {s: set(keys) for s, keys in _roles(schema.NEVER).items() if s in FOLD_SECTIONS}
# the data settings that never change the prepared tables: where the files are read from, which their digests
# make irrelevant
NOT_TABLES = set(_roles(schema.NEVER)["data"])


# the pipeline's classification head (pipeline.core.modeling): a fold trained under another head is another
# model, whose weights this version does not read
HEAD = "pooled-linear-1"


def model_identity(cfg: Config, tokenizer: Path, init_digest: str | None) -> dict:
    """The model a fold starts from: the tiny architecture and its tokenizer's files (in `tokenizer`), a
    pretrained model's name (its files may sit anywhere: model.path), or the content of a folder given as
    model.name, under the pipeline's head (HEAD; model.pooling is among the settings); a
    stage-2 fold adds its stage-1 model's fingerprint (`init_digest`)."""
    name = cfg.model.name
    init = {"head": HEAD} if init_digest is None else {"init_from": init_digest, "head": HEAD}
    if name == "tiny":
        return {"tiny": True, "tokenizer": tree_digest(tokenizer, skip=("trained_on.json",)), **init}
    if not cfg.model.path and Path(name).is_dir():
        return {"folder": tree_digest(name), **init}
    return {"name": name, **init}


# settings added after folds were already trained: left out while at their default (which is what those
# folds were trained with), so adding a setting never makes every trained fold stale (role LATER in pipeline.schema)
# (a tuple's default as the list a config's to_dict holds: `train.langs=[]` is its default, not a new setting)
LATER = {s: {k: list(d) if isinstance(d, tuple) else d for k, d in keys.items()}
         for s, keys in _roles(schema.LATER).items() if keys}  # fmt: skip


def settings(cfg: Config) -> dict:
    d = cfg.to_dict()
    return {section: later_left_out(section, d[section], NOT_WEIGHTS[section], cfg) for section in FOLD_SECTIONS}


def later_left_out(section: str, values: dict, skip: set | tuple = (), cfg: Config | None = None) -> dict:
    """`values` of a config section without the keys in `skip`, the LATER keys at their defaults and, given the
    whole `cfg`, the keys that count only while another setting has a value (`when` in pipeline.schema) when not."""
    later = LATER.get(section, {})
    kept = {k: v for k, v in values.items() if k not in skip and (k not in later or v != later[k])}
    return {k: v for k, v in kept.items() if cfg is None or applies(cfg, schema.roles(section)[k])}


def applies(cfg: Config, meta: schema.Setting) -> bool:
    """Whether a setting means anything in `cfg`: always, or while the setting its `when` names has that value (or,
    where it is one of schema.CONDITIONS, satisfies it)."""
    if meta.when is None:
        return True
    key, wanted = meta.when
    value = schema.value_of(cfg, key)
    return wanted.holds(value) if isinstance(wanted, schema.CONDITIONS) else value == wanted


def settings_differ(cfg: Config, saved: Config) -> str:
    """The weight-changing settings in which `cfg` differs from `saved`, as 'key (here, there)'."""
    return differ(settings(cfg), settings(saved))


def differ(ours: dict, theirs: dict, there: str = "there") -> str:
    """Two `settings` values' differences, as 'train.lr (0.002 here, 0.001 there)'."""
    ours, theirs = ({s: {**LATER.get(s, {}), **side[s]} for s in side} for side in (ours, theirs))  # defaults back
    found = [d for s in ours for k in ours[s] for d in leaves(f"{s}.{k}", ours[s][k], theirs.get(s, {}).get(k))]
    return ", ".join(f"{key} ({a!r} here, {b!r} {there})" for key, a, b in found)


def leaves(key: str, ours, theirs) -> list[tuple[str, object, object]]:
    """(key, ours, theirs) of each value that differs, a block's by its own keys: `model.lora.r (8 here, 4 there)`,
    not the whole model.lora block twice."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [d for k in dict.fromkeys([*ours, *theirs]) for d in leaves(f"{key}.{k}", ours.get(k), theirs.get(k))]
    return [] if ours == theirs else [(key, ours, theirs)]


def made_from(cfg: Config, table_digest: str, model: dict, relabel: dict | None = None) -> dict:
    """What a fold's weights are made from: the training table, the model it starts from and the settings; with
    data.relabel_from, the teacher's training-row predictions (`relabel`: fold -> sha256) and data.relabel_weight,
    which change the targets and not the table (without it, nothing: a fold trained before it keeps its digest)."""
    made = {"table": table_digest, "model": model, "settings": settings(cfg)}
    if relabel is not None:
        made["relabel"] = {"weight": cfg.data.relabel_weight, "teacher": relabel}
    return made


def fold_fingerprint(made: dict) -> str:
    """The digest a complete fold's done.json must carry to count for these inputs and settings (`made_from`),
    trained by one process (see with_world for more)."""
    return json_digest(made)


# settings that decide only when a fold is evaluated and when it stops, never the weights of the steps trained
# so far (an evaluation draws no random number): a resume state saved under other values of them is continued
RESUMABLE = {s: tuple(k for k, meta in schema.roles(s).items() if meta.resumable) for s in FOLD_SECTIONS}


def resume_key(made: dict) -> str:
    """What a resume state must match to be continued: `made_from` less the RESUMABLE settings."""
    every = made["settings"]
    kept = {s: {k: v for k, v in values.items() if k not in RESUMABLE.get(s, ())} for s, values in every.items()}
    return json_digest({**made, "settings": kept})


def with_world(digest: str, world: int) -> str:
    """The fingerprint of a fold trained by `world` processes: the effective batch and the rows of each step depend
    on it (micro-batch x accumulation x world). One process leaves `digest` as it is, so that folds trained before
    the world size counted keep theirs."""
    return digest if world == 1 else json_digest({"fold": digest, "world": world})


def with_precision(digest: str, measured: str | None) -> str:
    """The fingerprint of a fold whose train.precision=auto was decided by measuring a step both ways: the one it
    trained in (`measured`) changes the weights. None (auto decided by the device alone, or a precision set)
    leaves `digest` as it is, so that folds trained before auto was measured keep theirs."""
    return digest if measured is None else json_digest({"fold": digest, "precision": measured})


def as_trained(digest: str, done: dict) -> str:
    """The fingerprint a complete fold's done.json carries for `digest`: its world size and measured precision."""
    measured = done.get("precision") if done.get("precision_rates") else None
    return with_world(with_precision(digest, measured), done.get("world", 1))


# the TF-IDF baseline (`make baseline`): character n-grams and logistic regression, its whole setting
TFIDF = {
    "model": "tfidf+lr",  # the `model` field of its done.json: what `make board` shows
    "vectorizer": {"analyzer": "char_wb", "ngram_range": (2, 5), "min_df": 2, "sublinear_tf": True,
                   "max_features": 400_000},
    "classifier": {"C": 4.0, "max_iter": 2000, "solver": "liblinear"},
}  # fmt: skip


def tfidf_fingerprint(table_digest: str, test_digest: str, seed: int, langs: tuple[str, ...] = ()) -> str:
    """What a baseline fold's result depends on: the prepared tables, the model's settings, the seed and the
    languages it is fit on (train.langs; at its default, every language, the digest is what it always was)."""
    return json_digest({**TFIDF, "seed": seed, "table": table_digest, "test": test_digest} | _langs(langs))


def _langs(langs: tuple[str, ...]) -> dict:
    return {"langs": list(langs)} if langs else {}  # absent at the default: earlier folds keep their digests


def test_cache_key(weights_digest: str, test_digest: str, cfg: Config, precision: str) -> dict:
    """What a fold's cached test predictions depend on."""
    return {"weights": weights_digest, "test": test_digest, "max_length": cfg.model.max_length, "precision": precision}


def training_cache_key(weights_digest: str, table_digest: str, cfg: Config, precision: str) -> dict:
    """What a fold's cached predictions of the training-only rows depend on: test_cache_key's, with the training
    table in place of the test table."""
    key = test_cache_key(weights_digest, table_digest, cfg, precision)
    key["table"] = key.pop("test")
    return key
