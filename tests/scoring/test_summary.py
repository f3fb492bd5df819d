"""The block a run ends with (pipeline.scoring.summary): its figures and files, as train and predict print it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import config, layout
from pipeline.files import file_record
from pipeline.scoring import metrics, summary
from tests.helpers.tinyrun import TINY, overrides


def test_the_block_names_the_figures_the_test_auc_the_time_and_every_file(tmp_path: Path) -> None:
    cfg = config.load("sample", overrides(tmp_path))
    exp = layout.experiment_dir(cfg)
    exp.mkdir(parents=True)
    cv = {
        "metrics": {"six": 0.81234, "valid_auc": 0.8, "brier": float("nan")},
        "folds": {"0": {}, "1": {}},
        "per_lang": {"es": 0.9, "fr": None},
        "test_auc": {"auc": 0.75, "rows": 63812, "per_lang": {"es": 0.7}, "folds": ["fold0"]},
    }
    (exp / layout.CV_JSON).write_text(json.dumps(cv).replace("NaN", "null"))
    (exp / layout.CV_PNG).write_bytes(b"png")
    subs = Path(cfg.submissions_dir)
    subs.mkdir()
    (subs / "sample.csv").write_text("id,toxic\n")
    (subs / "submission.csv").write_text("id,toxic\n")
    record = {"name": "sample", "folds": ["fold0", "fold1"], "of": 5, "file": file_record(subs / "submission.csv")}
    (subs / "submission.json").write_text(json.dumps(record))
    # every metric of the one list, in its order: the two given with their values, the others (Brier: NaN) '-'
    given = {"6-lang AUC": "6-lang AUC 0.8123", "valid AUC": "valid AUC 0.8000"}
    figures = " | ".join(given.get(m.header, f"{m.header} -") for m in metrics.METRICS)
    assert figures.startswith("6-lang AUC 0.8123 | valid AUC 0.8000 |") and "Brier -" in figures
    assert summary.block(cfg, "train", 61.4, submission="(2 of 5 folds)") == "\n".join([
        "== train: sample ==",
        f"OOF         2 folds: {figures}",
        "languages   es 0.9000 fr -",
        "test AUC    1 fold: 0.7500 on 63,812 labelled rows (es 0.7000)",
        "wall time   61 s",
        f"report      {exp / 'cv.png'}",
        "curves      none yet (make train)",
        "board       none yet (make board)",
        f"submission  {subs / 'sample.csv'} (2 of 5 folds)",
        f"            {subs / 'submission.csv'} (2 of 5 folds)",
    ])  # fmt: skip
    (subs / "submission.csv").write_text("id,toxic\na,0.5\n")  # another file than the record's: not claimed
    assert "submission.csv" not in summary.block(cfg, "train", 1)


def test_a_test_auc_of_a_language_with_one_class_is_a_dash(tmp_path: Path) -> None:
    """cv.json holds null for a figure that is not a number (the test AUC of a language whose labels are of one
    class): the block shows '-' for it."""
    cfg = config.load("sample", overrides(tmp_path))
    exp = layout.experiment_dir(cfg)
    exp.mkdir(parents=True)
    score = {"auc": 0.75, "rows": 10, "per_lang": {"es": 0.7, "tr": None}, "folds": ["fold0"]}
    (exp / layout.CV_JSON).write_text(json.dumps({"metrics": {"six": None}, "per_lang": {}, "test_auc": score}))
    assert "test AUC    1 fold: 0.7500 on 10 labelled rows (es 0.7000 tr -)" in summary.block(cfg, "predict", 1)


@pytest.mark.slow  # trains two folds of the tiny model: seconds
def test_train_and_predict_each_end_with_the_block(tmp_path: Path, capsys, torch_one_thread) -> None:
    from pipeline import data, predict, train

    args = ["--config", "sample", *overrides(tmp_path), *TINY]
    assert data.main(args) == 0
    capsys.readouterr()
    assert train.main(args) == 0
    out = capsys.readouterr().out
    block = out[out.index("== train: sample ==") :].splitlines()
    assert [line.split()[0] for line in block[1:]] == ["OOF", "languages", "wall", "report", "curves", "board",
                                                       "submission"], block  # fmt: skip
    assert block[1].startswith("OOF         2 folds: 6-lang AUC ") and "| valid AUC 0." in block[1] and block[-2:] == [
        "board       none yet (make board)", "submission  none yet (make predict)"]  # fmt: skip
    assert str(tmp_path / "models" / "sample" / "curves.png") in out
    assert predict.main(args) == 0
    out = capsys.readouterr().out
    block = out[out.index("== predict: sample ==") :].splitlines()
    subs = tmp_path / "submissions"
    assert block[-2:] == [f"submission  {subs / 'sample.csv'} (2 of 2 folds)",
                          f"            {subs / 'submission.csv'} (2 of 2 folds)"]  # fmt: skip
