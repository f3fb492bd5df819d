"""Reading the competition's CSV files with a real parser, and the checks every file gets.

Comments hold newlines, quotes, any script and up to thousands of characters, so nothing here assumes
one line per row. A file that cannot be read exactly is refused with one line that names the file and
where in it the problem is (a byte offset, a data row), never read half-way.
"""

from __future__ import annotations

import codecs
import csv
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.errors import DataError
from pipeline.files import not_a_file


def not_utf8(path: Path) -> DataError:
    """The first byte of `path` that is not UTF-8, at its offset in the file (pandas' offset is in its buffer)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 20)
            pending = len(decoder.getstate()[0])  # bytes of a character split across blocks
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as e:
                at = offset - pending + e.start
                byte = e.object[e.start]
                return DataError(f"{path}: not UTF-8 text (byte {byte:#04x} at offset {at}); save it as UTF-8")
            if not block:
                return DataError(f"{path}: not UTF-8 text; save it as UTF-8")
            offset += len(block)


def nul_byte(path: Path) -> int:
    """Offset of the first NUL byte in `path`, or -1 (pandas' parser silently ends a field at one)."""
    offset = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            at = block.find(b"\x00")
            if at >= 0:
                return offset + at
            offset += len(block)
    return -1


def strict_problem(path: Path) -> DataError | None:
    """The first place where `path` is not well-formed CSV, by Python's csv module in strict mode; else None.

    pandas' parser is lenient: a stray quote that opens a field in the middle of a file makes it read on,
    across the line breaks, until the next quote, so two rows become one with no word. Strict parsing stops
    there instead (a character after a closing quote, a quoted field that never closes)."""
    limit = csv.field_size_limit()
    # a field may be as long as the file (the module's default stops at 128 KiB: a 1 MB comment is valid CSV)
    csv.field_size_limit(max(limit, path.stat().st_size + 1))
    try:
        with open(path, encoding="utf-8", newline="") as f:
            reader = csv.reader(f, strict=True)
            try:
                for _ in reader:
                    pass
            except csv.Error as e:
                return DataError(
                    f"{path}: not a readable CSV at line {reader.line_num} ({e}; a stray quote?); fix the file"
                )
            except UnicodeDecodeError:
                return not_utf8(path)
    finally:
        csv.field_size_limit(limit)
    return None


def check_bytes(path: Path) -> None:
    """The file exists, holds no NUL byte, is UTF-8 and is well-formed CSV."""
    if not path.is_file():
        raise DataError(f"{path}: {not_a_file(path)}")
    nul = nul_byte(path)
    if nul >= 0:
        raise DataError(f"{path}: NUL byte at offset {nul} (UTF-16 or binary?); save it as UTF-8 text")
    problem = strict_problem(path)
    if problem is not None:
        raise problem


def check_header(path: Path, columns: list[str]) -> None:
    """Every column the pipeline reads is in the header, once."""
    try:
        header = pd.read_csv(path, nrows=0, encoding="utf-8").columns.tolist()
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: empty file") from None
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except (pd.errors.ParserError, ValueError) as e:
        raise DataError(f"{path}: not a readable CSV ({str(e).strip().splitlines()[-1]})") from None
    missing = [c for c in columns if c not in header]
    if missing:
        raise DataError(f"{path}: missing column {missing[0]} (has: {', '.join(map(str, header))})")
    # pandas renames a repeated name (lang, lang.1) and would read the first; which one is meant is a guess
    names = pd.read_csv(path, nrows=1, header=None, dtype=str, keep_default_na=False, encoding="utf-8").iloc[0]
    twice = [c for c in [*columns, "lang"] if (names == c).sum() > 1]
    if twice:
        raise DataError(f"{path}: column {twice[0]} appears twice in the header; keep one")


def read_rows(path: Path, columns: list[str], usecols: bool) -> pd.DataFrame:
    """Every row, every column as text (only `columns` kept when `usecols`)."""
    try:
        # every column as text and no NA guessing: a comment that reads "null" stays "null". Every column is
        # parsed (usecols would let a row with an extra field, an unquoted comma, shift its values silently),
        # in chunks that keep only the needed ones; index_col=False and the warning as an error stop pandas
        # from turning a first row with an extra field into a silent index column
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            chunks = pd.read_csv(
                path, dtype=str, keep_default_na=False, index_col=False, encoding="utf-8", chunksize=1 << 18
            )
            return pd.concat([c[columns] if usecols else c for c in chunks], ignore_index=True)
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except pd.errors.ParserWarning:
        raise DataError(f"{path}: not a readable CSV (the first data row has more fields than the header)") from None
    except (pd.errors.ParserError, ValueError) as e:
        raise DataError(f"{path}: not a readable CSV ({str(e).strip().splitlines()[-1]})") from None


def label_values(frame: pd.DataFrame, col: str, path: Path, allowed: tuple[float, ...] = ()) -> pd.Series:
    """A label column as numbers in [0, 1] (and the `allowed` extra values); else one line naming the first."""
    values = pd.to_numeric(frame[col].str.strip(), errors="coerce")
    bad = (values.isna() | (values < 0) | (values > 1)) & ~values.isin(allowed)
    if bad.any():
        row = int(np.argmax(bad.to_numpy()))
        extra = "".join(f" or {v:g}" for v in allowed)
        raise DataError(
            f"{path}: column {col} has {int(bad.sum())} value(s) that are not numbers in [0, 1]{extra} "
            f"(first at data row {row + 1}: {frame[col].iloc[row]!r})"
        )
    return values


def check_ids(frame: pd.DataFrame, path: Path) -> None:
    """No id holds a line break: an id never has one, and a row that does is most often two rows merged."""
    broken = frame["id"].str.contains("[\r\n]", regex=True)
    if broken.any():
        row = int(np.argmax(broken.to_numpy()))
        raise DataError(
            f"{path}: the id at data row {row + 1} holds a line break ({frame['id'].iloc[row][:40]!r}): "
            "two rows merged by a stray quote? fix the file"
        )


def read_csv(path: Path, columns: list[str], labels: tuple[str, ...] = (), usecols: bool = True) -> pd.DataFrame:
    """Read a CSV with a real parser, all as text; check its bytes, columns, ids and labels. Errors name the
    file and where in it."""
    path = Path(path)
    check_bytes(path)
    check_header(path, columns)
    frame = read_rows(path, columns, usecols)
    if "id" in columns:
        check_ids(frame, path)
    for col in labels:
        frame[col] = label_values(frame, col, path)
    return frame


def check_unique(frame: pd.DataFrame, col: str, path: Path) -> None:
    dup = frame[col].duplicated()
    if dup.any():
        raise DataError(f"{path}: {int(dup.sum())} duplicate {col}(s), e.g. {frame[col][dup].iloc[0]!r}")


def check_lang(frame: pd.DataFrame, path: Path, notes: list[str] | None = None) -> None:
    """No empty language code; the others as the pipeline compares them, lower case without surrounding spaces
    (`ES`, `es ` -> `es`), changed in `frame`; what was changed is said in `notes`, naming the first row."""
    raw = frame["lang"]
    clean = raw.str.strip().str.lower()
    empty = clean == ""
    if empty.any():
        raise DataError(f"{path}: empty lang at data row {int(np.argmax(empty.to_numpy())) + 1}")
    changed = (raw != clean).to_numpy()
    if changed.any():
        frame["lang"] = clean
        pairs = sorted(set(zip(raw[changed], clean[changed])))
        said = ", ".join(f"{a!r} as {b!r}" for a, b in pairs[:3]) + (", ..." if len(pairs) > 3 else "")
        if notes is not None:
            notes.append(f"{path.name}: {int(changed.sum())} lang value(s) read in lower case without spaces "
                         f"({said}; the first at data row {int(np.argmax(changed)) + 1})")  # fmt: skip
