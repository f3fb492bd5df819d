"""Every stage, declared once: its name (the make target, `python -m pipeline <name>`), its module, its doc, the
paths it checks before any work and the files of its own experiment's folds it reads.

A stage is a module with a `main(argv=None)`: `pipeline/<name>.py` unless its record names another, so a stage
may share its name with a module that is not a stage (a stage `errors` beside pipeline/errors.py). Made from
STAGES: the choices of `python -m pipeline`, the stage lines of `make help`, the Makefile targets of the stages
without a recipe of their own, what `experiments.preflight` checks and what `validity.usable_folds` needs of a
fold, and docs/stages.md's table, which `python3 -m pipeline.stages write` rewrites and tests/test_stages.py checks.
The import rules of the stages (none imports another; only a driver imports one) are checked from the same
records by tests/test_architecture.py, so no copy of the list sits in pyproject.toml.

Standard library only, and nothing at import: the Makefile reads it with the system python, before .venv exists.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

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
    ),
    Stage(
        "stage1",
        "data and one model for the stage-1 experiment `model.init_from` names (`GPUS=N` for DDP)",
        driver=True,
    ),
    Stage("train", "train every fold (`GPUS=N` for DDP); writes `models/<name>/`", checks=("prepared", "models")),
    Stage(
        "predict",
        "fold models on test, ensembled into `submissions/submission.csv` (`GPUS=N`: the folds shared)",
        # fold<k>/test.csv caches the test predictions: the models folder is written too
        checks=("prepared", "submission", "submission.csv", "models"),
        reads=("tested", "all"),
    ),
    Stage(
        "export",
        "each trained fold as a folder transformers and torch load alone (docs/export.md)",
        checks=("models",),
        reads=("all",),  # weights, head.json, vocabulary map: every file done.json records
    ),
    # the fold table every stage that trains prints as well (train, baseline: scoring.report.cv_report)
    Stage("cv", "fold and per-language AUC of what has been trained so far", checks=("models",), reads=("oof",)),
    Stage(
        "baseline",
        "TF-IDF + logistic regression on the same folds, side by side with the trained model",
        checks=("prepared", "models", "submission"),
        reads=("oof", "test"),
    ),
    Stage(
        "blend",
        '`BLEND="exp1 exp2 ..."`: rank-average with weights fit on OOF (nested); `submissions/<blend>.csv`',
        checks=("models", "submission"),
    ),
    Stage(
        "board",
        "every experiment and blend under `models/`, best test AUC estimate first; `models/board.md`",
        checks=("board",),
    ),
    Stage(
        "search",
        'an Optuna study over `search.space` (`ARGS="search.trials=N"`), each trial `models/<name>-t<n>/`; '
        "`models/<name>/search/`",
        driver=True,
        checks=("input", "models"),
    ),
    Stage("recipe", "a chain of stages (`pipeline/configs/recipes/<CONFIG>.yaml`), side by side, then the board"),
    Stage("leaks", "validation rows checked by content for versions of themselves among their fold's training rows"),
    Stage("bench", "peak memory and speed of each memory technique, side by side with HF Trainer", also=("bench-gpu",)),
    Stage(
        "kernel",
        "push a Kaggle GPU notebook, follow it, bring its output back",
        also=("kernel-status", "kernel-output"),
    ),
    Stage(
        "submit", "submit to the competition and record the score; list the recorded submissions", also=("submissions",)
    ),
)

TABLE_BEGIN, TABLE_END = "<!-- stages: from pipeline/stages.py -->", "<!-- /stages -->"


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


def between(text: str, begin: str, end: str, body: str) -> str:
    head, rest = text.split(begin, 1)
    return f"{head}{begin}\n{body}{end}{rest.split(end, 1)[1]}"


GENERATED = {  # file -> its text with the part made from STAGES rewritten
    "docs/stages.md": lambda t: between(t, TABLE_BEGIN, TABLE_END, modules_table()),
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
