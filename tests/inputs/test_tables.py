"""The fold table (pipeline.inputs.tables): folds stratified on language and label, seeded and identical across
builds, the English and bias rows, texts that survive the table, a fold with one class, reading it back; and
the extra translated files: found by pattern, their language read from the name, and one line for a file
whose language cannot be told."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import data, layout, validity
from pipeline.errors import DataError
from pipeline.files import read_json, write_json
from pipeline.inputs import lengths, sample, tables, texts, tokens
from tests.helpers import E5, SCALE, SHARED, make_cfg, turkish_upper

LANGS_TEST = {"es", "fr", "it", "pt", "ru", "tr"}


def quiet(*_args) -> None:
    pass


def build(tmp_path: Path, *overrides: str) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    cfg = make_cfg(tmp_path, *overrides)
    data.prepare(cfg, log=quiet)
    return tables.load_table(cfg)


def fold_counts(table: pd.DataFrame) -> pd.DataFrame:
    """Rows per (fold) x (lang, toxic) among the validation rows."""
    valid = table[table["fold"] >= 0]
    return valid.groupby(["fold", "lang", "toxic"]).size().unstack(["lang", "toxic"], fill_value=0)


# ---------------------------------------------------------------- folds


def test_assign_folds_disjoint_covering_balanced() -> None:
    strata = pd.Series(["es_0"] * 50 + ["es_1"] * 11 + ["it_0"] * 43 + ["it_1"] * 17 + ["tr_0"] * 29)
    folds = tables.assign_folds(strata, 5, seed=3)
    assert folds.shape == (len(strata),)
    assert set(folds.tolist()) == set(range(5))  # every row in exactly one fold, none left at -1
    members = [set(np.flatnonzero(folds == k)) for k in range(5)]
    assert sum(len(m) for m in members) == len(strata)
    assert set().union(*members) == set(range(len(strata)))
    for s in strata.unique():  # stratified: each stratum spread evenly, to within one row
        per_fold = np.bincount(folds[(strata == s).to_numpy()], minlength=5)
        assert per_fold.max() - per_fold.min() <= 1, s


def test_assign_folds_seeded() -> None:
    strata = pd.Series(["a"] * 40 + ["b"] * 20)
    first = tables.assign_folds(strata, 4, seed=1)
    assert np.array_equal(first, tables.assign_folds(strata, 4, seed=1))
    assert not np.array_equal(first, tables.assign_folds(strata, 4, seed=2))


def test_table_folds_stratified_on_language_and_label(tmp_path: Path) -> None:
    table, _, meta = build(tmp_path)
    valid = table[table["source"] == "validation"]
    assert (table.loc[table["source"] != "validation", "fold"] == -1).all()  # training-only rows
    assert set(valid["fold"]) == set(range(5))
    counts = fold_counts(table)
    assert counts.shape[1] == 6  # es/it/tr x 0/1
    assert ((counts.max() - counts.min()) <= 1).all(), counts
    assert meta["summary"]["folds"] == {str(k): int(v) for k, v in table["fold"].value_counts().items()}  # JSON keys


def test_folds_csv_identical_across_fresh_builds(tmp_path: Path) -> None:
    paths = []
    for sub in ("a", "b"):
        cfg = make_cfg(tmp_path / sub, "data.english_negatives=60")
        data.prepare(cfg, log=quiet)
        paths.append(layout.prepared_dir(cfg))
    for name in ("folds.csv", "test.csv"):
        assert (paths[0] / name).read_bytes() == (paths[1] / name).read_bytes(), name
    other = make_cfg(tmp_path / "c", "data.english_negatives=60", "data.seed=7")
    data.prepare(other, log=quiet)
    assert (layout.prepared_dir(other) / "folds.csv").read_bytes() != (paths[0] / "folds.csv").read_bytes()


def test_english_negatives_seeded(tmp_path: Path) -> None:
    raw = pd.DataFrame(sample.make_frames(0, SCALE)[layout.TRAIN])
    n_toxic = int((raw["toxic"] == 1).sum())
    assert len(raw) - n_toxic > 60  # more clean rows than we keep

    def english(sub: str, *overrides: str) -> pd.DataFrame:
        table, _, _ = build(tmp_path / sub, "data.english_negatives=60", *overrides)
        return table[table["source"] == "jigsaw-toxic-comment-train"]

    a, b, c = english("a"), english("b"), english("c", "data.seed=7")
    assert int(a["toxic"].sum()) == n_toxic  # every toxic row is kept
    assert int((a["toxic"] == 0).sum()) == 60
    assert list(a["id"]) == list(b["id"])  # same seed, same sample
    assert set(a.loc[a["toxic"] == 0, "id"]) != set(c.loc[c["toxic"] == 0, "id"])
    assert set(a.loc[a["toxic"] == 1, "id"]) == set(c.loc[c["toxic"] == 1, "id"])
    assert (a["lang"] == "en").all()


def test_english_rows_keeps_file_order() -> None:
    frame = pd.DataFrame({"id": list("abcdefgh"), "toxic": [0.0, 1, 0, 0, 1, 0, 0, 0]})
    rows = tables.english_rows(frame, negatives=2, seed=0)
    assert list(rows.index) == sorted(rows.index)
    assert {"b", "e"} <= set(rows["id"]) and len(rows) == 4
    assert len(tables.english_rows(frame, negatives=100, seed=0)) == 8  # more than available: all of them


def test_bias_rows_become_hard_labels(tmp_path: Path) -> None:
    table, _, _ = build(tmp_path, "data.bias_rows=50")
    bias = table[table["source"] == "jigsaw-unintended-bias-train"]
    assert len(bias) == 50
    assert set(bias["toxic"]) <= {0, 1} and bias["toxic"].sum() > 0


def test_soft_labels_keep_the_training_rows_fractions_and_round_the_scored_ones(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, "data.bias_rows=50", "data.soft_labels=true")
    notes = []
    data.prepare(cfg, log=notes.append)
    table, _, _ = tables.load_table(cfg)
    bias = table[table["source"] == "jigsaw-unintended-bias-train"]
    fractional = ~bias["toxic"].isin([0, 1])
    assert fractional.sum() > 0 and ((bias["toxic"] >= 0) & (bias["toxic"] <= 1)).all()
    assert set(table.loc[table["fold"] >= 0, "toxic"]) <= {0, 1}  # what the AUC scores: 0 or 1
    said = [n for n in map(str, notes) if "soft labels kept on training-only rows" in n]
    assert said and f"jigsaw-unintended-bias-train {int(fractional.sum()):,}" in said[0]


def test_sample_texts_survive_the_table(tmp_path: Path) -> None:
    table, test, meta = build(tmp_path)
    frames = sample.make_frames(0, SCALE)
    valid = table[table["source"] == "validation"].set_index("id")
    raw = frames["validation.csv"].set_index(frames["validation.csv"]["id"].astype(str))
    assert valid["text"].to_dict() == raw["comment_text"].to_dict()  # quotes and newlines included
    assert any("\n" in t for t in valid["text"]) and any('"' in t for t in valid["text"])
    assert list(test["text"]) == list(frames["test.csv"]["content"])
    assert set(test["lang"]) == LANGS_TEST and len(test) == meta["summary"]["test_rows"]


# ---------------------------------------------------------------- fold classes


def test_fold_with_one_class_is_refused(tmp_path: Path, raw_sample: Path) -> None:
    valid = pd.read_csv(raw_sample / layout.VALID, dtype=str, keep_default_na=False)
    toxic = valid.index[valid["toxic"] == "1"]
    valid.loc[toxic[3:], "toxic"] = "0"  # 3 toxic rows cannot reach 5 folds
    valid.to_csv(raw_sample / layout.VALID, index=False)
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    with pytest.raises(DataError) as info:
        data.prepare(cfg, log=quiet)
    message = str(info.value)
    assert message.startswith(str(raw_sample / layout.VALID)) and "\n" not in message
    assert "all non-toxic" in message and "3 of 180 validation rows are toxic" in message
    assert "data.folds=3 or fewer" in message
    assert not layout.prepared_dir(cfg).exists()
    data.prepare(make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}", "data.folds=3"), log=quiet)


@pytest.mark.parametrize("k", [100, 200])  # fewer than a class's rows; more than the rows
def test_more_folds_than_the_rows_allow_is_one_line_naming_the_most(tmp_path: Path, raw_sample: Path, k: int) -> None:
    valid = pd.read_csv(raw_sample / layout.VALID, dtype=str, keep_default_na=False)
    most = min((valid["toxic"] == "1").sum(), (valid["toxic"] == "0").sum())
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}", f"data.folds={k}")
    with pytest.raises(DataError) as info:  # scikit-learn's "n_splits=100 cannot be greater ..." before
        data.prepare(cfg, log=quiet)
    message = str(info.value)
    assert message.startswith(str(raw_sample / layout.VALID)) and "\n" not in message
    assert f"cannot make data.folds={k} folds with both classes in each: set data.folds={most} or fewer" in message
    assert not layout.prepared_dir(cfg).exists()


# ---------------------------------------------------------------- reading the prepared tables


def test_load_table_refuses_other_data_settings(tmp_path: Path) -> None:
    data.prepare(make_cfg(tmp_path), log=quiet)
    with pytest.raises(DataError, match="other data settings"):
        tables.load_table(make_cfg(tmp_path, "data.seed=5"))
    with pytest.raises(DataError, match="no prepared data"):
        tables.load_table(make_cfg(tmp_path, "name=never-built"))


@pytest.mark.parametrize("field", ["raw", "table_digest"])
def test_a_data_json_without_a_field_its_readers_use_is_one_line(tmp_path: Path, field: str) -> None:
    """Valid JSON that lacks a field predict and the baseline read (`raw`: where sample_submission.csv is)."""
    cfg = make_cfg(tmp_path)
    data.prepare(cfg, log=quiet)
    path = layout.prepared_dir(cfg) / layout.DATA_JSON
    write_json(path, {k: v for k, v in read_json(path).items() if k != field})
    with pytest.raises(DataError, match="not written by `make data`; run `make data` again"):
        tables.load_table(cfg)


# ---------------------------------------------------------------- the extra translated files


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


def test_language_codes_in_other_case_or_with_spaces_are_read_as_one_and_said(tmp_path: Path, raw_sample: Path) -> None:
    """`ES` in validation.csv and `es ` in test.csv are the language es: read so, and `make data` says so, naming a
    row; otherwise the six-language OOF would silently lose es."""
    valid = pd.read_csv(raw_sample / layout.VALID, dtype=str, keep_default_na=False)
    es = valid.index[valid["lang"] == "es"]
    valid.loc[es[:3], "lang"] = "ES"
    valid.to_csv(raw_sample / layout.VALID, index=False)
    test = pd.read_csv(raw_sample / layout.TEST, dtype=str, keep_default_na=False)
    test.loc[test["lang"] == "es", "lang"] = "es "
    test.to_csv(raw_sample / layout.TEST, index=False)
    said = []
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    data.prepare(cfg, log=said.append)
    table, test_table, _ = tables.load_table(cfg)
    assert set(table.loc[table["fold"] >= 0, "lang"]) == {"es", "it", "tr"}
    assert "es" in set(test_table["lang"]) and "es " not in set(test_table["lang"])
    first = int(es[0]) + 1
    words = "data: validation.csv: 3 lang value(s) read in lower case without spaces ('ES' as 'es'; the first at"
    assert f"{words} data row {first})" in said
    assert any(line.startswith("data: test.csv: ") and "('es ' as 'es';" in line for line in said), said


def test_a_comment_longer_than_the_csv_modules_field_limit_is_read(tmp_path: Path, raw_sample: Path) -> None:
    """A 1 MB comment is valid CSV (the csv module's default limit is 128 KiB): read, byte for byte."""
    valid = pd.read_csv(raw_sample / layout.VALID, dtype=str, keep_default_na=False)
    long = "una frase muy larga, " * 50_000
    valid.loc[1, "comment_text"] = long
    valid.to_csv(raw_sample / layout.VALID, index=False)
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    data.prepare(cfg, log=lambda *_: None)
    table, _, _ = tables.load_table(cfg)
    assert len(long) > 1_000_000 and long in set(table["text"])
    import csv

    assert csv.field_size_limit() == 131072  # the module's limit is put back


def test_held_out_without_translated_files_says_it_holds_nothing(tmp_path: Path) -> None:
    said = []
    cfg = make_cfg(tmp_path, "data.held_out=0.3", "data.extra_files=[]")
    data.prepare(cfg, log=said.append)
    assert (
        "data: data.held_out=0.3 holds out nothing, as data.extra_files names no translated file: the test's fr, pt, "
        "ru get no OOF rows"
    ) in said


def test_a_training_file_of_no_rows_is_read_and_said(tmp_path: Path, raw_sample: Path) -> None:
    """A header-only translated file (a download cut short) adds nothing: `make data` says so, naming it."""
    path = raw_sample / "translated-train.csv"
    path.write_text(path.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    said = []
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    data.prepare(cfg, log=said.append)
    assert f"data: {path}: no rows (a header only): it adds no training rows" in said


# ---------------------------------------------------------------- validation.csv: copies, labels, not a training file


WELCOME = (
    "50x50px|left Vikipedi'ye hoş geldiniz, {name}! Katkılarınız için teşekkür ederiz. Yeni başlayanlar için "
    "rehber sayfasına göz atabilir, sorularınızı yardım masasına sorabilirsiniz. İyi çalışmalar dileriz."
)


def with_copies(raw: Path, copies: list[str]) -> pd.DataFrame:
    """validation.csv with `copies` appended as non-toxic Turkish rows; returns the new rows."""
    valid = pd.read_csv(raw / layout.VALID, dtype={"id": str}, keep_default_na=False)
    new = pd.DataFrame({"id": [f"copy{i}" for i in range(len(copies))], "comment_text": copies, "lang": "tr",
                        "toxic": 0})  # fmt: skip
    pd.concat([valid, new], ignore_index=True).to_csv(raw / layout.VALID, index=False)
    return new


def test_near_copies_in_validation_csv_share_one_fold_and_are_said(tmp_path: Path, raw_sample: Path) -> None:
    """A welcome template with a different user's name each time, and a comment pasted again in other case and
    punctuation: one group each, in one fold, so no fold trains on a copy of a row it scores."""
    names = ["Ahmet", "Mehmet", "Zeynep", "Deniz", "Ayşe", "Burak", "Elif", "Can", "Emre", "Selin"]
    pasted = "bu sayfa tamamen boş ve kaynak yok, lütfen düzeltelim arkadaşlar"
    with_copies(raw_sample, [WELCOME.format(name=n) for n in names] + [pasted, pasted.upper() + "!!!"])
    said = []
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    data.prepare(cfg, log=said.append)
    table, _, _ = tables.load_table(cfg)
    rows = table.set_index("id")
    welcome = rows.loc[[f"copy{i}" for i in range(10)]]
    assert welcome["fold"].nunique() == 1 and welcome["group"].nunique() == 1
    assert rows.loc["copy10", "fold"] == rows.loc["copy11", "fold"]
    assert rows.loc["copy10", "group"] == rows.loc["copy11", "group"] != welcome["group"].iloc[0]
    assert any("rows are near-copies of another of their language (character 3-5-gram cosine at least 0.9)" in s
               and "each kept in one fold" in s for s in said), said  # fmt: skip


def test_validation_csv_or_test_csv_as_a_training_file_is_refused(tmp_path: Path, raw_sample: Path) -> None:
    for name in ("validation.csv", "test.csv"):
        cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}", f"data.extra_files=[{name}]")
        with pytest.raises(DataError, match=rf"^data.extra_files={name}: .*{name} is the competition's {name}, not a "
                                            r"training file"):  # fmt: skip
            data.prepare(cfg, log=quiet)


def test_training_rows_holding_a_validation_text_are_dropped_and_said(tmp_path: Path, raw_sample: Path) -> None:
    """A renamed copy of validation rows in a training file: dropped (case and punctuation set aside), and said."""
    valid = pd.read_csv(raw_sample / layout.VALID, dtype={"id": str}, keep_default_na=False)
    texts = [t for t in valid["comment_text"] if len(t) > 20][:3]
    extra = tmp_path / "more-es.csv"
    copies = [texts[0].upper(), texts[1] + " !!", texts[2], "una frase del todo nueva aquí"]
    write_translated(extra, copies, [0, 1, 0, 1])
    said = []
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}", f"data.extra_files=[{extra}]")
    data.prepare(cfg, log=said.append)
    table, _, _ = tables.load_table(cfg)
    kept = table.loc[table["source"] == "more-es", "text"].tolist()
    assert kept == ["una frase del todo nueva aquí"]
    assert ("data: 3 training rows hold the text of a validation row (3 of more-es): dropped before any row is "
            "held out, so that no fold trains on a comment it scores") in said  # fmt: skip


def test_a_turkish_validation_text_in_capitals_in_training_is_dropped(tmp_path: Path, raw_sample: Path) -> None:
    """Upper-cased as Turkish writes it (ı to I, i to İ), a validation row is still the same text."""
    valid = pd.read_csv(raw_sample / layout.VALID, dtype={"id": str}, keep_default_na=False)
    turkish = valid[valid["lang"] == "tr"]["comment_text"]
    text = next(t for t in turkish if "ı" in t and "i" in t and len(t) > 20)
    extra = tmp_path / "more-tr.csv"
    write_translated(extra, [turkish_upper(text), "tamamen yeni bir cümle burada"], [0, 1])
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}", f"data.extra_files=[{extra}]")
    data.prepare(cfg, log=quiet)
    table, _, _ = tables.load_table(cfg)
    assert table.loc[table["source"] == "more-tr", "text"].tolist() == ["tamamen yeni bir cümle burada"]


def test_held_out_rows_holding_a_validation_text_are_dropped_before_the_split(tmp_path: Path, raw_sample: Path) -> None:
    """A copy of validation.csv under another name, with most of its rows held out: none of them stays, held out
    or not, so no fold trains on (or scores) the twin of a row another fold scores."""
    valid = pd.read_csv(raw_sample / layout.VALID, dtype={"id": str}, keep_default_na=False)
    texts = [t for t in valid["comment_text"] if len(t) > 20]
    fresh = [f"una frase del todo nueva número {i}" for i in range(40)]
    extra = tmp_path / "copy-es.csv"
    write_translated(extra, texts + fresh, [i % 2 for i in range(len(texts) + len(fresh))])
    said = []
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}", f"data.extra_files=[{extra}]",
                   "data.held_out=0.9")  # fmt: skip
    data.prepare(cfg, log=said.append)
    table, _, _ = tables.load_table(cfg)
    kept = table[table["source"] == "copy-es"]
    assert sorted(kept["text"]) == sorted(fresh)
    assert (kept["fold"] >= 0).any()  # the held-out split still ran, on what is left
    assert (f"data: {len(texts):,} training rows hold the text of a validation row ({len(texts):,} of copy-es): "
            "dropped before any row is held out, so that no fold trains on a comment it scores") in said  # fmt: skip


def test_a_soft_label_in_validation_csv_is_said(tmp_path: Path, raw_sample: Path) -> None:
    valid = pd.read_csv(raw_sample / layout.VALID, dtype={"id": str}, keep_default_na=False)
    valid["toxic"] = valid["toxic"].astype(float)
    valid.loc[4, "toxic"] = 0.3
    valid.to_csv(raw_sample / layout.VALID, index=False)
    said = []
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    data.prepare(cfg, log=said.append)
    first = valid.loc[4, "id"]
    assert (f"data: {raw_sample / layout.VALID}: 1 labels are neither 0 nor 1 (the first: 0.3 at id {first}): "
            "rounded at 0.5, as the AUC scores 0 or 1") in said  # fmt: skip
    table, _, _ = tables.load_table(cfg)
    assert set(table["toxic"]) == {0, 1}


# ---------------------------------------------------------------- long comments held out (pipeline.inputs.lengths)


def words(batch: list[str]) -> np.ndarray:
    """A stand-in tokenizer's untruncated counts: a token a word, and <s> </s>."""
    return np.array([len(t.split()) + 2 for t in batch])


def long_translations(tmp_path: Path, raw: Path, *overrides: str):
    """Translated fr and pt files of 60 English comments (the competition's ids), the fr translations of 8 of them
    over lengths.LONG words, the pt ones all short; the config that holds out 10% of them."""
    ids, long = [f"src{i}" for i in range(60)], set(range(0, 60, 7)) - {56}
    fr = [("mot " * (lengths.LONG + 5) if i in long else "un court commentaire") + f" {i}" for i in range(60)]
    for lang, written in (("fr", fr), ("pt", [f"um comentário curto {i}" for i in range(60)])):
        pd.DataFrame({"id": ids, "comment_text": written, "toxic": [i % 2 for i in range(60)]}).to_csv(
            tmp_path / f"translated-{lang}.csv", index=False
        )
    files = f"[{tmp_path}/translated-fr.csv,{tmp_path}/translated-pt.csv]"
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw}", f"data.extra_files={files}", "data.held_out=0.1",
                   *overrides)  # fmt: skip
    return cfg, {ids[i] for i in long}


def test_every_source_comment_with_a_long_standin_translation_is_held_out_whole(tmp_path: Path, raw_sample: Path):
    cfg, long = long_translations(tmp_path, raw_sample)
    table, _ = tables.build_tables(cfg, raw_sample, words)
    extra = table[table["source"].str.startswith("translated-")].copy()
    extra["src"] = [f"src{int(i.rsplit('-', 1)[1])}" for i in extra["id"]]  # a row's number is its comment's
    of_long = extra[extra["src"].isin(long)]
    assert len(of_long) == 2 * len(long) and (of_long["fold"] >= 0).all()  # fr and pt: the group whole
    assert (of_long.groupby("src")["fold"].nunique() == 1).all()  # in one fold
    others = extra[~extra["src"].isin(long)]
    assert others.groupby("src")["fold"].first().ge(0).sum() == round(0.1 * (60 - len(long)))
    # switched off: the share alone, which leaves most long comments in training
    off, _ = tables.build_tables(replace(cfg, data=replace(cfg.data, hold_out_long=False)), raw_sample, words)
    assert (off.loc[of_long.index, "fold"] == -1).any()


def test_make_data_says_the_long_held_out_rows_of_each_standin_language(tmp_path: Path, raw_sample: Path,
                                                                      monkeypatch) -> None:  # fmt: skip
    cfg, long = long_translations(tmp_path, raw_sample)
    monkeypatch.setattr(tokens, "length_counter", lambda _cfg: words)
    said: list[str] = []
    data.prepare(cfg, log=said.append)
    n, floor = len(long), lengths.MIN_BUCKET_ROWS
    toxic = sum(int(s[3:]) % 2 for s in long)
    assert f"data: held out fr {n} over {lengths.LONG} tokens (toxic {toxic} / clean {n - toxic})" in said
    assert (f"data: warning: held out fr has under {floor} toxic and clean rows over {lengths.LONG} tokens: the "
            f"estimate merges its >{lengths.LONG} bucket for fr into a shorter one") in said  # fmt: skip
    assert f"data: held out pt 0 over {lengths.LONG} tokens (toxic 0 / clean 0)" in said


def test_the_tiny_model_holds_out_no_comment_for_its_length_and_says_so(tmp_path: Path, raw_sample: Path) -> None:
    cfg, long = long_translations(tmp_path, raw_sample)
    said: list[str] = []
    data.prepare(cfg, log=said.append)  # the sample's tiny model: its tokenizer is trained after the split
    assert any("data.hold_out_long: model.name=tiny's tokenizer is made from these tables" in s for s in said), said
    assert not any(s.startswith("data: held out fr") for s in said)


@pytest.mark.slow  # the real slice's stand-in rows tokenized by e5's tokenizer, grouped roughly: seconds
def test_real_slice_holds_out_every_long_standin_translation(tmp_path: Path) -> None:
    if not (SHARED.is_dir() and E5.is_dir()):
        pytest.skip("../shared/jigsaw-real or ../shared/pretrained is absent (a user's clone has no ../shared)")
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={SHARED}", "data.extra_files=[translated-train.csv]",
                   "data.english_negatives=500", "data.held_out=0.3", f"model.name={E5}")  # fmt: skip
    table, test = tables.build_tables(cfg, SHARED, tokens.length_counter(cfg))
    standin = lengths.standin_langs(test["lang"], table.loc[table["source"] == layout.VALID_SOURCE, "lang"])
    assert standin == ["fr", "pt", "ru"]
    rows = table[(table["source"] == "translated-train") & table["lang"].isin(standin)]
    long = rows[tokens.length_counter(cfg)(rows["text"].tolist()) > lengths.LONG]
    assert len(long) > 3 * lengths.MIN_BUCKET_ROWS and (long["fold"] >= 0).all()
    notes = table.attrs["notes"]
    for lang in standin:
        n = int((long["lang"] == lang).sum())
        assert any(s.startswith(f"held out {lang} {n} over {lengths.LONG} tokens") for s in notes), notes


def test_the_tables_signature_names_the_tokenizer_that_counted_the_long_comments(tmp_path: Path,
                                                                                 raw_sample: Path) -> None:  # fmt: skip
    """Another model's tokenizer counts other long comments: tables split by one are not current for another."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_text("{}")
    base = ("data.source=dir", f"data.dir={raw_sample}", "data.held_out=0.1")
    cfg = make_cfg(tmp_path, *base, f"model.name={model}")
    first = validity.input_signature(cfg)
    (model / "tokenizer.json").write_text('{"other": 1}')
    second = validity.input_signature(cfg)
    assert first["length_tokenizer"] != second["length_tokenizer"]
    assert "tokenizer" in validity.changed_inputs(first, second)
    assert "length_tokenizer" not in validity.input_signature(make_cfg(tmp_path, *base))  # tiny: nothing counted
    off = make_cfg(tmp_path, *base, f"model.name={model}", "data.hold_out_long=false")
    assert "length_tokenizer" not in validity.input_signature(off)


# ---------------------------------------------------------------- texts made alike (pipeline.inputs.texts)


def test_normalise_text_makes_every_source_s_texts_alike_and_says_what_it_changed(tmp_path: Path, raw_sample: Path):
    extra = tmp_path / "talk-fr.csv"
    write_translated(extra, ["== Titre ==\n\n\xa0:une réponse", "un texte\nsur deux lignes"], [0, 1])
    base = ("data.source=dir", f"data.dir={raw_sample}", f"data.extra_files=[{extra}]")
    cfg = make_cfg(tmp_path, *base, "data.normalise_text=true")
    table, test = tables.build_tables(cfg, raw_sample)
    assert sorted(table.loc[table["source"] == "talk-fr", "text"]) == ["Titre une réponse", "un texte sur deux lignes"]
    raw_test = pd.read_csv(raw_sample / layout.TEST, dtype=str, keep_default_na=False)
    assert test["text"].tolist() == [texts.normalise(t) for t in raw_test["content"]]
    assert not table["text"].str.contains("\n").any()
    said = table.attrs["notes"]
    assert ("talk-fr: texts normalised (data.normalise_text): rows with a newline 100.0% -> 0.0%, with talk-page "
            "layout 50.0% -> 0.0%") in said  # fmt: skip
    for source in ("jigsaw-toxic-comment-train", "validation", "test"):
        assert any(s.startswith(f"{source}: texts normalised") for s in said), said
    off, _ = tables.build_tables(make_cfg(tmp_path, *base), raw_sample)  # the default: the files' texts as given
    assert off["text"].str.contains("\n").any()
