"""Stage `make data`: acquire the competition's files, check them, build the fold table, cache tokens.

Reads   the source named by `data.source`: the built-in sample, a folder, or Kaggle.
Writes  input/<raw>/*.csv                  raw files as the source gives them (sample and kaggle; never edited)
        input/prepared/<name>/folds.csv    one row per comment: id, text, lang, toxic, source, fold (and
                                           pseudo_for with data.pseudo_from: see pipeline.inputs.pseudo)
        input/prepared/<name>/test.csv     id, text, lang
        input/prepared/<name>/data.json    summary, provenance and what the tables were made from, by content
        input/prepared/<name>/config.yaml  the resolved config
        input/prepared/<name>/tokenizer/   the tiny model's tokenizer; tokens.json: the cache it uses
        input/cache/<key>/                 token ids (see pipeline.inputs.tokens); caches no table uses are removed

Validation rows get folds 0..k-1 (stratified on language x label); rows used only for training get
fold -1. The same config and files give the same table, byte for byte. The tables, the tokenizer and
tokens.json are replaced together: an interrupted or failed run leaves the previous set as it was.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from pipeline import config as config_mod
from pipeline import experiments, files, layout, validity
from pipeline.errors import DataError, run_stage
from pipeline.files import atomic_dir, check_free_space, file_digest, read_json, write_csv, write_json
from pipeline.inputs import sample, tables, tokens
from pipeline.schema import Config

# ---------------------------------------------------------------- acquire


def acquire(cfg: Config, api=None) -> Path:
    """Make the raw files present and return their folder. A source that fails never falls back to another."""
    d = cfg.data
    raw = layout.raw_dir(cfg)
    if d.source == "sample":
        if not all((raw / f).exists() for f in sample.FILES):
            sample.write(raw, seed=0, scale=d.sample_scale)
    elif d.source == "kaggle":
        from pipeline.kaggle import client, downloads

        api = api or client.get_api()
        needed = layout.needed_files(cfg)
        if not all((raw / f).exists() for f in needed):
            # one file at a time, only those this config reads: the archive also holds large unused copies
            downloads.download_competition(d.competition, raw, api=api, files=needed)
        for ref in d.datasets:
            dest = layout.dataset_dir(cfg, ref)
            if not dest.exists():
                downloads.download_dataset(ref, dest, api=api)
    elif not raw.is_dir():
        raise DataError(f"{raw}: no such folder (data.dir)")
    required = layout.REQUIRED
    missing = [raw / f for f in required if not (raw / f).is_file()]
    if missing:
        raise DataError(f"{missing[0]}: {files.not_a_file(missing[0])} (the folder needs {', '.join(required)})")
    return raw


def up_to_date(cfg: Config) -> bool:
    """The prepared tables were made from these inputs, as they are now, by content (validity.current_meta)."""
    if not (layout.prepared_dir(cfg) / layout.DATA_JSON).exists():
        return False
    try:
        validity.current_meta(cfg)
    except DataError:
        return False
    return True


def prepare(cfg: Config, api=None, log=print, finish=None) -> dict:
    """Acquire, build and write the tables, unless the same inputs already made them. Returns data.json.

    finish(folder, table, test, meta), if given, completes the prepared folder (the tokenizer and token
    cache): on a rebuild it runs in the staging folder, before that replaces the old one, so an interrupted
    run leaves the previous table and tokenizer together.
    """
    raw = acquire(cfg, api=api)
    out = layout.prepared_dir(cfg)
    if up_to_date(cfg):
        log(f"data: {out}/folds.csv is up to date")
        if finish is not None:
            table, test, meta = tables.load_table(cfg)
            finish(out, table, test, meta)
            return meta
        return validity.current_meta(cfg)
    log(f"data: building the tables from {raw}")
    table, test = tables.build_tables(cfg, raw, tokens.length_counter(cfg))  # the split counts long comments
    for note in table.attrs.get(
        "notes", []
    ):  # held-out rows (and how long), language codes read otherwise, held_out without files
        log(f"data: {note}")
    # the frames in memory (text plus per-value overhead) bound the CSVs they become
    need = int(table.memory_usage(deep=True).sum() + test.memory_usage(deep=True).sum())
    check_free_space(out.parent, need, "the prepared tables")
    tok_dir = out / layout.TOKENIZER
    with atomic_dir(out) as tmp:
        if tok_dir.exists():  # a trained tokenizer is kept; pipeline.tokens retrains it if the texts changed
            shutil.copytree(tok_dir, tmp / layout.TOKENIZER)  # a copy: an interrupted run keeps the old one in place
        write_csv(tmp / layout.TABLE, table)
        write_csv(tmp / layout.TEST_TABLE, test)
        meta = {
            "raw": str(raw.resolve()),
            "signature": validity.input_signature(cfg, raw),
            "table_digest": file_digest(tmp / layout.TABLE),
            "test_digest": file_digest(tmp / layout.TEST_TABLE),
            "folds_digest": tables.folds_digest(table),  # model.init_folds: the same folds, pseudo rows apart
            "summary": tables.table_summary(table, test),
        }
        write_json(tmp / layout.DATA_JSON, meta)
        config_mod.save(cfg, tmp / layout.PREPARED_CONFIG)
        if finish is not None:
            finish(tmp, table, test, meta)
    return meta


def prune_caches(cfg: Config) -> list[Path]:
    """Remove the token caches that no prepared folder's tokens.json points at; returns what went.

    Staging folders (.<name>.tmp-<pid>) of a `make data` running for another experiment count too (those of a
    killed one are removed first), and folders being written (hidden names) are never touched, nor any folder that
    is not a token cache (tokens.is_cache).
    """
    root = layout.cache_root(cfg)
    prepared = layout.prepared_root(cfg)
    files.remove_dead_temporaries(prepared)  # the staging folder of a killed `make data` holds no cache in use
    used = set()
    names = (f"*/{layout.TOKENS_POINTER}", f".*/{layout.TOKENS_POINTER}")
    pointers = [p for name in names for p in prepared.glob(name)] if prepared.is_dir() else []
    for pointer in pointers:
        try:
            used.add(read_json(pointer)["key"])
        except (OSError, ValueError, KeyError):
            return []  # a pointer that cannot be read: keep everything rather than guess
    gone = []
    for folder in sorted(root.iterdir()) if root.is_dir() else ():
        # only a token cache: input_dir may be a folder of the user's, whose cache/ holds folders of theirs
        if folder.is_dir() and folder.name not in used and tokens.is_cache(folder):
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
    experiments.preflight(cfg, "data")
    tokens.check_max_length(cfg)
    cache: dict = {}

    def finish(folder: Path, table, test, meta: dict) -> None:
        cache.update(tokens.build(cfg, folder, table, test, meta))

    with experiments.experiment_lock(cfg, "data"):
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
