"""pipeline.config: defaults, YAML files, strict typed overrides, save/load round trip, frozen."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import config, schema
from pipeline.errors import ConfigError
from pipeline.schema import CHOICES, Config
from tests.helpers import ROOT

CONFIGS = sorted(config.CONFIG_DIR.glob("*.yaml"))


def test_defaults_load() -> None:
    cfg = config.load("sample")
    assert isinstance(cfg, Config)
    assert cfg.name == "sample"
    assert cfg.data.source == "sample"
    assert cfg.model.name == "tiny"
    assert cfg.model.tiny == schema.TinyConfig()  # untouched sections keep the dataclass defaults
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


TEXT_KEYS = ["name", "blend.name", "kaggle.user", "data.pseudo_from"]


@pytest.mark.parametrize("key", TEXT_KEYS)
@pytest.mark.parametrize("written", ["010", "0x10", "1.10", "1_0", "0o7", "2020"])
def test_a_text_setting_keeps_the_text_written(tmp_path: Path, key: str, written: str) -> None:
    """YAML 1.1 reads 010 as 8, 0x10 as 16 and 1.10 as 1.1: a name is the text as written, on the command line
    and in a config file alike."""
    assert schema.value_of(config.load("sample", [f"{key}={written}"]), key) == written
    *sections, last = key.split(".")
    text = "".join(f"{'  ' * i}{s}:\n" for i, s in enumerate(sections)) + f"{'  ' * len(sections)}{last}: {written}\n"
    (tmp_path / "c.yaml").write_text(text)
    assert schema.value_of(config.load(str(tmp_path / "c.yaml")), key) == written


@pytest.mark.parametrize("key", [*TEXT_KEYS, "kaggle.title"])
@pytest.mark.parametrize("written", ["no", "yes", "true", "True", "off", "null", "Null", "~"])
def test_a_text_setting_keeps_a_yaml_bool_or_null_as_written(tmp_path: Path, key: str, written: str) -> None:
    """YAML 1.1 reads no and True as booleans and null and ~ as None: a text setting is the text as written."""
    if key != "kaggle.title" and written == "~":
        return  # not a folder name: refused as one (test_unsafe_names_are_refused), not as "expected str"
    assert schema.value_of(config.load("sample", [f"{key}={written}"]), key) == written
    *sections, last = key.split(".")
    text = "".join(f"{'  ' * i}{s}:\n" for i, s in enumerate(sections)) + f"{'  ' * len(sections)}{last}: {written}\n"
    (tmp_path / "c.yaml").write_text(text)
    assert schema.value_of(config.load(str(tmp_path / "c.yaml")), key) == written


def test_a_bool_setting_still_reads_yaml_booleans_and_a_list_keeps_names() -> None:
    cfg = config.load("sample", ["train.tensorboard=yes", "model.trim_vocab=off", "blend.members=[no,true]"])
    assert (cfg.train.tensorboard, cfg.model.trim_vocab, cfg.blend.members) == (True, False, ("no", "true"))
    with pytest.raises(ConfigError, match="^train.epochs: expected int, got True$"):
        config.load("sample", ["train.epochs=true"])


def test_the_text_settings_docs_configs_md_names_keep_their_text() -> None:
    """Each `key=value` of the rule in docs/configs.md loads as the text written."""
    rules = (Path(__file__).parents[1] / "docs" / "configs.md").read_text(encoding="utf-8")
    sentence = rules[rules.index("A text setting keeps the text as written") :].split("`train.folds` names")[0]
    examples = re.findall(r"`([a-z_.]+)=([^`]+)`", sentence)
    assert len(examples) >= 7, sentence
    for key, written in examples:
        assert schema.value_of(config.load("sample", [f"{key}={written}"]), key) == written


def test_a_fold_named_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^train.folds=\[0, 0\]: fold 0 is named twice; name each fold once$"):
        config.load("sample", ["train.folds=[0,0]"])


def test_an_empty_allowed_value_is_shown_quoted() -> None:
    with pytest.raises(ConfigError) as info:
        config.load("sample", ["kaggle.docker_image_pinning=newest"])
    assert str(info.value) == "kaggle.docker_image_pinning: 'newest' is not one of '', 'original', 'latest'"


def test_a_list_of_names_keeps_the_text_written() -> None:
    assert config.load("sample", ["blend.members=[010,0x10,1.10]"]).blend.members == ("010", "0x10", "1.10")
    assert config.load("sample", ["kaggle.user=12:30"]).kaggle.user == "12:30"  # sexagesimal 750 to YAML 1.1
    with pytest.raises(ConfigError, match="^name='12:30': a name must be a plain folder name"):
        config.load("sample", ["name=12:30"])


def test_a_key_set_twice_in_a_config_file_is_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    twice = tmp_path / "twice.yaml"
    twice.write_text("name: x\ntrain:\n  epochs: 1\nmodel:\n  name: tiny\ntrain:\n  lr: 0.1\n")
    with pytest.raises(ConfigError) as info:
        config.load(str(twice))
    message = str(info.value)
    assert message.startswith(f"{twice}: not valid YAML") and "\n" not in message, message
    assert "'train' is set twice: at line 2 and at line 6" in message, message
    inner = tmp_path / "inner.yaml"
    inner.write_text("train:\n  lr: 0.1\n  epochs: 1\n  lr: 0.2\n")
    with pytest.raises(ConfigError, match=r"'lr' is set twice: at line 2 and at line 4"):
        config.load(str(inner))
    # a merge key, then a key that overrides what it merged, is not a key set twice
    assert config.parse_yaml("a: &a {x: 1, y: 1}\nb:\n  <<: *a\n  x: 2\n")["b"] == {"x": 2, "y": 1}


@pytest.mark.parametrize(
    "written", ["[translated-train.csv:]", "translated-train.csv:", "[a.csv:es,translated-train.csv:]"]
)
def test_an_extra_file_with_an_empty_language_is_named(written: str) -> None:
    with pytest.raises(ConfigError) as info:  # YAML reads `[x.csv:]` as [{x.csv: None}]: not "expected str"
        config.load("sample", [f"data.extra_files={written}"])
    assert str(info.value).startswith("data.extra_files: 'translated-train.csv:' names no language after the colon")
    assert config.load("sample", ["data.extra_files=[a.csv:es]"]).data.extra_files == ("a.csv:es",)


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
    for path in CONFIGS:  # bench-gpu names a CUDA device: its presence is checked where it runs
        cfg = config.load(path.stem, device=False)
        assert isinstance(cfg, Config), path
        assert config.load(str(path), device=False) == cfg


def test_every_config_is_in_the_docs_table_of_configs() -> None:
    text = (ROOT / "docs" / "configs.md").read_text(encoding="utf-8")
    table = text.split("## The configs", 1)[1].split("\n## ", 1)[0]
    assert sorted(re.findall(r"^\| `([\w.-]+)`", table, re.M)) == sorted(p.stem for p in CONFIGS)


def test_config_is_frozen() -> None:
    cfg = config.load("sample")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.name = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.epochs = 99  # type: ignore[misc]
    assert isinstance(cfg.train.folds, tuple)  # lists become tuples: nothing inside can change either


# ---------------------------------------------------------------- ranges, names, devices, YAML and ARGS

OUT_OF_RANGE = [
    ("train.micro_batch=-4", "train.micro_batch"),
    ("train.micro_batch=0", "train.micro_batch"),
    ("train.accumulation=-1", "train.accumulation"),
    ("train.max_grad_norm=-1", "train.max_grad_norm"),
    ("train.max_grad_norm=0", "train.max_grad_norm"),
    ("train.epochs=0", "train.epochs"),
    ("train.eval_batch=0", "train.eval_batch"),
    ("data.folds=1", "data.folds"),
    ("train.lr=0", "train.lr"),
    ("train.lr=-0.1", "train.lr"),
    ("train.lr=.nan", "train.lr"),
    ("train.lr=.inf", "train.lr"),
    ("model.dropout=1", "model.dropout"),
    ("model.dropout=-0.1", "model.dropout"),
    ("train.warmup=1.0", "train.warmup"),
    ("train.warmup=-0.5", "train.warmup"),
    ("data.english_negatives=-1", "data.english_negatives"),
    ("data.bias_rows=-3", "data.bias_rows"),
    ("model.max_length=7", "model.max_length"),
    ("train.save_every_steps=-1", "train.save_every_steps"),
    ("train.max_bad_steps=0", "train.max_bad_steps"),
    ("train.max_memory_gb=-2", "train.max_memory_gb"),
    ("train.weight_decay=-0.01", "train.weight_decay"),
    ("train.folds=[0,-2]", "train.folds"),
    ("kaggle.gpus=-1", "kaggle.gpus"),
    ("kaggle.timeout=-5", "kaggle.timeout"),
    ("kaggle.submit_timeout=-1", "kaggle.submit_timeout"),
    ("kaggle.working_gb=0", "kaggle.working_gb"),
    ("blend.step=0", "blend.step"),
    ("blend.step=0.7", "blend.step"),
    ("data.seed=-1", "data.seed"),  # numpy's seeds are 0 .. 2**32 - 1
    ("data.seed=99999999999", "data.seed"),
    ("train.seed=-1", "train.seed"),
    ("train.seed=4294967296", "train.seed"),
]


@pytest.mark.parametrize(("override", "key"), OUT_OF_RANGE)
def test_out_of_range_is_one_line_naming_key_and_range(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.load("sample", [override])
    message = str(info.value)
    assert message.startswith(f"{key}=") and "must be" in message, message
    assert "\n" not in message


def test_train_folds_beyond_data_folds_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"train.folds=\[0, 7\]: fold 7 does not exist with data.folds=5"):
        config.load("sample", ["train.folds=[0,", "7]"])  # make train ARGS="train.folds=[0, 7]"
    assert config.load("sample", ["train.folds=[0,7]", "data.folds=8"]).train.folds == (0, 7)


def test_range_edges_are_accepted() -> None:
    cfg = config.load(
        "sample",
        [
            "train.micro_batch=1",
            "train.accumulation=1",
            "data.folds=2",
            "model.dropout=0",
            "train.warmup=0",
            "data.english_negatives=0",
            "model.max_length=8",
            "train.weight_decay=0",
            "train.max_memory_gb=0",
        ],
    )
    assert cfg.data.folds == 2 and cfg.model.max_length == 8


@settings(max_examples=60, deadline=None)
@given(
    key=st.sampled_from([k for k, _, _ in schema.RANGES if k != "train.folds"]),
    value=st.one_of(st.integers(-(10**6), 10**6), st.floats(allow_nan=True, allow_infinity=True, width=32)),
)
def test_any_value_loads_in_range_or_fails_naming_the_key(key: str, value) -> None:
    """Every value either loads and satisfies its range, or is one ConfigError line naming the key."""
    raw = {float("inf"): ".inf", float("-inf"): "-.inf"}.get(value, ".nan" if value != value else repr(value))
    try:
        cfg = config.load("sample", [f"{key}={raw}"])
    except ConfigError as e:
        assert key in str(e) and "\n" not in str(e), str(e)
        return
    got = schema.value_of(cfg, key)
    ok = next(test for k, test, _ in schema.RANGES if k == key)
    assert ok(got), (key, got)


@pytest.mark.parametrize("name", ["", " ", ".", "..", "a/b", "../x", "/tmp/x", "a\\b", ".hidden", "x" * 101])
def test_unsafe_names_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="name="):
        config.load("sample", [f"name={name}"])


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("model.init_from", "nosuch/../x"),
        ("data.pseudo_from", "../teacher"),
        ("blend.name", ".."),
        ("blend.name", "/abs/path"),
        ("blend.name", "a/b"),
        ("blend.members", "[a,../models/x]"),
        ("name", "x" * 300),
    ],
)
def test_every_name_that_becomes_a_folder_is_checked_naming_its_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.load("sample", [f"{key}={value}"])
    message = str(info.value)
    assert message.startswith(f"{key}=") and "\n" not in message, message
    assert len(message) < 200  # a 300-character name is not repeated whole


def test_an_experiment_is_not_its_own_teacher() -> None:
    with pytest.raises(ConfigError, match="data.pseudo_from=x: an experiment cannot label its own training rows"):
        config.load("sample", ["name=x", "data.pseudo_from=x"])


def test_args_is_one_word_split_like_a_shell_and_never_run() -> None:
    """`make` passes ARGS as one word: it is split into overrides here, quotes kept, and nothing in it runs."""
    parser = config.parser("test")
    cfg = config.from_args(parser.parse_args(["--args", "name=x 'train.folds=[0, 1]' train.lr=3e-4"]))
    assert (cfg.name, cfg.train.folds, cfg.train.lr) == ("x", (0, 1), 3e-4)
    with pytest.raises(ConfigError, match="^name='x;touch"):  # the shell would have run `touch afile`
        config.from_args(parser.parse_args(["--args", "name=x;touch${IFS}afile"]))
    with pytest.raises(ConfigError, match="cannot split it"):
        config.from_args(parser.parse_args(["--args", "name='x"]))


def test_what_the_makefile_and_guarantees_md_say_of_a_shell_word_in_args_is_what_is_printed() -> None:
    """`ARGS='name=x;touch y'` (and `name=x;touch` alone): the errors the docs quote are the ones a stage prints."""
    root = Path(__file__).parents[1]
    guarantees = (root / "docs" / "guarantees.md").read_text()
    quoted = re.findall(r"ARGS='([^']+)'`(?:(?!ARGS=').)*?`error: ([^`]+)`", guarantees, flags=re.DOTALL)
    quoted += re.findall(r"ARGS='([^']+)': \"error: ([^\"]+)\"", (root / "Makefile").read_text())
    assert len(quoted) == 3, quoted
    parser = config.parser("test")
    for args, said in quoted:
        with pytest.raises(ConfigError) as info:
            config.from_args(parser.parse_args(["--args", args]))
        assert str(info.value).startswith(said), (args, said, str(info.value))


def test_device_must_exist(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"train.device='cuda': this machine has no CUDA device"):
        config.load("sample", ["train.device=cuda"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert config.load("sample", ["train.device=cuda:1"]).train.device == "cuda:1"
    with pytest.raises(ConfigError, match=r"has 2 CUDA device\(s\)"):
        config.load("sample", ["train.device=cuda:2"])
    for bad in ("gpu", "cuda:x", "meta"):
        with pytest.raises(ConfigError, match="train.device="):
            config.load("sample", [f"train.device={bad}"])
    assert config.load("sample", ["train.device=cpu"]).train.device == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # a config packed for another machine (make kernel) is not checked against this one's devices
    assert config.load("sample", ["train.device=cuda"], device=False).train.device == "cuda"


def test_list_with_spaces_split_by_the_shell_is_joined() -> None:
    # make train ARGS="train.folds=[0, 2]" reaches argv as two words
    assert config.load("sample", ["train.folds=[0,", "2]"]).train.folds == (0, 2)
    assert config.load("sample", ["train.folds=[0,", "1,", "2]", "train.epochs=1"]).train.epochs == 1
    with pytest.raises(ConfigError, match=r"override '7' is not key=value \(a list with spaces"):
        config.load("sample", ["train.epochs=1", "7"])
    with pytest.raises(ConfigError) as info:
        config.load("sample", ["train.folds=[0,"])
    assert str(info.value).startswith("train.folds=") and "\n" not in str(info.value)


def test_yaml_syntax_error_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ntrain:\n  epochs: [1\n  lr: 3\n")
    with pytest.raises(ConfigError) as info:
        config.load(str(bad))
    message = str(info.value)
    assert message.startswith(f"{bad}: not valid YAML") and "line" in message and "\n" not in message
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match=rf"{listed}: a config is a mapping"):
        config.load(str(listed))


def test_stage_prints_one_line_for_bad_settings(capsys) -> None:
    from pipeline import data

    assert data.main(["train.micro_batch=-4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: train.micro_batch=-4") and "\n" not in err
    assert f"(`{err.removeprefix('error: ')}`)" in (ROOT / "docs" / "configs.md").read_text()  # as the Rules quote it


def test_stage1_settings_are_checked_at_load_and_applied_under_its_name() -> None:
    for bad, key in (("train.lr=-1", "train.lr"), ("train.lrr=1", "train.lrr"), ("train.lr", "key=value")):
        with pytest.raises(ConfigError, match=rf"^model.init_args: .*{re.escape(key)}"):
            config.load("sample", ["model.init_from=warm", f"model.init_args=[{bad}]"])
    cfg = config.load("sample", ["model.init_from=warm", "model.init_args=[train.lr=5e-3,name=other]", "train.lr=1e-4"])
    s1 = config.stage1_config(cfg)
    # init_args apply to this config; the stage-1 run's name, fold and lineage are fixed after them
    assert (s1.name, s1.train.folds, s1.train.lr) == ("warm", (-1,), 5e-3)
    assert (s1.model.init_from, s1.model.init_args) == ("", ())
    assert s1.train.epochs == cfg.train.epochs and s1.data == cfg.data
    assert config.stage1_config(config.load("sample")) is None
