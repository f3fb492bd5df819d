"""`make gpu-check` (pipeline.benchmark.gpucheck) where no GPU is: its refusal, its table, and the checks that do not
need CUDA run on the CPU with the tiny model (bf16 under autocast against fp32, the out-of-memory halving)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from pipeline import config
from pipeline.benchmark import gpucheck
from tests.helpers import one_line_error

ROOT = Path(__file__).resolve().parents[2]
TINY = ["bench.model=tiny", "model.tiny.hidden=32", "model.tiny.intermediate=64", "model.tiny.vocab=300",
        "train.device=cpu"]  # fmt: skip
SMALL = gpucheck.Shape(seq=16, micro=4, accumulation=2, steps=2)


def tiny_cfg():
    return config.load("bench-gpu", TINY)


def test_without_cuda_it_refuses_in_one_line_and_writes_nothing(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpucheck.main([f"models_dir={tmp_path}"]) == 2
    line = one_line_error(capsys)
    assert line.startswith("error: make gpu-check needs a CUDA GPU; torch.cuda.is_available() is False")
    assert gpucheck.CHECK_TORCH in line
    assert not list(tmp_path.iterdir())


def test_the_table_gives_each_check_a_verdict_and_counts_the_ones_that_ran() -> None:
    checks = [
        gpucheck.Check("precision", True, "auto: bf16 (compute capability 9.0; expected bf16)", 0.2),
        gpucheck.Check("fp16 vs fp32", False, "a | b", 12.4),
        gpucheck.Check("DDP (NCCL)", None, "1 GPU: two are needed"),
    ]
    text = gpucheck.table(checks, "NVIDIA H100 (cuda:0)")
    assert text.splitlines()[0] == "`make gpu-check` on NVIDIA H100 (cuda:0)"
    assert "| precision | ok | auto: bf16 (compute capability 9.0; expected bf16) | 0 |" in text
    assert "| fp16 vs fp32 | FAILED | a / b | 12 |" in text  # a bar in a result does not split its row
    assert "| DDP (NCCL) | skipped | 1 GPU: two are needed | 0 |" in text
    assert text.rstrip().endswith("1 of 2 checks ok, 1 FAILED")


def test_the_report_is_written_as_markdown_and_json(tmp_path: Path, capsys) -> None:
    cfg = config.load("bench-gpu", [*TINY, f"models_dir={tmp_path}"])
    out = gpucheck.write_report(cfg, [gpucheck.Check("precision", True, "auto: fp16", 1.0)], "T4 (cuda:0)")
    assert out == tmp_path / "gpu-check"
    assert (out / "report.md").read_text() in capsys.readouterr().out
    saved = json.loads((out / "report.json").read_text())
    assert saved["device"] == "T4 (cuda:0)" and saved["checks"][0]["verdict"] == "ok"


def test_a_failing_check_is_a_row_and_the_others_still_run() -> None:
    def broken():
        raise RuntimeError("CUDA error: an illegal memory access\nmore")

    c = gpucheck.timed("fp16 vs fp32", broken)
    assert c.ok is False and c.result == "RuntimeError: CUDA error: an illegal memory access"


@pytest.mark.usefixtures("torch_one_thread")
def test_bf16_under_autocast_with_accumulation_and_checkpointing_stays_close_to_fp32(monkeypatch) -> None:
    ok, result = gpucheck.loss_check(tiny_cfg(), torch.device("cpu"), ["bf16"], SMALL)
    assert ok, result
    assert result.startswith("2 steps of 4 x 2 rows x 16 tokens, checkpointing: fp32 ") and "bf16 " in result
    monkeypatch.setattr(gpucheck, "LOSS_TOLERANCE", 0.0)  # the same gap, judged by no tolerance: caught
    assert gpucheck.loss_check(tiny_cfg(), torch.device("cpu"), ["bf16"], SMALL)[0] is False


@pytest.mark.usefixtures("torch_one_thread")
def test_an_out_of_memory_error_at_the_first_micro_batch_is_halved_away(capsys) -> None:
    ok, result = gpucheck.oom_check(tiny_cfg(), torch.device("cpu"), "fp32", SMALL)
    assert ok, result
    assert result == "fp32: 1 halving(s), micro-batch 4 -> 2, 2 of 2 steps done"
    assert "out of memory at step 1; micro-batches halved to 2 rows" in capsys.readouterr().err


def test_make_gpu_check_runs_the_module_and_help_names_it() -> None:
    dry = subprocess.run(["make", "-n", "-o", ".venv/.installed", "gpu-check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert "-m pipeline.benchmark.gpucheck --args" in dry.stdout, dry
    made = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "  make gpu-check      on one CUDA GPU:" in made.stdout


@pytest.mark.usefixtures("torch_one_thread")
def test_run_puts_every_check_in_one_report(tmp_path: Path, monkeypatch, capsys) -> None:
    """The whole sequence on the CPU: the GPU's own calls faked, the tiny model trained for real, bench left out;
    one GPU, so the NCCL check is skipped and said to be."""
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: "Fake GPU")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(gpucheck, "precision_check", lambda d: (True, "auto: bf16"))
    monkeypatch.setattr(gpucheck, "half_precisions", lambda d: ["bf16"])
    cfg = config.load("bench-gpu", [*TINY, f"models_dir={tmp_path}"])
    checks = gpucheck.run(cfg, [], bench=False)
    got = {c.name: gpucheck.verdict(c) for c in checks}
    assert got == {"precision": "ok", "bf16 vs fp32": "ok", "out of memory": "ok", "make bench-gpu": "skipped",
                   "DDP (NCCL)": "skipped"}, checks  # fmt: skip
    assert (tmp_path / "gpu-check" / "report.md").read_text().startswith("`make gpu-check` on Fake GPU (cpu)")


def test_bench_gpu_runs_in_its_own_process_with_the_settings_given(tmp_path: Path, monkeypatch) -> None:
    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 2, "", "loading\nerror: train.device='cuda': no CUDA device\n")

    monkeypatch.setattr(gpucheck.subprocess, "run", fake_run)
    cfg_args = ["--config", "bench-gpu", "--args", f"models_dir={tmp_path}"]
    ok, result = gpucheck.bench_check(cfg_args, config.load("bench-gpu", [*TINY, f"models_dir={tmp_path}"]))
    assert seen[0][1:] == ["-m", "pipeline.bench", *cfg_args]
    assert ok is False and result == "exit 2: error: train.device='cuda': no CUDA device"
    monkeypatch.setattr(gpucheck.subprocess, "run", lambda cmd, **k: subprocess.CompletedProcess(cmd, 0, "", ""))
    assert gpucheck.bench_check(cfg_args, config.load("bench-gpu", [f"models_dir={tmp_path}"], device=False)) == (
        True,
        f"the table in {tmp_path}/bench/xlm-roberta-large.md",
    )
