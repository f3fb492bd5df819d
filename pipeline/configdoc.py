"""docs/configs.md's "Every key" tables, its table of the keys that matter most (MOST: which keys, the rows the
same as theirs in "Every key") and its list of the keys with a fixed set of values, and a section's rows on another
page (docs/kaggle.md's `kaggle`, docs/training.md's `model.lora`), made from pipeline.schema's fields:
`python -m pipeline.configdoc PAGE` rewrites them (docs/configs.md, docs/kaggle.md, docs/training.md), and
tests/test_schema.py checks that each page holds what the fields say."""

from __future__ import annotations

import dataclasses
import json
import re

from pipeline.docpage import between, rewrite
from pipeline.schema import CHOICES, CONDITIONS, LATER, NEVER, Config, is_section, roles, walk

BEGIN, END = "<!-- keys: from pipeline/schema.py -->", "<!-- /keys -->"
FIXED_BEGIN, FIXED_END = "<!-- fixed: from pipeline/schema.py -->", "<!-- /fixed -->"  # inside a sentence
MOST_BEGIN, MOST_END = "<!-- most: from pipeline/schema.py -->", "<!-- /most -->"
# the keys a first run is most likely to set, in the order a reader meets them: the quick table near the page's top
MOST = (
    "data.source",
    "data.extra_files",
    "data.english_negatives",
    "model.name",
    "model.path",
    "model.lora.r",
    "train.precision",
    "train.micro_batch",
    "train.accumulation",
    "train.checkpointing",
    "train.layer_decay",
    "train.max_memory_gb",
    "train.optimizer",
    "train.loss",
    "train.save_every_steps",
    "model.trim_vocab",
    "train.folds",
    "model.init_from",
    "model.init_args",
    "train.training_only_rows",
    "data.pseudo_from",
    "data.pseudo_labels",
    "predict.ensemble",
)
TABLE_HEAD = ["| key | default | meaning |", "|---|---|---|"]
# a section's rows on the page that tells its story (kaggle.md's `kaggle`, training.md's `model.lora`): the same rows
# as in "Every key", so that no page holds a second doc of a key
SECTION = re.compile(r"(<!-- section ([a-z_.]+): from pipeline/schema.py -->)(.*?)(<!-- /section -->)", re.S)


def shown(value) -> str:
    """A default as docs/configs.md shows it."""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, tuple):
        return f"`{json.dumps(list(value))}`"
    return '`""`' if value == "" else f"`{value}`"


def class_doc(cls) -> str:
    doc = cls.__doc__ or ""
    return "" if doc.startswith(f"{cls.__name__}(") else " ".join(doc.split())  # dataclass's own: the signature


def while_(when: tuple) -> str:
    """A `when` as the docs say it: `key=value`, or `key > bound` / `key is set` (schema.CONDITIONS)."""
    key, wanted = when
    return f"{key} {wanted}" if isinstance(wanted, CONDITIONS) else f"{key}={wanted}"


def fingerprint_note(name: str) -> str:
    """Which keys of a section leave a result as it is, said under its table."""
    if name not in ("data", "model", "train"):
        return ""
    what = "the prepared tables' signature" if name == "data" else "a fold's fingerprint"
    never = [f"`{k}`" for k, meta in roles(name).items() if meta.role == NEVER]
    later = [f"`{k}`" for k, meta in roles(name).items() if meta.role == LATER]
    when = [f"`{k}` (while `{while_(meta.when)}`)" for k, meta in roles(name).items() if meta.when]
    parts = [f"Left out of {what}: {', '.join(never)}."] if never else []
    if later:
        parts.append(f"Part of it only away from their defaults (so folds made before they existed still count): "
                     f"{', '.join(later)}.")  # fmt: skip
    if when:
        parts.append(f"Part of it only while another setting has a value: {', '.join(when)}.")
    return " ".join(parts)


def key_row(key: str, f: dataclasses.Field) -> str:
    """A key's row, in "Every key" and in the quick table alike."""
    meta = f.metadata["setting"]
    allowed = f"; {meta.allowed}" if meta.allowed else ""  # choices are in the doc, in words
    return f"| `{key}` | {shown(f.default)} | {meta.doc}{allowed} |"


def key_table(title: str, cls, prefix: str) -> list[str]:
    lines = [f"### {title}", ""]
    if class_doc(cls):
        lines += [class_doc(cls), ""]
    lines += TABLE_HEAD
    lines += [key_row(f"{prefix}{f.name}", f) for f in dataclasses.fields(cls) if not is_section(f)]
    note = fingerprint_note(prefix.rstrip("."))
    return lines + (["", note] if note else []) + [""]


def key_tables() -> str:
    """The "Every key" tables of docs/configs.md: one a section, in declaration order, nested sections after theirs."""
    lines = key_table("Top level", Config, "")

    def sections(cls, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            if is_section(f):
                lines.extend(key_table(f"`{prefix}{f.name}`", f.default_factory, f"{prefix}{f.name}."))
                sections(f.default_factory, f"{prefix}{f.name}.")

    sections(Config, "")
    return "\n".join(lines).rstrip("\n") + "\n"


def with_key_tables(text: str) -> str:
    """A docs page's text with the part between BEGIN and END made the key tables."""
    return between(text, BEGIN, END, f"\n\n{key_tables()}\n") if BEGIN in text else text


def most_table() -> str:
    """The quick table: the rows of MOST's keys, in MOST's order."""
    fields = {key: f for key, f, _ in walk()}
    return "\n".join([*TABLE_HEAD, *(key_row(key, fields[key]) for key in MOST)]) + "\n"


def with_most_table(text: str) -> str:
    """A docs page's text with the part between MOST_BEGIN and MOST_END (where it has one) made most_table()."""
    return between(text, MOST_BEGIN, MOST_END, f"\n{most_table()}") if MOST_BEGIN in text else text


def section_table(name: str) -> str:
    """The rows of the keys directly in section `name` (`kaggle`, `model.lora`), as "Every key" has them."""
    rows = [key_row(key, f) for key, f, _ in walk() if key.rsplit(".", 1)[0] == name]
    if not rows:
        raise ValueError(f"no section {name!r} in pipeline/schema")
    return "\n".join([*TABLE_HEAD, *rows]) + "\n"


def with_section_tables(text: str) -> str:
    """A docs page's text with every section marker's part made that section's rows."""
    return SECTION.sub(lambda m: f"{m[1]}\n{section_table(m[2])}{m[4]}", text)


def fixed_keys() -> str:
    """Every key with a fixed set of values (its choices), as the rules paragraph lists them."""
    return ", ".join(f"`{key}`" for key in CHOICES)


def with_fixed_keys(text: str) -> str:
    """A docs page's text with the list between FIXED_BEGIN and FIXED_END (where it has one) made fixed_keys()."""
    return between(text, FIXED_BEGIN, FIXED_END, fixed_keys()) if FIXED_BEGIN in text else text


def generated(text: str) -> str:
    """A docs page's text with every part made from the fields rewritten."""
    return with_section_tables(with_most_table(with_fixed_keys(with_key_tables(text))))


def main(argv: list[str] | None = None) -> int:
    """`python -m pipeline.configdoc PAGE`: rewrite the parts of PAGE (docs/configs.md) made from the fields above."""
    return rewrite(argv, "python -m pipeline.configdoc docs/configs.md", generated)


if __name__ == "__main__":
    raise SystemExit(main())
