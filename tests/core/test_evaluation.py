"""Evaluation inside epochs, the best evaluation kept, patience, step records, curves, TensorBoard and the ETA.

The fold's AUC is scripted (a wrapper around evaluation.eval_record) so that which evaluation is best is known;
the weights each evaluation sees are copied as it happens, and the kept ones are compared with them.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from pipeline import layout, train
from pipeline.core import evaluation, fold, resume
from pipeline.scoring import plots, report
from tests.helpers import one_line_error
from tests.helpers.folds import StopAt, fold_run
from tests.helpers.tinyrun import TINY, overrides

pytestmark = pytest.mark.usefixtures("torch_one_thread")

# the `prepared` fixture (a tiny two-fold experiment, tables and tokens built) is in tests/conftest.py


def with_train(cfg, **changes):
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **changes))


def scripted(monkeypatch, aucs: list[float]) -> list[dict]:
    """Evaluation n scores aucs[n] (then the last again); returns what each evaluation saw: its step, the
    model's weights and its predictions."""
    seen: list[dict] = []
    real_predict, real_record = evaluation.predict_rows, evaluation.eval_record

    def predict_rows(model, *args, **kwargs):
        preds = real_predict(model, *args, **kwargs)
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        seen.append({"weights": weights, "preds": preds})
        return preds

    def eval_record(*args, **kwargs):
        record = real_record(*args, **kwargs)
        seen[-1]["step"] = record["step"]
        record["auc"] = aucs[min(len(seen), len(aucs)) - 1]
        return record

    monkeypatch.setattr(evaluation, "predict_rows", predict_rows)
    monkeypatch.setattr(evaluation, "eval_record", eval_record)
    return seen


def test_the_kept_weights_are_the_best_evaluations_not_the_last(prepared, monkeypatch) -> None:
    cfg = with_train(prepared, eval_every_steps=5, epochs=2)
    seen = scripted(monkeypatch, [0.60, 0.70, 0.90, 0.80, 0.85, 0.70, 0.75, 0.72, 0.71, 0.70, 0.69, 0.68])
    run = fold_run(cfg, StopAt(10**9))
    done = run.run()
    windows = run.windows
    steps = [s["step"] for s in seen]
    # every 5 steps over the fold, and each epoch's end
    want = sorted({*range(5, 2 * windows + 1, 5), windows, 2 * windows})
    assert steps == want and len(steps) >= 6
    best = seen[2]  # the scripted 0.90
    assert done["best_step"] == best["step"] == 15 and done["auc"] == 0.90 and done["evaluations"] == len(steps)
    fold_dir = layout.experiment_dir(cfg) / "fold0"
    kept = load_file(fold_dir / "model.safetensors")
    name = "encoder.encoder.layer.0.attention.self.query.weight"
    assert torch.equal(kept[name], best["weights"][name])
    assert not torch.equal(kept[name], seen[-1]["weights"][name])  # training went on after the best
    oof = pd.read_csv(fold_dir / "oof.csv")
    np.testing.assert_allclose(oof["best"].to_numpy(), best["preds"], rtol=1e-12)  # through CSV
    # `pred`: each half at the step the other half scores best (the scripted AUC is the model's, not a half's)
    run_valid = run.table.iloc[run.valid_idx]
    held, chosen = evaluation.held_out_choice(
        run_valid, {s["step"]: s["preds"] for s in seen}, run.profile, run.first_half
    )
    # in the chosen step's order, on the kept step's scale
    np.testing.assert_allclose(oof["pred"].to_numpy(), evaluation.on_kept_scale(held, best["preds"], run.first_half))
    assert done["held_out_steps"] == chosen and all(c in steps for c in chosen)
    records = [json.loads(line) for line in (fold_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == steps and [r["auc"] for r in records][:3] == [0.60, 0.70, 0.90]


def test_patience_stops_a_fold_whose_auc_stopped_improving(prepared, monkeypatch, capsys) -> None:
    cfg = with_train(prepared, eval_every_steps=3, epochs=2, patience=3)
    seen = scripted(monkeypatch, [0.60, 0.70, 0.65, 0.64, 0.63, 0.99])  # the 0.99 is never reached
    run = fold_run(cfg, StopAt(10**9))
    done = run.run()
    assert len(seen) == 5 and done["evaluations"] == 5 and done["stopped_early"] is True
    assert done["best_step"] == 6 and done["auc"] == 0.70 and done["metric"] == "valid_auc"  # named in done.json
    assert done["steps"] == 15 < 2 * run.windows  # training stopped at the fifth evaluation
    out = capsys.readouterr().out
    # the sample has no held-out translated rows: judged by the validation AUC, and named so
    assert "fold 0: no better valid AUC for 3 evaluations (train.patience); stopping at step 15" in out
    assert "keeping step 6 (valid AUC 0.7000)" in out
    assert "| no better (3 of 3)" in out


def test_patience_counts_an_epoch_ends_evaluation_as_one(prepared, monkeypatch, capsys) -> None:
    """Evaluations every W-1 steps (W an epoch's steps) fall one step before each epoch's end: the end's evaluation
    is one of the P that patience counts, as the log's "no better (k of P)" says, never "(3 of 2)"."""
    windows = fold_run(prepared, StopAt(10**9)).windows
    cfg = with_train(prepared, eval_every_steps=windows - 1, epochs=3, patience=2)
    seen = scripted(monkeypatch, [0.70, 0.60, 0.65, 0.64, 0.63, 0.62, 0.61])
    done = fold_run(cfg, StopAt(10**9)).run()
    steps = [s["step"] for s in seen]
    assert steps == [windows - 1, windows, 2 * windows - 2]  # best, the epoch's end a step later, the next: stop
    assert done["best_step"] == windows - 1 and done["stopped_early"] and done["steps"] == 2 * windows - 2
    out = capsys.readouterr().out
    assert "no better (2 of 2)" in out and "(3 of 2)" not in out


def test_patience_and_best_survive_a_resume(prepared, monkeypatch, tmp_path) -> None:
    """Stopped after the best and one worse evaluation, resumed: patience goes on counting from there."""
    cfg = with_train(prepared, eval_every_steps=3, epochs=2, patience=3)
    seen = scripted(monkeypatch, [0.60, 0.70, 0.65, 0.64, 0.63, 0.99])
    with pytest.raises(fold.Interrupted):
        fold_run(cfg, StopAt(11)).run()  # after the third evaluation (step 9), saved at step 11
    done = fold_run(cfg, StopAt(10**9)).run()
    assert [s["step"] for s in seen] == [3, 6, 9, 12, 15]  # none repeated, none missed
    assert done["best_step"] == 6 and done["steps"] == 15 and done["stopped_early"] is True


def test_a_resume_under_another_eval_interval_evaluates_as_that_interval_does(prepared, tmp_path) -> None:
    """Cut at step 5 under eval_every_steps=3, resumed under 5: step 5, which 5 evaluates and 3 did not, is evaluated
    at the resume, and from there on every evaluation is the one an uninterrupted run under 5 makes."""
    three, five = (with_train(prepared, eval_every_steps=e) for e in (3, 5))
    reference = dataclasses.replace(five, models_dir=str(tmp_path / "reference"))
    want = fold_run(reference, StopAt(10**9)).run()
    with pytest.raises(fold.Interrupted):
        fold_run(three, StopAt(5)).run()  # evaluated at step 3, saved at step 5
    got = fold_run(five, StopAt(10**9)).run()

    def history(cfg) -> dict[int, float]:
        lines = (layout.experiment_dir(cfg) / "fold0" / layout.METRICS).read_text().splitlines()
        return {r["step"]: r["auc"] for r in map(json.loads, lines)}

    theirs, ours = history(reference), history(five)
    assert list(theirs) == [5, 10, 15, 19] and list(ours) == [3, *theirs]
    assert all(ours[s] == pytest.approx(theirs[s], abs=1e-9) for s in theirs)
    assert (got["best_step"], got["auc"]) == (want["best_step"], pytest.approx(want["auc"], abs=1e-9))


def test_a_resume_under_a_lower_patience_already_used_up_stops_at_once(prepared, monkeypatch, capsys) -> None:
    """Best at step 3, no better at 6, cut at step 7 under patience=6, resumed under patience=1: one interval has
    passed without a better AUC, so the fold stops at once, saying so, and keeps step 3."""
    seen = scripted(monkeypatch, [0.70, 0.60, 0.99])  # the 0.99 is never reached
    with pytest.raises(fold.Interrupted):
        fold_run(with_train(prepared, eval_every_steps=3, patience=6), StopAt(7)).run()
    capsys.readouterr()
    run = fold_run(with_train(prepared, eval_every_steps=3, patience=1), StopAt(10**9))
    done = run.run()
    out = capsys.readouterr().out
    assert len(seen) == 2 and done["stopped_early"] is True and (done["best_step"], done["steps"]) == (3, 6)
    assert done["auc"] == 0.70 and run.progress.step.window == 7  # nothing trained past the saved step
    line = (
        "fold 0: train.patience=1 is already used up: no better valid AUC than step 3's (0.7000) in the 1 evaluation "
    )
    assert line + "up to step 6; stopping at once, keeping step 3\n" in out


def test_a_resume_from_evaluations_that_do_not_name_their_metric(prepared, monkeypatch, capsys) -> None:
    """A resume state saved before evaluations named their metric (no `metric` in its history): the resumed
    fold's lines, metrics.jsonl and curves go on; the older evaluations are 'AUC', as their own lines said."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scripted(monkeypatch, [0.70, 0.60, 0.65])
    cfg = with_train(prepared, eval_every_steps=3, patience=6)
    with pytest.raises(fold.Interrupted):
        fold_run(cfg, StopAt(7)).run()  # evaluated at steps 3 and 6
    real = resume.fold_state

    def older(state, rank=0):
        saved = real(state, rank)
        for record in saved.history:
            record.pop("metric", None)
        return saved

    monkeypatch.setattr(resume, "fold_state", older)
    capsys.readouterr()
    fold_run(cfg, StopAt(10**9)).run()
    assert "valid AUC 0.6500" in capsys.readouterr().out  # the fold's own evaluations name their metric
    records = report.read_jsonl(layout.experiment_dir(cfg) / "fold0" / layout.METRICS)
    assert [r.get("metric") for r in records[:3]] == [None, None, "valid_auc"]
    loss_ax, auc_ax = plt.subplots(2)[1]
    plots.fold_curves(loss_ax, auc_ax, 0, [], records[:2], 3)
    assert "AUC of the fold's rows" in auc_ax.get_legend_handles_labels()[1]  # not a 6-lang AUC it may not have been
    plt.close("all")


def test_evaluating_inside_epochs_leaves_training_as_it_was(prepared, tmp_path) -> None:
    """Dropout on, evaluations every 4 steps or none: the same losses at every step (eval mode is undone)."""
    losses = {}
    for every in (0, 4):
        cfg = dataclasses.replace(
            with_train(prepared, eval_every_steps=every, log_every_steps=1), models_dir=str(tmp_path / str(every))
        )
        fold_run(cfg, StopAt(10**9)).run()
        losses[every] = [r["loss"] for r in read_steps(layout.experiment_dir(cfg))]
    assert len(losses[0]) > 8 and losses[4] == losses[0]


def read_steps(base) -> list[dict]:
    return [json.loads(line) for line in (base / "fold0" / layout.STEPS).read_text().splitlines()]


def test_step_records_have_every_step_once_across_a_resume(prepared, tmp_path) -> None:
    cfg = with_train(prepared, log_every_steps=3, save_every_steps=4)
    reference = dataclasses.replace(cfg, models_dir=str(tmp_path / "reference"))
    fold_run(reference, StopAt(10**9)).run()
    want = read_steps(layout.experiment_dir(reference))
    with pytest.raises(fold.Interrupted):
        fold_run(cfg, StopAt(10)).run()  # saved at step 10: the record at 9 stays, later ones would go
    fold_dir = layout.experiment_dir(cfg) / "fold0"
    with open(fold_dir / layout.STEPS, "a") as f:  # a record past the saved step, and a line cut short
        f.write(json.dumps({**want[3], "loss": 99.0}) + "\n" + '{"step": 15, "lo')
    fold_run(cfg, StopAt(10**9)).run()
    got = read_steps(layout.experiment_dir(cfg))
    assert [r["step"] for r in got] == [r["step"] for r in want] == list(range(3, len(want) * 3 + 1, 3))
    for a, b in zip(got, want):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6) and a["lr"] == pytest.approx(b["lr"], rel=1e-9)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    assert {"examples_per_second", "tokens_per_second", "peak_memory_mb", "loss_scale", "skipped"} <= set(got[0])


@pytest.mark.slow  # trains or reports several folds: seconds
def test_curves_png_holds_every_fold(tmp_path) -> None:
    base = tmp_path
    args = ["--config", "sample", *overrides(base), *TINY, "data.folds=3", "train.log_every_steps=2"]
    from pipeline import data

    assert data.main(args) == 0 and train.main(args) == 0
    exp = base / "models" / "sample"
    png = exp / layout.CURVES_PNG
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    titles = plots.plot_curves([exp / f"fold{k}" for k in range(3)], tmp_path / "again.png", "sample")
    assert titles == ["fold 0", "fold 1", "fold 2"]
    assert all(read_steps_of(exp / f"fold{k}") for k in range(3))
    assert set(read_steps_of(exp / "fold0")[0]["lr"]) == {"decay", "no_decay"}  # every group's rate, named


def read_steps_of(folder) -> list[dict]:
    return report.read_jsonl(folder / layout.STEPS)


def test_tensorboard_gets_the_scalars_and_without_the_package_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    from pipeline import data

    args = ["--config", "sample", *overrides(tmp_path), *TINY, "train.log_every_steps=2", "train.tensorboard=true"]
    assert data.main(args) == 0 and train.main(args) == 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "models" / "sample" / "tb" / "fold0"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr/decay", "train/lr/no_decay", "train/grad_norm", "valid/auc"} <= tags  # lr: by group
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were not installed
    assert train.main([*args, "name=again"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("error: train.tensorboard=true needs the tensorboard package"), line


@pytest.mark.slow  # trains or reports several folds: seconds
def test_the_eta_counts_every_fold_left(tmp_path, monkeypatch, capsys) -> None:
    """A simulated clock (60 s an optimizer step): after fold 0's first epoch of two, the run has that fold's
    second epoch and all of fold 1 left, three epochs: about three times an epoch's minutes."""
    from pipeline import data

    clock = tmp_path / "clock"
    monkeypatch.setenv("PIPELINE_FAKE_CLOCK", str(clock))
    monkeypatch.setenv("PIPELINE_FAKE_STEP_SECONDS", "60")
    args = ["--config", "sample", *overrides(tmp_path), *TINY, "train.epochs=2"]
    assert data.main(args) == 0 and train.main(args) == 0
    out = capsys.readouterr().out
    steps = int(re.search(r"2 epochs, ([\d,]+) optimizer steps", out).group(1)) // 2  # one epoch's
    eta = re.search(r"fold 0 epoch 1: .* \| ETA (?:(\d+)h)?(\d+)m for the run", out)
    minutes = int(eta.group(1) or 0) * 60 + int(eta.group(2))
    assert 3 * steps * 0.9 <= minutes <= 3 * steps * 1.1 + 1, (minutes, steps)
    monkeypatch.delenv("PIPELINE_FAKE_CLOCK")


def test_a_later_setting_at_its_default_keeps_the_fingerprint(prepared) -> None:
    from pipeline import fingerprint

    base = fingerprint.settings(prepared)
    assert "eval_every_steps" not in base["train"] and "patience" not in base["train"]
    changed = fingerprint.settings(with_train(prepared, eval_every_steps=50, patience=2))
    assert changed["train"]["eval_every_steps"] == 50 and changed["train"]["patience"] == 2
    logs_only = fingerprint.settings(with_train(prepared, log_every_steps=1, tensorboard=True))
    assert logs_only == base  # records change no weights


def test_a_fold_with_held_out_translated_rows_is_scored_as_the_test_is(tmp_path) -> None:
    """With data.held_out the fold's AUC (which chooses its best step) is the six-language one, not one AUC
    over rows of which half are translations at a 50% toxic rate."""
    from pipeline.scoring import metrics
    from tests.helpers import prepare_tiny

    cfg = prepare_tiny(tmp_path, "data.held_out=0.6")  # 0.6: both classes of every language in each fold
    fold_run(cfg, StopAt(10**9)).run()
    folder = layout.experiment_dir(cfg) / "fold0"
    oof = report.read_oof([folder])
    assert {"fr", "pt", "ru"} <= set(oof.loc[oof["source"] != layout.VALID_SOURCE, "lang"])
    done = json.loads((folder / layout.DONE).read_text())
    six = metrics.six_language(oof, metrics.read_profile(cfg))
    assert done["profile"] == metrics.read_profile(cfg)  # what it was scored by travels with it
    assert done["auc"] == pytest.approx(six["auc"]) and done["metric"] == "six"
    assert done["auc_per_lang"] == pytest.approx(six["per_lang"], nan_ok=True)
    assert done["auc"] != pytest.approx(metrics.auc(oof["toxic"], oof["pred"]))
    summary = report.cv_report(cfg)  # with OOF rows in languages validation.csv lacks
    assert summary["six"]["held_out_rows"] == int((oof["source"] != layout.VALID_SOURCE).sum())
    assert summary["rows"] == len(oof) and summary["metrics"]["six"] == pytest.approx(six["auc"])
    assert (layout.experiment_dir(cfg) / layout.CV_PNG).stat().st_size > 0
    assert f"{metrics.SIX.header} {six['auc']:.4f}" in report.fold_table(summary)
    evaluations = [json.loads(line) for line in (folder / layout.METRICS).read_text().splitlines()]
    assert {e["metric"] for e in evaluations} == {"six"}  # each evaluation names what it was judged by


def simulated_fold(rng, evaluations: int, rows: int = 2500, rate: float = 0.15) -> tuple[pd.DataFrame, dict]:
    """A fold's rows and `evaluations` evaluations that are equally good in truth: each one a fresh draw of
    noise on one shared signal, so no step is better than another but by chance."""
    y = (rng.random(rows) < rate).astype(int)
    signal = 1.2 * y + rng.normal(size=rows)
    preds = {100 * (e + 1): 1 / (1 + np.exp(-(signal + 0.8 * rng.normal(size=rows)))) for e in range(evaluations)}
    return pd.DataFrame({"id": [f"r{i}" for i in range(rows)], "lang": "es", "toxic": y}), preds


def test_the_oof_is_not_chosen_on_the_rows_it_scores() -> None:
    """Ten equally good evaluations: the best of them, judged on the rows it is scored on, reads about 0.01
    high; each half at the step the other half chose reads as one evaluation does (the truth)."""
    rng = np.random.default_rng(0)
    best_bias, held_bias = [], []
    for _ in range(40):
        valid, preds = simulated_fold(rng, 10)
        truth = metrics_auc(valid, preds[100])  # one evaluation, chosen by nothing
        best_bias.append(max(metrics_auc(valid, p) for p in preds.values()) - truth)
        first = evaluation.halves(valid["id"].to_numpy(), valid["toxic"].astype(str).to_numpy(), 0)
        held, _ = evaluation.held_out_choice(valid, preds, None, first)
        held_bias.append(metrics_auc(valid, held) - truth)
    assert np.mean(best_bias) > 0.008  # the bias the board used to rank by
    assert abs(np.mean(held_bias)) < 0.003, np.mean(held_bias)


def metrics_auc(valid: pd.DataFrame, preds) -> float:
    from pipeline.scoring.metrics import auc

    return auc(valid["toxic"], preds)


def test_a_better_step_is_still_found_by_the_other_half() -> None:
    """Where one evaluation is better in truth, both halves choose it: holding the choice out costs nothing."""
    rng = np.random.default_rng(1)
    valid, preds = simulated_fold(rng, 4)
    y = valid["toxic"].to_numpy()
    preds[300] = 1 / (1 + np.exp(-(3.0 * y + rng.normal(size=len(y)))))  # far better than the others
    first = evaluation.halves(valid["id"].to_numpy(), valid["toxic"].astype(str).to_numpy(), 0)
    held, chosen = evaluation.held_out_choice(valid, preds, None, first)
    assert chosen == [300, 300]
    np.testing.assert_array_equal(held, preds[300])


def test_halves_taken_at_two_steps_are_put_on_the_kept_steps_scale() -> None:
    """A step that orders every row as the kept one, on another scale (the probabilities drifted): its half
    mixed in as it is lowers the pooled AUC, and on the kept step's scale it reads exactly as the kept step."""
    rng = np.random.default_rng(3)
    valid, preds = simulated_fold(rng, 1, rows=2000)
    kept = preds[100]
    drifted = kept**4  # the same order, lower probabilities
    first = evaluation.halves(valid["id"].to_numpy(), valid["toxic"].astype(str).to_numpy(), 0)
    mixed = np.where(first, kept, drifted)
    assert metrics_auc(valid, mixed) < metrics_auc(valid, kept) - 0.01  # two scales in one AUC
    mapped = evaluation.on_kept_scale(mixed, kept, first)
    np.testing.assert_allclose(mapped, kept)  # same order within each half: the kept values back
    np.testing.assert_allclose(evaluation.on_kept_scale(mapped, kept, first), mapped)  # mapped twice: unchanged
    other = np.where(first, kept, preds[100] + 0.3 * rng.normal(size=len(kept)))  # another order in half two
    moved = evaluation.on_kept_scale(other, kept, first)
    for half in (first, ~first):  # each half keeps its own order, with the kept step's values
        assert metrics_auc(valid[half], moved[half]) == pytest.approx(metrics_auc(valid[half], other[half]))
        np.testing.assert_allclose(np.sort(moved[half]), np.sort(kept[half]))


def test_halves_keep_groups_whole_and_split_each_stratum_evenly() -> None:
    keys = np.array([f"g{i // 3}" for i in range(600)])  # groups of three rows
    strata = np.array(["es_0", "es_1", "tr_0", "tr_1"])[np.arange(600) // 150]
    first = evaluation.halves(keys, strata, seed=5)
    frame = pd.DataFrame({"key": keys, "first": first, "stratum": strata})
    assert (frame.groupby("key")["first"].nunique() == 1).all()  # a group on one side
    share = frame.groupby("stratum")["first"].mean()
    assert ((share - 0.5).abs() <= 0.02).all(), share.to_dict()
    assert not np.array_equal(first, evaluation.halves(keys, strata, seed=6))  # seeded


def test_halves_split_each_language_evenly_where_a_group_spans_languages() -> None:
    """Held-out groups: an English comment and its fr, pt and ru translations, labelled alike; each stratum is
    split within a row or two, not by whichever language each group's first row happens to have."""
    rng = np.random.default_rng(0)
    keys, strata = [], []
    for g in range(300):
        label = int(rng.random() < 0.4)
        langs = ["en", *rng.choice(["fr", "pt", "ru"], rng.integers(1, 4), replace=False)]
        keys += [f"g{g}"] * len(langs)
        strata += [f"{lang}_{label}" for lang in langs]
    for seed in range(3):
        first = evaluation.halves(np.array(keys), np.array(strata), seed)
        frame = pd.DataFrame({"key": keys, "first": first, "stratum": strata})
        assert (frame.groupby("key")["first"].nunique() == 1).all()
        apart = frame.groupby("stratum")["first"].agg(lambda f: abs(2 * int(f.sum()) - len(f)))
        assert apart.max() <= 4, apart.to_dict()


def test_a_half_of_one_class_falls_back_to_the_whole_folds_best() -> None:
    valid = pd.DataFrame({"id": ["a", "b", "c", "d"], "lang": "es", "toxic": [0, 1, 0, 0]})
    preds = {1: np.array([0.1, 0.2, 0.3, 0.4]), 2: np.array([0.1, 0.9, 0.2, 0.3])}
    held, chosen = evaluation.held_out_choice(valid, preds, None, np.array([True, True, False, False]))
    assert chosen == [2, 2] and np.array_equal(held, preds[2])


def test_a_smoke_run_stops_after_max_steps_evaluated_and_saved_and_never_counts_for_a_full_run(prepared, capsys):
    """train.max_steps=3: three optimizer steps, an evaluation at the third, the model, the OOF and done.json
    written; its fingerprint is not the full run's, so `make train` without it trains the fold again."""
    from pipeline import validity

    cfg = with_train(prepared, max_steps=3, epochs=2)
    run = fold_run(cfg, StopAt(10**9))
    assert run.windows > 3
    done = run.run()
    assert done["steps"] == 3 and done["evaluations"] == 1 and done["best_step"] == 3
    fold_dir = layout.experiment_dir(cfg) / "fold0"
    assert {"model.safetensors", "oof.csv", "done.json"} <= {p.name for p in fold_dir.iterdir()}
    assert "train.max_steps=3: a smoke run, stopped at step 3 of" in capsys.readouterr().out
    assert validity.fold_status(fold_dir, validity.current_fingerprint(cfg), ()) == ""
    full = with_train(prepared, epochs=2)
    assert validity.fold_status(fold_dir, validity.current_fingerprint(full), ()) != ""  # retrained by a full run


def test_a_smoke_run_says_so_logs_every_step_and_estimates_only_its_own_steps(prepared, capsys, monkeypatch):
    """train.max_steps=3 of a longer schedule: the banner says `smoke run: 3 of N steps`, steps.jsonl holds each
    of the three steps, and the ETA at the stop counts no step past it (a simulated 60 s a step: the uncapped
    schedule would say N-3 minutes)."""
    clock = layout.experiment_dir(prepared).parent / "clock"
    monkeypatch.setenv("PIPELINE_FAKE_CLOCK", str(clock))
    monkeypatch.setenv("PIPELINE_FAKE_STEP_SECONDS", "60")
    cfg = with_train(prepared, max_steps=3, epochs=2)
    run = fold_run(cfg, StopAt(10**9))
    total = 2 * run.windows
    assert total > 3 + 10  # a schedule the ETA would count in minutes
    run.run()
    out = capsys.readouterr().out
    assert f"2 epochs, smoke run: 3 of {total:,} steps (train.max_steps)" in out, out
    lines = (layout.experiment_dir(cfg) / "fold0" / layout.STEPS).read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3]
    eta = re.search(r"fold 0 epoch 1 step 3/\d+: .* \| ETA (\S+) for the run", out)
    assert eta is not None and eta.group(1).endswith("s") and "m" not in eta.group(1), out


def test_the_smoke_run_banner_is_what_docs_stages_md_quotes() -> None:
    from pipeline import config
    from pipeline.core import distributed
    from pipeline.core.foldmodel import banner
    from tests.helpers import ROOT

    page = " ".join((ROOT / "docs" / "stages.md").read_text().split())
    quoted = re.search(r"`(smoke run: (\d+) of (\d+) steps \(train.max_steps\))`", page)
    assert quoted is not None
    model = torch.nn.Linear(2, 1)
    model.lora = None
    cfg = config.load("sample", [f"train.max_steps={quoted.group(2)}"])
    assert quoted.group(1) in banner(cfg, distributed.Dist(), "fp32", 10, 5, int(quoted.group(3)), model)
    full = config.load("sample", [f"train.max_steps={quoted.group(3)}"])  # as long as the schedule: no smoke run
    steps = int(quoted.group(3))
    assert f"{steps:,} optimizer steps" in banner(full, distributed.Dist(), "fp32", 10, 5, steps, model)


def test_a_smoke_runs_plan_counts_its_steps_for_the_run_and_for_a_fold() -> None:
    """eta.Plan with `cap` (train.max_steps as epochs): 2 of 10 epochs' steps left in this fold, a fold after it
    of the same cap; one evaluation each, not the schedule's three epochs of both."""
    from pipeline.core import eta

    rate = eta.Rate(train_tokens=100.0, train_seconds=100.0, eval_tokens=10.0, eval_seconds=10.0)  # 1 s a token
    plan = eta.Plan(epoch_tokens=100.0, eval_tokens=10.0, epochs_left=2, folds_left=1, fold_epochs=3,
                    done_fraction=0.03, cap=0.05)  # fmt: skip
    assert plan.seconds(rate) == pytest.approx((0.05 - 0.03) * 100 + 10 + 0.05 * 100 + 10)
    assert plan.fold_seconds(rate) == pytest.approx(0.05 * 100 + 10)
    full = dataclasses.replace(plan, cap=None)
    assert full.seconds(rate) == pytest.approx(0.97 * 100 + 10 + 2 * 110 + 3 * 110)
