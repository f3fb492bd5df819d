"""Stage `make cv`: the fold AUC table of what has been trained so far, for the current inputs and settings.

Reads   models/<name>/fold<k>/oof.csv and done.json of the folds made from the current inputs and settings,
        and their test.csv where `make predict` wrote it (each test language's toxic rate by EM: scoring/rates.py)
Writes  models/<name>/oof.csv   every validation row with its out-of-fold prediction
        models/<name>/cv.json   every metric (scoring.metrics.METRICS) of the OOF and of each fold, AUC per language
        models/<name>/cv.png    ROC curves per language, AUC per fold

Folds of other settings or inputs are left out and named with the reason (pipeline.validity.usable_folds).
"""

from __future__ import annotations

import sys

from pipeline import config as config_mod
from pipeline import experiments, layout
from pipeline.errors import run_stage
from pipeline.schema import Config
from pipeline.scoring import report


def run(cfg: Config) -> dict:
    experiments.preflight(cfg, "cv")
    summary = report.cv_report(cfg)
    print(report.fold_table(summary))
    if cfg.train.langs:  # a specialist's figures are of its languages' rows alone, not of the test's six
        langs = ",".join(cfg.train.langs)
        print(f"cv: train.langs=[{langs}]: the OOF holds {langs} rows only, so every figure above is theirs; the "
              "6-lang estimate comes from routing it (blend.route, recipes.md#per-language-specialists)")  # fmt: skip
    print(f"wrote {layout.experiment_dir(cfg)}/cv.json, cv.png, curves.png, oof.csv")
    return summary


def main(argv=None) -> int:
    args = config_mod.parser("Print the fold AUC table of what has been trained so far.").parse_args(argv)
    return run_stage(lambda: run(config_mod.from_args(args)))


if __name__ == "__main__":
    sys.exit(main())
