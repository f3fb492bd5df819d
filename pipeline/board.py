"""Stage `make board`: every experiment and blend under models/, side by side, best OOF first.

Reads   models/*/cv.json (or, where it is missing, the completed folds' oof.csv and done.json),
        models/*/pipeline.yaml for a trained experiment's settings
Writes  models/board.md   the table that is printed

Columns: OOF AUC overall and per language, folds done (of data.folds), minutes (a blend: its members'),
test AUC where the experiment's cv.json has `test_auc` (written when the competition's test labels are
known), and the settings that matter: model, max_length, epochs, lr, effective batch.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd
import yaml

from pipeline import config as config_mod
from pipeline import layout
from pipeline.config import Config
from pipeline.errors import PipelineError, run_stage
from pipeline.files import atomic_write_text, read_json
from pipeline.scoring import report


def summary_of(exp: Path) -> dict | None:
    """cv.json, or the same summary computed from the completed folds; None for a folder with neither.

    Folds without OOF rows (a stage-1 run on the training-only rows, fold -1) count as done, without AUC."""
    if (exp / layout.CV_JSON).exists():
        return read_json(exp / layout.CV_JSON)
    dirs = layout.done_dirs(exp)
    if not dirs:
        return None
    done = {k: read_json(d / layout.DONE) for k, d in dirs.items()}
    scored = [d for d in dirs.values() if (d / layout.OOF).exists()]
    if not scored:
        return {"oof_auc": math.nan, "per_lang": {}, "folds": {}, "fold_details": done}
    oof = pd.concat([pd.read_csv(d / layout.OOF, dtype={"id": str}, keep_default_na=False) for d in scored])
    return report.cv_summary(oof, done)


def folds_done(summary: dict, total) -> str:
    """`3/5` folds complete of data.folds; a run on the training-only rows alone (fold -1) is `stage 1`."""
    done = [int(k) for k in summary.get("fold_details", {}) or summary["folds"]]
    if done == [-1]:
        return "stage 1"
    return f"{sum(k >= 0 for k in done)}/{total}"


def settings(exp: Path, summary: dict) -> dict:
    """model, max_length, epochs, lr, effective batch and the number of folds the experiment has."""
    details = list(summary.get("fold_details", {}).values())
    first = details[0] if details else {}
    if "blend" in summary:
        b = summary["blend"]
        members = " + ".join(f"{n} {b['weights'][n]:.2f}" for n in b["members"])
        return {"model": f"blend: {members}", "folds_total": len(summary["folds"])}
    if (exp / layout.RUN_CONFIG).exists():
        # read as plain YAML, not as a Config: an experiment from an older version still gets its row
        saved = yaml.safe_load((exp / layout.RUN_CONFIG).read_text()) or {}
        model, train = saved.get("model", {}), saved.get("train", {})
        batch = first.get("effective_batch", train.get("micro_batch", 0) * train.get("accumulation", 0) or None)
        return {
            "model": model.get("name", "?"),
            "max_length": model.get("max_length"),
            "epochs": train.get("epochs"),
            "lr": train.get("lr"),
            "batch": batch,
            "folds_total": saved.get("data", {}).get("folds", len(summary["folds"])),
        }
    # no resolved config beside it (the TF-IDF baseline): what its done.json says
    return {"model": first.get("model", "?"), "epochs": first.get("epochs"), "folds_total": len(summary["folds"])}


def rows(models: Path) -> list[dict]:
    """One row per experiment or blend folder, best OOF AUC first (NaN last)."""
    out = []
    for exp in sorted(p for p in models.iterdir() if p.is_dir()):
        summary = summary_of(exp)
        if summary is None:
            continue
        s = settings(exp, summary)
        minutes = sum(d.get("minutes", 0) for d in summary.get("fold_details", {}).values())
        out.append(
            {
                "name": exp.name,
                "oof": summary["oof_auc"],
                "per_lang": summary["per_lang"],
                "folds": folds_done(summary, s.pop("folds_total")),
                "minutes": minutes,
                "test": (summary.get("test_auc") or {}).get("auc"),  # {auc, per_lang, rows} from predict or blend
                **s,
            }
        )
    return sorted(out, key=lambda r: -r["oof"] if not math.isnan(r["oof"]) else math.inf)


def cell(value, fmt: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, fmt)


def board_table(board: list[dict]) -> str:
    """A Markdown table: readable printed, rendered on GitHub."""
    langs = sorted({lg for r in board for lg in r["per_lang"]})
    head = ["experiment", "OOF AUC", *langs, "folds", "minutes", "test AUC"]
    head += ["model", "max_len", "epochs", "lr", "batch"]
    body = []
    for r in board:
        values = [
            r["name"],
            cell(r["oof"], ".4f"),
            *(cell(r["per_lang"].get(lg), ".4f") for lg in langs),
            r["folds"],
            cell(r["minutes"], ".1f"),
            cell(r["test"], ".4f"),
            r["model"],
            cell(r.get("max_length")),
            cell(r.get("epochs")),
            cell(r.get("lr"), "g"),
            cell(r.get("batch")),
        ]
        body.append([str(v) for v in values])
    # padded to the widest cell of each column, so that the printed table reads as well as the rendered one
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in [head, *body]]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def run(cfg: Config) -> str:
    models = layout.models_root(cfg)
    board = rows(models) if models.is_dir() else []
    if not board:
        raise PipelineError(f"nothing to list in {models}/: run `make train`, `make baseline` or `make blend` first")
    text = board_table(board)
    atomic_write_text(layout.board_path(cfg), f"# Board\n\nBest OOF AUC first.\n\n{text}\n")
    print(text)
    print(f"\nwrote {layout.board_path(cfg)}")
    return text


def main(argv=None) -> int:
    args = config_mod.parser("List every experiment and blend under models/, best OOF AUC first.").parse_args(argv)
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
