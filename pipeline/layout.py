"""Where everything lives on disk: the one owner of every path and file name.

    input/                              cfg.input_dir
      sample/, <competition>/           the raw files of data.source sample or kaggle (never edited);
                                        data.source=dir reads data.dir in place
      <dataset slug>/                   the files of data.datasets
      prepared/<name>/                  folds.csv, test.csv, data.json, config.yaml, tokenizer/, tokens.json
      cache/<key>/                      token ids and meta.json (pipeline.inputs.tokens)
      locks/<name>.lock                 one run per experiment (shared by the trains of its folds)
      locks/<name>.fold<k>.lock         one train per fold
      recipes/<recipe>/<step>.log       what each step of `make recipe` printed
    models/                             cfg.models_dir
      <name>/                           pipeline.yaml, oof.csv, cv.json, cv.png, submissions.jsonl, precision.json
      <name>/fold<k>/                   model.safetensors, tokenizer, pipeline.yaml, metrics.jsonl, oof.csv,
                                        test.csv, test.json, vocab_map.npy, resume.pt, done.json (last)
      <name>/fold-1/                    a stage-1 model: trained on the training-only rows, no OOF
      <name>/search/                    `make search`: study.db (the Optuna study), history.png
      <name>-t<n>/                      trial n of that search: an experiment of its own
      board.md, bench/
    submissions/                        <name>.csv, submission.csv

Every stage asks this module for a path; nothing else builds one. Whether what lies at a path counts for
a config (a fold, the prepared tables) is pipeline.validity's answer; other experiments (blend members,
teachers, their kinds) and the checks and lock around a stage are pipeline.experiments'.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

from pipeline.errors import DataError
from pipeline.schema import Config
from pipeline.validation import check_name

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
# split, id, source, lang, tokens: the untruncated token count of every scored and every test row (the
# estimate's length buckets), and what they were counted from
LENGTHS, LENGTHS_KEY = "lengths.csv", "lengths.json"
# how data.held_out groups translated rows (pipeline.inputs.groups); a new way rebuilds the tables held out before.
# 3: the long stand-in comments held out too (data.hold_out_long, pipeline.inputs.lengths)
HELD_OUT_GROUPING = 3
# how validation.csv's near-copies are grouped into one fold (pipeline.inputs.groups.copy_groups) and its copies
# found among the training rows; a new way rebuilds every table, whose folds and rows it decides. 2: Turkish's
# dotted and dotless i are one letter when texts are compared without case (groups.normalised)
VALIDATION_GROUPING = 2
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
# with predict.training_rows: the fold's predictions of the training-only rows (id, source, prob), a teacher's for
# data.relabel_from, and what they were made from
TRAINING_PREDS, TRAINING_KEY = "training.csv", "training.json"
CACHE_KEYS = {TEST_PREDS: TEST_KEY, TRAINING_PREDS: TRAINING_KEY}  # a fold's cached predictions -> their stamp
METRICS = "metrics.jsonl"  # one line an evaluation
STEPS = "steps.jsonl"  # one line every train.log_every_steps optimizer steps
RESUME = "resume.pt"
PRECISION_CHOICE = "precision.json"  # train.precision=auto's rates on a CPU, measured once for the experiment
RUN_CONFIG = "pipeline.yaml"  # the resolved config, beside the weights and in the experiment's folder
# what a trained fold's done.json does not vouch for: the logs, and what is remade or replaced later
NOT_RECORDED = {DONE, RESUME, TEST_PREDS, TEST_KEY, TRAINING_PREDS, TRAINING_KEY, METRICS, STEPS}
ALL = "*"  # in `needs`: every file done.json records
# in `needs`: the weights, or, for a fold kept without them (kaggle.keep_weights=false), test predictions made with
# the weights done.json records (a fold that predicted before its weights were left behind)
TESTED = "weights or their test predictions"
# the files a stage's record says it reads of a fold (pipeline/stages.py, READS), as `needs` names them
FOLD_NEEDS = {"weights": WEIGHTS, "oof": OOF, "test": TEST_PREDS, "tested": TESTED, "all": ALL}
# the files of an experiment folder
CV_JSON, CV_PNG = "cv.json", "cv.png"
CURVES_PNG = "curves.png"  # each fold's training loss, validation AUC and learning rate against steps
TENSORBOARD = "tb"  # tb/fold<k>/: TensorBoard event files (train.tensorboard)
SUBMIT_RECORD = "submissions.jsonl"  # every `make submit` of the experiment, with its scores
TIME_UP = "time_up.json"  # written when a run stopped for its deadline: which fold, and why
VOCAB_MAP = "vocab_map.npy"  # beside a trimmed model's weights: old token id -> new
SUBMISSION = "submission.csv"  # the name Kaggle notebooks expect
SUBMISSION_RECORD = "submission.json"  # beside it: the experiment and folds `make predict` wrote it from
BOARD = "board.md"
EXPORT = "export"  # models/<name>/export/fold<k>/: a fold as a folder transformers and torch load (make export)
EXPORT_HEAD = "head.pt"  # in it: the head's weight and bias
EXPORT_SPEC = "export.json"  # in it: the pooling, max_length and scale of the output
MLM = "mlm"  # models/<name>/mlm/: `make mlm`'s encoder, a folder `model.name` accepts
MLM_RESUME = "mlm.resume.pt"  # beside it while `make mlm` runs: where a killed run goes on from
SEARCH = "search"  # models/<name>/search/: `make search`'s study and its picture
STUDY_DB, SEARCH_HISTORY = "study.db", "history.png"


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
            if path.name in (VALID, TEST, SAMPLE_SUBMISSION):
                # validation.csv is what the folds are scored on: as a training file, every validation text would
                # train every fold, and the CV would read high without a word
                raise DataError(f"data.extra_files={entry}: {path} is the competition's {path.name}, not a training "
                                f"file: the folds validate on validation.csv and predict test.csv")  # fmt: skip
            seen.setdefault(path, lang)
    return list(seen.items())


def teacher_files(cfg: Config) -> dict[int, Path]:
    """fold -> the fold-k test predictions of the teacher data.pseudo_from names (they may not exist yet)."""
    return {k: fold_dir(cfg, k, cfg.data.pseudo_from) / TEST_PREDS for k in range(cfg.data.folds)}


def relabel_files(cfg: Config) -> dict[int, Path]:
    """fold -> the fold-k predictions of the training-only rows of the teacher data.relabel_from names (they may
    not exist yet)."""
    return {k: fold_dir(cfg, k, cfg.data.relabel_from) / TRAINING_PREDS for k in range(cfg.data.folds)}


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


def recipe_log(cfg: Config, recipe: str, step: str) -> Path:
    """input/recipes/<recipe>/<step>.log: the output of one step of `make recipe`."""
    return input_dir(cfg) / "recipes" / recipe / f"{step}.log"


def recipe_lock(cfg: Config, recipe: str) -> Path:
    """The lock of a recipe's chain: a second `make recipe` of it stops at once, naming the run that holds it."""
    return input_dir(cfg) / "recipes" / recipe / "recipe.lock"


def precision_choice(cfg: Config) -> Path:
    """Where the first fold of an experiment leaves the rates its `auto` precision was chosen by (core.precision)."""
    return experiment_dir(cfg) / PRECISION_CHOICE


def fold_lock_path(cfg: Config, fold: int) -> Path:
    """The lock of one fold of an experiment: a train of other folds may run beside its holder."""
    return input_dir(cfg) / "locks" / f"{cfg.name}.{fold_name(fold)}.lock"


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


def export_dir(cfg: Config, fold: int) -> Path:
    return experiment_dir(cfg) / EXPORT / fold_name(fold)


def baseline_name(cfg: Config) -> str:
    """The experiment `make baseline` writes beside the config's own: <name>-tfidf, or <name>-tfidf-es for a
    specialist of train.langs=[es] (on the same tables, so that it never replaces the baseline of every language)."""
    return "-".join([f"{cfg.name}-tfidf", *cfg.train.langs])


def blend_name(cfg: Config, members: list[str]) -> str:
    """The experiment a blend writes: blend.name, else its members' names joined by +."""
    return cfg.blend.name or "+".join(members)


def mlm_dir(cfg: Config) -> Path:
    """models/<name>/mlm/: the encoder `make mlm` trained on the competition's texts (config, weights, tokenizer,
    done.json)."""
    return experiment_dir(cfg) / MLM


def mlm_resume(cfg: Config) -> Path:
    """models/<name>/mlm.resume.pt: `make mlm`'s resume state, removed once the folder is written."""
    return experiment_dir(cfg) / MLM_RESUME


def search_dir(cfg: Config) -> Path:
    """models/<name>/search/: the study of `make search` (study.db unless search.storage names another) and
    history.png."""
    return experiment_dir(cfg) / SEARCH


def trial_name(cfg: Config, number: int) -> str:
    """The experiment trial `number` of the config's search trains: <name>-t<number>."""
    return check_name(f"{cfg.name}-t{number}")


def submission_path(cfg: Config, name: str | None = None) -> Path:
    """submissions/<name>.csv; `make submit` sends kaggle.submit_file instead when that is set."""
    return Path(cfg.submissions_dir) / f"{check_name(cfg.name if name is None else name)}.csv"


def submission_csv(cfg: Config) -> Path:
    return Path(cfg.submissions_dir) / SUBMISSION


def submission_record(cfg: Config) -> Path:
    """submissions/submission.json: which experiment and folds submission.csv holds (make predict writes both)."""
    return Path(cfg.submissions_dir) / SUBMISSION_RECORD


def board_path(cfg: Config) -> Path:
    return models_root(cfg) / BOARD


def bench_dir(cfg: Config) -> Path:
    return models_root(cfg) / "bench"


def gpu_check_dir(cfg: Config) -> Path:
    """`make gpu-check`'s report (pipeline.benchmark.gpucheck)."""
    return models_root(cfg) / "gpu-check"
