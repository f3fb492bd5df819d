"""Every setting is declared once, in pipeline/schema/: the docs' key tables, the loader's choices and ranges and
the fingerprint's roles are read from there, and the fingerprints of folds trained before that stay the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline import config, configdoc, docpage, fingerprint, schema
from pipeline.errors import ConfigError
from pipeline.files import json_digest
from tests.helpers import ROOT

CONFIGS_MD = ROOT / "docs" / "configs.md"


def test_every_key_is_in_the_docs() -> None:
    text = CONFIGS_MD.read_text(encoding="utf-8")
    missing = [key for key, _, _ in schema.walk() if f"| `{key}` |" not in text]
    assert not missing, f"docs/configs.md lacks {missing}: run `.venv/bin/python -m pipeline.configdoc docs/configs.md`"


def test_the_docs_key_tables_are_the_schema_s() -> None:
    text = CONFIGS_MD.read_text(encoding="utf-8")
    assert text == configdoc.generated(text), "run `.venv/bin/python -m pipeline.configdoc docs/configs.md`"


def test_configdoc_without_its_page_says_how_to_call_it(capsys) -> None:
    assert configdoc.main([]) == 2
    assert "usage: python -m pipeline.configdoc docs/configs.md" in capsys.readouterr().err


def test_the_rules_name_every_key_with_a_fixed_set_of_values() -> None:
    text = CONFIGS_MD.read_text(encoding="utf-8")
    listed = text.split(configdoc.FIXED_BEGIN, 1)[1].split(configdoc.FIXED_END, 1)[0]
    assert listed.replace("`", "").split(", ") == list(schema.CHOICES)
    assert "model.pooling" in schema.CHOICES and "predict.calibration" in schema.CHOICES


def test_the_guarantees_name_every_setting_left_out_of_a_fingerprint() -> None:
    text = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    left_out = [f"{s}.{k}" for s in fingerprint.FOLD_SECTIONS for k in sorted(fingerprint.NOT_WEIGHTS[s])]
    assert [key for key in left_out if f"`{key}`" not in text] == []


# the roles of the settings that had one other than WEIGHTS when the fingerprints below were pinned; a setting
# added since may take any role (one that changed the fingerprints of existing folds would fail the pins below)
PINNED_ROLES = {
    **{f"train.{k}": schema.NEVER for k in ("folds", "device", "eval_batch", "save_every_steps", "max_bad_steps",
                                            "checkpointing", "log_every_steps", "tensorboard")},
    **{f"model.{k}": schema.NEVER for k in ("name", "path", "init_args")},
    "data.source": schema.NEVER, "data.dir": schema.NEVER,
    **{k: schema.LATER for k in ("train.eval_every_steps", "train.patience", "data.held_out", "data.group_encoder",
                                 "model.pooling")},
}  # fmt: skip


def test_the_roles_read_from_the_fields_are_those_folds_were_trained_with() -> None:
    assert {key: schema.of(key).role for key in PINNED_ROLES} == PINNED_ROLES
    assert fingerprint.LATER["train"]["patience"] == 0 and fingerprint.LATER["model"]["pooling"] == "mean"
    assert {"source", "dir"} <= fingerprint.NOT_TABLES
    assert fingerprint.RESUMABLE["train"][:2] == ("eval_every_steps", "patience")


# the digests these configs' folds carried before the settings were declared in pipeline/schema/
PINNED = {
    ("sample",): "734e778435b445c6",
    ("xlmr-large",): "fcec49d8fcdde523",
    ("sample", "train.patience=2", "train.eval_every_steps=5", "data.held_out=0.3", "model.pooling=cls",
     "data.group_encoder=enc"): "a25aed0e0ff0846c",
    ("sample", "train.device=cpu", "train.eval_batch=7", "train.log_every_steps=3", "train.tensorboard=true",
     "model.path=/x", "train.folds=[0]"): "734e778435b445c6",
}  # fmt: skip
PINNED_RESUME = {("sample", "train.patience=2", "train.eval_every_steps=5", "data.held_out=0.3", "model.pooling=cls",
                  "data.group_encoder=enc"): "2ebf23c98c59b2c6"}  # fmt: skip
PINNED_TABLES = {("sample",): "9e4a1bc88a20a7dc", ("xlmr-large",): "77aa736fba954267"}


def made(case: tuple[str, ...]) -> tuple[dict, config.Config]:
    cfg = config.load(case[0], list(case[1:]), device=False)
    model = {"tiny": True, "tokenizer": "tok", "head": fingerprint.HEAD}
    return fingerprint.made_from(cfg, "table-digest", model), cfg


@pytest.mark.parametrize("case", list(PINNED), ids=lambda c: " ".join(c))
def test_fingerprints_of_a_fixed_config_stay_byte_identical(case: tuple[str, ...]) -> None:
    assert fingerprint.fold_fingerprint(made(case)[0]) == PINNED[case]
    if case in PINNED_RESUME:
        assert fingerprint.resume_key(made(case)[0]) == PINNED_RESUME[case]
    if case in PINNED_TABLES:
        data = made(case)[1].to_dict()["data"]
        assert json_digest(fingerprint.later_left_out("data", data, fingerprint.NOT_TABLES)) == PINNED_TABLES[case]


def test_a_setting_that_means_something_only_under_another_counts_only_then() -> None:
    """`when`: a setting (a focal loss's gamma) that nothing reads unless another has a value (the loss is focal)."""
    gamma = schema.Setting("the focal loss's gamma", when=("train.optimizer", "adamw8bit"))
    assert fingerprint.applies(config.load("sample", ["train.optimizer=adamw8bit"], device=False), gamma)
    assert not fingerprint.applies(config.load("sample", device=False), gamma)
    assert fingerprint.applies(config.load("sample", device=False), schema.of("train.lr"))


def test_the_quick_table_is_the_every_key_rows_of_its_keys() -> None:
    """The keys that matter most are a choice of keys, not a second doc of them: each row is its key's row in
    "Every key", so a setting's doc is written once."""
    text = CONFIGS_MD.read_text(encoding="utf-8")
    assert configdoc.MOST_BEGIN in text, "docs/configs.md: the quick table is made by configdoc"
    quick = text.split(configdoc.MOST_BEGIN, 1)[1].split(configdoc.MOST_END, 1)[0].strip().splitlines()[2:]
    every = text.split(configdoc.BEGIN, 1)[1].splitlines()
    assert len(quick) == len(configdoc.MOST) and all(row in every for row in quick)
    assert {key for key, _, _ in schema.walk()} >= set(configdoc.MOST)


@pytest.mark.parametrize("page", ["configs.md", "kaggle.md", "training.md"])
def test_each_page_s_section_rows_are_the_schema_s(page: str) -> None:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    assert text == configdoc.generated(text), f"run `.venv/bin/python -m pipeline.configdoc docs/{page}`"


def test_no_page_documents_a_key_in_a_table_of_its_own() -> None:
    """A row of a key and its meaning (and default) is written by configdoc alone: a hand-written one beside it
    would be a second doc of the key, which a change of the setting leaves behind. A table comparing configs
    (docs/encoders.md's, a column a config) is not one."""
    keys = {key for key, _, _ in schema.walk()}
    twins = []
    for path in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        text = configdoc.SECTION.sub("", path.read_text(encoding="utf-8"))
        for begin, end in ((configdoc.BEGIN, configdoc.END), (configdoc.MOST_BEGIN, configdoc.MOST_END)):
            if begin in text:
                text = docpage.between(text, begin, end, "")
        for line in text.splitlines():
            cells = line.split("|")[1:-1]
            named = set(re.findall(r"`([a-z_.0-9]+)`", cells[0])) if cells else set()
            if len(cells) <= 3 and named & keys:
                twins.append(f"{path.name}: {line[:80]}")
    assert not twins, twins


def test_choices_and_ranges_come_from_the_fields() -> None:
    # every setting's choices are its field's own, whatever they are (test_config loads each one and refuses
    # another); the default is one of them, and the docs' key table names the others
    assert config.CHOICES is schema.CHOICES and "model.pooling" in schema.CHOICES
    for key, f, meta in schema.walk():
        assert schema.CHOICES.get(key, ()) == meta.choices, key
        assert not meta.choices or f.default in meta.choices, key
        assert all(f"`{c}`" in meta.doc for c in meta.choices if c != f.default), key
    keys = [key for key, _, _ in schema.walk()]
    assert len(keys) == len(set(keys)) and all(schema.of(k).doc for k in keys)
    assert {key for key, _, _ in schema.RANGES} <= set(keys)
    with pytest.raises(ConfigError, match="train.patience=-1 is out of range: must be an integer >= 0"):
        config.load("sample", ["train.patience=-1"], device=False)


def test_the_writer_rewrites_only_the_key_tables(tmp_path: Path) -> None:
    page = tmp_path / "configs.md"
    fixed = f"({configdoc.FIXED_BEGIN}`old.key`{configdoc.FIXED_END})"
    page.write_text(f"# Head\n\n{configdoc.BEGIN}\nold\n{configdoc.END}\n\nTail {fixed}\n")
    assert configdoc.main([str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Head\n\n") and "| `train.lr` |" in text
    assert text.endswith(
        f"{configdoc.END}\n\nTail ({configdoc.FIXED_BEGIN}{configdoc.fixed_keys()}{configdoc.FIXED_END})\n"
    )


def test_a_setting_with_fixed_values_names_each_of_them_its_default_too() -> None:
    """docs/configs.md's row of such a setting says what every value does, the default's included."""
    unnamed = [
        f"{key}: `{c}`" for key, _, meta in schema.walk() for c in meta.choices if c and f"`{c}`" not in meta.doc
    ]
    assert not unnamed
