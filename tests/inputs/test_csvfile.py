"""Reading the competition's CSV files exactly, or refusing them in one line (pipeline.inputs.csvfile).

Bad input tried systematically: the data stage fed randomly damaged competition files (hypothesis). Each
damaged folder either parses into a sane table whose texts are the input's, byte for byte, or stops with a
DataError: one line that names the damaged file. Either way input/prepared/ holds no temporary files, and a
failed build leaves the previous table (or none) exactly as it was. Run with `-s` to see how many damaged
inputs were tried and what became of them. And each hand-made damage, with the words its error must use.
"""

from __future__ import annotations

import csv
import functools
import io
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import data, layout
from pipeline.errors import DataError
from pipeline.inputs import csvfile, sample, tables
from pipeline.layout import BIAS, TEST, TRAIN, VALID
from pipeline.layout import SAMPLE_SUBMISSION as SUBMISSION
from tests.helpers import digests, make_cfg
from tests.helpers.damage import DAMAGES, damage_missing_extra

SCALE = 0.05  # 75 English rows, 45 validation rows, 60 test rows
OUTCOMES: Counter[str] = Counter()
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,  # examples stay independent of earlier runs
)

TRANSLATED = "translated-train.csv"
FILES = (TRAIN, BIAS, VALID, TEST, SUBMISSION, TRANSLATED)
REQUIRED = {  # the columns the data stage reads from each file
    TRAIN: ("id", "comment_text", "toxic"),
    BIAS: ("id", "comment_text", "toxic"),
    VALID: ("id", "comment_text", "lang", "toxic"),
    TEST: ("id", "content", "lang"),
    SUBMISSION: ("id", "toxic"),
    TRANSLATED: ("comment_text", "lang", "toxic"),
}
TEXT = {TRAIN: "comment_text", BIAS: "comment_text", VALID: "comment_text", TEST: "content"}
TEXT[TRANSLATED] = "comment_text"
LABELLED = (TRAIN, BIAS, VALID, TRANSLATED)  # toxic must be a number in [0, 1]
UNIQUE_IDS = (VALID, TEST, SUBMISSION)
GOOD_LABELS = ["0", "1", "0.0", "1.0", " 1 ", "1e0", "0.4999", "0.5", "-0", "+1", ".5"]
BAD_LABELS = ["", " ", "nan", "NaN", "NA", "null", "None", "inf", "-inf", "-0.5", "1.5", "2", "yes", "0x1", "1,0"]


def quiet(*_args) -> None:
    pass


@functools.cache
def base_frames() -> dict[str, pd.DataFrame]:
    """The sample competition, every cell as text."""
    return {name: frame.astype(str) for name, frame in sample.make_frames(seed=0, scale=SCALE).items()}


def to_bytes(frame: pd.DataFrame, quoting: int, newline: str) -> bytes:
    """A CSV as a careful writer makes it: a field holding a carriage return is always quoted."""
    if quoting == csv.QUOTE_MINIMAL and frame.map(lambda v: "\r" in str(v)).to_numpy().any():
        quoting = csv.QUOTE_ALL  # Python's minimal quoting with a "\n" terminator leaves a lone "\r" bare
    return frame.to_csv(index=False, quoting=quoting, lineterminator=newline).encode("utf-8")


def parse(raw: bytes) -> list[dict[str, str]]:
    """The file as Python's own csv module reads it: the reference the pipeline's parse must agree with."""
    text = raw.decode("utf-8-sig", errors="replace")  # a stray byte in a column nobody reads is let be
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows:
        return []
    header = rows[0]
    return [{h: (r[i] if i < len(r) else "") for i, h in enumerate(header)} for r in rows[1:]]


# ---------------------------------------------------------------- damage


texts = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=60),
    st.sampled_from(["", " ", "\n", "\r", "\r\n", '"', '""', '"a"b', "a,b", ",", "null", "NA", "#x", "\ufeff"]),
    st.builds(lambda piece, n: piece * n, st.sampled_from(['ab "c", d\n', "é", "ж ", "x"]), st.integers(1000, 8000)),
)


@st.composite
def frame_damage(draw):
    """(file, kind, detail, edit): a change to one file's table, and the error it must cause (or None)."""
    name = draw(st.sampled_from(FILES))
    frame = base_frames()[name].copy()
    n = len(frame)
    row = draw(st.integers(0, n - 1))
    kinds = ["drop_column", "extra_column", "label", "empty_table", "lang"]
    kinds += ["text", "text", "text"] if name in TEXT else []
    kinds += ["duplicate_id", "id_text"] if "id" in frame.columns else []
    kind = draw(st.sampled_from(kinds))
    expect = None
    if kind == "drop_column":
        col = draw(st.sampled_from(list(frame.columns)))
        frame = frame.drop(columns=[col])
        if name == TRANSLATED and col == "lang":
            expect = "no lang column and no single language in its name"  # an extra file's name may say it
        elif col in REQUIRED[name]:
            expect = f"missing column {col}"
    elif kind == "extra_column":
        col = draw(st.one_of(st.sampled_from(list(frame.columns) + ["", "Unnamed: 0"]), texts.filter(lambda t: t)))
        values = draw(st.lists(texts, min_size=n, max_size=n))
        frame.insert(draw(st.integers(0, len(frame.columns))), col, values, allow_duplicates=True)
        if col in REQUIRED[name] or (col == "lang" and "lang" in base_frames()[name].columns):
            expect = "appears twice"  # which of the two is meant would be a guess
    elif kind == "text":
        for _ in range(draw(st.integers(1, 3))):
            frame.iloc[draw(st.integers(0, n - 1)), frame.columns.get_loc(TEXT[name])] = draw(texts)
    elif kind == "label":
        value = draw(st.sampled_from(GOOD_LABELS + BAD_LABELS))
        frame.loc[row, "toxic"] = value
        if name in LABELLED and value in BAD_LABELS:
            expect = "not numbers in [0, 1]"
    elif kind == "lang":
        if "lang" not in frame.columns:
            return frame_damage_none(name, frame)
        value = draw(st.sampled_from(["", " ", "\t"]))
        frame.loc[row, "lang"] = value
        expect = "empty lang"
    elif kind == "empty_table":
        frame = frame.iloc[:0]
        empty = {VALID: "0 validation rows (0 toxic) cannot make data.folds=5 folds", TEST: "no rows (a header only)"}
        expect = {**empty, SUBMISSION: "ids differ"}.get(name)
    elif kind == "duplicate_id":
        other = draw(st.integers(0, n - 1).filter(lambda i: i != row))
        frame.loc[other, "id"] = frame.loc[row, "id"]
        if name in UNIQUE_IDS:
            expect = "duplicate id"
    elif kind == "id_text":  # any text is an id, as long as the ids stay unique and test matches submission
        value = draw(texts)
        frame.loc[row, "id"] = value
        if ("\n" in value or "\r" in value) and name != TRANSLATED:  # whose ids are read: a line break is refused
            expect = "holds a line break"
        elif name in UNIQUE_IDS and (frame["id"] == value).sum() > 1:
            expect = "duplicate id"
        elif name in (TEST, SUBMISSION):
            expect = "ids differ"
    return name, kind, frame, expect


def frame_damage_none(name: str, frame: pd.DataFrame):
    return name, "none", frame, None


def truncate(raw: bytes, draw) -> bytes:
    last = raw.rstrip(b"\n").rfind(b"\n") + 1  # where the last row starts
    return raw[: draw(st.integers(last, len(raw) - 1))]


@st.composite
def byte_damage(draw):
    """(file, kind, bytes): damage below the CSV level."""
    name = draw(st.sampled_from(FILES))
    raw = to_bytes(base_frames()[name], csv.QUOTE_MINIMAL, "\n")
    kind = draw(
        st.sampled_from(
            [
                "empty",
                "blank",
                "header_only",
                "truncate",
                "truncate_anywhere",
                "latin1",
                "utf16",
                "bom",
                "latin1_byte",
                "nul",
                "stray_quote",
                "stray_comma",
                "crlf_file",
            ]
        )
    )
    if kind == "empty":
        raw = b""
    elif kind == "blank":
        raw = draw(st.sampled_from([b"\n", b"\n\n\n", b"   \n", b"\r\n"]))
    elif kind == "header_only":
        raw = raw[: raw.index(b"\n") + 1]
    elif kind == "truncate":
        raw = truncate(raw, draw)
    elif kind == "truncate_anywhere":
        raw = raw[: draw(st.integers(1, len(raw) - 1))]
    elif kind == "latin1":
        raw = raw.decode("utf-8").encode(draw(st.sampled_from(["latin-1", "cp1252"])), errors="replace")
    elif kind == "utf16":
        raw = raw.decode("utf-8").encode(draw(st.sampled_from(["utf-16", "utf-16-le"])))
    elif kind == "bom":
        raw = b"\xef\xbb\xbf" + raw
    else:
        at = draw(st.integers(raw.index(b"\n") + 1, len(raw)))
        piece = {
            "latin1_byte": b"\xe9",
            "nul": b"\x00",
            "stray_quote": b'"',
            "stray_comma": b",",
            "crlf_file": b"",
        }[kind]
        raw = raw[:at] + piece + raw[at:]
        if kind == "crlf_file":
            raw = raw.replace(b"\n", b"\r\n")  # inside quoted texts too: their newlines become \r\n
    return name, kind, raw


# ---------------------------------------------------------------- outcome checks


def make_raw(folder: Path, damaged: str, raw_bytes: bytes) -> Path:
    raw = folder / "raw"
    raw.mkdir()
    for name, frame in base_frames().items():
        (raw / name).write_bytes(raw_bytes if name == damaged else to_bytes(frame, csv.QUOTE_MINIMAL, "\n"))
    return raw


def longest_row(raw: bytes) -> int:
    """Fields in the longest data row, less those of the header."""
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8-sig", errors="replace"), newline="")))
    return max((len(r) for r in rows[1:]), default=0) - len(rows[0]) if rows else 0


def check_table(cfg, raw: Path) -> None:
    """The prepared table is the input's, row for row and byte for byte."""
    table, test, _ = tables.load_table(cfg)
    for name in (TRAIN, VALID, TEST, SUBMISSION, TRANSLATED):
        assert longest_row((raw / name).read_bytes()) <= 0, f"{name}: a row with an extra field was accepted"
    files = {name: parse((raw / name).read_bytes()) for name in FILES}
    valid = files[VALID]
    got = table[table["source"] == "validation"]
    assert sorted(got["id"]) == sorted(r["id"] for r in valid)  # every validation row once
    assert got["id"].is_unique
    assert set(got["fold"]) == set(range(cfg.data.folds))
    assert set(table.loc[table["source"] != "validation", "fold"]) <= {-1}
    assert set(table["toxic"]) <= {0, 1}
    by_id = {r["id"]: r for r in valid}
    for _, r in got.iterrows():
        want = by_id[r["id"]]
        assert r["text"] == want["comment_text"] and r["lang"] == want["lang"]
        assert r["toxic"] == int(float(want["toxic"]) >= 0.5)
    en = table[table["source"] == Path(TRAIN).stem]
    assert list(en["text"]) == [r["comment_text"] for r in files[TRAIN]]  # every English row kept, in order
    assert list(en["id"]) == [r["id"] for r in files[TRAIN]]
    tr = table[table["source"] == Path(TRANSLATED).stem]
    assert list(tr["text"]) == [r["comment_text"] for r in files[TRANSLATED]]
    assert list(tr["lang"]) == [r["lang"] for r in files[TRANSLATED]]
    bias = table[table["source"] == Path(BIAS).stem]
    assert set(bias["text"]) <= {r["comment_text"] for r in files[BIAS]}
    assert list(test["id"]) == [r["id"] for r in files[TEST]]
    assert list(test["text"]) == [r["content"] for r in files[TEST]]
    assert list(test["lang"]) == [r["lang"] for r in files[TEST]]


def attempt(folder: Path, damaged: str, raw_bytes: bytes, prebuilt: bool) -> tuple[str, str]:
    """Run the data stage on the damaged folder: ('ok', '') or ('error', message); checks what is on disk."""
    raw = make_raw(folder, damaged, raw_bytes)
    cfg = make_cfg(folder, "data.source=dir", f"data.dir={raw}", "data.bias_rows=5")
    prepared = layout.prepared_dir(cfg)
    before = None
    if prebuilt:  # a table from good files already there: a failed rebuild must leave it as it was
        good = folder / "good"
        shutil.copytree(raw, good)
        good.joinpath(damaged).write_bytes(to_bytes(base_frames()[damaged], csv.QUOTE_MINIMAL, "\n"))
        data.prepare(make_cfg(folder, "data.source=dir", f"data.dir={good}", "data.bias_rows=5"), log=lambda *a: None)
        before = digests(prepared)
    try:
        data.prepare(cfg, log=lambda *a: None)
        outcome = ("ok", "")
    except DataError as e:
        outcome = ("error", str(e))
    leftovers = [p for p in prepared.parent.rglob(".*")] if prepared.parent.exists() else []
    assert not leftovers, leftovers  # no temporary file or folder survives, success or not
    if outcome[0] == "ok":
        check_table(cfg, raw)
    else:
        message = outcome[1]
        assert "\n" not in message and "\r" not in message, message  # one line
        assert message.startswith(str(raw)), message  # the file at fault, first
        assert damaged in message, message  # the damaged file is the one named (or its partner's complaint names it)
        if before is None:
            assert not prepared.exists()
        else:
            assert digests(prepared) == before
    return outcome


@pytest.mark.slow  # many generated cases
@SETTINGS
@given(
    damage=frame_damage(),
    quoting=st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL]),
    newline=st.sampled_from(["\n", "\r\n"]),
    prebuilt=st.booleans(),
)
def test_damaged_tables_parse_exactly_or_fail_in_one_line(damage, quoting, newline, prebuilt) -> None:
    name, kind, frame, expect = damage
    raw_bytes = to_bytes(frame, quoting, newline)
    if "\x00" in frame.to_csv(index=False):
        expect = "NUL"  # a NUL byte would silently cut a field short in pandas' parser: refused
    with tempfile.TemporaryDirectory() as tmp:
        status, message = attempt(Path(tmp), name, raw_bytes, prebuilt)
    OUTCOMES[f"table {kind}: {status}"] += 1
    if expect is None:
        assert status == "ok", message
    else:
        assert status == "error" and expect in message, (expect, message)


@pytest.mark.slow  # many generated cases
@SETTINGS
@given(damage=byte_damage(), prebuilt=st.booleans())
def test_damaged_bytes_parse_exactly_or_fail_in_one_line(damage, prebuilt) -> None:
    name, kind, raw_bytes = damage
    with tempfile.TemporaryDirectory() as tmp:
        status, message = attempt(Path(tmp), name, raw_bytes, prebuilt)
    OUTCOMES[f"bytes {kind}: {status}"] += 1
    must_fail = {
        "empty": "empty file",
        "blank": "",
        "latin1": "not UTF-8",
        "nul": "NUL byte",
        "utf16": "",
    }
    if kind in must_fail and not (kind == "latin1" and raw_bytes.isascii()):
        assert status == "error" and must_fail[kind] in message, (kind, message)
    if kind in ("bom", "crlf_file") or (kind == "header_only" and name in (TRAIN, BIAS, TRANSLATED)):
        assert status == "ok", (kind, message)


# ---------------------------------------------------------------- hand-made damage


@pytest.mark.parametrize(("damage", "words"), DAMAGES, ids=[d.__name__.removeprefix("damage_") for d, _ in DAMAGES])
def test_bad_input_is_one_line_naming_the_file(tmp_path: Path, raw_sample: Path, damage, words: str) -> None:
    name = damage(raw_sample)
    cfg = make_cfg(tmp_path, "data.source=dir", f"data.dir={raw_sample}")
    with pytest.raises(DataError) as info:
        data.prepare(cfg, log=quiet)
    message = str(info.value)
    where = raw_sample / name if damage is not damage_missing_extra else Path(name)
    assert message.startswith(f"{where}: ")  # the file at fault, first
    assert words in message
    assert "\n" not in message
    assert not layout.prepared_dir(cfg).exists()  # nothing half-written
    prepared = Path(cfg.input_dir) / "prepared"
    assert not prepared.exists() or not any(prepared.iterdir())


def test_not_utf8_gives_the_offset_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "validation.csv"
    head = "id,comment_text,lang,toxic\n" + "0,çok güzel ılık,tr,0\n" * 60000  # past pandas' first buffer
    body = head.encode() + b"1,caf\xe9,es,0\n"
    path.write_bytes(body)
    with pytest.raises(DataError) as info:
        csvfile.read_csv(path, ["id", "comment_text", "lang", "toxic"])
    assert str(info.value).startswith(f"{path}: not UTF-8 text (byte 0xe9 at offset {len(head.encode()) + 5})")


# ---------------------------------------------------------------- the outcomes of the property tests


def test_report_outcomes() -> None:
    """Runs last in this file: how many damaged inputs were tried, and what each became (`-s` shows it)."""
    total = sum(OUTCOMES.values())
    print(f"\ndamaged inputs tried: {total}")
    for key, count in sorted(OUTCOMES.items()):
        print(f"  {key}: {count}")
    if total:  # absent when the property tests were deselected
        assert {k.split(": ")[1] for k in OUTCOMES} <= {"ok", "error"}


def test_a_stray_quote_that_merges_rows_stops_naming_the_line(tmp_path: Path) -> None:
    """pandas would read on from the stray quote to the next one, making two rows one; strict CSV stops."""
    path = tmp_path / "x.csv"
    path.write_text('id,comment_text,toxic\na,hello,0\nb,"stray,0\nc,world,1\nd,"quoted" text,0\n')
    with pytest.raises(DataError, match=r"x.csv: not a readable CSV at line 5 .*a stray quote\?"):
        csvfile.read_csv(path, ["id", "comment_text", "toxic"], labels=("toxic",))


def test_an_id_with_a_line_break_is_refused_naming_its_row(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text('id,comment_text,toxic\na,hello,0\n"b\nc",two rows?,1\n')
    with pytest.raises(DataError, match=r"x.csv: the id at data row 2 holds a line break"):
        csvfile.read_csv(path, ["id", "comment_text", "toxic"], labels=("toxic",))
