"""Damage done to a sample competition's files (a folder from the raw_sample fixture), each with the words of
the one-line error it must cause: the bad-input tests of `make data` and of pipeline.inputs.csvfile."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from pipeline import layout


def rewrite(path: Path, edit: Callable[[pd.DataFrame], pd.DataFrame]) -> None:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    edit(frame).to_csv(path, index=False)


def set_cell(col: str, row: int, value: str) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def edit(frame: pd.DataFrame) -> pd.DataFrame:
        frame.loc[row, col] = value
        return frame

    return edit


def damage_missing(raw: Path) -> str:
    (raw / "validation.csv").unlink()
    return "validation.csv"


def damage_folder(raw: Path) -> str:
    """A folder where validation.csv belongs (an archive unpacked in place): not a "missing" file."""
    (raw / "validation.csv").unlink()
    (raw / "validation.csv").mkdir()
    return "validation.csv"


def damage_column(raw: Path) -> str:
    rewrite(raw / "validation.csv", lambda f: f.drop(columns=["lang"]))
    return "validation.csv"


def damage_label_range(raw: Path) -> str:
    rewrite(raw / "validation.csv", set_cell("toxic", 5, "2"))
    return "validation.csv"


def damage_label_text(raw: Path) -> str:
    rewrite(raw / layout.TRAIN, set_cell("toxic", 3, "yes"))
    return layout.TRAIN


def damage_extra_label(raw: Path) -> str:
    rewrite(raw / "translated-train.csv", set_cell("toxic", 7, "-1"))
    return "translated-train.csv"


def damage_duplicate_test_id(raw: Path) -> str:
    rewrite(raw / "test.csv", set_cell("id", 1, "0"))
    return "test.csv"


def damage_submission_ids(raw: Path) -> str:
    rewrite(raw / "sample_submission.csv", set_cell("id", 0, "999999"))
    return "sample_submission.csv"


def damage_encoding(raw: Path) -> str:
    path = raw / "validation.csv"
    text = path.read_text(encoding="utf-8")
    assert "í" in text  # Spanish comments have accents
    path.write_bytes(text.encode("latin-1", errors="replace"))
    return "validation.csv"


def damage_empty(raw: Path) -> str:
    (raw / "test.csv").write_bytes(b"")
    return "test.csv"


def damage_unterminated_quote(raw: Path) -> str:
    with open(raw / "validation.csv", "a", encoding="utf-8") as f:
        f.write('99999,"a comment cut off in the middle of its')  # a download stopped mid-row
    return "validation.csv"


def damage_empty_lang(raw: Path) -> str:
    rewrite(raw / "test.csv", set_cell("lang", 2, ""))
    return "test.csv"


def damage_missing_extra(raw: Path) -> str:
    (raw / "translated-train.csv").unlink()
    return "translated-train.csv"


def damage_too_few_rows(raw: Path) -> str:
    rewrite(raw / "validation.csv", lambda f: f.head(3))
    return "validation.csv"


def damage_header_only_test(raw: Path) -> str:
    """A test set of no rows: a submission of no rows would follow, over a good one."""
    for name in ("test.csv", "sample_submission.csv"):
        rewrite(raw / name, lambda f: f.head(0))
    return "test.csv"


# each damage, and the words that say what is wrong
DAMAGES = [
    (damage_missing, "missing file"),
    (damage_folder, "a folder where a file belongs"),
    (damage_column, "missing column lang"),
    (damage_label_range, "not numbers in [0, 1] (first at data row 6: '2')"),
    (damage_label_text, "not numbers in [0, 1] (first at data row 4: 'yes')"),
    (damage_extra_label, "not numbers in [0, 1]"),
    (damage_duplicate_test_id, "1 duplicate id(s), e.g. '0'"),
    (damage_submission_ids, "ids differ from test.csv's"),
    (damage_encoding, "not UTF-8 text"),
    (damage_empty, "empty file"),
    (damage_unterminated_quote, "not a readable CSV"),
    (damage_empty_lang, "empty lang at data row 3"),
    (damage_missing_extra, "extra training file not found"),
    (damage_too_few_rows, "3 validation rows (0 toxic) cannot make data.folds=5 folds"),
    (damage_header_only_test, "no rows (a header only): a test set needs its rows"),
]
