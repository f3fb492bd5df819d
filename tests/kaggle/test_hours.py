"""The time plan of `make kernel` (pipeline/kaggle/hours.py): an estimate that says so, with the throughput's source,
every row it trains on, a stage-1 model, every evaluation, the saves and predicting."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pipeline import config
from pipeline.kaggle import hours

LARGE = ("data.extra_files=[]",)


def cfg_for(tmp_path: Path, *overrides: str) -> config.Config:
    paths = [f"input_dir={tmp_path / 'input'}", f"models_dir={tmp_path / 'models'}", f"kaggle.dir={tmp_path / 'k'}"]
    return config.load("xlmr-large", [*paths, *overrides])


def bench_file(tmp_path: Path, gpu: str | None, samples_per_second: float = 10.0) -> None:
    ours = {"samples_per_second": samples_per_second, "device": "cuda:0", **({"gpu": gpu} if gpu else {})}
    folder = tmp_path / "models" / "bench"
    folder.mkdir(parents=True)
    (folder / "xlm-roberta-large.json").write_text(json.dumps({"seq_len": 256, "rows": [
        {"spec": {"key": "all3"}, "ours": ours}]}))  # fmt: skip


def test_the_estimate_says_it_is_one(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, *LARGE)
    plan = hours.plan_time(cfg, 5)
    text = hours.format_time(plan, cfg)
    assert text.startswith("kernel: time plan, an estimate (the log's ETA lines are measured)")
    assert "10% of their fp16 peak, not measured" in plan.source
    assert 4000 < plan.tokens_per_second < 7000  # where public figures put two T4s on XLM-R large
    assert plan.total_seconds == pytest.approx(5 * (plan.fold_seconds + plan.predict_seconds))
    assert plan.save_seconds > 0 and plan.predict_seconds > hours.LOAD_SECONDS


@pytest.mark.parametrize("gpu", [None, "NVIDIA A100-SXM4-80GB", "Quadro T4000", "NVIDIA T400", "NVIDIA T400 4GB"])
def test_a_bench_figure_from_another_gpu_is_not_kaggle_s(tmp_path: Path, gpu: str | None) -> None:
    """make bench-gpu on an A100, on a card whose name holds "T4" without being one (Quadro T4000, T400), or in a
    file that names no GPU says nothing of two T4s: not doubled, not used."""
    bench_file(tmp_path, gpu)
    rate, source = hours.throughput(cfg_for(tmp_path, *LARGE))
    assert "an estimate for 2 T4s" in source and "not a T4: not used" in source and rate != 10.0 * 256 * 2


@pytest.mark.parametrize("gpu", ["Tesla T4", "NVIDIA T4"])
def test_a_bench_figure_from_a_t4_is_used(tmp_path: Path, gpu: str) -> None:
    bench_file(tmp_path, gpu)
    rate, source = hours.throughput(cfg_for(tmp_path, *LARGE))
    assert rate == 10.0 * 256 * 2 and source.startswith(f"measured by make bench-gpu on one {gpu}")


def test_extra_files_are_counted_or_said_not_to_be(tmp_path: Path) -> None:
    plain = hours.plan_time(cfg_for(tmp_path, *LARGE), 5)
    extra = ("data.extra_files=[translated-train.csv]", "data.datasets=[someone/translated]")
    missing = hours.plan_time(cfg_for(tmp_path, *extra), 5)
    assert missing.uncounted == ("translated-train.csv",)
    text = hours.format_time(missing, cfg_for(tmp_path, *extra))
    assert "warning: data.extra_files translated-train.csv not found here, so their rows are not counted" in text
    folder = tmp_path / "input" / "translated"  # where `make data` downloads data.datasets
    folder.mkdir(parents=True)
    rows = "".join(f'{i},"a comment, with a comma\nand a newline {i}",es,0\n' for i in range(40000))
    (folder / "translated-train.csv").write_text("id,comment_text,lang,toxic\n" + rows)
    counted = hours.plan_time(cfg_for(tmp_path, *extra), 5)
    assert counted.uncounted == ()
    per_row = plain.epoch_tokens / (hours.disk.training_row_bound(cfg_for(tmp_path, *LARGE)) - 8000 / 5)
    assert counted.epoch_tokens - plain.epoch_tokens == pytest.approx(40000 * per_row, rel=0.05)


def test_a_stage1_model_and_evaluations_inside_epochs_are_counted(tmp_path: Path) -> None:
    base = hours.plan_time(cfg_for(tmp_path, *LARGE), 5)
    two = cfg_for(tmp_path, *LARGE, "model.init_from=xl-s1")
    staged = hours.plan_time(two, 5)
    assert staged.stage1_seconds > base.fold_seconds / 2
    assert staged.total_seconds == pytest.approx(base.total_seconds + staged.stage1_seconds)
    assert "the stage-1 model xl-s1, first" in hours.format_time(staged, two)
    attached = hours.plan_time(cfg_for(tmp_path, *LARGE, "model.init_from=xl-s1", "kaggle.init_kernel=run-s1"), 5)
    assert attached.stage1_seconds == 0  # trained by another kernel
    often = hours.plan_time(cfg_for(tmp_path, *LARGE, "train.eval_every_steps=50"), 5)
    assert often.evals_per_epoch > 5 and often.fold_seconds > base.fold_seconds


def test_the_plan_is_against_kaggle_timeout_when_it_is_shorter(tmp_path: Path) -> None:
    """kaggle.timeout=7200 ends the session after two hours: the plan weighs the folds against that, not 12 hours."""
    cfg = cfg_for(tmp_path, *LARGE, "kaggle.timeout=7200")
    assert hours.session_seconds(cfg) == 7200
    text = hours.format_time(hours.plan_time(cfg, 5), cfg)
    assert "fold(s) and predicting, of a 2 h (kaggle.timeout=7200) session" in text and "12 h session" not in text
    assert "kernel: warning: the folds need about" in text and "about 1 fold(s) fit one" in text
    longer = cfg_for(tmp_path, *LARGE, "kaggle.timeout=99999")
    assert hours.session_seconds(longer) == 12 * 3600 and "of a 12 h session" in hours.format_time(
        hours.plan_time(longer, 5), longer
    )


def test_a_token_budget_counts_the_optimizer_steps_its_micro_batches_make(tmp_path: Path) -> None:
    """Evaluations every N steps count the epoch's steps: under train.token_budget at least its padded tokens over
    the budget a micro-batch, more than its rows over micro_batch where the budget holds fewer rows."""
    rows = 100_000.0
    plain = cfg_for(tmp_path, *LARGE)
    t = plain.train
    want = math.ceil(rows / (t.micro_batch * t.accumulation * 2))  # two T4s
    assert hours.epoch_windows(plain, rows, 150.0) == want
    budget = cfg_for(tmp_path, *LARGE, "train.token_budget=512")
    assert hours.epoch_windows(budget, rows, 150.0) == math.ceil(
        rows * 150.0 * hours.PADDING / (512 * t.accumulation * 2)
    )
    roomy = cfg_for(tmp_path, *LARGE, f"train.token_budget={10**6}")
    assert hours.epoch_windows(roomy, rows, 150.0) == want  # never fewer rows a batch than micro_batch allows
    every = ["train.eval_every_steps=200"]
    often = hours.plan_time(cfg_for(tmp_path, *LARGE, *every, "train.token_budget=512"), 5)
    assert often.evals_per_epoch > hours.plan_time(cfg_for(tmp_path, *LARGE, *every), 5).evals_per_epoch


def test_checkpoint_ensembling_predicts_the_test_at_each_evaluation_and_not_again(tmp_path: Path) -> None:
    base = hours.plan_time(cfg_for(tmp_path, *LARGE), 5)
    ens = hours.plan_time(cfg_for(tmp_path, *LARGE, "train.eval_ensemble=3"), 5)
    assert ens.eval_seconds == pytest.approx(
        base.eval_seconds * (base.eval_tokens + base.test_tokens) / base.eval_tokens
    )
    assert ens.predict_seconds == 0 < base.predict_seconds  # predict reads what training stored
    extra = ens.epochs * ens.evals_per_epoch * (ens.eval_seconds - base.eval_seconds)
    assert ens.fold_seconds == pytest.approx(base.fold_seconds + extra)
