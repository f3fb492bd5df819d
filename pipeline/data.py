"""Stage `make data`: acquire the competition's files, check them, build the fold table, cache tokens.

Reads   the source named by `data.source`: the built-in sample, a folder, or Kaggle.
Writes  input/<raw>/*.csv                  raw files as the source gives them (sample and kaggle; never edited)
        input/prepared/<name>/folds.csv    one row per comment: id, text, lang, toxic, source, fold (and
                                           pseudo_for with data.pseudo_from: see pipeline.pseudo)
        input/prepared/<name>/test.csv     id, text, lang
        input/prepared/<name>/data.json    summary, provenance and the signature that makes reruns free
        input/prepared/<name>/config.yaml  the resolved config
        input/prepared/<name>/tokenizer/   the tiny model's tokenizer; tokens.json: the cache it uses
        input/cache/<key>/                 token ids (see pipeline.tokens); caches no table uses are removed

Validation rows get folds 0..k-1 (stratified on language x label); rows used only for training get
fold -1. The same config and files give the same table, byte for byte. The tables, the tokenizer and
tokens.json are replaced together: an interrupted or failed run leaves the previous set as it was.
"""

from __future__ import annotations

import codecs
import glob
import re
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import StratifiedKFold

from pipeline import config as config_mod
from pipeline import io, pseudo, sample, tokens
from pipeline.config import Config
from pipeline.errors import run_stage
from pipeline.io import atomic_dir, check_free_space, file_digest, read_json, write_csv, write_json
from pipeline.tables import DataError, load_table, prepared_dir  # noqa: F401 - the later stages read them here

TRAIN = "jigsaw-toxic-comment-train.csv"
BIAS = "jigsaw-unintended-bias-train.csv"
VALID = "validation.csv"
TEST = "test.csv"
SUBMISSION = "sample_submission.csv"
REQUIRED = (TRAIN, VALID, TEST, SUBMISSION)
TABLE_COLUMNS = ["id", "text", "lang", "toxic", "source", "fold"]


# ---------------------------------------------------------------- where things live


def raw_dir(cfg: Config) -> Path:
    """Where the raw competition files are read from."""
    d = cfg.data
    if d.source == "dir":
        if not d.dir:
            raise DataError("data.source=dir needs data.dir=PATH (a folder with the competition's files)")
        return Path(d.dir).expanduser()
    if d.source == "kaggle":
        return Path(cfg.input_dir) / d.competition
    name = "sample" if d.sample_scale == 1.0 else f"sample-x{d.sample_scale:g}"
    return Path(cfg.input_dir) / name


# ---------------------------------------------------------------- acquire


def acquire(cfg: Config, api=None) -> Path:
    """Make the raw files present and return their folder. A source that fails never falls back to another."""
    d = cfg.data
    raw = raw_dir(cfg)
    if d.source == "sample":
        if not all((raw / f).exists() for f in sample.FILES):
            sample.write(raw, seed=0, scale=d.sample_scale)
    elif d.source == "kaggle":
        from pipeline import kaggle_io

        api = api or kaggle_io.get_api()
        if not all((raw / f).exists() for f in needed_files(cfg)):
            # one file at a time, only those this config reads: the archive also holds large unused copies
            kaggle_io.download_competition(d.competition, raw, api=api, files=needed_files(cfg))
        for slug in d.datasets:
            dest = Path(cfg.input_dir) / slug.split("/")[-1]
            if not dest.exists():
                kaggle_io.download_dataset(slug, dest, api=api)
    elif not raw.is_dir():
        raise DataError(f"{raw}: no such folder (data.dir)")
    missing = [f for f in REQUIRED if not (raw / f).is_file()]
    if missing:
        raise DataError(f"{raw / missing[0]}: missing file (the folder needs {', '.join(REQUIRED)})")
    return raw


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
    folders = [Path("."), raw, *[Path(cfg.input_dir) / slug.split("/")[-1] for slug in cfg.data.datasets]]
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


# ---------------------------------------------------------------- read and check


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


def read_csv(path: Path, columns: list[str], labels: tuple[str, ...] = (), usecols: bool = True) -> pd.DataFrame:
    """Read a CSV with a real parser, all as text; check columns and labels. Errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: missing file")
    nul = nul_byte(path)
    if nul >= 0:
        raise DataError(f"{path}: NUL byte at offset {nul} (UTF-16 or binary?); save it as UTF-8 text")
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
            frame = pd.concat([c[columns] if usecols else c for c in chunks], ignore_index=True)
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except pd.errors.ParserWarning:
        raise DataError(f"{path}: not a readable CSV (the first data row has more fields than the header)") from None
    except (pd.errors.ParserError, ValueError) as e:
        raise DataError(f"{path}: not a readable CSV ({str(e).strip().splitlines()[-1]})") from None
    for col in labels:
        values = pd.to_numeric(frame[col].str.strip(), errors="coerce")
        bad = values.isna() | (values < 0) | (values > 1)
        if bad.any():
            row = int(np.argmax(bad.to_numpy()))
            raise DataError(
                f"{path}: column {col} has {int(bad.sum())} value(s) that are not numbers in [0, 1] "
                f"(first at data row {row + 1}: {frame[col].iloc[row]!r})"
            )
        frame[col] = values
    return frame


def check_unique(frame: pd.DataFrame, col: str, path: Path) -> None:
    dup = frame[col].duplicated()
    if dup.any():
        raise DataError(f"{path}: {int(dup.sum())} duplicate {col}(s), e.g. {frame[col][dup].iloc[0]!r}")


def check_lang(frame: pd.DataFrame, path: Path) -> None:
    empty = frame["lang"].str.strip() == ""
    if empty.any():
        raise DataError(f"{path}: empty lang at data row {int(np.argmax(empty.to_numpy())) + 1}")


# ---------------------------------------------------------------- build the table


def assign_folds(strata: pd.Series, k: int, seed: int) -> np.ndarray:
    """Fold 0..k-1 for each row, from a seeded StratifiedKFold on the given strata."""
    folds = np.full(len(strata), -1, dtype=np.int64)
    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    for fold, (_, idx) in enumerate(splitter.split(np.zeros(len(strata)), strata.to_numpy())):
        folds[idx] = fold
    return folds


def english_rows(frame: pd.DataFrame, negatives: int, seed: int) -> pd.DataFrame:
    """All toxic rows plus a seeded sample of `negatives` clean ones, in file order."""
    toxic = frame["toxic"] >= 0.5
    clean = np.flatnonzero(~toxic.to_numpy())
    rng = np.random.default_rng(seed)
    keep = rng.choice(clean, size=min(negatives, len(clean)), replace=False)
    mask = toxic.to_numpy().copy()
    mask[keep] = True
    return frame[mask]


def build_tables(cfg: Config, raw: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(training table, test table) from the raw files."""
    d = cfg.data
    parts = []

    path = raw / TRAIN
    en = english_rows(read_csv(path, ["id", "comment_text", "toxic"], labels=("toxic",)), d.english_negatives, d.seed)
    parts.append(
        pd.DataFrame(
            {
                "id": en["id"],
                "text": en["comment_text"],
                "lang": "en",
                "toxic": en["toxic"],
                "source": path.stem,
                "fold": -1,
            }
        )
    )

    if d.bias_rows > 0:
        path = raw / BIAS
        bias = read_csv(path, ["id", "comment_text", "toxic"], labels=("toxic",))
        bias = bias.sample(n=min(d.bias_rows, len(bias)), random_state=d.seed).sort_index()
        parts.append(
            pd.DataFrame(
                {
                    "id": bias["id"],
                    "text": bias["comment_text"],
                    "lang": "en",
                    "toxic": bias["toxic"],
                    "source": path.stem,
                    "fold": -1,
                }
            )
        )

    for path, lang in extra_files(cfg, raw):
        extra = read_extra(path, lang)
        parts.append(
            pd.DataFrame(
                {
                    "id": [f"{path.stem}-{i}" for i in range(len(extra))],
                    "text": extra["comment_text"].to_numpy(),
                    "lang": extra["lang"].to_numpy(),
                    "toxic": extra["toxic"].to_numpy(),
                    "source": path.stem,
                    "fold": -1,
                }
            )
        )

    path = raw / VALID
    valid = read_csv(path, ["id", "comment_text", "lang", "toxic"], labels=("toxic",))
    check_unique(valid, "id", path)
    check_lang(valid, path)
    if len(valid) < d.folds:
        raise DataError(f"{path}: {len(valid)} rows cannot make {d.folds} folds")
    label = (valid["toxic"] >= 0.5).astype(int).astype(str)
    # a stratum smaller than k cannot be spread over k folds: then the label alone (each fold keeps both
    # classes), then the language alone
    for strata in (valid["lang"] + "_" + label, label, valid["lang"]):
        if strata.value_counts().min() >= d.folds:
            break
    parts.append(
        pd.DataFrame(
            {
                "id": valid["id"],
                "text": valid["comment_text"],
                "lang": valid["lang"],
                "toxic": valid["toxic"],
                "source": path.stem,
                "fold": assign_folds(strata, d.folds, d.seed),
            }
        )
    )

    table = pd.concat(parts, ignore_index=True)
    # soft labels (unintended bias) become hard ones: the metric is AUC on 0/1 targets
    table["toxic"] = (table["toxic"] >= 0.5).astype(np.int64)
    table["fold"] = table["fold"].astype(np.int64)
    check_fold_classes(table, d.folds, path)

    path = raw / TEST
    test = read_csv(path, ["id", "content", "lang"])
    check_unique(test, "id", path)
    check_lang(test, path)
    sub_path = raw / SUBMISSION
    sub = read_csv(sub_path, ["id", "toxic"], usecols=False)
    check_unique(sub, "id", sub_path)
    if set(sub["id"]) != set(test["id"]):
        n = len(set(sub["id"]) ^ set(test["id"]))
        raise DataError(f"{sub_path}: ids differ from {path.name}'s ({n} id(s) in only one of them)")
    test = pd.DataFrame({"id": test["id"], "text": test["content"], "lang": test["lang"]})
    return pseudo.add(cfg, table[TABLE_COLUMNS], test), test


def check_fold_classes(table: pd.DataFrame, k: int, valid_path: Path) -> None:
    """Each fold's validation rows hold both classes: a fold of one class has no AUC and picks no best epoch."""
    valid = table[table["fold"] >= 0]
    positives, total = int(valid["toxic"].sum()), len(valid)
    most = min(positives, total - positives)  # the most folds that can each get a row of the rarer class
    for fold in range(k):
        rows = valid[valid["fold"] == fold]
        if rows["toxic"].nunique() < 2:
            cls = "toxic" if int(rows["toxic"].iloc[0]) == 1 else "non-toxic"
            fix = f"set data.folds={most} or fewer" if most >= 2 else "add validation rows of both classes"
            raise DataError(
                f"{valid_path}: fold {fold} of {k} would hold {len(rows)} validation rows, all {cls} "
                f"({positives} of {total} validation rows are toxic); each fold needs both classes: {fix}"
            )


def summarize(table: pd.DataFrame, test: pd.DataFrame) -> dict:
    by = table.groupby(["source", "lang"]).agg(rows=("toxic", "size"), toxic=("toxic", "mean"))
    return {
        "rows": len(table),
        "test_rows": len(test),
        "toxic_rate": round(float(table["toxic"].mean()), 4),
        "by_source_lang": [
            {"source": s, "lang": lang, "rows": int(r.rows), "toxic_rate": round(float(r.toxic), 4)}
            for (s, lang), r in by.iterrows()
        ],
        # keys as text: data.json gives them back so, and a rerun returns what a build returned
        "folds": {str(int(k)): int(v) for k, v in table["fold"].value_counts().sort_index().items()},
        "test_langs": {str(k): int(v) for k, v in test["lang"].value_counts().sort_index().items()},
    }


def signature(cfg: Config, raw: Path) -> dict:
    """What the table depends on: the data settings and each raw file's size and modification time."""
    files = sorted(p for p in raw.iterdir() if p.suffix == ".csv")
    # a pattern's matches are listed: a new file that matches it rebuilds the table
    files += [p for p, _ in extra_files(cfg, raw) if p.parent.resolve() != raw.resolve()]
    return {
        "data": cfg.to_dict()["data"],
        "files": {str(p.resolve()): [p.stat().st_size, p.stat().st_mtime_ns] for p in files},
        "pseudo": pseudo.signature(cfg),  # a retrained teacher relabels the test rows
    }


def prepare(cfg: Config, api=None, log=print, finish=None) -> dict:
    """Acquire, build and write the tables, unless the same inputs already made them. Returns data.json.

    finish(folder, table, test, meta), if given, completes the prepared folder (the tokenizer and token
    cache): on a rebuild it runs in the staging folder, before that replaces the old one, so an interrupted
    run leaves the previous table and tokenizer together.
    """
    raw = acquire(cfg, api=api)
    out = prepared_dir(cfg)
    sig = signature(cfg, raw)
    meta_path = out / "data.json"
    if meta_path.exists() and (out / "folds.csv").exists():
        meta = read_json(meta_path)
        if meta.get("signature") == sig and file_digest(out / "folds.csv") == meta.get("table_digest"):
            log(f"data: {out}/folds.csv is up to date")
            if finish is not None:
                table, test, meta = load_table(cfg)
                finish(out, table, test, meta)
            return meta
    log(f"data: building the tables from {raw}")
    table, test = build_tables(cfg, raw)
    # the frames in memory (text plus per-value overhead) bound the CSVs they become
    need = int(table.memory_usage(deep=True).sum() + test.memory_usage(deep=True).sum())
    check_free_space(out.parent, need, "the prepared tables")
    tok_dir = out / "tokenizer"
    with atomic_dir(out) as tmp:
        if tok_dir.exists():  # a trained tokenizer is kept; pipeline.tokens retrains it if the texts changed
            shutil.copytree(tok_dir, tmp / "tokenizer")  # a copy: an interrupted run keeps the old one in place
        write_csv(tmp / "folds.csv", table)
        write_csv(tmp / "test.csv", test)
        meta = {
            "raw": str(raw.resolve()),
            "signature": sig,
            "table_digest": file_digest(tmp / "folds.csv"),
            "test_digest": file_digest(tmp / "test.csv"),
            "summary": summarize(table, test),
        }
        write_json(tmp / "data.json", meta)
        config_mod.save(cfg, tmp / "config.yaml")
        if finish is not None:
            finish(tmp, table, test, meta)
    return meta


def prune_caches(cfg: Config) -> list[Path]:
    """Remove the token caches that no prepared folder's tokens.json points at; returns what went.

    Staging folders (.<name>.tmp-<pid>) of a `make data` running for another experiment count too, and
    folders being written (hidden names) are never touched.
    """
    root = tokens.cache_root(cfg)
    prepared = Path(cfg.input_dir) / "prepared"
    used = set()
    pointers = [*prepared.glob("*/tokens.json"), *prepared.glob(".*/tokens.json")] if prepared.is_dir() else []
    for pointer in pointers:
        try:
            used.add(read_json(pointer)["key"])
        except (OSError, ValueError, KeyError):
            return []  # a pointer that cannot be read: keep everything rather than guess
    gone = []
    for folder in sorted(root.iterdir()) if root.is_dir() else ():
        if folder.is_dir() and not folder.name.startswith(".") and folder.name not in used:
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
    return gone


def _rows(n: int) -> str:
    return f"{n:,} row{'s' if n != 1 else ''}"


def report(meta: dict, cache: dict, seconds: float, pruned: int = 0) -> str:
    """The readable summary `make data` ends with: one line per source and language, folds, test, cache."""
    s = meta["summary"]
    lines = [f"data: {_rows(s['rows'])} for training and validation, {s['toxic_rate']:.1%} toxic"]
    width = max((len(f"{r['source']}/{r['lang']}") for r in s["by_source_lang"]), default=0)
    for r in s["by_source_lang"]:
        name = f"{r['source']}/{r['lang']}"
        lines.append(f"  {name:<{width}}  {r['rows']:>9,} rows  {r['toxic_rate']:6.1%} toxic")
    folds = s["folds"]
    train_only = folds.get("-1", 0)
    per_fold = ", ".join(f"{k}: {v:,}" for k, v in folds.items() if k != "-1")
    lines.append(f"  folds       validation rows per fold {{{per_fold}}}; {train_only:,} rows for training only")
    langs = ", ".join(f"{k} {v:,}" for k, v in s["test_langs"].items())
    lines.append(f"  test        {_rows(s['test_rows'])} ({langs})")
    lines.append(f"  tokens      cache {cache['key']} ({cache['status']}, {cache['tokens']:,} tokens)")
    if pruned:
        lines.append(f"  removed     {pruned} token cache(s) no prepared table uses")
    lines.append(f"  done in {seconds:.1f} s")
    return "\n".join(lines)


def run(cfg) -> None:
    """The data stage for a loaded config: the fold table, the tokenizer and the token cache."""
    start = time.perf_counter()
    io.preflight(cfg, "data")
    tokens.check_max_length(cfg)
    cache: dict = {}

    def finish(folder: Path, table, test, meta: dict) -> None:
        cache.update(tokens.build(cfg, folder, table, test, meta))

    with io.experiment_lock(cfg, "data"):
        meta = prepare(cfg, finish=finish)
        pruned = prune_caches(cfg)
    print(report(meta, cache, time.perf_counter() - start, len(pruned)))


def main(argv=None) -> int:
    args = config_mod.parser("Acquire the competition's files, build the fold table and the token cache.").parse_args(
        argv
    )
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
