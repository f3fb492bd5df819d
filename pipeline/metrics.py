"""AUC overall and per language, and the cross-validation report (`make cv`).

Reads   models/<name>/fold<k>/oof.csv and done.json (whatever has been trained so far)
Writes  models/<name>/oof.csv   every validation row with its out-of-fold prediction
        models/<name>/cv.json   AUC per fold, overall OOF AUC and per language
        models/<name>/cv.png    ROC curves per language, AUC per fold
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score, roc_curve

from pipeline import config as config_mod
from pipeline import fingerprint
from pipeline.config import Config
from pipeline.errors import PipelineError, run_stage
from pipeline.io import atomic_path, read_json, write_csv, write_json


def auc(y, p) -> float:
    """ROC AUC, or NaN where only one class is present."""
    y = np.asarray(y)
    if len(np.unique(y)) < 2:
        return float("nan")
    return float(roc_auc_score(y, p))


def auc_by_lang(y, p, lang) -> dict[str, float]:
    y, p, lang = np.asarray(y), np.asarray(p), np.asarray(lang)
    return {str(g): auc(y[lang == g], p[lang == g]) for g in sorted(set(lang))}


def experiment_dir(cfg: Config) -> Path:
    return Path(cfg.models_dir) / cfg.name


def fold_dirs(exp: Path) -> list[Path]:
    """Every fold folder with a done.json, in fold order (fold-1, a stage-1 model, first); no fingerprint check."""
    dirs = [p.parent for p in exp.glob("fold*/done.json")]
    return sorted(dirs, key=lambda p: int(p.name[4:]))


def cv_summary(oof: pd.DataFrame, done: dict[int, dict]) -> dict:
    folds = {int(k): auc(g["toxic"], g["pred"]) for k, g in oof.groupby("fold")}
    return {
        "oof_auc": auc(oof["toxic"], oof["pred"]),
        "per_lang": auc_by_lang(oof["toxic"], oof["pred"], oof["lang"]),
        "folds": folds,
        "fold_per_lang": {int(k): auc_by_lang(g["toxic"], g["pred"], g["lang"]) for k, g in oof.groupby("fold")},
        "rows": len(oof),
        "fold_details": done,
    }


def format_table(summary: dict) -> str:
    langs = list(summary["per_lang"])
    head = (
        f"{'fold':>4}  {'epochs':>6}  {'best AUC':>8}  " + "  ".join(f"{lg:>6}" for lg in langs) + f"  {'minutes':>7}"
    )
    lines = [head, "-" * len(head)]
    for k, a in summary["folds"].items():
        d = summary["fold_details"].get(k, {})
        per = summary["fold_per_lang"][k]
        lines.append(
            f"{k:>4}  {d.get('epochs', 0):>6}  {a:>8.4f}  "
            + "  ".join(f"{per.get(lg, float('nan')):>6.4f}" for lg in langs)
            + f"  {d.get('minutes', float('nan')):>7.1f}"
        )
    lines.append("-" * len(head))
    minutes = sum(d.get("minutes", 0) for d in summary["fold_details"].values())
    lines.append(
        f"{'OOF':>4}  {'':>6}  {summary['oof_auc']:>8.4f}  "
        + "  ".join(f"{summary['per_lang'][lg]:>6.4f}" for lg in langs)
        + f"  {minutes:>7.1f}"
    )
    return "\n".join(lines)


def plot(oof: pd.DataFrame, summary: dict, path: Path) -> None:
    """ROC per language on the left, AUC per fold on the right: the CV at a glance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for lang, g in oof.groupby("lang"):
        if g["toxic"].nunique() == 2:
            fpr, tpr, _ = roc_curve(g["toxic"], g["pred"])
            left.plot(fpr, tpr, label=f"{lang} (AUC {summary['per_lang'][lang]:.3f}, n={len(g)})")
    fpr, tpr, _ = roc_curve(oof["toxic"], oof["pred"])
    left.plot(fpr, tpr, color="black", lw=2, label=f"all (AUC {summary['oof_auc']:.3f})")
    left.plot([0, 1], [0, 1], ls=":", color="grey")
    left.set(xlabel="false positive rate", ylabel="true positive rate", title="Out-of-fold ROC by language")
    left.legend(loc="lower right", fontsize=8)
    folds = list(summary["folds"])
    values = [summary["folds"][k] for k in folds]
    bars = right.bar([str(k) for k in folds], values, color="tab:blue")
    right.bar_label(bars, fmt="%.3f", fontsize=8)
    right.axhline(summary["oof_auc"], color="black", ls="--", label=f"OOF {summary['oof_auc']:.3f}")
    low = min([*values, summary["oof_auc"]])
    right.set(xlabel="fold", ylabel="AUC", title="AUC per fold", ylim=(max(0.0, low - 0.05), 1.0))
    right.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def usable_folds(cfg: Config, digest: str | None = None, what: str = "cv") -> list[Path]:
    """The complete folds made from the current inputs and settings; says which others it leaves out."""
    exp = experiment_dir(cfg)
    digest = digest or fingerprint.current(cfg)
    dirs, left_out = fingerprint.select_folds(exp, digest, cfg.data.folds)
    why = fingerprint.describe(left_out)
    if not dirs:
        hint = f" ({why})" if left_out else ""
        differ = fingerprint.settings_differ(cfg, exp / "pipeline.yaml")
        if differ:  # most often: this stage was run without the ARGS `make train` had
            hint += f"; the settings differ from {exp}/pipeline.yaml in {differ}: give the same CONFIG and ARGS"
        raise PipelineError(f"no trained folds for these inputs and settings in {exp}{hint}; run `make train` first")
    if left_out:
        print(f"{what}: using {', '.join(d.name for d in dirs)}; left out {why}", file=sys.stderr)
    return dirs


def cv_report(cfg: Config, digest: str | None = None) -> dict:
    """Gather the usable folds' OOF predictions; write oof.csv, cv.json and cv.png."""
    exp = experiment_dir(cfg)
    dirs = usable_folds(cfg, digest)
    oof = pd.concat(
        [pd.read_csv(d / "oof.csv", dtype={"id": str}, keep_default_na=False) for d in dirs], ignore_index=True
    )
    done = {int(d.name[4:]): read_json(d / "done.json") for d in dirs}
    summary = cv_summary(oof, done)
    old = exp / "cv.json"
    if old.exists():  # the test score `make predict` measured stays while it belongs to the same folds
        test = read_json(old).get("test_auc")
        if test and test.get("folds") == [d.name for d in dirs] and test.get("digests") == fold_digests(dirs):
            summary["test_auc"] = test
    write_csv(exp / "oof.csv", oof)
    write_json(exp / "cv.json", summary)
    plot(oof, summary, exp / "cv.png")
    return summary


def fold_digests(dirs: list[Path]) -> list[str]:
    return [read_json(d / "done.json").get("digest", "") for d in dirs]


def main(argv=None) -> int:
    args = config_mod.parser("Print the fold AUC table of what has been trained so far.").parse_args(argv)

    def stage() -> None:
        cfg = config_mod.from_args(args)
        summary = cv_report(cfg)
        print(format_table(summary))
        print(f"wrote {experiment_dir(cfg)}/cv.json, cv.png, oof.csv")

    return run_stage(stage)


if __name__ == "__main__":
    sys.exit(main())
