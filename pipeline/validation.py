"""A config's values checked before any work: names that become folders, the device, every value in its range
(pipeline.schema's `within`) and the settings that must agree with each other. Each refusal is one ConfigError
line naming the key; pipeline.config runs these when it loads a config.
"""

from __future__ import annotations

import re

from pipeline.errors import ConfigError
from pipeline.schema import RANGES, Config, plain, value_of

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
    named = [("model.init_from", cfg.model.init_from), ("model.init_folds", cfg.model.init_folds)]
    named += [("data.pseudo_from", cfg.data.pseudo_from), ("data.relabel_from", cfg.data.relabel_from)]
    named += [("blend.name", cfg.blend.name)] + [("blend.members", m) for m in cfg.blend.members]
    for entry in cfg.blend.route:  # lang:experiment
        lang, _, name = entry.partition(":")
        if not re.fullmatch(r"[a-z]{2}", lang) or not name:
            raise ConfigError(f"blend.route: {entry!r} is not `lang:experiment` (e.g. es:rs-es)")
        named.append(("blend.route", name))
    langs = [e.partition(":")[0] for e in cfg.blend.route]
    if len(set(langs)) < len(langs):
        raise ConfigError(f"blend.route={list(cfg.blend.route)}: a language routed twice; route each language once")
    for key, value in named:
        if value:  # "" means none
            check_name(value, key)
    if cfg.data.pseudo_from == cfg.name:
        raise ConfigError(
            f"data.pseudo_from={cfg.name}: an experiment cannot label its own training rows; "
            "name another experiment or blend as the teacher"
        )
    if cfg.data.relabel_from == cfg.name:
        raise ConfigError(
            f"data.relabel_from={cfg.name}: an experiment cannot relabel its own training rows; name another as the "
            "teacher"
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


def check_values(cfg: Config) -> None:
    """Every value in its range, and the settings that must agree with each other."""
    if not 0 <= cfg.data.pseudo_low < cfg.data.pseudo_high <= 1:
        raise ConfigError(
            f"data.pseudo_low={cfg.data.pseudo_low}, data.pseudo_high={cfg.data.pseudo_high}: "
            f"need 0 <= pseudo_low < pseudo_high <= 1"
        )
    if cfg.data.relabel_from and not cfg.data.soft_labels:  # (1 - w) * label + w * p is fractional
        raise ConfigError(
            f"data.relabel_from={cfg.data.relabel_from}: a relabelled target is fractional, a soft target; set "
            "data.soft_labels=true as well"
        )
    for key, ok, allowed in RANGES:
        value = value_of(cfg, key)
        if not ok(value):
            raise ConfigError(f"{key}={plain(value)!r} is out of range: must be {allowed}")
    missing = [f for f in cfg.train.folds if f >= cfg.data.folds]
    if missing:
        raise ConfigError(
            f"train.folds={list(cfg.train.folds)}: fold {missing[0]} does not exist with data.folds={cfg.data.folds} "
            f"(folds are 0..{cfg.data.folds - 1}, and -1 for a stage-1 model)"
        )
    twice = sorted({f for f in cfg.train.folds if cfg.train.folds.count(f) > 1})
    if twice:  # two runs of one fold in one command: the second would skip or replace the first
        raise ConfigError(f"train.folds={list(cfg.train.folds)}: fold {twice[0]} is named twice; name each fold once")
    for entry in cfg.data.extra_files:
        if entry.endswith(":"):  # `file.csv:es` gives the language; a bare colon would become part of the file name
            raise ConfigError(
                f"data.extra_files: {entry!r} names no language after the colon; write {entry}es (the file's "
                "language code) or leave the colon out (the language is then its lang column's or its name's)"
            )
    if cfg.bench.effective_batch % cfg.bench.micro_batch:
        raise ConfigError(
            f"bench.micro_batch={cfg.bench.micro_batch} must divide bench.effective_batch={cfg.bench.effective_batch}"
        )
    if cfg.model.tiny.hidden % cfg.model.tiny.heads:
        raise ConfigError(
            f"model.tiny.hidden={cfg.model.tiny.hidden} must be a multiple of model.tiny.heads={cfg.model.tiny.heads}"
        )
    check_init(cfg)
    odd = [x for x in cfg.train.langs if not re.fullmatch(r"[a-z]{2}", x)]
    if odd or len(set(cfg.train.langs)) < len(cfg.train.langs):
        raise ConfigError(f"train.langs={list(cfg.train.langs)}: two-letter language codes, each once (e.g. [es])")


def check_init(cfg: Config) -> None:
    """model.init_folds alone: one model a fold starts from, never an experiment's own folds; under LoRA, fold k's
    adapters go over fold k of that experiment, merged (pipeline.core.modeling.lora_base)."""
    name = cfg.model.init_folds
    if not name:
        return
    if cfg.model.init_from:
        raise ConfigError(
            f"model.init_folds={name}, model.init_from={cfg.model.init_from}: a fold starts from one model; "
            "set one of them"
        )
    if name == cfg.name:
        raise ConfigError(f"model.init_folds={name}: an experiment cannot start from itself; name it differently")
    if -1 in cfg.train.folds:  # pipeline.layout.STAGE1, the stage-1 model's fold number
        raise ConfigError(f"model.init_folds={name}: a stage-1 model (train.folds -1) has no fold to start from")
