"""pipeline.config: defaults, YAML files, strict typed overrides, save/load round trip, frozen."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipeline import config
from pipeline.config import CHOICES, Config, ConfigError

CONFIGS = sorted(config.CONFIG_DIR.glob("*.yaml"))


def test_defaults_load() -> None:
    cfg = config.load("sample")
    assert isinstance(cfg, Config)
    assert cfg.name == "sample"
    assert cfg.data.source == "sample"
    assert cfg.model.name == "tiny"
    assert cfg.model.tiny == config.TinyConfig()  # untouched sections keep the dataclass defaults
    assert config.from_dict({}) == Config()


@pytest.mark.parametrize(
    ("override", "get", "expected"),
    [
        ("train.epochs=7", lambda c: c.train.epochs, 7),
        ("model.tiny.layers=1", lambda c: c.model.tiny.layers, 1),
        ("train.lr=0.02", lambda c: c.train.lr, 0.02),
        ("train.lr=1", lambda c: c.train.lr, 1.0),  # an int widens to a float
        ("train.checkpointing=false", lambda c: c.train.checkpointing, False),
        ("name=my-exp", lambda c: c.name, "my-exp"),
        ("name=2020", lambda c: c.name, "2020"),  # a number is still a name
        ("train.precision=bf16", lambda c: c.train.precision, "bf16"),
        ("train.folds=[0,2]", lambda c: c.train.folds, (0, 2)),
        ("train.folds=0,2", lambda c: c.train.folds, (0, 2)),
        ("train.folds=[]", lambda c: c.train.folds, ()),
        ("data.extra_files=a.csv,b.csv", lambda c: c.data.extra_files, ("a.csv", "b.csv")),
        ("data.extra_files=", lambda c: c.data.extra_files, ()),
    ],
)
def test_overrides(override: str, get, expected) -> None:
    value = get(config.load("sample", [override]))
    assert value == expected
    assert type(value) is type(expected)


def test_override_keeps_the_rest_of_the_section() -> None:
    base = config.load("sample")
    cfg = config.load("sample", ["train.epochs=9"])
    assert cfg.train == dataclasses.replace(base.train, epochs=9)
    assert cfg.data == base.data


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("epochz=3", "epochz"),
        ("train.epochz=3", "train.epochz"),
        ("model.tiny.layerz=1", "model.tiny.layerz"),
        ("data.sourc=dir", "data.sourc"),
    ],
)
def test_unknown_key_fails_naming_it(override: str, key: str) -> None:
    with pytest.raises(ConfigError, match=rf"unknown config key {key}\b"):
        config.load("sample", [override])


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("train.epochs=abc", "train.epochs"),
        ("train.epochs=2.5", "train.epochs"),
        ("train.epochs=true", "train.epochs"),  # a bool is not an int here
        ("train.lr=fast", "train.lr"),
        ("train.checkpointing=maybe", "train.checkpointing"),
        ("train.folds=[0,x]", "train.folds[1]"),
        ("train.folds=3", "train.folds"),
        ("data=3", "data"),
        ("train.epochs.x=1", "train.epochs.x"),
    ],
)
def test_wrong_type_fails_naming_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.load("sample", [override])
    assert key in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_choice_outside_choices_fails(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"{key}: 'nonsense' is not one of"):
        config.load("sample", [f"{key}=nonsense"])
    for good in CHOICES[key]:
        config.load("sample", [f"{key}={good}"])


def test_override_without_equals_fails() -> None:
    with pytest.raises(ConfigError, match="train.epochs"):
        config.load("sample", ["train.epochs"])


def test_unknown_config_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="sample"):
        config.load("no-such-config")


def test_save_load_file_round_trip(tmp_path: Path) -> None:
    cfg = config.load("sample", ["train.folds=[1,3]", "data.extra_files=[x.csv]", "train.lr=0.25", "name=rt"])
    path = tmp_path / "deep" / "config.yaml"
    config.save(cfg, path)
    back = config.load_file(path)
    assert back == cfg
    assert back.digest() == cfg.digest()
    assert config.load(str(path)) == cfg  # a saved config is also a valid --config path


def test_digest_follows_sections() -> None:
    a = config.load("sample")
    b = config.load("sample", ["train.epochs=9"])
    assert a.digest() != b.digest()
    assert a.digest("data", "model") == b.digest("data", "model")


def test_every_yaml_loads() -> None:
    assert any(p.stem == "sample" for p in CONFIGS)
    for path in CONFIGS:
        cfg = config.load(path.stem)
        assert isinstance(cfg, Config), path
        assert config.load(str(path)) == cfg


def test_config_is_frozen() -> None:
    cfg = config.load("sample")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.epochs = 99  # type: ignore[misc]
    assert isinstance(cfg.train.folds, tuple)  # lists become tuples: nothing inside can change either
