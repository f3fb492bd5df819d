"""Where everything lives on disk, and whether a fold counts: the one owner of both.

    input/                              cfg.input_dir
      sample/, <competition>/           the raw files of data.source sample or kaggle (never edited);
                                        data.source=dir reads data.dir in place
      <dataset slug>/                   the files of data.datasets
      prepared/<name>/                  folds.csv, test.csv, data.json, config.yaml, tokenizer/, tokens.json
      cache/<key>/                      token ids and meta.json (pipeline.inputs.tokens)
      locks/<name>.lock                 one run per experiment
    models/                             cfg.models_dir
      <name>/                           pipeline.yaml, oof.csv, cv.json, cv.png, submissions.jsonl
      <name>/fold<k>/                   model.safetensors, tokenizer, pipeline.yaml, metrics.jsonl, oof.csv,
                                        test.csv, test.json, vocab_map.npy, resume.pt, done.json (last)
      <name>/fold-1/                    a stage-1 model: trained on the training-only rows, no OOF
      board.md, bench/
    submissions/                        <name>.csv, submission.csv

Every stage asks this module for a path; nothing else builds one. A fold counts for a config when its
done.json exists and carries the config's fingerprint (pipeline.fingerprint, over the inputs as they are
now) and the files the reader needs are there: `fold_status` is that rule, the one answer every stage
gets, and `usable_folds` applies it to an experiment's folders.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from pipeline import config as config_mod
from pipeline import files, fingerprint
from pipeline.config import Config, check_name
from pipeline.errors import DataError, PipelineError
from pipeline.files import read_json

STAGE1 = -1  # the fold number of a stage-1 model: trained on the training-only rows

# the files of a prepared folder (input/prepared/<name>/); the tokenizer and token pointer are replaced with them
TABLE, TEST_TABLE, DATA_JSON = "folds.csv", "test.csv", "data.json"
PREPARED_CONFIG = "config.yaml"
TOKENIZER = "tokenizer"  # the tiny model's tokenizer folder
TOKENS_POINTER = "tokens.json"  # {"key": ...}: the token cache input/cache/<key>/ these tables use
CACHE_META = "meta.json"  # in a token cache: key, sizes and digests of its arrays
# the files of a fold folder
DONE = "done.json"  # written last: the fold is complete
WEIGHTS = "model.safetensors"
OOF = "oof.csv"  # the fold's validation rows with their predictions
TEST_PREDS = "test.csv"  # the fold's test predictions (id, toxic)
TEST_KEY = "test.json"  # what the cached test predictions were made from
METRICS = "metrics.jsonl"
RESUME = "resume.pt"
RUN_CONFIG = "pipeline.yaml"  # the resolved config, beside the weights and in the experiment's folder
# the files of an experiment folder
CV_JSON, CV_PNG = "cv.json", "cv.png"
SUBMIT_RECORD = "submissions.jsonl"  # every `make submit` of the experiment, with its scores
VOCAB_MAP = "vocab_map.npy"  # beside a trimmed model's weights: old token id -> new
SUBMISSION = "submission.csv"  # the name Kaggle notebooks expect
BOARD = "board.md"


# ---------------------------------------------------------------- input/


def input_dir(cfg: Config) -> Path:
    return Path(cfg.input_dir)


def raw_dir(cfg: Config) -> Path:
    """Where the raw competition files are read from."""
    d = cfg.data
    if d.source == "dir":
        if not d.dir:
            raise DataError("data.source=dir needs data.dir=PATH (a folder with the competition's files)")
        return Path(d.dir).expanduser()
    if d.source == "kaggle":
        return input_dir(cfg) / d.competition
    return input_dir(cfg) / ("sample" if d.sample_scale == 1.0 else f"sample-x{d.sample_scale:g}")


def dataset_dir(cfg: Config, ref: str) -> Path:
    """Where the files of a dataset in data.datasets (owner/slug) are downloaded."""
    return input_dir(cfg) / ref.split("/")[-1]


def prepared_root(cfg: Config) -> Path:
    return input_dir(cfg) / "prepared"


def prepared_dir(cfg: Config, name: str | None = None) -> Path:
    # checked again here, not only when the config loads: `name=` made this input/prepared/ itself,
    # which `make data` replaces whole, with every other experiment's tables in it
    return prepared_root(cfg) / check_name(cfg.name if name is None else name)


def cache_root(cfg: Config) -> Path:
    return input_dir(cfg) / "cache"


def lock_path(cfg: Config) -> Path:
    return input_dir(cfg) / "locks" / f"{cfg.name}.lock"


# ---------------------------------------------------------------- models/ and submissions/


def models_root(cfg: Config) -> Path:
    return Path(cfg.models_dir)


def experiment_dir(cfg: Config, name: str | None = None) -> Path:
    """models/<name>/: the config's experiment, or another one (a blend member, a teacher, a stage-1 model)."""
    return models_root(cfg) / check_name(cfg.name if name is None else name)


def fold_name(fold: int) -> str:
    return f"fold{fold}"


def fold_dir(cfg: Config, fold: int, name: str | None = None) -> Path:
    return experiment_dir(cfg, name) / fold_name(fold)


def fold_index(folder: Path) -> int | None:
    """The fold number a folder's name gives (fold3 -> 3, fold-1 -> -1); None for any other name."""
    tail = folder.name[len("fold") :] if folder.name.startswith("fold") else ""
    digits = tail[1:] if tail.startswith("-") else tail
    return int(tail) if digits.isdigit() else None


def fold_dirs(exp: Path) -> dict[int, Path]:
    """Every fold folder of an experiment, by fold number (fold -1, a stage-1 model, first); complete or not."""
    found = {fold_index(p): p for p in exp.glob("fold*") if p.is_dir()}
    return {k: found[k] for k in sorted(k for k in found if k is not None)}


def done_dirs(exp: Path) -> dict[int, Path]:
    """The fold folders that hold a done.json, by fold number; nothing about whose settings made them."""
    return {k: p for k, p in fold_dirs(exp).items() if (p / DONE).is_file()}


def submission_path(cfg: Config, name: str | None = None) -> Path:
    """submissions/<name>.csv; `make submit` sends kaggle.submit_file instead when that is set."""
    return Path(cfg.submissions_dir) / f"{check_name(cfg.name if name is None else name)}.csv"


def submission_csv(cfg: Config) -> Path:
    return Path(cfg.submissions_dir) / SUBMISSION


def board_path(cfg: Config) -> Path:
    return models_root(cfg) / BOARD


def bench_dir(cfg: Config) -> Path:
    return models_root(cfg) / "bench"


# ---------------------------------------------------------------- what a fold is made from, as the inputs are now


def read_data_json(cfg: Config) -> dict:
    """input/prepared/<name>/data.json, or the error that says `make data`."""
    path = prepared_dir(cfg) / DATA_JSON
    if not path.exists():
        raise DataError(f"{path.parent}: no prepared data; run `make data CONFIG=...` with the same config first")
    return read_json(path)


def current_fingerprint(cfg: Config, meta: dict | None = None) -> str:
    """The fingerprint a fold of this config must carry, for the prepared data as it is now (data.json, the
    tiny model's tokenizer and the stage-1 model's own fingerprint)."""
    meta = read_data_json(cfg) if meta is None else meta
    tokenizer = prepared_dir(cfg) / TOKENIZER
    model = fingerprint.model_identity(cfg, tokenizer, init_digest(cfg))
    return fingerprint.fold_fingerprint(cfg, meta["table_digest"], model)


def init_dir(cfg: Config) -> Path | None:
    """The stage-1 fold `model.init_from` names, checked complete; None without init_from."""
    name = cfg.model.init_from
    if not name:
        return None
    if name == cfg.name:
        raise PipelineError(f"model.init_from={name}: an experiment cannot start from itself; name it differently")
    folder = fold_dir(cfg, STAGE1, name)
    why = fold_status(folder, needs=(WEIGHTS,))
    if why:
        raise PipelineError(
            f"model.init_from={name}: {folder} is not complete; make it first with "
            "`make stage1` (this run's CONFIG and ARGS)"
        )
    return folder


def init_digest(cfg: Config) -> str | None:
    """The fingerprint of the stage-1 model a fold starts from; None without model.init_from."""
    folder = init_dir(cfg)
    return None if folder is None else read_json(folder / DONE)["digest"]


# ---------------------------------------------------------------- whether a fold counts


def fold_status(folder: Path, digest: str | None = None, needs: tuple[str, ...] = ()) -> str:
    """'' when the fold at `folder` is complete (done.json and the files in `needs`) and, given a digest,
    made with it; else why it does not count."""
    if not (folder / DONE).is_file():
        return "not complete"
    if any(not (folder / name).is_file() for name in needs):
        return "not complete"
    if digest is not None and read_json(folder / DONE).get("digest") != digest:
        return "trained on other data or settings (retrain it with `make train`)"
    return ""


def is_complete(folder: Path, digest: str, needs: tuple[str, ...] = (WEIGHTS,)) -> bool:
    return not fold_status(folder, digest, needs)


def select_folds(exp: Path, digest: str, k: int) -> tuple[list[Path], dict[str, str]]:
    """(folds that count, in fold order; {fold name: why it is left out}), missing folds included."""
    # fold-1, a stage-1 model, has no OOF and no test predictions: it is not one of the k folds
    found = {fold: p for fold, p in fold_dirs(exp).items() if fold >= 0}
    use, left_out = [], {}
    for fold in sorted(set(found) | set(range(k))):
        if fold not in found:
            why = "not trained"
        elif fold >= k:
            why = f"not a fold of data.folds={k}"
        else:
            why = fold_status(found[fold], digest)
        if why:
            left_out[fold_name(fold)] = why
        else:
            use.append(found[fold])
    return use, left_out


def describe(left_out: dict[str, str]) -> str:
    """One line per reason: 'fold3, fold4: not a fold of data.folds=3'."""
    by_reason: dict[str, list[str]] = {}
    for fold, why in left_out.items():
        by_reason.setdefault(why, []).append(fold)
    return "; ".join(f"{', '.join(folds)}: {why}" for why, folds in by_reason.items())


def settings_differ(cfg: Config, name: str | None = None) -> str:
    """How the weight-changing settings differ from those models/<name>/pipeline.yaml was trained with."""
    saved = experiment_dir(cfg, name) / RUN_CONFIG
    return fingerprint.settings_differ(cfg, config_mod.load_file(saved)) if saved.exists() else ""


def usable_folds(cfg: Config, digest: str | None = None, what: str = "cv") -> list[Path]:
    """The complete folds made from the current inputs and settings; says which others it leaves out."""
    exp = experiment_dir(cfg)
    digest = digest or current_fingerprint(cfg)
    dirs, left_out = select_folds(exp, digest, cfg.data.folds)
    why = describe(left_out)
    if not dirs:
        hint = f" ({why})" if left_out else ""
        differ = settings_differ(cfg)
        if differ:  # most often: this stage was run without the ARGS `make train` had
            hint += f"; the settings differ from {exp}/{RUN_CONFIG} in {differ}: give the same CONFIG and ARGS"
        raise PipelineError(f"no trained folds for these inputs and settings in {exp}{hint}; run `make train` first")
    if left_out:
        print(f"{what}: using {', '.join(d.name for d in dirs)}; left out {why}", file=sys.stderr)
    return dirs


def fold_digests(dirs: list[Path]) -> list[str]:
    return [read_json(d / DONE).get("digest", "") for d in dirs]


# ---------------------------------------------------------------- checked before work starts, held while it runs


def preflight(cfg: Config, stage: str) -> None:
    """Every path `stage` (data | train | predict) reads or writes, checked before any work is done."""
    if stage == "data":
        if cfg.data.source == "dir" and cfg.data.dir:
            files.check_readable(Path(cfg.data.dir).expanduser(), "the competition folder (data.dir)")
        files.check_writable_dir(input_dir(cfg), "the input folder (input_dir)")
    if stage in ("train", "predict"):
        files.check_readable(prepared_dir(cfg), "the prepared data")
    if stage == "train":
        files.check_writable_dir(experiment_dir(cfg), "the models folder (models_dir)")
    if stage == "predict":
        files.check_writable_dir(Path(cfg.submissions_dir), "the submissions folder (submissions_dir)")
        for path in (submission_path(cfg), submission_csv(cfg)):
            files.check_file_target(path, "the submission")
        # fold<k>/test.csv caches the test predictions
        files.check_writable_dir(experiment_dir(cfg), "the models folder (models_dir)")


@contextlib.contextmanager
def experiment_lock(cfg: Config, stage: str):
    """Hold the experiment's lock for the block (a lock this process already holds is left as it is)."""
    path = lock_path(cfg)
    taken = files.acquire_lock(path, f"experiment {cfg.name!r}", stage)
    try:
        yield
    finally:
        if taken:
            files.release_lock(path)


def hold_experiment_lock(cfg: Config, stage: str) -> None:
    """Take the experiment's lock until this process exits (one line at the start of a stage)."""
    files.acquire_lock(lock_path(cfg), f"experiment {cfg.name!r}", stage)
