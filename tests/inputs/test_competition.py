"""The competition's files and the extra translated ones (pipeline.inputs.competition): translated files found by
pattern, their language read from the name, and one line for a file whose language cannot be told."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from pipeline import data
from pipeline.errors import DataError
from pipeline.inputs import tables
from tests.helpers import make_cfg


def quiet(*_args) -> None:
    pass


def write_translated(path: Path, texts: list[str], toxic: list[int]) -> None:
    # as the popular translated-train datasets: id, comment_text, the six labels; no lang column
    pd.DataFrame(
        {"id": [f"t{i}" for i in range(len(texts))], "comment_text": texts, "toxic": toxic, "obscene": 0}
    ).to_csv(path, index=False)


def test_translated_files_by_pattern_with_language_from_the_name(tmp_path: Path, raw_sample: Path) -> None:
    extra = tmp_path / "translated"
    extra.mkdir()
    write_translated(extra / "jigsaw-toxic-comment-train-google-es-cleaned.csv", ["hola", "idiota"], [0, 1])
    write_translated(extra / "jigsaw-toxic-comment-train-google-fr-cleaned.csv", ["bonjour"], [0])
    write_translated(extra / "mixed.csv", ["ciao", "stupido"], [0, 1])
    cfg = make_cfg(
        tmp_path,
        "data.source=dir",
        f"data.dir={raw_sample}",
        f"data.extra_files=[{extra}/jigsaw-toxic-comment-train-google-*-cleaned.csv,{extra}/mixed.csv:it]",
    )
    data.prepare(cfg, log=quiet)
    table, _, _ = tables.load_table(cfg)
    got = {s: sorted(zip(t["text"], t["lang"], t["toxic"])) for s, t in table[table["fold"] == -1].groupby("source")}
    assert got["jigsaw-toxic-comment-train-google-es-cleaned"] == [("hola", "es", 0), ("idiota", "es", 1)]
    assert got["jigsaw-toxic-comment-train-google-fr-cleaned"] == [("bonjour", "fr", 0)]
    assert got["mixed"] == [("ciao", "it", 0), ("stupido", "it", 1)]
    # a new file matching the pattern rebuilds the table
    write_translated(extra / "jigsaw-toxic-comment-train-google-pt-cleaned.csv", ["obrigado"], [0])
    data.prepare(cfg, log=quiet)
    assert "pt" in set(tables.load_table(cfg)[0]["lang"])


def test_translated_file_without_a_language_is_one_line(tmp_path: Path, raw_sample: Path) -> None:
    write_translated(tmp_path / "translated-train-es-fr.csv", ["x"], [0])
    write_translated(tmp_path / "plain.csv", ["x"], [0])
    for name, says in (("translated-train-es-fr.csv", "(it names es, fr)"), ("plain.csv", "plain.csv:es")):
        cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}", f"data.extra_files=[{tmp_path / name}]")
        with pytest.raises(DataError) as info:
            data.prepare(cfg, log=quiet)
        assert str(info.value).startswith(str(tmp_path / name)) and says in str(info.value)
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}", "data.extra_files=[nothing-*.csv]")
    with pytest.raises(DataError, match=r"^nothing-\*\.csv: extra training file not found"):
        data.prepare(cfg, log=quiet)
