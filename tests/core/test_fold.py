"""One fold trained in process (pipeline.core.fold.FoldRun): a stop at an epoch's last step, checkpointing in
the real fold, a fold with one class, a resumed fold that keeps the plan auto-fit chose; a resume under other
settings (continued, or named as dropped before anything is replaced), a resumed fold's minutes, TensorBoard
and the ETA after a resume, a killed run's temporaries and a full disk while a state is saved; a fold cut by a
token budget resumed mid-epoch."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from pipeline import config, files, fingerprint, layout, train, validity
from pipeline.core import distributed, foldclock, resume
from pipeline.core.fold import FoldInputs, FoldRun
from pipeline.core.resume import Interrupted
from pipeline.errors import PipelineError
from pipeline.files import read_json, write_json
from pipeline.inputs import tables, tokens
from pipeline.scoring import metrics
from tests.helpers import digests
from tests.helpers.folds import StopAt, fold_run

pytestmark = pytest.mark.usefixtures("torch_one_thread")

# the `prepared` fixture (a tiny two-fold experiment, tables and tokens built) is in tests/conftest.py


def test_stop_at_an_epochs_last_step_resumes_into_its_evaluation(prepared, tmp_path) -> None:
    cfg = prepared
    reference = dataclasses.replace(cfg, models_dir=str(tmp_path / "reference"))
    want = fold_run(reference, StopAt(10**9)).run()

    run = fold_run(cfg, StopAt(10**9))
    run.stop = StopAt(run.windows)  # Ctrl-C during the epoch's last optimizer step
    with pytest.raises(Interrupted):
        run.run()
    fold_dir = layout.experiment_dir(cfg) / "fold0"
    state = torch.load(fold_dir / layout.RESUME, weights_only=True)
    assert state["step"]["window"] == run.windows and state["history"] == []  # trained, not yet evaluated
    assert not (fold_dir / "done.json").exists()

    # a kill during the evaluation leaves exactly this state; the rerun evaluates and finishes
    got = fold_run(cfg, StopAt(10**9)).run()
    assert got["auc"] == pytest.approx(want["auc"], abs=1e-9)
    history = [json.loads(line) for line in (fold_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == 1 and history[0]["steps_run"] == 0  # nothing trained twice
    assert (fold_dir / "done.json").exists() and not (fold_dir / layout.RESUME).exists()


def test_the_train_stage_runs_with_checkpointing(prepared) -> None:
    """Checkpointing recomputes each layer's forward in backward: two forwards per micro-batch, not one."""
    counts = {}
    for on in (True, False):
        cfg = dataclasses.replace(prepared, train=dataclasses.replace(prepared.train, checkpointing=on))
        run = fold_run(cfg, StopAt(10**9))  # the model as the stage builds it
        calls = []
        for layer in run.model.encoder.encoder.layer:
            layer.intermediate.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        run.train_epoch(0)
        counts[on] = len(calls)
    layers = prepared.model.tiny.layers
    micro_batches = len(run.epoch_plan(0))
    assert counts[False] == layers * micro_batches
    assert counts[True] == 2 * layers * micro_batches


def test_a_fold_with_one_class_is_refused(prepared) -> None:
    table, _, _ = tables.load_table(prepared)
    table.loc[table["fold"] == 1, "toxic"] = 0
    with pytest.raises(PipelineError, match="fold 1: its validation rows hold one class"):
        FoldRun(FoldInputs(prepared, 1, table, None, None, "x"), distributed.Dist(), StopAt(1))


def test_a_fold_whose_every_evaluation_is_nan_writes_no_done_json(prepared, monkeypatch) -> None:
    """A metric that cannot be taken of a fold's rows keeps no weights and no OOF: the fold fails, never complete."""
    from pipeline.core import foldeval

    monkeypatch.setattr(foldeval.metrics, "fold_score", lambda rows, preds, profile: ("valid_auc", float("nan"), {}))
    cfg = config.with_overrides(prepared, ["train.max_steps=2"])
    with pytest.raises(PipelineError, match="fold 0: no evaluation scored a number .1 evaluations, AUC nan."):
        fold_run(cfg, StopAt(10**9), fold=0).run()
    assert not (layout.fold_dir(cfg, 0) / layout.DONE).exists()


def test_a_resumed_fold_keeps_the_micro_batch_auto_fit_chose(prepared, monkeypatch) -> None:
    """The saved steps count windows of the fitted plan: a resume must not fit again (memory may differ now)."""
    from pipeline.core import memory

    picks = iter([8, 2])  # the second fit would choose another micro-batch
    monkeypatch.setattr(memory, "fit_micro_batch", lambda *a, **k: (next(picks), "fake"))
    cfg = dataclasses.replace(prepared, train=dataclasses.replace(prepared.train, max_memory_gb=1.0))
    with pytest.raises(Interrupted):
        fold_run(cfg, StopAt(3)).run()
    resumed = fold_run(cfg, StopAt(10**9))
    assert (resumed.cfg.train.micro_batch, resumed.cfg.train.accumulation) == (8, 4)  # 16 x 2 fitted to 8 x 4
    assert resumed.progress.step.window == 3
    resumed.run()


# ---------------------------------------------------------------- a resume under other settings, its time, its files


def with_train(cfg, **changes):
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, **changes))


def say_resume(cfg, capsys) -> tuple[str, str]:
    """What `make train` says of fold 0's resume state before any fold starts, under `cfg`: (stdout, stderr)."""
    capsys.readouterr()
    path = layout.fold_dir(cfg, 0) / layout.RESUME
    train.say_resume(path, 0, validity.current_fingerprint(cfg), validity.current_made_from(cfg), 1)
    return capsys.readouterr()


def test_a_patience_change_continues_the_saved_progress(prepared, tmp_path, capsys) -> None:
    """train.patience decides only when the fold stops: a state saved under patience=6 is continued under 8 and
    ends as an uninterrupted run with 8 does."""
    six, eight = (with_train(prepared, eval_every_steps=3, patience=p) for p in (6, 8))
    want = fold_run(dataclasses.replace(eight, models_dir=str(tmp_path / "reference")), StopAt(10**9)).run()
    with pytest.raises(Interrupted):
        fold_run(six, StopAt(5)).run()  # Ctrl-C at step 5
    out, _ = say_resume(eight, capsys)
    assert out.startswith("fold 0: continues its saved progress (epoch 1, step 5) with train.patience (8 here, 6 when")
    run = fold_run(eight, StopAt(10**9))
    assert run.progress.step.window == 5  # not trained again from step 0
    got = run.run()
    for key in ("auc", "best_step", "steps", "evaluations"):
        assert got[key] == want[key], key
    oof = [
        pd.read_csv(base / "sample" / "fold0" / layout.OOF) for base in (tmp_path / "models", tmp_path / "reference")
    ]
    assert (oof[0]["pred"] - oof[1]["pred"]).abs().max() < 1e-6


def test_a_weight_changing_setting_says_what_is_dropped_before_anything_is_replaced(prepared, capsys) -> None:
    cfg = with_train(prepared, log_every_steps=2)
    with pytest.raises(Interrupted):
        fold_run(cfg, StopAt(5)).run()
    exp = layout.experiment_dir(cfg)
    before = digests(exp)
    other = with_train(cfg, lr=2e-3)
    out, err = say_resume(other, capsys)
    path = exp / "fold0" / layout.RESUME
    assert err.startswith(f"warning: fold 0: the progress saved in {path} (epoch 1, step 5) will be dropped and the "
                          "fold trained from its start: train.lr (0.002 here, 0.001 when saved), which changes the "
                          "weights trained so far. To continue it instead, stop now")  # fmt: skip
    assert err.count("\n") == 1 and out == ""
    # Ctrl-C as soon as the fold starts: nothing of the saved progress is replaced (its state, its step records)
    with pytest.raises(Interrupted, match="fold 0 stopped at its first step; nothing was saved or replaced"):
        fold_run(other, StopAt(1)).run()
    assert digests(exp) == before
    # with the settings it was saved with, it continues
    assert fold_run(cfg, StopAt(10**9)).progress.step.window == 5


def test_a_stop_at_the_first_step_replaces_nothing_when_every_step_records_and_evaluates(prepared) -> None:
    """log_every_steps=1 writes a record at step 1, eval_every_steps=1 an evaluation (weights, OOF): a stop at the
    first step of a run that would drop a saved state still leaves that state's folder as it was."""
    cfg = with_train(prepared, log_every_steps=1, eval_every_steps=1, tensorboard=True)
    with pytest.raises(Interrupted):
        fold_run(cfg, StopAt(5)).run()
    exp = layout.experiment_dir(cfg)
    before = digests(exp)
    assert any(name.startswith("tb/") for name in before) and "fold0/steps.jsonl" in before
    with pytest.raises(Interrupted, match="fold 0 stopped at its first step; nothing was saved or replaced"):
        fold_run(with_train(cfg, lr=2e-3), StopAt(1)).run()
    assert digests(exp) == before
    assert fold_run(cfg, StopAt(10**9)).progress.step.window == 5  # and it continues


class KillAt(StopAt):
    """A kill (nothing after it runs) when the loop asks for the `at`-th time."""

    @property
    def raised(self) -> bool:
        if StopAt.raised.fget(self):
            raise SystemExit("killed")
        return False


def test_a_run_that_drops_a_saved_state_drops_it_at_its_first_write(prepared) -> None:
    """Once a run under other settings has written its first record or evaluation, the state it was warned to drop
    is gone: killed there, a rerun with the old settings must not continue that state beside the new weights."""
    cfg = with_train(prepared, log_every_steps=1, eval_every_steps=2)
    with pytest.raises(Interrupted):
        fold_run(cfg, StopAt(5)).run()
    path = layout.experiment_dir(cfg) / "fold0" / layout.RESUME
    with pytest.raises(SystemExit):
        fold_run(with_train(cfg, lr=2e-3), KillAt(3)).run()  # killed at step 3: step 2's evaluation replaced weights
    assert not path.exists()
    assert fold_run(cfg, StopAt(10**9)).progress.step.window == 0  # trained from its start, not continued


def test_a_fold_resumed_from_its_first_step_records_every_step_once(prepared, tmp_path) -> None:
    """log_every_steps=1, a state saved at step 1, killed at step 2 after its record was written: the resumed fold's
    step records and TensorBoard events are an uninterrupted run's, step 1's one point included."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = with_train(prepared, log_every_steps=1, save_every_steps=1, tensorboard=True)
    reference = dataclasses.replace(cfg, models_dir=str(tmp_path / "reference"))
    fold_run(reference, StopAt(10**9)).run()
    with pytest.raises(SystemExit):
        fold_run(cfg, KillAt(2)).run()
    folder = layout.fold_dir(cfg, 0)
    assert torch.load(folder / layout.RESUME, weights_only=True)["step"]["window"] == 1
    assert fold_run(cfg, StopAt(10**9)).run()["steps"] == 19

    def records(models) -> tuple[list, dict]:
        lines = (models / "sample" / "fold0" / layout.STEPS).read_text().splitlines()
        events = EventAccumulator(str(models / "sample" / "tb" / "fold0"))
        events.Reload()
        tb = {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
        return [(r["step"], round(r["loss"], 6)) for r in map(json.loads, lines)], tb

    got, want = records(tmp_path / "models"), records(tmp_path / "reference")
    assert [s for s, _ in want[0]] == list(range(1, 20)) and got == want


def test_a_stale_complete_fold_is_named_with_why_before_it_is_trained_again(prepared, capsys) -> None:
    fold_run(prepared, StopAt(10**9)).run()  # fold 0 complete
    folder = layout.fold_dir(prepared, 0)

    def todo(cfg) -> tuple[list[int], str]:
        capsys.readouterr()
        made = validity.current_made_from(cfg)
        return train.folds_to_train(cfg, [0], made, distributed.Dist()), capsys.readouterr().err

    assert todo(prepared) == ([], "")  # complete: skipped, nothing to warn of
    folds, err = todo(with_train(prepared, lr=2e-3))
    assert folds == [0] and err == (
        f"warning: fold 0: the complete fold in {folder} no longer counts (trained on other data or settings: "
        "train.lr (0.002 here, 0.001 when trained)); it is trained again, replacing it\n"
    )
    done = read_json(folder / layout.DONE)
    write_json(folder / layout.DONE, {k: v for k, v in done.items() if k != "made_from"})  # an older done.json
    assert "train.lr (0.002 here, 0.001 when trained)); it is" in todo(with_train(prepared, lr=2e-3))[1]
    write_json(folder / layout.DONE, done)
    with open(folder / layout.WEIGHTS, "r+b") as f:
        f.truncate(100)
    folds, err = todo(prepared)
    assert folds == [0] and err.startswith(f"warning: fold 0: the complete fold in {folder} no longer counts "
                                           "(model.safetensors has 100 bytes, done.json records")  # fmt: skip
    assert err.count("\n") == 1


def test_a_skipped_fold_names_its_own_figure_apart_from_the_fold_tables(prepared, capsys) -> None:
    """The skip line's figure is the best step's own, chosen on the rows it is scored on (done.json `auc`);
    the fold table's takes each half at the step the other half chose: each line says which it prints."""
    fold_run(prepared, StopAt(10**9)).run()
    done = read_json(layout.fold_dir(prepared, 0) / layout.DONE)
    capsys.readouterr()
    assert train.folds_to_train(prepared, [0], validity.current_made_from(prepared), distributed.Dist()) == []
    assert capsys.readouterr().out == (
        f"fold 0: complete with these settings ({metrics.judged_by(done)} {done['auc']:.4f} with its best step, "
        "chosen on the rows it is scored on; the fold table's takes each half at the step its other half chose); "
        "skipped\n"
    )


def test_why_a_resume_state_is_continued_or_not() -> None:
    made = {"table": "t", "model": {"tiny": True}, "settings": {"train": {"lr": 0.001, "patience": 6}, "model": {}}}
    state = {"digest": "d", "world": 1, "made_from": made, "resume_key": fingerprint.resume_key(made)}
    patience = {**made, "settings": {"train": {"lr": 0.001, "patience": 8}, "model": {}}}
    lr = {**made, "settings": {"train": {"lr": 0.002, "patience": 6}, "model": {}}}
    assert resume.verdict(state, "d", made, 1) == (True, "")
    assert resume.verdict(state, "e", patience, 1) == (True, "train.patience (8 here, 6 when saved)")
    assert resume.verdict(state, "e", lr, 1) == (
        False, "train.lr (0.002 here, 0.001 when saved), which changes the weights trained so far")  # fmt: skip
    assert resume.verdict(state, "e", {**made, "table": "u"}, 1)[1].startswith("the training table changed")
    assert resume.verdict(state, "d", made, 2) == (
        False, "it was saved by 1 process and this run has 2 (run with GPUS=1 to resume)")  # fmt: skip
    old = {"digest": "d", "world": 1}  # saved before states recorded what they were made from
    assert resume.verdict(old, "d", made, 1) == (True, "")
    assert resume.verdict(old, "e", patience, 1)[1] == (
        "it was saved with other data or settings, which changes the weights trained so far"
    )


def test_a_resumed_folds_minutes_count_the_time_before_the_resume(prepared) -> None:
    with pytest.raises(Interrupted):
        fold_run(prepared, StopAt(5)).run()
    path = layout.experiment_dir(prepared) / "fold0" / layout.RESUME
    state = torch.load(path, weights_only=True)
    assert state["seconds"] > 0  # the time the fold ran before it was cut
    state["seconds"] = 600.0  # as if it had trained ten minutes before the cut
    torch.save(state, path)
    done = fold_run(prepared, StopAt(10**9)).run()
    assert 10 <= done["minutes"] < 11


def test_tensorboard_keeps_the_step_a_fold_resumes_at(prepared, tmp_path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = with_train(prepared, log_every_steps=2, eval_every_steps=4, tensorboard=True)
    reference = dataclasses.replace(cfg, models_dir=str(tmp_path / "reference"))
    fold_run(reference, StopAt(10**9)).run()
    with pytest.raises(Interrupted):
        fold_run(cfg, StopAt(8)).run()  # saved at step 8, which has a training record and an evaluation
    fold_run(cfg, StopAt(10**9)).run()

    def steps(models) -> dict[str, list[int]]:
        events = EventAccumulator(str(models / "sample" / "tb" / "fold0"))
        events.Reload()
        return {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}

    got, want = steps(tmp_path / "models"), steps(tmp_path / "reference")
    assert 8 in want["train/loss"] and 8 in want["valid/auc"]
    assert got == want  # every step once, the resumed one included


def test_the_eta_uses_this_runs_rate_not_an_earlier_runs(prepared, monkeypatch, capsys) -> None:
    """eta.json of an earlier run made under ten times the load: once this run has measured, its estimate is its
    own (a simulated clock, 60 s an optimizer step), not a mix of every run the folder has seen."""
    from pipeline.core import eta

    monkeypatch.setenv("PIPELINE_FAKE_CLOCK", str(prepared.input_dir + "/clock"))
    monkeypatch.setenv("PIPELINE_FAKE_STEP_SECONDS", "60")
    cfg = with_train(prepared, epochs=2)
    run = fold_run(cfg, StopAt(10**9))
    slow = eta.Rate(train_tokens=run.epoch_tokens * 20, train_seconds=20 * run.windows * 600.0)
    exp = layout.experiment_dir(cfg)
    write_json(exp / eta.ETA_FILE, {"run": "an earlier one", "rate": vars(slow), "earlier": vars(eta.Rate())})
    run = fold_run(cfg, StopAt(10**9))
    assert run.rate.train(run.epoch_tokens) == pytest.approx(run.windows * 600.0)  # until it has measured
    capsys.readouterr()
    run.run()
    out = capsys.readouterr().out
    found = re.search(r"fold 0 epoch 1: .* \| ETA (?:(\d+)h)?(\d+)m for the run", out)
    minutes = int(found.group(1) or 0) * 60 + int(found.group(2))
    assert run.windows * 0.9 <= minutes <= run.windows * 1.1 + 1, (
        minutes,
        run.windows,
    )  # one epoch left at 1 min a step
    saved = read_json(exp / eta.ETA_FILE)
    assert saved["run"] == eta.run_id() and saved["earlier"]["train_seconds"] == slow.train_seconds
    assert eta.read_rates(exp)[0].train_tokens > 0  # a later fold of this run goes on with this run's rate


def test_a_fold_removes_the_temporaries_of_a_killed_run(prepared) -> None:
    import subprocess
    import sys

    pid = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)
    folder = layout.experiment_dir(prepared) / "fold0"
    folder.mkdir(parents=True)
    stale = folder / f".resume.pt.tmp-{pid}"  # a resume state's write cut by SIGKILL
    stale.write_bytes(b"half a state")
    fold_run(prepared, StopAt(10**9))
    assert not stale.exists()


def test_a_full_disk_while_a_resume_state_is_saved_is_one_line_and_keeps_the_last_one(prepared, monkeypatch) -> None:
    cfg = with_train(prepared, save_every_steps=3)
    with pytest.raises(Interrupted):
        fold_run(cfg, StopAt(4)).run()
    folder = layout.experiment_dir(cfg) / "fold0"
    saved = (folder / layout.RESUME).read_bytes()
    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        """The disk fills up half-way through the state, as torch says it (measured on a full tmpfs): its own
        writer, given a path, only "unexpected pos"; a Python file raises the OSError."""
        real_save({"half": torch.zeros(10)}, f)
        if isinstance(f, str | Path):
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", save)
    with pytest.raises(files.DiskFullError) as info:
        fold_run(cfg, StopAt(10**9)).run()  # its next save is at step 6
    assert str(info.value).startswith(f"the disk is full: resume.pt could not be written in {folder} (needs about ")
    assert (folder / layout.RESUME).read_bytes() == saved
    assert not list(folder.glob(".*"))


def test_each_step_runs_its_jobs_in_one_fixed_order(prepared, monkeypatch) -> None:
    """After every optimizer step: timing, logging, evaluation, the deadline, a stop request, the checkpoint; at a
    fresh fold's first step the deadline and the stop are asked before anything is written (a stop there writes
    nothing)."""
    run = fold_run(dataclasses.replace(prepared, train=dataclasses.replace(prepared.train, save_every_steps=1)),
                   StopAt(10**9))  # fmt: skip
    order = ["time_window", "log_window", "evaluate_when_due", "deadline_passed", "stop_requested",
             "checkpoint_when_due"]  # fmt: skip
    calls = []
    for name in order:
        owner = foldclock if name == "deadline_passed" else run  # the time budget's, not the run's
        job = getattr(owner, name)
        monkeypatch.setattr(owner, name, lambda *a, job=job, name=name: (calls.append(name), job(*a))[1])
    run.train_epoch(0)
    first = ["time_window", "deadline_passed", "stop_requested", "log_window", "evaluate_when_due",
             "checkpoint_when_due"]  # fmt: skip
    assert calls == first + order * (run.windows - 1)


def test_a_retrain_refused_while_its_fold_is_built_or_stopped_at_once_leaves_the_complete_fold(prepared) -> None:
    """A complete fold trained again under settings that building its model or optimizer refuses (an 8-bit optimizer
    on a CPU), or stopped at its first step, keeps its done.json, its test predictions and its vocabulary map
    (none here: a trimmed retrain would write one): the folder is replaced only once the new run has begun."""
    fold_run(prepared, StopAt(10**9)).run()
    exp, folder = layout.experiment_dir(prepared), layout.fold_dir(prepared, 0)
    (folder / layout.TEST_PREDS).write_text("id,toxic\n1,0.5\n")  # as `make predict` leaves them
    write_json(folder / layout.TEST_KEY, {"key": "k"})
    before = digests(exp)
    assert {"fold0/done.json", "pipeline.yaml"} <= set(before)
    trimmed = dataclasses.replace(prepared, model=dataclasses.replace(prepared.model, trim_vocab=True))
    with pytest.raises(PipelineError, match="^train.optimizer=adamw8bit runs only on a CUDA GPU"):
        fold_run(with_train(trimmed, optimizer="adamw8bit"), StopAt(10**9))
    assert digests(exp) == before
    with pytest.raises(Interrupted, match="fold 0 stopped at its first step; nothing was saved or replaced"):
        fold_run(with_train(trimmed, lr=2e-3), StopAt(1)).run()
    assert digests(exp) == before
    assert validity.is_complete(folder, validity.current_fingerprint(prepared))
    fold_run(with_train(trimmed, lr=2e-3), StopAt(10**9)).run()  # a retrain that begins replaces it
    assert not (folder / layout.TEST_PREDS).exists() and (folder / layout.VOCAB_MAP).exists()
    assert config.load_file(exp / layout.RUN_CONFIG).train.lr == 2e-3


def test_precision_auto_on_a_cpu_takes_the_faster_of_one_step_each(prepared, monkeypatch, capsys) -> None:
    """On a CPU with native bf16 a fold's start measures one step in bf16 and one in fp32 and trains in the faster,
    saying which and both rates in its header; done.json records them, and its fingerprint the precision chosen:
    a fold that chose bf16 does not pass for one that chose fp32."""
    from pipeline.core import memory, precision

    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)  # as on an AVX512-BF16 CPU without AMX
    measured = []

    def rates(net, model, micro, seq_len, precisions, device, optimizer):
        measured.append((micro, seq_len, precisions))
        real = real_rates(net, model, micro, seq_len, precisions, device, optimizer)  # it runs: both rates > 0
        assert set(real) == {"bf16", "fp32"} and min(real.values()) > 0
        return {"bf16": 10.0, "fp32": 20.0}  # fp32 faster here, whatever this CPU measured

    real_rates = memory.step_rates
    monkeypatch.setattr(memory, "step_rates", rates)
    cfg = dataclasses.replace(prepared, train=dataclasses.replace(prepared.train, precision="auto"))
    run = fold_run(cfg, StopAt(10**9))
    assert run.precision == "fp32" and measured == [(cfg.train.micro_batch, cfg.model.max_length, ("bf16", "fp32"))]
    done = run.run()
    header = capsys.readouterr().out
    assert (f"precision fp32 (auto, measured faster: fp32 20.0 ex/s, bf16 10.0 ex/s, one step each at micro-batch "
            f"{cfg.train.micro_batch} x {cfg.model.max_length} tokens)") in header  # fmt: skip
    assert done["precision"] == "fp32" and done["precision_rates"] == {"bf16": 10.0, "fp32": 20.0}
    digest = validity.current_fingerprint(cfg)
    fold_dir = layout.fold_dir(cfg, 0)
    assert done["digest"] == fingerprint.with_precision(digest, "fp32") != digest
    assert validity.is_complete(fold_dir, digest)  # a rerun skips it
    from pipeline import predict

    table, test, meta = tables.load_table(cfg)
    splits, _ = tokens.load_cache(cfg, meta)
    predict.fold_test_preds(cfg, fold_dir, splits["test"], test, meta, torch.device("cpu"))
    assert read_json(fold_dir / layout.TEST_KEY)["key"]["precision"] == "fp32"  # the test, as its OOF, in fp32
    as_bf16 = {**read_json(fold_dir / layout.DONE), "precision": "bf16"}  # the record of another choice
    write_json(fold_dir / layout.DONE, as_bf16)
    assert validity.fold_status(fold_dir, digest).startswith(validity.OTHER_INPUTS)


def test_precision_auto_on_a_cpu_measures_nothing_where_a_setting_decides(prepared, monkeypatch) -> None:
    """fp32 set, or a CPU without native bf16: no step is measured and the fingerprint is as before."""
    from pipeline.core import memory, precision

    monkeypatch.setattr(memory, "step_rates", lambda *a: pytest.fail("measured"))
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    cfg = dataclasses.replace(prepared, train=dataclasses.replace(prepared.train, precision="auto"))
    run = fold_run(cfg, StopAt(10**9))
    assert run.precision == "fp32" and run.precision_rates is None
    assert precision.choose({"bf16": 5.0, "fp32": 5.0}) == "fp32"  # a tie: fp32, which rounds nothing
    assert precision.choose({"fp32": 5.0, "bf16": 5.1}) == "bf16"


def test_precision_auto_is_measured_once_an_experiment_and_the_other_folds_take_it(prepared, monkeypatch) -> None:
    """Rates a few percent apart flip with noise: the first fold measures, the others (side by side or in a later
    run) take its rates from models/<name>/precision.json and say so; other shapes are measured again."""
    from pipeline.core import memory, precision

    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: True)
    draws = iter([{"bf16": 10.0, "fp32": 9.0}, {"bf16": 9.0, "fp32": 10.0}, {"bf16": 3.0, "fp32": 4.0}])
    measured = []

    def rates(net, model, micro, seq_len, precisions, device, optimizer):
        measured.append((micro, seq_len))
        return next(draws)  # a second measurement would choose fp32

    monkeypatch.setattr(memory, "step_rates", rates)
    cfg = dataclasses.replace(prepared, train=dataclasses.replace(prepared.train, precision="auto"))
    first, second = fold_run(cfg, StopAt(10**9), fold=0), fold_run(cfg, StopAt(10**9), fold=1)
    assert (first.precision, second.precision) == ("bf16", "bf16") and len(measured) == 1
    assert second.precision_rates == {"bf16": 10.0, "fp32": 9.0}
    assert "as this experiment's first fold measured" in second.precision_why
    assert "as this experiment" not in first.precision_why
    assert read_json(layout.precision_choice(cfg))["rates"] == {"bf16": 10.0, "fp32": 9.0}
    other = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, micro_batch=cfg.train.micro_batch // 2))
    assert fold_run(other, StopAt(10**9), fold=1).precision == "fp32" and len(measured) == 2  # other shapes


def test_a_token_budget_fold_stopped_mid_epoch_resumes_to_the_same_auc(prepared, tmp_path) -> None:
    """train.token_budget: micro-batches of unequal rows, the same plan again after a resume (the seed's), so a
    fold stopped mid-epoch ends where an uninterrupted one does."""
    cfg = config.with_overrides(prepared, ["train.token_budget=128"])
    reference = dataclasses.replace(cfg, models_dir=str(tmp_path / "reference"))
    want = fold_run(reference, StopAt(10**9)).run()

    run = fold_run(cfg, StopAt(10**9))
    rows = [len(ms[0]) for ms in run.epoch_plan(0)]
    assert len(set(rows)) > 2 and max(rows) <= 16  # cut by the budget, never past micro_batch
    run.stop = StopAt(run.windows // 2)
    with pytest.raises(Interrupted):
        run.run()
    got = fold_run(cfg, StopAt(10**9)).run()
    assert got["auc"] == pytest.approx(want["auc"], abs=1e-9)
