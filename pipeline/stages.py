"""Every stage, declared once: its name (the make target, `python -m pipeline <name>`), its module, its doc, the
paths it checks before any work and the files of its own experiment's folds it reads.

A stage is a module with a `main(argv=None)`: `pipeline/<name>.py` unless its record names another, so a stage
may share its name with a module that is not a stage (a stage `errors` beside pipeline/errors.py). Made from
STAGES: the choices of `python -m pipeline`, the stage lines of `make help`, the Makefile targets of the stages
without a recipe of their own, what `experiments.preflight` checks and what `validity.usable_folds` needs of a
fold, and docs/stages.md's two tables (the stages and their modules; what each stage writes), which
`python3 -m pipeline.stages write` rewrites and tests/test_stages.py checks.
The import rules of the stages (none imports another; only a driver imports one) are checked from the same
records by tests/test_architecture.py, so no copy of the list sits in pyproject.toml.

Standard library only, and nothing at import: the Makefile reads it with the system python, before .venv exists.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from pipeline.docpage import between

# what experiments.preflight can check before a stage does any work (its CHECKS carry them out, one each)
CHECKS = {
    "raw": "`data.dir` readable (`data.source=dir`)",
    "input": "`input_dir` writable",
    "prepared": "prepared data readable",
    "models": "`models_dir` writable",
    "submission": "`submissions_dir` writable, `<name>.csv` replaceable",
    "submission.csv": "`submission.csv` replaceable",
    "board": "`board.md` replaceable",
}
# the files of its experiment's folds a stage reads (validity.usable_folds; layout.FOLD_NEEDS names the files)
READS = {
    "weights": "weights",
    "oof": "OOF",
    "test": "test predictions",
    "tested": "weights or their test predictions",
    "all": "every recorded file",
}


@dataclass(frozen=True)
class Stage:
    name: str  # the make target
    doc: str  # one line: `make help`, docs/stages.md's table
    also: tuple[str, ...] = ()  # other make targets that run the same module (their recipes are in the Makefile)
    driver: bool = False  # runs other stages: it alone may import one (tests/test_architecture.py)
    module: str = ""  # the module it runs: pipeline.<name> unless given
    checks: tuple[str, ...] = ()  # what it checks before any work, in this order (keys of CHECKS)
    reads: tuple[str, ...] = ()  # what it needs of each fold of its experiment that it uses (keys of READS)
    writes: tuple[str, ...] = ()  # docs/stages.md's "What each stage writes": one row a group of files it writes

    def __post_init__(self) -> None:
        if not self.module:  # frozen: the default is set once, here
            object.__setattr__(self, "module", f"pipeline.{self.name}")
        unknown = [c for c in self.checks if c not in CHECKS] + [r for r in self.reads if r not in READS]
        if unknown:
            raise ValueError(f"stage {self.name}: unknown checks or reads {unknown}")

    @property
    def path(self) -> str:
        """The module's file, from the repository root."""
        return self.module.replace(".", "/") + ".py"

    @property
    def targets(self) -> tuple[str, ...]:
        return (self.name, *self.also)


STAGES = (
    Stage(
        "data",
        "acquire the competition, build `input/prepared/<name>/folds.csv` and the token cache",
        checks=("raw", "input"),
        writes=(
            "`input/<raw>/*.csv` the competition's files as given (sample and kaggle sources; never edited; `dir` is "
            "read in place)",
            "`input/prepared/<name>/folds.csv` one row per comment: `id, text, lang, toxic, source, fold, group`; "
            "validation rows in folds 0..k-1 (stratified on language × label, near-copies and translations of one "
            "comment a `group`, in one fold; with `data.held_out`, every source comment with a fr, pt or ru "
            "translation over 128 tokens among them: [recipes.md](recipes.md#six-languages-a-validation-that-looks-"
            "like-the-test)), training-only rows in fold -1",
            "`input/prepared/<name>/test.csv`, `data.json` (summary, provenance), `config.yaml`, `tokenizer/` (tiny "
            "model only), `tokens.json` (the token cache these tables use), `lengths.csv` (every validation, held-out "
            "and test row's untruncated token count: the six-language estimate's length buckets)",
            "`input/cache/<key>/` token ids, unpadded, as memory-mapped arrays + `meta.json`; the key covers the "
            "tokenizer files, max length and the tables. Caches that no `input/prepared/*/tokens.json` points at are "
            "removed at the end of `make data`",
            "`input/vectors/<key>.npy` sentence vectors of the rows, with `data.group_encoder` (held-out groups found "
            "by content); the key covers the encoder and the texts",
        ),
    ),
    Stage(
        "mlm",
        "the encoder trained as a masked language model on every text (no label); `models/<name>/mlm/`",
        checks=("prepared", "models"),
        writes=(
            "`models/<name>/mlm/` the encoder's `save_pretrained` folder (config.json, model.safetensors; "
            "not the masked-language head), its tokenizer and `done.json` (fingerprint, steps, first and last loss): "
            "`model.name=models/<name>/mlm` trains from it ([training.md](training.md#domain-adaptive-mlm)); while it "
            "runs, `models/<name>/mlm.resume.pt` (its resume state, removed at the end)",
        ),
    ),
    Stage(
        "stage1",
        "data and one model for the stage-1 experiment `model.init_from` names (`GPUS=N` for DDP)",
        driver=True,
        writes=(
            "for a config with `model.init_from`: that experiment's `input/prepared/<init_from>/` and its one model "
            "`models/<init_from>/fold-1/` (see [recipes.md](recipes.md#two-stages))",
        ),
    ),
    Stage(
        "train",
        "train every fold (`GPUS=N` for DDP); writes `models/<name>/`",
        checks=("prepared", "models"),
        writes=(
            "`models/<name>/fold<k>/` best epoch's weights (`model.safetensors`), tokenizer, `pipeline.yaml` (resolved"
            " config), `metrics.jsonl`, `oof.csv` (`pred`: each half in the order of the step the other half chose, on"
            " the kept step's scale; `best`: the kept step's), `done.json` (with the fold's fingerprint, its best "
            '`auc` and the `metric` it is: docs/recipes.md "The figures"); `fold-1/` for a stage-1 model (no OOF); '
            "`models/<name>/precision.json`, the rates `train.precision=auto` chose by on a CPU with bf16 (measured by"
            " the first fold, taken by the others)",
            "`models/<name>/oof.csv` (with `source`: validation.csv's rows or held-out translated ones), `cv.json` "
            "(`metrics` of the OOF and of each fold, `per_lang`, `scale`, `six`: what the six-language AUC is made of,"
            " its range and, under `six.lengths`, the figure without length, the bucket shares, effective rows and "
            'validation.csv\'s AUC per length bucket; docs/recipes.md "The figures"; `null` for a figure that is not a '
            "number, an AUC over one class), `cv.png` (ROC per language, AUC per fold), `curves.png`",
        ),
    ),
    Stage(
        "predict",
        "fold models on test, ensembled into `submissions/submission.csv` (`GPUS=N`: the folds shared)",
        # fold<k>/test.csv caches the test predictions: the models folder is written too
        checks=("prepared", "submission", "submission.csv", "models"),
        reads=("tested", "all"),
        writes=(
            "`models/<name>/fold<k>/test.csv` (+ `test.json`, its cache key), `submissions/<name>.csv`, "
            "`submissions/submission.csv` (`id,toxic`, sample_submission's order) and `submission.json` (the "
            "experiment, the folds and the test AUC it holds; `make predict` prints `submissions/submission.csv now "
            "holds <name>, k of 5 folds, test AUC x (was <previous>)`): an ensemble of fewer folds than the "
            "experiment's `data.folds` says so on stderr, and one of fewer folds than `submission.csv` holds of the "
            "same experiment writes `<name>.csv` only, keeping `submission.csv` (`predict.allow_fewer_folds=true` "
            "replaces it); a smoke run (`train.max_steps`) writes `<name>.csv` only where `submission.csv` holds a run"
            " of every step; `test_auc` in `cv.json` where the competition has `test_labels.csv`; `calibration` in "
            "`cv.json` with `predict.calibration`",
        ),
    ),
    Stage(
        "export",
        "each trained fold as a folder transformers and torch load alone (docs/export.md)",
        checks=("models",),
        reads=("all",),  # weights, head.json, vocabulary map: every file done.json records,
        writes=(
            "`models/<name>/export/fold<k>/` of each complete fold: the encoder's `save_pretrained` folder with the "
            "fold's tokenizer, `head.pt`, `export.json` (pooling, max_length, scale); a trimmed vocabulary given back "
            "in full ([export.md](export.md))",
        ),
    ),
    # the fold table every stage that trains prints as well (train, baseline: scoring.report.cv_report)
    Stage(
        "cv",
        "fold and per-language AUC of what has been trained so far",
        checks=("models",),
        reads=("oof",),
        writes=(
            "the fold AUC table of the folds made from the current inputs and settings (and refreshes `cv.json`, "
            "`cv.png`)",
        ),
    ),
    Stage(
        "baseline",
        "TF-IDF + logistic regression on the same folds, side by side with the trained model",
        checks=("prepared", "models", "submission"),
        reads=("oof", "test"),
        writes=(
            "`models/<name>-tfidf/`: the same files as a trained experiment (OOF and test predictions per fold); "
            "`submissions/<name>-tfidf.csv`, its test AUC in `cv.json`",
        ),
    ),
    Stage(
        "blend",
        '`BLEND="exp1 exp2 ..."`: rank-average with weights fit on OOF (nested); `BLEND=exp` with '
        "`blend.route=[es:exp-es,...]`: a route by language; `submissions/<blend>.csv`",
        checks=("models", "submission"),
        writes=("`models/<blend>/` and `submissions/<blend>.csv` (see [recipes.md](recipes.md))",),
    ),
    Stage(
        "board",
        "every experiment and blend under `models/`, best test AUC estimate first; `models/board.md`",
        checks=("board",),
        writes=("`models/board.md` (see [recipes.md](recipes.md))",),
    ),
    Stage(
        "search",
        'an Optuna study over `search.space` (`ARGS="search.trials=N"`), each trial `models/<name>-t<n>/`; '
        "`models/<name>/search/`",
        driver=True,
        checks=("input", "models"),
        writes=(
            "`models/<name>-t<n>/`: each trial an experiment of its own ([search.md](search.md)); "
            "`models/<name>/search/study.db` (the study, unless `search.storage`), `history.png`",
        ),
    ),
    Stage(
        "recipe",
        "a chain of stages (`pipeline/configs/recipes/<CONFIG>.yaml`), side by side, then the board",
        writes=(
            "`input/recipes/<recipe>/<step>.log`: each step's output; what each step's stage writes; at the end the "
            "board (`models/board.md`)",
        ),
    ),
    Stage(
        "leaks",
        "validation rows checked by content for versions of themselves among their fold's training rows",
        writes=(
            "nothing: prints the validation rows (validation.csv's and held-out ones) that have a twin among their "
            "fold's training rows ([recipes.md](recipes.md#six-languages-a-validation-that-looks-like-the-test))",
        ),
    ),
    Stage(
        "bench",
        "peak memory and speed of each memory technique, side by side with HF Trainer",
        also=("bench-gpu",),
        writes=(
            "`models/bench/<model>.md` (the table, the floor and the notes, also printed), `.json` (every row's raw "
            "measurements, per-step times included), `.png` (peak memory and samples per second per row) "
            "([bench.md](bench.md))",
        ),
    ),
    Stage(
        "kernel",
        "push a Kaggle GPU notebook, follow it, bring its output back",
        also=("kernel-status", "kernel-output"),
        writes=(
            "`kernel/<slug>/code/` (the code bundle, uploaded as the private dataset `<user>/<slug>-code`) and "
            "`kernel/<slug>/notebook/` (the kernel pushed); the kernel's output brought back ([kaggle.md](kaggle.md))",
        ),
    ),
    Stage(
        "submit",
        "submit to the competition and record the score; list the recorded submissions",
        also=("submissions",),
        writes=(
            "`models/<name>/submissions.jsonl`: one line per submission (time, file, message, ref, status, public and "
            "private score)",
        ),
    ),
)

TABLE_BEGIN, TABLE_END = "<!-- stages: from pipeline/stages.py -->", "<!-- /stages -->"
WRITES_BEGIN, WRITES_END = "<!-- writes: from pipeline/stages.py -->", "<!-- /writes -->"


def by_name(name: str) -> Stage | None:
    return next((s for s in STAGES if s.name == name), None)


def of(name: str) -> Stage:
    """The record of a stage the code names (its own, in experiments.preflight and validity.usable_folds)."""
    stage = by_name(name)
    if stage is None:
        raise KeyError(f"no stage {name!r} in pipeline/stages.py")
    return stage


def help_lines() -> str:
    """The stage lines of `make help` (the Makefile's own targets follow them)."""
    return "".join(f"  make {s.name:<14} {s.doc.replace('`', '')}\n" for s in STAGES)


def words(keys: tuple[str, ...], table: dict[str, str]) -> str:
    return "; ".join(table[k] for k in keys) or "-"


def modules_table() -> str:
    """docs/stages.md's table: what each make target does, the module it runs, what it checks first, what it reads
    of a fold."""
    rows = [
        f"| {', '.join(f'`make {t}`' for t in s.targets)} | {s.doc} | `{s.path}` | {words(s.checks, CHECKS)} | "
        f"{words(s.reads, READS)} |"
        for s in STAGES
    ]
    head = "| make target | what | module | checks first | reads of a fold |"
    return "\n".join([head, "|---|---|---|---|---|", *rows]) + "\n"


def writes_table() -> str:
    """docs/stages.md's "What each stage writes": a stage's first row names it, its other rows leave that cell
    empty."""
    rows = [
        f"| {f'`make {s.name}`' if i == 0 else ''} | {what} |".replace("|  |", "| |")
        for s in STAGES
        for i, what in enumerate(s.writes)
    ]
    return "\n".join(["| stage | writes |", "|---|---|", *rows]) + "\n"


GENERATED = {  # file -> its text with the part made from STAGES rewritten
    "docs/stages.md": lambda t: between(
        between(t, TABLE_BEGIN, TABLE_END, f"\n{modules_table()}"), WRITES_BEGIN, WRITES_END, f"\n{writes_table()}"
    ),
}


def main(argv: list[str] | None = None) -> int:
    """`names`: the stage names (the Makefile); `help`: make help's stage lines; `write`: the generated parts."""
    argv = sys.argv[1:] if argv is None else argv
    what = argv[0] if argv else ""
    if what == "names":
        print(" ".join(s.name for s in STAGES))
    elif what == "help":
        sys.stdout.write(help_lines())
    elif what == "write":
        root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
        for name, rewrite in GENERATED.items():
            path = root / name
            path.write_text(rewrite(path.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        print("usage: python3 -m pipeline.stages {names,help,write [ROOT]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
