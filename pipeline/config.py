"""One frozen, typed config for every stage: read, overridden and checked.

A config is the dataclass defaults (pipeline/schema/, where every setting is declared), then a YAML file
from pipeline/configs/ (or any path), then `key.sub=value` overrides from the command line. An unknown key
or a value of the wrong type is an error that names the key. `save` writes the resolved config next to an
artifact; `load_file` reads it back, so every checkpoint carries the settings that made it.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import types
import typing
from pathlib import Path

import yaml

from pipeline import validation
from pipeline.errors import ConfigError, one_of
from pipeline.schema import CHOICES, Config

CONFIG_DIR = Path(__file__).parent / "configs"


class _WrittenInt(int):
    """An int that keeps the text it was written as (`010`, `0x10`, `12:30`), for a setting that is text."""

    text: str


class _WrittenFloat(float):
    """A float that keeps the text it was written as (`1.10`), for a setting that is text."""

    text: str


class _Written:
    """A YAML true/false/null (`no`, `True`, `~`) with the text it was written as: a text setting keeps the text
    (`name=no` is the experiment `no`), any other setting takes the value (bool and None cannot be subclassed)."""

    def __init__(self, value, text: str) -> None:
        self.value, self.text = value, text

    def __repr__(self) -> str:
        return repr(self.value)


class _Loader(yaml.SafeLoader):
    """safe_load's YAML, with two differences: a scalar keeps its text, so that `name=010` stays the name `010`
    (YAML 1.1 reads it as the octal 8) and `name=no` the name `no` (not False), and a key set twice in one
    mapping is refused (YAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            _refuse_twice(self, node)
        return super().construct_mapping(node, deep=deep)


def _refuse_twice(loader: _Loader, node: yaml.MappingNode) -> None:
    """A mapping's keys each once; the second of a pair is a YAML error with its line (`train:` twice in a file
    would silently drop the first section's keys)."""
    first: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` merges, then keys after it override: allowed
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            line = first.setdefault(key, key_node.start_mark.line)
        except TypeError:  # an unhashable key: safe_load's own error says it
            continue
        if line != key_node.start_mark.line:
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {key!r} is set twice: at line {line + 1} and", key_node.start_mark
            )


def _keeps_text(kind: type, construct):
    def constructor(loader: _Loader, node: yaml.ScalarNode):
        number = kind(construct(loader, node))
        number.text = node.value  # the scalar as written
        return number

    return constructor


_Loader.add_constructor("tag:yaml.org,2002:int", _keeps_text(_WrittenInt, yaml.SafeLoader.construct_yaml_int))
_Loader.add_constructor("tag:yaml.org,2002:float", _keeps_text(_WrittenFloat, yaml.SafeLoader.construct_yaml_float))


def _written(construct):
    def constructor(loader: _Loader, node: yaml.ScalarNode):
        value = construct(loader, node)
        # an empty scalar (`file.csv:`'s value) stays a plain None: _bare_key reads it as text ending in a colon
        return _Written(value, node.value) if node.value else value

    return constructor


_Loader.add_constructor("tag:yaml.org,2002:bool", _written(yaml.SafeLoader.construct_yaml_bool))
_Loader.add_constructor("tag:yaml.org,2002:null", _written(yaml.SafeLoader.construct_yaml_null))


def parse_yaml(text: str):
    """YAML as this config reads it (a file or an override's value): numbers keep their text, keys are unique."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader


def validate(cfg: Config, device: bool = True) -> Config:
    """Every setting in its allowed range (pipeline.validation); the first that is not becomes a one-line
    ConfigError naming it.

    device=False skips the check that train.device exists here (a config packed to run on another machine).
    """
    validation.check_names(cfg)
    if cfg.model.init_args:  # stage 1's settings: a bad one stops here, not when stage 1 starts hours later
        try:
            with_overrides(cfg, [*cfg.model.init_args, "model.init_args=[]"], device=False)
        except ConfigError as e:
            raise ConfigError(f"model.init_args: {e}") from None
    validation.check_values(cfg)
    if device:
        validation.check_device(cfg.train.device)
    return cfg


def _bare_key(value) -> bool:
    """YAML reads `file.csv:` (and `[file.csv:]`'s item) as the mapping {file.csv: None}: the text was `file.csv:`."""
    return isinstance(value, dict) and len(value) == 1 and None in value.values()


def _coerce(value, tp, key: str):
    """Check `value` against the annotated type `tp`; ints widen to floats, lists become tuples."""
    if isinstance(value, _Written):  # `no`, `True`, `null`: the text for a text setting, else the YAML value
        value = value.text if tp is str else value.value
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
        if _bare_key(value) and item_tp is str:
            value = f"{next(iter(value))}:"
        if isinstance(value, str):
            items = [v.strip() for v in value.split(",") if v.strip()]
            # `0,2` on the command line is a list too: non-text items are parsed as YAML, like a whole override
            value = items if item_tp is str else [parse_yaml(v) for v in items]
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
            return int(value)  # a plain int, not the loader's _WrittenInt
    elif tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # a YAML number like `name: 010` is still the name written (str() would give `8`)
            return getattr(value, "text", None) or str(value)
        if _bare_key(value):
            return f"{next(iter(value))}:"
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
                raise ConfigError(f"{key}: {kwargs[name]!r} is not one of {one_of(CHOICES[key])}")
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


def recipe_path(name: str) -> Path:
    """A recipe's name (pipeline/configs/recipes/<name>.yaml, `make recipe CONFIG=<name>`) or a path to one."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    p = CONFIG_DIR / "recipes" / f"{name}.yaml"
    if not p.exists():
        known = ", ".join(sorted(q.stem for q in (CONFIG_DIR / "recipes").glob("*.yaml")))
        raise ConfigError(f"no recipe named {name!r} (known: {known})")
    return p


def _yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error as one line: what is wrong and where (line and column, counted from 1)."""
    mark = getattr(e, "problem_mark", None)
    what = getattr(e, "problem", None) or str(e).splitlines()[0]
    return f"{what} at line {mark.line + 1}, column {mark.column + 1}" if mark else what


def read_yaml(path: Path, shape: str = "a config is a mapping of keys (name: ..., train: ...)") -> dict:
    """A config file's tree; a syntax error or a file that is not a mapping (`shape` says of what) is one line
    naming the file."""
    try:
        tree = parse_yaml(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({_yaml_problem(e)}); fix the file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read it ({e.__class__.__name__}: {e})") from None
    tree = tree.value if isinstance(tree, _Written) else tree  # a file of only `null` or `true`
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: {shape}, not {type(tree).__name__}")
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
        return parse_yaml(raw)
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
    its name, fold -1, no init of its own, no pseudo-labels (test rows are never a stage-1 row anyway) and no
    relabelled rows (every teacher fold saw validation rows)."""
    name = cfg.model.init_from
    if not name:
        return None
    fixed = [
        f"name={name}",
        "train.folds=[-1]",
        "model.init_from=",
        "model.init_args=[]",
        "data.pseudo_from=",
        "data.relabel_from=",
    ]
    fixed.append("train.training_only_rows=true")  # the default, though fold -1 reads only those rows anyway
    s1 = with_overrides(cfg, [*cfg.model.init_args, *fixed], device=device)
    if s1.model.pooling != cfg.model.pooling:  # stage 2 pools as its stage-1 model does (foldmodel.check_settings)
        raise ConfigError(
            f"model.init_args: model.pooling={s1.model.pooling} for the stage-1 model {name}, "
            f"{cfg.model.pooling} for stage 2: a stage-2 fold pools as the model it starts from; give both one pooling"
        )
    return s1


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
