"""The competition's files: their names, and the extra translated training files a config adds.

Kaggle's competition folder holds jigsaw-toxic-comment-train.csv (English, six labels),
jigsaw-unintended-bias-train.csv (English, `toxic` a float), validation.csv (es, it, tr), test.csv
(es, fr, it, pt, ru, tr; the text column is `content`) and sample_submission.csv; test_labels.csv was
published after the competition closed. The pipeline reads only the files it needs (`needed_files`).
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pandas as pd

from pipeline import layout
from pipeline.config import Config
from pipeline.errors import DataError
from pipeline.inputs.csvfile import check_lang, read_csv

TRAIN = "jigsaw-toxic-comment-train.csv"
BIAS = "jigsaw-unintended-bias-train.csv"
VALID = "validation.csv"
TEST = "test.csv"
SUBMISSION = "sample_submission.csv"
TEST_LABELS = "test_labels.csv"  # id, toxic: the competition's test answers, published after it closed
REQUIRED = (TRAIN, VALID, TEST, SUBMISSION)


def needed_files(cfg: Config) -> tuple[str, ...]:
    """The competition files this config reads."""
    return REQUIRED + ((BIAS,) if cfg.data.bias_rows > 0 else ())


LANGS = ("ar", "de", "en", "es", "fr", "hi", "it", "ja", "nl", "pl", "pt", "ru", "tr", "zh")  # read from file names
_LANG_SUFFIX = re.compile(r"^(?P<name>.+):(?P<lang>[a-z]{2,3})$")


def split_extra(entry: str) -> tuple[str, str]:
    """`file.csv:es` -> ('file.csv', 'es'); `file.csv` -> ('file.csv', '')."""
    m = _LANG_SUFFIX.match(entry)
    return (m["name"], m["lang"]) if m else (entry, "")


def find_extra(cfg: Config, raw: Path, name: str) -> list[Path]:
    """An extra training file or glob pattern: a path, or a name in the raw folder or a downloaded dataset's
    folder. A pattern gives every file it matches, in name order; the first folder with a match wins."""
    folders = [Path("."), raw, *[layout.dataset_dir(cfg, ref) for ref in cfg.data.datasets]]
    for folder in folders:
        p = Path(name).expanduser()
        # the folder is taken literally (a temporary folder may hold `[`); only the name is a pattern
        pattern = str(p) if p.is_absolute() else str(Path(glob.escape(str(folder))) / p)
        found = sorted(Path(m) for m in glob.glob(pattern) if Path(m).is_file())
        if found:
            return found
    where = ", ".join(str(f) for f in folders)
    raise DataError(f"{name}: extra training file not found (data.extra_files; looked in {where})")


def extra_files(cfg: Config, raw: Path) -> list[tuple[Path, str]]:
    """Every (file, language given for it) that data.extra_files names; a file named twice counts once."""
    seen: dict[Path, str] = {}
    for entry in cfg.data.extra_files:
        name, lang = split_extra(entry)
        for path in find_extra(cfg, raw, name):
            seen.setdefault(path, lang)
    return list(seen.items())


def lang_from_name(path: Path) -> str:
    """The language a translated file's name states: jigsaw-toxic-comment-train-google-es-cleaned.csv -> es."""
    words = {w.lower() for w in re.split(r"[-_.\s]+", path.stem)}
    found = sorted(words & set(LANGS))
    if len(found) != 1:
        seen = f" (it names {', '.join(found)})" if found else ""
        raise DataError(
            f"{path}: no lang column and no single language in its name{seen}; "
            f"give it per file in data.extra_files, e.g. {path.name}:es"
        )
    return found[0]


def read_extra(path: Path, lang: str) -> pd.DataFrame:
    """comment_text, lang, toxic of an extra file; lang as given for it, else its lang column, else its name."""
    frame = read_csv(path, ["comment_text", "toxic"], labels=("toxic",), usecols=False)
    if lang:  # given for the file: it wins over a lang column
        frame["lang"] = lang
    elif "lang" not in frame.columns:
        frame["lang"] = lang_from_name(path)
    check_lang(frame, path)
    return frame[["comment_text", "lang", "toxic"]]
