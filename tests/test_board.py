"""`make board`: every experiment and blend under models/, best OOF first, also in models/board.md."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline import blend, board, config, layout, validity
from pipeline.errors import PipelineError
from pipeline.files import read_json, write_json
from pipeline.scoring import metrics, paired, ranking, report
from tests.helpers import board_rows
from tests.helpers.experiments import Competition, write_lengths

VALID = metrics.BY_KEY["valid_auc"].header


def board_config(models: Path) -> config.Config:
    """The board of `models`, whose experiments' inputs are beside it (tests' Competition layout)."""
    return config.load("sample", [f"models_dir={models}", f"input_dir={models.parent / 'input'}"])


def noisy(y: np.ndarray, scale: float, seed: int) -> np.ndarray:
    return y + np.random.default_rng(seed).normal(0, scale, len(y))


def make_models(tmp_path: Path) -> Path:
    """A trained experiment (its own settings, every fold, a test AUC), a TF-IDF baseline, a blend of the two,
    one experiment with 2 of 5 folds and no cv.json yet, a stage-1 run (fold -1 alone, no OOF) and a folder
    that is no experiment."""
    comp = Competition(tmp_path, 600)
    models, y = comp.models, comp.rows["toxic"].to_numpy()
    tests = {k: np.random.default_rng(k).random(90) for k in range(5)}
    settings = ("model.max_length=256", "train.epochs=3", "train.lr=2e-5")
    xlmr = comp.experiment("xlmr", noisy(y, 1.0, 1), tests, overrides=settings, effective_batch=64)
    tfidf = comp.experiment("xlmr-tfidf", noisy(y, 0.7, 2), tests, kind="tfidf+lr")
    report.cv_report(comp.config("name=xlmr", *settings))
    report.cv_report(comp.config("name=xlmr-tfidf"), read_json(tfidf / "fold0" / "done.json")["digest"])
    cv = read_json(xlmr / "cv.json")
    folds = [f"fold{k}" for k in range(5)]
    digests = [read_json(xlmr / f / "done.json")["digest"] for f in folds]
    write_json(xlmr / "cv.json", {**cv, "test_auc": {"auc": 0.8765, "per_lang": {}, "rows": 90, "folds": folds,
                                                    "digests": digests}})  # fmt: skip
    blend.run(comp.config("blend.members=[xlmr,xlmr-tfidf]"))
    comp.experiment("partial", noisy(y, 3.0, 3), None, folds=(0, 1))
    comp.experiment("stage1", np.zeros(len(y)), None, folds=(-1,), epochs=2, minutes=4.0)
    (models / "bench").mkdir()
    (models / "bench" / "xlm-roberta-base.md").write_text("a table\n")
    return models


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """make_models's folders, made once for the tests of this file (each changes a copy of its own)."""
    base = tmp_path_factory.mktemp("board")
    make_models(base)
    return base


def copy_of(built: Path, tmp_path: Path) -> Path:
    """A test's own copy of the built folders; its models folder."""
    shutil.copytree(built, tmp_path, dirs_exist_ok=True, symlinks=True)
    return tmp_path / "models"


def test_board_lists_experiments_and_blends(built: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    models = copy_of(built, tmp_path)
    text = board.run(board_config(models))
    out = capsys.readouterr().out
    assert text in out and (models / "board.md").read_text().count(text) == 1

    rows = board_rows(text)
    names = [r["experiment"] for r in rows]
    assert sorted(names) == ["partial (incomplete)", "stage1", "xlmr", "xlmr+xlmr-tfidf", "xlmr-tfidf"]  # bench: none
    oof = [float(r[VALID]) for r in rows[:-1]]
    assert oof == sorted(oof, reverse=True)  # best OOF first
    assert names[-2:] == ["partial (incomplete)", "stage1"]  # the noisiest, then the one without OOF
    want = ["experiment", *(m.header for m in metrics.METRICS), board.NEXT, "w/o length", "es", "it", "tr", "folds"]
    assert list(rows[0])[: len(want)] == want
    row = {r["experiment"].split(" (")[0]: r for r in rows}
    cv = read_json(models / "xlmr" / "cv.json")
    assert (
        row["xlmr"][VALID] == f"{cv['metrics']['valid_auc']:.4f}" and row["xlmr"]["es"] == f"{cv['per_lang']['es']:.4f}"
    )
    # the Brier score needs probabilities: a trained experiment's OOF has them, a blend's ranks do not
    assert row["xlmr"]["Brier"] == f"{cv['metrics']['brier']:.4f}" and row["xlmr+xlmr-tfidf"]["Brier"] == "-"
    assert row["xlmr"]["test AUC"] == "0.8765" and row["xlmr-tfidf"]["test AUC"] == "-"
    without = ((cv.get("six") or {}).get("lengths") or {}).get("without")
    assert row["xlmr"]["w/o length"] == (f"{without:.4f}" if without is not None else "-"), cv.get("six")
    assert row["xlmr"]["folds"] == "5 of 5" and row["partial"]["folds"] == "2 of 5"  # folds done of data.folds
    assert row["xlmr"]["minutes"] == "7.5" and row["partial"]["minutes"] == "3.0"  # 1.5 a fold
    assert [row["xlmr"][k] for k in ("model", "max_len", "epochs", "lr", "batch")] == [
        "tiny",
        "256",
        "3",
        "2e-05",
        "64",
    ]
    assert row["xlmr-tfidf"]["model"] == "tfidf+lr" and row["xlmr-tfidf"]["lr"] == "-"
    w = read_json(models / "xlmr+xlmr-tfidf" / "cv.json")["blend"]["weights"]
    assert row["xlmr+xlmr-tfidf"]["model"] == f"blend: xlmr {w['xlmr']:.2f} + xlmr-tfidf {w['xlmr-tfidf']:.2f}"
    assert row["xlmr+xlmr-tfidf"]["minutes"] == "15.0"  # its members' minutes
    assert row["stage1"]["folds"] == "stage 1" and row["stage1"][VALID] == "-"
    assert row["stage1"]["minutes"] == "4.0"
    assert not (models / "partial" / "cv.json").exists()  # the board reads, it does not write experiments
    assert "(stale)" not in text and "- partial (incomplete): fold2, fold3, fold4: not trained" in text


def test_a_lora_experiment_is_named_with_its_rank_on_the_board(tmp_path: Path) -> None:
    comp = Competition(tmp_path, 300)
    y = comp.rows["toxic"].to_numpy()
    comp.experiment("full", noisy(y, 1.0, 1), None)
    comp.experiment("lora", noisy(y, 1.0, 2), None, overrides=("model.lora.r=8",))
    rows = {r["experiment"]: r for r in board_rows(board.run(board_config(comp.models)))}
    assert rows["lora"]["model"] == "tiny + LoRA r=8" and rows["full"]["model"] == "tiny"


def test_board_with_nothing_to_list(tmp_path: Path) -> None:
    with pytest.raises(PipelineError, match="nothing to list"):
        board.run(config.load("sample", [f"models_dir={tmp_path / 'models'}"]))


def test_board_marks_stale_experiments_and_skips_broken_folders(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    models = copy_of(built, tmp_path)
    # xlmr is trained again with another learning rate (its pipeline.yaml says so), but no fold is yet
    saved = config.load_file(models / "xlmr" / "pipeline.yaml")
    config.save(config.with_overrides(saved, ["train.lr=1e-3"]), models / "xlmr" / "pipeline.yaml")
    (models / "xlmr-tfidf" / "cv.json").write_text("[1, 2")  # a damaged report: the folds still tell
    (models / "partial" / "pipeline.yaml").write_text(": not yaml [")  # unreadable: skipped and named
    text = board.run(board_config(models))
    err = capsys.readouterr().err
    assert f"board: skipped {models / 'partial'}: cannot read it" in err
    names = [r["experiment"] for r in board_rows(text)]
    assert sorted(names) == ["stage1", "xlmr (stale)", "xlmr+xlmr-tfidf (stale)", "xlmr-tfidf"]
    assert "- xlmr (stale): fold0, fold1, fold2, fold3, fold4: trained on other data or settings" in text
    assert "- xlmr+xlmr-tfidf (stale): " in text  # its member no longer counts


def test_a_blend_of_a_damaged_member_is_stale_as_the_member_is(built: Path, tmp_path: Path) -> None:
    """docs/guarantees.md: a blend counts only while its members do; a member's fold whose OOF was damaged after
    the blend was made leaves that fold of the blend out as well."""
    models = copy_of(built, tmp_path)
    oof = models / "xlmr" / "fold2" / "oof.csv"
    oof.write_text(oof.read_text()[:100])  # cut short, done.json as it was
    names = [r["experiment"] for r in board_rows(board.run(board_config(models)))]
    assert "xlmr (stale)" in names and "xlmr+xlmr-tfidf (stale)" in names, names
    row = next(r for r in board.rows(board_config(models)) if r["name"] == "xlmr+xlmr-tfidf")
    assert row["stale"].startswith("fold2: member xlmr's fold2 no longer counts (oof.csv has 100 bytes"), row["stale"]


def test_stale_notes_name_the_command_that_makes_each_kind_again(built: Path, tmp_path: Path) -> None:
    """A stale baseline is made again by `make baseline`, a stale blend keeps its model column and folds of
    data.folds, and a folder of unknown making is `?`, not a baseline."""
    models = copy_of(built, tmp_path)
    saved = config.load_file(models / "xlmr-tfidf" / "pipeline.yaml")
    config.save(config.with_overrides(saved, ["train.seed=99"]), models / "xlmr-tfidf" / "pipeline.yaml")
    (models / "junk" / "fold0").mkdir(parents=True)
    (models / "junk" / "fold0" / "done.json").write_text("garbage")
    text = board.run(board_config(models))
    row = {r["experiment"].split(" (")[0]: r for r in board_rows(text)}
    assert "- xlmr-tfidf (stale): fold0, fold1, fold2, fold3, fold4: trained on other data or settings (make it " \
           "again with `make baseline`)" in text  # fmt: skip
    assert row["xlmr+xlmr-tfidf"]["model"] == "blend: xlmr + xlmr-tfidf" and row["xlmr+xlmr-tfidf"]["folds"] == "0 of 5"
    assert row["junk"]["model"] == "?" and "- junk (stale): " in text


def test_an_experiment_made_by_a_newer_version_says_so_and_is_not_stale(built: Path, tmp_path: Path, capsys) -> None:
    """A newer version's pipeline.yaml holds every key, its new ones too: this version cannot tell whether the folds
    count, and says that in one line instead of calling them stale."""
    models = copy_of(built, tmp_path)
    saved = models / "xlmr" / "pipeline.yaml"
    saved.write_text(saved.read_text().replace("train:\n", "train:\n  focal_gamma: 2.0\n", 1))
    text = board.run(board_config(models))
    names = [r["experiment"] for r in board_rows(text)]
    assert {"xlmr (newer version)", "xlmr+xlmr-tfidf (newer version)"} <= set(names)  # the blend's member is newer
    assert not any("stale" in n for n in names)
    notes = [line for line in text.splitlines() if line.startswith("- xlmr ")]
    assert notes == [
        f"- xlmr (newer version): xlmr: made by a newer version of the pipeline ({saved} sets train.focal_gamma, "
        "which this version does not know); read it with that version, or update this checkout"
    ]
    with pytest.raises(validity.NewerVersion, match="train.focal_gamma"):
        validity.experiment_config(board_config(models), "xlmr")


def test_each_experiment_is_scored_by_the_test_profile_it_recorded_whatever_the_boards_config(tmp_path: Path) -> None:
    """An experiment's six-language AUC comes from the profile its folds' done.json record, not from the
    prepared tables of whatever CONFIG or name= the board runs under."""
    comp = Competition(tmp_path, 600)
    y = comp.rows["toxic"].to_numpy()
    three = {"mix": {"es": 0.5, "it": 0.3, "tr": 0.2}, "rates": {"es": 0.3, "it": 0.1, "tr": 0.2},
             "rate_from": dict.fromkeys(("es", "it", "tr"), "validation.csv")}  # fmt: skip
    comp.experiment("xlmr", noisy(y, 1.0, 1), None, profile=three)
    want = metrics.six_language(comp.rows.assign(pred=noisy(y, 1.0, 1)), three)["auc"]
    texts = [board.run(config.with_overrides(board_config(comp.models), extra)) for extra in ([], ["name=h"])]
    assert texts[0] == texts[1]
    (row,) = board_rows(texts[0])
    assert row[metrics.SIX.header] == f"{want:.4f}"  # not '-': the recorded test has no fr, pt, ru


@pytest.mark.slow  # trains or reports several folds: seconds
def test_a_metric_added_to_the_one_list_reaches_every_report(tmp_path: Path, monkeypatch, capsys) -> None:
    """metrics.METRICS is the one list: a metric added there is in cv.json (overall and per fold), the fold
    table, the blend's table and summary, and the board, by its name; one that needs probabilities is
    not computed on a blend's ranks."""
    rows = metrics.Metric("rows", "OOF rows", "rows scored", lambda oof, profile: float(len(oof)), fmt=".0f")
    mean = metrics.Metric("mean", "mean pred", "mean probability", lambda oof, profile: float(oof["pred"].mean()),
                          probabilities=True)  # fmt: skip
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, rows, mean))
    monkeypatch.setattr(metrics, "BY_KEY", {m.key: m for m in metrics.METRICS})
    models = make_models(tmp_path)  # made under the longer list: not the copy the other tests share
    out = capsys.readouterr().out
    cv = read_json(models / "xlmr" / "cv.json")
    assert cv["metrics"]["rows"] == 600 and sum(f["rows"] for f in cv["folds"].values()) == 600
    assert "OOF rows" in report.fold_table(cv)
    blended = read_json(models / "xlmr+xlmr-tfidf" / "cv.json")
    assert blended["blend"]["member_metrics"]["xlmr"]["mean"] > 0 and blended["metrics"]["mean"] is None  # NaN
    assert "OOF rows" in out.split("blend xlmr+xlmr-tfidf")[0]  # the blend's table of members
    (row,) = [r for r in board_rows(board.run(board_config(models))) if r["experiment"] == "xlmr"]
    assert row["OOF rows"] == "600" and row["mean pred"] == f"{cv['metrics']['mean']:.4f}"


def calibrated(exp: Path, older: bool = False) -> dict:
    """A `lang` calibration record of every fold of `exp`, written in its cv.json as `make predict` would;
    `older`: as a predict wrote it before each fold's C was chosen on the other folds (no `c_by_fold`)."""
    folds = [f"fold{k}" for k in range(5)]
    record = {"how": "lang", "oof_before": 0.7, "oof_after": 0.75, "c": 0.1, "c_tried": {"0.1": 0.75}, "folds": folds,
              "digests": [read_json(exp / f / "done.json")["digest"] for f in folds]}  # fmt: skip
    if not older:
        record["c_by_fold"] = {str(k): 0.1 for k in range(5)}
    write_json(exp / "cv.json", {"calibration": record})
    return record


def test_a_tie_is_marked_with_every_row_below_whose_order_flips_not_only_the_next() -> None:
    def row(name: str, corners) -> dict:
        return {"name": name, "metrics": {metrics.SIX.key: corners[0], "valid_auc": 0.9}, "test": None,
                "test_of": "t", "scored_folds": [0, 1], "corners": corners}  # fmt: skip

    # a over b and b over c at every corner; a under c at the third
    a, b, c = row("a", [0.910, 0.905, 0.880]), row("b", [0.905, 0.900, 0.870]), row("c", [0.900, 0.895, 0.890])
    marked = ranking.mark_ties([a, b, c])
    assert marked[0]["tie"] == "c" and marked[1]["tie"] == "c"


def test_a_calibrated_rows_corners_are_its_calibrated_oofs() -> None:
    """The figure a calibrated experiment is ranked by has a range too (each fold at its recorded C), so ties with
    it are marked; without each fold's C or a range, none."""
    from pipeline.scoring import calibration
    from tests.scoring.test_metrics import six_language_oof

    oof = six_language_oof(seed=3)
    oof["fold"] = np.arange(len(oof)) % 3
    profile = metrics.test_profile(oof[oof["source"] == "validation"], oof["lang"])
    six = {"profile": profile, "corners": metrics.six_corners(oof, profile)}
    scaled, by_fold = calibration.nested_choice(oof, profile)
    record = {"c_by_fold": {str(k): c for k, c in by_fold.items()}}  # as cv.json reads back
    got = board.calibrated_corners(board.calibrated_oof(oof, six, record), six)
    assert got == pytest.approx(metrics.six_corners(scaled, profile)) and len(got) == len(six["corners"])
    assert board.calibrated_oof(oof, six, {}) is None and board.calibrated_corners(None, six) is None
    assert board.calibrated_corners(scaled, {**six, "corners": None}) is None


def test_a_calibrated_submission_is_ranked_by_its_calibrated_estimate_and_says_so(tmp_path: Path) -> None:
    comp = Competition(tmp_path, 600)
    y = comp.rows["toxic"].to_numpy()
    three = {"mix": {"es": 0.5, "it": 0.3, "tr": 0.2}, "rates": {"es": 0.3, "it": 0.1, "tr": 0.2},
             "rate_from": dict.fromkeys(("es", "it", "tr"), "validation.csv")}  # fmt: skip
    exp = comp.experiment("xlmr", noisy(y, 1.0, 1), None, profile=three)
    record = calibrated(exp)
    text = board.run(board_config(comp.models))
    (row,) = board_rows(text)
    assert row["experiment"] == "xlmr (calibrated)" and row[metrics.SIX.header] == "0.7500"
    assert "- xlmr (calibrated): its submission is calibrated (lang): 6-lang AUC 0.7000 before, 0.7500 after" in text
    write_json(exp / "cv.json", {"calibration": {**record, "digests": ["other"] * 5}})  # of other folds: not used
    (row,) = board_rows(board.run(board_config(comp.models)))
    assert row["experiment"] == "xlmr" and row[metrics.SIX.header] != "0.7500"


def test_an_older_calibration_record_whose_estimate_chose_its_c_is_not_ranked_by(tmp_path: Path) -> None:
    """A record from before each fold's C was chosen on the other folds: its after figure is the best of four
    estimates, chosen on the rows it scores. The board still marks the submission calibrated and reads the
    record, but ranks it by its uncalibrated OOF and says why."""
    comp = Competition(tmp_path, 600)
    three = {"mix": {"es": 0.5, "it": 0.3, "tr": 0.2}, "rates": {"es": 0.3, "it": 0.1, "tr": 0.2},
             "rate_from": dict.fromkeys(("es", "it", "tr"), "validation.csv")}  # fmt: skip
    exp = comp.experiment("xlmr", noisy(comp.rows["toxic"].to_numpy(), 1.0, 1), None, profile=three)
    calibrated(exp, older=True)
    text = board.run(board_config(comp.models))
    (row,) = board_rows(text)
    assert row["experiment"] == "xlmr (calibrated)" and row[metrics.SIX.header] not in ("0.7500", "-")
    assert ("- xlmr (calibrated): its submission is calibrated (lang); its figures are of the uncalibrated OOF: "
            "the calibration's record is older than the choice of C inside each fold, and its 6-lang AUC after "
            "calibration, 0.7500, chose C on the rows it scores (rerun `make predict`)") in text  # fmt: skip


def test_a_calibration_record_without_an_after_figure_is_marked_not_ranked_by(tmp_path: Path) -> None:
    """cv.json holds null for a figure that was not a number when predict wrote it: the board marks the submission
    calibrated and ranks it by its uncalibrated OOF (not a TypeError, not a row ranked by nothing)."""
    comp = Competition(tmp_path, 600)
    three = {"mix": {"es": 0.5, "it": 0.3, "tr": 0.2}, "rates": {"es": 0.3, "it": 0.1, "tr": 0.2},
             "rate_from": dict.fromkeys(("es", "it", "tr"), "validation.csv")}  # fmt: skip
    exp = comp.experiment("xlmr", noisy(comp.rows["toxic"].to_numpy(), 1.0, 1), None, profile=three)
    write_json(exp / "cv.json", {"calibration": {**calibrated(exp), "oof_after": None}})
    text = board.run(board_config(comp.models))
    (row,) = board_rows(text)
    assert row["experiment"] == "xlmr (calibrated)" and row[metrics.SIX.header] not in ("0.7500", "-")
    assert ("- xlmr (calibrated): its submission is calibrated (lang); its figures are of the uncalibrated OOF: "
            "the calibration's record has no 6-lang AUC after calibration to rank it by") in text  # fmt: skip


def test_a_calibrated_submission_without_a_six_language_auc_is_still_marked(tmp_path: Path) -> None:
    """No stand-in rows for fr, pt, ru: no 6-lang AUC to rank by, but the submission is calibrated all the same,
    and the board says so (the latest predict's record: one without calibration drops it)."""
    comp = Competition(tmp_path, 600)
    exp = comp.experiment("xlmr", noisy(comp.rows["toxic"].to_numpy(), 1.0, 1), None)
    calibrated(exp)
    text = board.run(board_config(comp.models))
    (row,) = board_rows(text)
    assert row["experiment"] == "xlmr (calibrated)" and row[metrics.SIX.header] == "-"
    assert "- xlmr (calibrated): its submission is calibrated (lang); its figures are of the uncalibrated OOF" in text
    assert "0.7500" not in text  # the estimate over the languages the OOF has is not shown as a 6-lang AUC


def test_a_blend_of_some_folds_is_k_of_n_and_ranked_only_among_the_same_folds(tmp_path: Path) -> None:
    """A blend of two folds of five reads "2 of 5", and an experiment of two folds is never ranked above one of
    five by a figure over other rows, however high its own."""
    comp = Competition(tmp_path, 600)
    y = comp.rows["toxic"].to_numpy()
    tests = {k: np.random.default_rng(k).random(90) for k in range(5)}
    comp.experiment("all", noisy(y, 1.0, 1), None)
    comp.experiment("few", noisy(y, 0.3, 2), tests, folds=(0, 1))  # far better, on two folds
    comp.experiment("few2", noisy(y, 0.5, 3), tests, folds=(0, 1))
    blend.run(comp.config("blend.members=[few,few2]", "blend.name=few-blend", "train.folds=[0,1]"))
    text = board.run(board_config(comp.models))
    listed = board_rows(text)
    rows = {r["experiment"].split(" ")[0]: r for r in listed}
    assert rows["few-blend"]["folds"] == "2 of 5" and rows["few"]["folds"] == "2 of 5"
    order = [r["experiment"].split(" ")[0] for r in listed]
    assert order[0] == "all" and set(order[1:]) == {"few", "few2", "few-blend"}
    assert "experiments are ranked among those scored on the same folds, the most folds first" in text


def test_a_figure_without_the_length_mix_is_marked_and_ranked_apart_from_those_with_it(tmp_path: Path) -> None:
    """One experiment's prepared folder has lengths.csv, the other's not (tables prepared before it existed): the
    second's 6-lang AUC, weighted by language and class only, is another estimate. However high, it is ranked
    below the length-aware one, marked, and a note says why; on a board where no row has the length mix, nothing
    is marked."""
    comp = Competition(tmp_path, 600)
    y = comp.rows["toxic"].to_numpy()
    three = {"mix": {"es": 0.5, "it": 0.3, "tr": 0.2}, "rates": {"es": 0.3, "it": 0.1, "tr": 0.2},
             "rate_from": dict.fromkeys(("es", "it", "tr"), "validation.csv")}  # fmt: skip
    comp.experiment("with-length", noisy(y, 1.0, 1), None, profile=three)
    comp.experiment("no-length", noisy(y, 0.4, 2), None, profile=three)  # far better predictions
    prepared = layout.prepared_dir(comp.config("name=with-length"))
    rng = np.random.default_rng(0)
    write_lengths(prepared, lambda split, rows: rng.integers(2, 200, len(rows)))
    text = board.run(board_config(comp.models))
    listed = board_rows(text)
    assert [r["experiment"] for r in listed] == ["with-length", "no-length (no length)"], text
    assert float(listed[1][metrics.SIX.header]) > float(listed[0][metrics.SIX.header])  # ranked apart, not by it
    assert listed[0]["w/o length"] != "-" and listed[1]["w/o length"] == "-"
    assert ("- no-length (no length): its 6-lang AUC is weighted by language and class only, not to the test's "
            "length mix (its rows have no token counts: its prepared folder has no lengths.csv") in text  # fmt: skip
    (prepared / layout.LENGTHS).unlink()
    listed = board_rows(board.run(board_config(comp.models)))
    assert [r["experiment"] for r in listed] == ["no-length", "with-length"]  # one estimate: ranked by it


def test_a_row_with_the_length_mix_and_one_without_are_never_a_tie_or_a_disagreement() -> None:
    """Their 6-lang AUCs are two estimates: an order flip at a corner, a test AUC the other way round, or a pair the
    estimate orders as the test are read between rows of one kind only."""

    def row(name: str, corners, test: float, length: bool) -> dict:
        return {"name": name, "metrics": {metrics.SIX.key: corners[0], "valid_auc": 0.9}, "test": test,
                "test_of": "t", "scored_folds": [0, 1], "corners": corners, "length": length}  # fmt: skip

    a, b = row("a", [0.910, 0.900], 0.88, True), row("b", [0.905, 0.903], 0.89, False)
    marked = ranking.mark_ties(ranking.mark_disagreements([a, b]))
    assert marked[0].get("tie") is None and marked[0]["below"] == "" and ranking.order_agreement(marked) == ""
    b["length"] = True  # the same estimate: b flips with a at the second corner, its test AUC above a's
    marked = ranking.mark_ties(ranking.mark_disagreements([a, b]))
    assert marked[0]["tie"] == "b" and marked[0]["below"] == "b" and ranking.order_agreement(marked) != ""


def test_two_experiments_whose_order_flips_inside_the_estimates_range_are_a_tie() -> None:
    def row(name: str, corners, folds=(0, 1, 2)) -> dict:
        return {"name": name, "metrics": {metrics.SIX.key: corners[0], "valid_auc": 0.9}, "test": None,
                "test_of": "t", "scored_folds": list(folds), "corners": corners}  # fmt: skip

    a, b, c = row("a", [0.910, 0.900]), row("b", [0.905, 0.903]), row("c", [0.850, 0.860])
    marked = ranking.mark_ties([a, b, c])
    assert marked[0]["tie"] == "b"  # b is above a at the second corner
    assert marked[1]["tie"] == ""  # b is above c at every corner
    d = row("d", [0.905, 0.903], folds=(0, 1))
    assert ranking.mark_ties([row("a", [0.910, 0.900]), d])[0].get("tie") is None  # other rows: not compared


def test_a_pair_whose_paired_interval_covers_0_is_a_tie_though_its_corners_never_flip() -> None:
    def row(name: str, corners, interval: paired.Interval | None = None) -> dict:
        r = {"name": name, "metrics": {metrics.SIX.key: corners[0], "valid_auc": 0.9}, "test": None,
             "test_of": "t", "scored_folds": [0, 1], "corners": corners}  # fmt: skip
        return {**r, "next": {"name": "next", "interval": interval}} if interval else r

    # a above b at every corner, but by less than the rows can tell; b above c by more
    a = row("a", [0.910, 0.905], paired.Interval(0.002, -0.001, 0.005))
    b, c = row("b", [0.908, 0.903], paired.Interval(0.02, 0.01, 0.03)), row("c", [0.888, 0.883])
    a["next"]["name"], b["next"]["name"] = "b", "c"
    marked = ranking.mark_ties([a, b, c])
    assert marked[0]["tie"] == "" and marked[0]["close"] == "b"  # not the corners: the interval
    assert "close" not in marked[1] and marked[1]["tie"] == ""
    notes = board.stale_notes(marked)
    assert "- a (~): a tie with b: +0.0020 [-0.0010, +0.0050], the 95% interval of the difference covers 0" in notes
    assert "because the interval covers 0" in notes and "toxic rates move" in notes  # both causes, in words


@pytest.mark.slow  # reports three experiments' folds and draws their rows again: seconds
def test_the_board_shows_the_paired_interval_to_the_next_row_and_marks_a_close_pair(tmp_path: Path) -> None:
    """Two experiments that err alike (one's predictions the other's, nudged) and a far better one: the better one's
    interval to the next is clear of 0 and not a tie; the two alike are a tie, their difference inside their
    interval; the last row has no next."""
    comp = Competition(tmp_path, 600)
    y = comp.rows["toxic"].to_numpy()
    three = {"mix": {"es": 0.5, "it": 0.3, "tr": 0.2}, "rates": {"es": 0.3, "it": 0.1, "tr": 0.2},
             "rate_from": dict.fromkeys(("es", "it", "tr"), "validation.csv")}  # fmt: skip
    blunt = noisy(y, 1.0, 2)
    comp.experiment("sharp", noisy(y, 0.3, 1), None, profile=three)
    comp.experiment("blunt", blunt, None, profile=three)
    comp.experiment("blunt-nudged", blunt + np.random.default_rng(3).normal(0, 0.05, len(y)), None, profile=three)
    text = board.run(board_config(comp.models))
    listed = board_rows(text)
    names = [r["experiment"].removesuffix(" (~)") for r in listed]
    assert names[0] == "sharp" and set(names[1:]) == {"blunt", "blunt-nudged"}
    assert listed[0]["experiment"] == "sharp" and listed[1]["experiment"].endswith(" (~)"), text
    diff, low, high = map(float, listed[0][board.NEXT].replace(" [", ", ").rstrip("]").split(", "))
    assert 0 < low <= diff <= high
    six = [float(r[metrics.SIX.header]) for r in listed]
    assert diff == pytest.approx(six[0] - six[1], abs=2e-4)
    assert listed[2][board.NEXT] == "-" and f"a tie with {names[2]}: " in text


def test_the_pairs_each_estimate_orders_as_the_test_are_counted() -> None:
    def row(name: str, six: float, without: float | None, test: float | None, folds=(0, 1)) -> dict:
        return {"name": name, "metrics": {metrics.SIX.key: six, "valid_auc": 0.9}, "without": without,
                "test": test, "test_of": "t", "scored_folds": list(folds)}  # fmt: skip

    # by test a > b > c; with length orders all three pairs so, without length puts c first
    a, b, c = row("a", 0.93, 0.91, 0.895), row("b", 0.92, 0.90, 0.890), row("c", 0.91, 0.95, 0.880)
    line = ranking.order_agreement([a, b, c, row("d", 0.99, 0.99, None), row("e", 0.5, 0.5, 0.99, folds=(0,))])
    assert line.startswith(f"- order as the test AUC: the {metrics.SIX.header} orders 3 of 3 pair(s)")
    assert "without length 1 of 3" in line  # d has no test AUC, e other folds: neither is counted
    assert ranking.order_agreement([a, row("d", 0.99, 0.99, None)]) == ""
    assert "without length" not in ranking.order_agreement([a, row("b", 0.92, None, 0.89)])
    assert line in board.stale_notes([a, b, c])


def test_the_pairs_the_estimate_orders_as_the_test_are_counted_far_apart_from_close() -> None:
    """A pair whose paired interval covers 0 is close: ordering it as the test is a coin's luck, counted apart from
    the far pairs; a pair without an interval (rows without their OOF) apart from both."""

    def row(name: str, six: float, test: float, folds=(0, 1)) -> dict:
        return {"name": name, "metrics": {metrics.SIX.key: six, "valid_auc": 0.9}, "without": None, "test": test,
                "test_of": "t", "scored_folds": list(folds)}  # fmt: skip

    # by the estimate a > b > c, by the test b > a > c: a-b close (and ordered wrong), a-c and b-c far (right)
    a, b, c = row("a", 0.930, 0.890), row("b", 0.929, 0.895), row("c", 0.900, 0.870)
    a["intervals"] = {"b": paired.Interval(0.001, -0.002, 0.004), "c": paired.Interval(0.03, 0.02, 0.04)}
    b["intervals"] = {"c": paired.Interval(0.029, 0.019, 0.039)}
    line = ranking.order_agreement([a, b, c])
    assert line.startswith(f"- order as the test AUC: the {metrics.SIX.header} orders 2 of 2 far pair(s) and 0 of 1 "
                           "close pair(s) as the test does"), line  # fmt: skip
    b["intervals"] = {"c": None}
    assert "orders 1 of 1 far pair(s) and 0 of 1 close pair(s) and 1 of 1 pair(s) without an interval" in (
        ranking.order_agreement([a, b, c])
    )
