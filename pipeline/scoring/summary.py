"""The block a run ends with (`make train`, `make predict`, `make blend`, and any stage that runs them): the
experiment's OOF figures and its AUC per test language, the test AUC where the competition's labels are
present, the run's wall time, and where its report, curves, the board and the submission are.

Read from what the run left (models/<name>/cv.json and the files beside it), so that every stage that ends a run
prints the same block: `print(summary.block(cfg, "train", seconds))`.
"""

from __future__ import annotations

from pathlib import Path

from pipeline import layout
from pipeline.schema import Config
from pipeline.scoring import metrics, report
from pipeline.scoring.publish import common_holds


def folds_of(record: dict) -> str:
    """`5 folds: ` as a cv.json record counts them (its `folds`: a mapping or a list), '' where it does not say."""
    folds = record.get("folds") if isinstance(record, dict) else None
    return f"{len(folds)} fold{'s' * (len(folds) != 1)}: " if isinstance(folds, (dict, list)) and folds else ""


def figures_line(cv: dict) -> str:
    """`5 folds: 6-lang AUC 0.8123 | valid AUC 0.8012 | Brier 0.1234`: every metric of METRICS, '-' for one it
    lacks, after the folds they are of (the OOF and a test AUC of other folds are told apart)."""
    saved = metrics.saved_figures(cv)
    return folds_of(cv) + " | ".join(f"{m.header} {metrics.shown(saved.get(m.key), m.fmt)}" for m in metrics.METRICS)


def languages_line(cv: dict) -> str:
    """`es 0.8100 it 0.7900 ... ru -`: the AUC of each test language on the rows that stand for it."""
    per = cv.get("per_lang") if isinstance(cv.get("per_lang"), dict) else {}
    return " ".join(f"{lg} {metrics.shown(v, '.4f')}" for lg, v in per.items()) or "-"


def test_line(cv: dict) -> str | None:
    """`0.7890 on 63,812 labelled rows (es ... )` where predict scored the submission on test labels; else None."""
    score = cv.get("test_auc")
    if not isinstance(score, dict) or not isinstance(score.get("auc"), (int, float)):
        return None
    per = " ".join(f"{lg} {metrics.shown(v, '.4f')}" for lg, v in (score.get("per_lang") or {}).items())
    return f"{folds_of(score)}{score['auc']:.4f} on {score.get('rows', 0):,} labelled rows" + (
        f" ({per})" if per else ""
    )


def where(path: Path, missing: str) -> str:
    """The path where the file is, else what writes it."""
    return str(path) if path.is_file() else f"none yet ({missing})"


def block(cfg: Config, stage: str, seconds: float, name: str | None = None, submission: str = "") -> str:
    """The end-of-run block of experiment `name` (the config's own by default) after `stage` ran for `seconds`;
    `submission`: what the stage says of the submission it wrote (its folds), after the path."""
    exp = layout.experiment_dir(cfg, name)
    cv = report.read_cv(exp / layout.CV_JSON)
    rows = [("OOF", figures_line(cv) if cv else "none yet (make train, or make cv)")]
    if cv:
        rows.append(("languages", languages_line(cv)))
    test = test_line(cv)
    if test is not None:
        rows.append(("test AUC", test))
    rows.append(("wall time", f"{seconds:.0f} s"))
    rows.append(("report", where(exp / layout.CV_PNG, "make cv")))
    if (exp / layout.CURVES_PNG).is_file() or stage == "train":  # a blend trains nothing: no curves to show
        rows.append(("curves", where(exp / layout.CURVES_PNG, "make train")))
    rows.append(("board", where(layout.board_path(cfg), "make board")))
    sub = layout.submission_path(cfg, name)
    if name is None and cfg.train.langs:  # a specialist predicts its languages' test rows only
        langs = ",".join(cfg.train.langs)
        rows.append(
            ("submission", f"none of its own: train.langs=[{langs}] (route it: blend.route={langs}:{exp.name})")
        )
    else:
        rows.append(("submission", f"{sub}{f' {submission}' if submission else ''}" if sub.is_file()
                     else "none yet (make predict)"))  # fmt: skip
    held = common_holds(cfg)
    if held is not None and held.get("name") == exp.name:  # the file a Kaggle notebook submits
        rows.append(("", f"{layout.submission_csv(cfg)} ({len(held['folds'])} of {held.get('of')} folds)"))
    return "\n".join([f"== {stage}: {exp.name} ==", *(f"{k:<11} {v}" for k, v in rows)])
