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
import glob
import re
import sys
from pathlib import Path

from pipeline import config as config_mod
from pipeline import files, fingerprint
from pipeline.config import ConfigError, check_name
from pipeline.errors import DataError, PipelineError
from pipeline.files import file_digest, read_json
from pipeline.schema import Config

STAGE1 = -1  # the fold number of a stage-1 model: trained on the training-only rows

# the competition's files, as Kaggle names them
TRAIN = "jigsaw-toxic-comment-train.csv"
BIAS = "jigsaw-unintended-bias-train.csv"
VALID = "validation.csv"
TEST = "test.csv"
SAMPLE_SUBMISSION = "sample_submission.csv"
TEST_LABELS = "test_labels.csv"  # id, toxic: the competition's test answers, published after it closed
REQUIRED = (TRAIN, VALID, TEST, SAMPLE_SUBMISSION)

# the files of a prepared folder (input/prepared/<name>/); the tokenizer and token pointer are replaced with them
TABLE, TEST_TABLE, DATA_JSON = "folds.csv", "test.csv", "data.json"
PREPARED_CONFIG = "config.yaml"
TOKENIZER = "tokenizer"  # the tiny model's tokenizer folder
TOKENS_POINTER = "tokens.json"  # {"key": ...}: the token cache input/cache/<key>/ these tables use
CACHE_META = "meta.json"  # in a token cache: key, sizes and digests of its arrays
# how data.held_out groups translated rows (pipeline.inputs.groups); a new way rebuilds the tables held out before
HELD_OUT_GROUPING = 2
VALID_SOURCE = Path(VALID).stem  # the `source` of validation.csv's rows in the table and the OOF
OOF_COLUMNS = ["id", "lang", "toxic", "fold", "source"]  # an oof.csv: these, then pred
# the scale of an oof.csv's pred and a fold test.csv's toxic, recorded in the fold's done.json (`scale`): a
# model's and the baseline's are probabilities; a blend's are weighted means of ranks, which only order rows
PROBABILITY, RANK = "probability", "rank"

# the files of a fold folder
DONE = "done.json"  # written last: the fold is complete
WEIGHTS = "model.safetensors"
OOF = "oof.csv"  # the fold's validation rows with their predictions
TEST_PREDS = "test.csv"  # the fold's test predictions (id, toxic)
TEST_KEY = "test.json"  # what the cached test predictions were made from
METRICS = "metrics.jsonl"  # one line an evaluation
STEPS = "steps.jsonl"  # one line every train.log_every_steps optimizer steps
RESUME = "resume.pt"
RUN_CONFIG = "pipeline.yaml"  # the resolved config, beside the weights and in the experiment's folder
# what a trained fold's done.json does not vouch for: the logs, and what is remade or replaced later
NOT_RECORDED = {DONE, RESUME, TEST_PREDS, TEST_KEY, METRICS, STEPS}
ALL = "*"  # in `needs`: every file done.json records
# in `needs`: the weights, or, for a fold kept without them (kaggle.keep_weights=false), test predictions made with
# the weights done.json records (a fold that predicted before its weights were left behind)
TESTED = "weights or their test predictions"
# the files of an experiment folder
CV_JSON, CV_PNG = "cv.json", "cv.png"
CURVES_PNG = "curves.png"  # each fold's training loss, validation AUC and learning rate against steps
TENSORBOARD = "tb"  # tb/fold<k>/: TensorBoard event files (train.tensorboard)
SUBMIT_RECORD = "submissions.jsonl"  # every `make submit` of the experiment, with its scores
TIME_UP = "time_up.json"  # written when a run stopped for its deadline: which fold, and why
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


def dataset_slug(ref: str) -> str:
    """The slug of a dataset named owner/slug or owner/slug/version: the folder it is downloaded or mounted in."""
    return ref.split("/")[1] if "/" in ref else ref


def dataset_dir(cfg: Config, ref: str) -> Path:
    """Where the files of a dataset in data.datasets (owner/slug[/version]) are downloaded."""
    return input_dir(cfg) / dataset_slug(ref)


def needed_files(cfg: Config) -> tuple[str, ...]:
    """The competition files this config reads."""
    return REQUIRED + ((BIAS,) if cfg.data.bias_rows > 0 else ())


_LANG_SUFFIX = re.compile(r"^(?P<name>.+):(?P<lang>[a-z]{2,3})$")


def split_extra(entry: str) -> tuple[str, str]:
    """`file.csv:es` -> ('file.csv', 'es'); `file.csv` -> ('file.csv', '')."""
    m = _LANG_SUFFIX.match(entry)
    return (m["name"], m["lang"]) if m else (entry, "")


def find_extra(cfg: Config, raw: Path, name: str) -> list[Path]:
    """An extra training file or glob pattern: a path, or a name in the raw folder or a downloaded dataset's
    folder. A pattern gives every file it matches, in name order; the first folder with a match wins."""
    folders = [Path("."), raw, *[dataset_dir(cfg, ref) for ref in cfg.data.datasets]]
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


def teacher_files(cfg: Config) -> dict[int, Path]:
    """fold -> the fold-k test predictions of the teacher data.pseudo_from names (they may not exist yet)."""
    return {k: fold_dir(cfg, k, cfg.data.pseudo_from) / TEST_PREDS for k in range(cfg.data.folds)}


def data_settings(cfg: Config) -> dict:
    """The data settings that decide what the tables hold: all but where the files are read from (data.source,
    data.dir), which the files' digests make irrelevant."""
    return fingerprint.later_left_out("data", cfg.to_dict()["data"], fingerprint.NOT_TABLES, cfg)


def input_signature(cfg: Config, raw: Path | None = None) -> dict:
    """What the prepared tables are made from, by content: the data settings, the sha256 of every file the
    table reads (the competition's and the extra ones, in order) and of the teacher's test predictions. A
    file edited in place, its size and time kept, changes it; the same files in another folder do not."""
    raw = raw_dir(cfg) if raw is None else raw
    read = [raw / name for name in needed_files(cfg)] + [p for p, _ in extra_files(cfg, raw)]
    missing = [p for p in read if not p.is_file()]
    if missing:
        raise DataError(f"{missing[0]}: missing file (the folder needs {', '.join(needed_files(cfg))})")
    teacher = teacher_files(cfg) if cfg.data.pseudo_from else {}
    signature = {
        "data": data_settings(cfg),
        "files": [[p.name, file_digest(p)] for p in read],
        # a retrained teacher relabels the test rows
        "pseudo": {str(k): file_digest(p) for k, p in teacher.items() if p.is_file()},
    }
    if cfg.data.held_out > 0:  # tables held out by an earlier way of grouping are built again
        signature["grouping"] = HELD_OUT_GROUPING
    return signature


def prepared_root(cfg: Config) -> Path:
    return input_dir(cfg) / "prepared"


def prepared_dir(cfg: Config, name: str | None = None) -> Path:
    # checked again here, not only when the config loads: `name=` made this input/prepared/ itself,
    # which `make data` replaces whole, with every other experiment's tables in it
    return prepared_root(cfg) / check_name(cfg.name if name is None else name)


def cache_root(cfg: Config) -> Path:
    return input_dir(cfg) / "cache"


def vectors_cache(cfg: Config, key: str) -> Path:
    """The sentence vectors data.group_encoder made of some texts (pipeline.inputs.encoder), by their key: beside
    the token caches, not among them (`make data` removes the token caches no prepared table uses)."""
    return input_dir(cfg) / "vectors" / f"{key}.npy"


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


def tensorboard_dir(cfg: Config, fold: int) -> Path:
    """models/<name>/tb/fold<k>/: where TensorBoard reads a fold's scalars (`tensorboard --logdir models/<name>/tb`)."""
    return experiment_dir(cfg) / TENSORBOARD / fold_name(fold)


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


# ---------------------------------------------------------------- the prepared data, as the inputs are now


def read_data_json(cfg: Config) -> dict:
    """input/prepared/<name>/data.json as it was written, or the error that says `make data`."""
    path = prepared_dir(cfg) / DATA_JSON
    try:
        meta = read_json(path)
    except FileNotFoundError:
        why = "no prepared data; run `make data CONFIG=...` with the same config first"
        raise DataError(f"{path.parent}: {why}") from None
    except (OSError, ValueError):
        meta = None
    if not isinstance(meta, dict) or not {"signature", "table_digest", "test_digest"} <= set(meta):
        raise DataError(f"{path}: unreadable or not written by `make data`; run `make data` again")
    return meta


def changed_inputs(recorded: dict, now: dict) -> str:
    """What differs between two input signatures, in words."""
    if recorded.get("data") != now["data"]:
        return "other data settings"
    was = {name: digest for name, digest in recorded.get("files", [])}
    changed = [name for name, digest in now["files"] if was.get(name) != digest]
    if changed or len(was) != len(now["files"]):
        return f"{', '.join(changed) or 'the list of files'} changed"
    return "the teacher's test predictions (data.pseudo_from) changed"


def current_meta(cfg: Config) -> dict:
    """data.json of the prepared tables, checked to be made from the inputs as they are now: the same data
    settings, the same raw files (by content) and the same teacher predictions; else one line that says
    `make data`. Every stage that reads prepared tables gets them through this."""
    meta = read_data_json(cfg)
    out = prepared_dir(cfg)
    if meta["signature"].get("data") != data_settings(cfg):
        raise DataError(f"{out}: built with other data settings; rerun `make data` with this config")
    now = input_signature(cfg)
    if meta["signature"] != now:
        why = changed_inputs(meta["signature"], now)
        raise DataError(f"{out}: its inputs changed since it was built ({why}); rerun `make data` with this config")
    for name, key in ((TABLE, "table_digest"), (TEST_TABLE, "test_digest")):
        path = out / name
        if not path.is_file() or file_digest(path) != meta[key]:
            raise DataError(f"{path}: differs from what data.json records (damaged?); rerun `make data`")
    return meta


def current_fingerprint(cfg: Config, meta: dict | None = None) -> str:
    """The fingerprint a fold of this config must carry, for the prepared data `meta` describes (by default
    current_meta's, checked against the inputs), the tiny model's tokenizer and the stage-1 model's own."""
    return fingerprint.fold_fingerprint(current_made_from(cfg, meta))


def current_made_from(cfg: Config, meta: dict | None = None) -> dict:
    """What a fold of this config is made from (fingerprint.made_from): its fingerprint is this one's digest."""
    meta = current_meta(cfg) if meta is None else meta
    tokenizer = prepared_dir(cfg) / TOKENIZER
    model = fingerprint.model_identity(cfg, tokenizer, init_digest(cfg))
    return fingerprint.made_from(cfg, meta["table_digest"], model)


def init_dir(cfg: Config) -> Path | None:
    """The stage-1 fold `model.init_from` names, checked complete and intact (and, where its own prepared data
    is here, current for it and the config it was trained with); None without init_from."""
    name = cfg.model.init_from
    if not name:
        return None
    if name == cfg.name:
        raise PipelineError(f"model.init_from={name}: an experiment cannot start from itself; name it differently")
    folder = fold_dir(cfg, STAGE1, name)
    # current for its own config and prepared data; a stage-1 model made elsewhere (an attached Kaggle kernel's
    # output) has no prepared data here, and is checked complete and intact only
    here = (prepared_dir(cfg, name) / DATA_JSON).exists() and (experiment_dir(cfg, name) / RUN_CONFIG).exists()
    digest = experiment_digest(cfg, name, "model")[0] if here else None
    why = fold_status(folder, digest, needs=(WEIGHTS,))
    if why:
        state = "is not complete" if why == "not complete" else f"is not usable ({why})"
        raise PipelineError(
            f"model.init_from={name}: {folder} {state}; make it first with `make stage1` (this run's CONFIG and ARGS)"
        )
    return folder


def init_digest(cfg: Config) -> str | None:
    """The fingerprint of the stage-1 model a fold starts from; None without model.init_from."""
    folder = init_dir(cfg)
    return None if folder is None else read_done(folder)["digest"]


# ---------------------------------------------------------------- whether a fold counts


def read_done(folder: Path) -> dict | None:
    """A fold's done.json, or None when it is missing or not a record of a complete fold."""
    try:
        done = read_json(folder / DONE)
    except (OSError, ValueError):
        return None
    return done if isinstance(done, dict) and isinstance(done.get("digest"), str) else None


def file_problem(folder: Path, name: str, record: dict | None, deep: bool = True) -> str:
    """Why `name` in a fold cannot be used as done.json (or test.json) vouches for it; '' when it can.

    Size always; the sha256 too where `deep` (the weights' digest is checked when they are loaded)."""
    path = folder / name
    if not path.is_file():
        return f"{name} is missing"
    if record is None:  # written before done.json recorded its files: present is all that can be said
        return ""
    if path.stat().st_size != record.get("bytes"):
        return f"{name} has {path.stat().st_size:,} bytes, done.json records {record.get('bytes')} (damaged?)"
    if deep and file_digest(path) != record.get("sha256"):
        return f"{name} differs from what done.json records (edited or damaged?)"
    return ""


def fold_records(folder: Path) -> dict:
    """What a trained fold's done.json vouches for: every file training left (weights, config, tokenizer,
    OOF, vocabulary map), by size and sha256. Test predictions come later and have their own record."""
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.name not in NOT_RECORDED and p.name[0] != ".")
    return {p.name: files.file_record(p) for p in found}


def fold_status(folder: Path, digest: str | None = None, needs: tuple[str, ...] = ()) -> str:
    """'' when the fold at `folder` counts: its done.json is readable, is this folder's (a copied folder is
    not), carries `digest` (when given), and the files in `needs` are there as done.json recorded them
    (the weights by size; their digest is checked where they are loaded). Else why it does not count."""
    done = read_done(folder)
    if done is None:
        return "not complete" if not (folder / DONE).exists() else "done.json is unreadable (retrain it)"
    if done.get("fold", fold_index(folder)) != fold_index(folder):
        return f"its done.json is fold {done.get('fold')}'s (a copied folder?); retrain it"
    # a fold trained by several processes carries the world size in its fingerprint (done.json says how many)
    if digest is not None and done["digest"] != fingerprint.with_world(digest, done.get("world", 1)):
        if done.get("model") == fingerprint.TFIDF["model"]:
            return "trained on other data or settings (make it again with `make baseline`)"
        if done.get("head") != fingerprint.HEAD:  # a trained fold records the head its weights belong to
            return "made by an older version, whose model had another head (retrain it with `make train`)"
        return "trained on other data or settings (retrain it with `make train`)"
    recorded = done.get("files") or {}
    if ALL in needs:  # every recorded file, the weights first
        needs = tuple(dict.fromkeys([n for n in needs if n != ALL] + sorted(recorded, key=lambda n: n != WEIGHTS)))
    if TESTED in needs:
        weightless = not (folder / WEIGHTS).is_file() and WEIGHTS in recorded  # else: the weights, which are missing
        needs = tuple(n for n in needs if n != TESTED and not (weightless and n == WEIGHTS))
        needs = (TEST_PREDS if weightless else WEIGHTS, *needs)
    for name in needs:
        if name == TEST_PREDS and name not in recorded:  # a trained fold's test predictions: a cache of predict
            why = test_preds_problem(folder, done)
        else:
            why = file_problem(folder, name, recorded.get(name), deep=name != WEIGHTS)
        if why:
            return why
    return ""


def test_preds_problem(folder: Path, done: dict, test_digest: str | None = None) -> str:
    """Why a trained fold's cached test predictions cannot be used ('' when they can): test.json must record
    them and the weights they were made with (and, given, the test table)."""
    try:
        stamp = read_json(folder / TEST_KEY)
    except (OSError, ValueError):
        return "no test predictions (run `make predict`)"
    if not isinstance(stamp, dict) or not isinstance(stamp.get("key"), dict):
        return "no test predictions (run `make predict`)"
    weights = (done.get("files") or {}).get(WEIGHTS, {}).get("sha256")
    if weights is not None and stamp["key"].get("weights") != weights:
        return "test predictions of other weights (run `make predict`)"
    if test_digest is not None and stamp["key"].get("test") != test_digest:
        return "test predictions of another test table (run `make predict`)"
    return file_problem(folder, TEST_PREDS, stamp.get("file"))


def is_complete(folder: Path, digest: str, needs: tuple[str, ...] = (WEIGHTS,)) -> bool:
    return not fold_status(folder, digest, needs)


def select_folds(exp: Path, digest: str, k: int, needs: tuple[str, ...] = ()) -> tuple[list[Path], dict[str, str]]:
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
            why = fold_status(found[fold], digest, needs)
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


def trained_settings_differ(cfg: Config, name: str | None = None) -> str:
    """How the weight-changing settings differ from those models/<name>/pipeline.yaml was trained with."""
    saved = experiment_dir(cfg, name) / RUN_CONFIG
    try:
        return fingerprint.settings_differ(cfg, config_mod.load_file(saved)) if saved.exists() else ""
    except ConfigError:
        return ""


def usable_folds(cfg: Config, digest: str, what: str = "cv", needs: tuple[str, ...] = ()) -> list[Path]:
    """The complete folds made from the current inputs and settings; says which others it leaves out."""
    exp = experiment_dir(cfg)
    dirs, left_out = select_folds(exp, digest, cfg.data.folds, needs)
    why = describe(left_out)
    if not dirs:
        hint = f" ({why})" if left_out else ""
        differ = trained_settings_differ(cfg)
        if differ:  # most often: this stage was run without the ARGS `make train` had
            hint += f"; the settings differ from {exp}/{RUN_CONFIG} in {differ}: give the same CONFIG and ARGS"
        raise PipelineError(f"no trained folds for these inputs and settings in {exp}{hint}; run `make train` first")
    if left_out:
        print(f"{what}: using {', '.join(d.name for d in dirs)}; left out {why}", file=sys.stderr)
    return dirs


def fold_digests(dirs: list[Path]) -> list[str]:
    return [(read_done(d) or {}).get("digest", "") for d in dirs]


# ---------------------------------------------------------------- other experiments: blend members, teachers, the board


def experiment_config(cfg: Config, name: str) -> Config:
    """The resolved config models/<name>/ was made with (its pipeline.yaml), or one line saying why not."""
    path = experiment_dir(cfg, name) / RUN_CONFIG
    if not path.is_file():
        raise PipelineError(f"{path.parent}: no {RUN_CONFIG}; it was not made by `make train` or `make baseline`")
    try:
        return config_mod.load_file(path)
    except ConfigError as e:
        raise PipelineError(f"{path}: not a config this version reads ({e}); make the experiment again") from None


def pred_scale(done: dict) -> str:
    """The scale of a fold's predictions: what its done.json records, else what made it (a fold written before
    the scale was recorded: a blend's are ranks, every other one's probabilities)."""
    return done.get("scale") or (RANK if done.get("model") == "blend" else PROBABILITY)


def experiment_kind(exp: Path) -> str:
    """'blend', 'tfidf+lr' or 'model': what made an experiment's folds (their done.json says)."""
    for folder in done_dirs(exp).values():
        model = (read_done(folder) or {}).get("model")
        if model in ("blend", fingerprint.TFIDF["model"]):
            return model
    return "model"


def blend_fold_problem(cfg: Config, folder: Path, needs: tuple[str, ...], chain: tuple[str, ...] = ()) -> str:
    """Why a blend's fold does not count ('' when it does): its own files, then each member's fold as
    current as when the blend was made (the digests its done.json records). `chain`: the blends that led
    here, so that a member naming one of them (a damaged done.json) is refused, not followed forever."""
    why = fold_status(folder, None, needs)
    if why:
        return why
    done, k = read_done(folder), fold_index(folder)
    chain = (*chain, folder.parent.name)
    for member, digest in (done.get("member_digests") or {}).items():
        if member in chain:
            return f"names {member} among its own members ({' -> '.join([*chain, member])}); make the blend again"
        folds = experiment_folds(cfg, member, needs=(), chain=chain)
        if k not in folds or read_done(folds[k])["digest"] != digest:
            return f"member {member}'s fold{k} changed since the blend was made (make the blend again)"
    return "" if done.get("member_digests") else "made by an older version (make the blend again)"


def experiment_as_prepared(cfg: Config, name: str) -> Config:
    """models/<name>/'s config, read where this run reads its inputs, with the data settings its prepared
    tables were built with here (a Kaggle notebook's config names Kaggle's folders; `make data` here did not)."""
    saved = experiment_config(cfg, name).to_dict()
    saved.update(input_dir=cfg.input_dir, models_dir=cfg.models_dir, submissions_dir=cfg.submissions_dir)
    meta = read_data_json(config_mod.from_dict(saved))
    # the settings its tables were built with, from the raw folder `make data` read here
    saved["data"].update(meta["signature"].get("data", {}), source="dir", dir=meta.get("raw", ""))
    return config_mod.from_dict(saved)


def experiment_digest(cfg: Config, name: str, kind: str) -> tuple[str, int]:
    """(the fingerprint the folds of models/<name>/ must carry now, its data.folds)."""
    try:
        saved = experiment_as_prepared(cfg, name)
        meta = current_meta(saved)
    except (DataError, PipelineError) as e:  # its own inputs are gone or changed: it cannot count now
        raise PipelineError(f"{name}: {e}") from None
    if kind == fingerprint.TFIDF["model"]:
        digest = fingerprint.tfidf_fingerprint(meta["table_digest"], meta["test_digest"], saved.train.seed)
    else:
        digest = current_fingerprint(saved, meta)
    return digest, saved.data.folds


def experiment_check(
    cfg: Config, name: str, needs: tuple[str, ...] = (OOF,), chain: tuple[str, ...] = ()
) -> tuple[list[Path], dict[str, str]]:
    """(the folds of models/<name>/ that count, {fold: why not} for the others of 0..data.folds-1): a trained
    experiment's or a baseline's checked against the fingerprint of its own config and prepared data as they
    are now, a blend's against its members as they were when it was made (`chain`: the blends that led here)."""
    exp = experiment_dir(cfg, name)
    if not exp.is_dir():
        raise PipelineError(f"{name}: no experiment in {exp} (train it, make its baseline or blend it first)")
    kind = experiment_kind(exp)
    if kind != "blend":
        digest, k = experiment_digest(cfg, name, kind)
        return select_folds(exp, digest, k, needs)
    found = {f: p for f, p in fold_dirs(exp).items() if f >= 0}
    why = {fold_name(f): blend_fold_problem(cfg, found[f], needs, chain) if f in found else "not made"
           for f in range(max(found, default=-1) + 1)}  # fmt: skip
    return [found[f] for f in sorted(found) if not why[fold_name(f)]], {f: w for f, w in why.items() if w}


def experiment_folds(
    cfg: Config, name: str, needs: tuple[str, ...] = (OOF,), chain: tuple[str, ...] = ()
) -> dict[int, Path]:
    """Every fold of models/<name>/ (a trained experiment, a TF-IDF baseline or a blend), each complete,
    intact and current (experiment_check), by fold number; else one line naming the experiment, the folds
    and why, and the command that makes them."""
    use, left_out = experiment_check(cfg, name, needs, chain)
    if left_out:
        kind = experiment_kind(experiment_dir(cfg, name))
        make = {"blend": "blend", fingerprint.TFIDF["model"]: "baseline"}.get(kind, "train predict")
        raise PipelineError(f"{name}: {describe(left_out)}; make it again with `make {make}` and its CONFIG and ARGS")
    return {fold_index(d): d for d in use}


# ---------------------------------------------------------------- checked before work starts, held while it runs


def preflight(cfg: Config, stage: str, name: str | None = None) -> None:
    """Every path `stage` reads or writes, checked before any work is done; `name` is the experiment folder a
    stage writes when it is not the config's own (a blend's, the baseline's)."""
    models = experiment_dir(cfg, name)
    if stage == "data":
        if cfg.data.source == "dir" and cfg.data.dir:
            files.check_readable(Path(cfg.data.dir).expanduser(), "the competition folder (data.dir)")
        files.check_writable_dir(input_dir(cfg), "the input folder (input_dir)")
    if stage in ("train", "predict", "baseline"):
        files.check_readable(prepared_dir(cfg), "the prepared data")
    if stage in ("train", "cv", "baseline", "blend"):
        files.check_writable_dir(models, "the models folder (models_dir)")
    if stage in ("predict", "blend", "baseline"):
        files.check_writable_dir(Path(cfg.submissions_dir), "the submissions folder (submissions_dir)")
        targets = (submission_path(cfg), submission_csv(cfg)) if stage == "predict" else (submission_path(cfg, name),)
        for path in targets:
            files.check_file_target(path, "the submission")
    if stage == "predict":
        # fold<k>/test.csv caches the test predictions
        files.check_writable_dir(models, "the models folder (models_dir)")
    if stage == "board":
        files.check_file_target(board_path(cfg), "the board (models/board.md)")


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
