"""The bench table on a tiny XLM-R: every row present, ratios computed, files written; one row in its own process."""

from __future__ import annotations

import json

from pipeline import bench, config

TINY = [
    "bench.model=tiny",
    "bench.seq_len=16",
    "bench.effective_batch=4",
    "bench.micro_batch=2",
    "bench.vocab_used=300",
    "bench.max_memory_gb=4",
    "model.tiny.vocab=1000",
    "model.tiny.layers=1",
    "model.tiny.hidden=32",
    "model.tiny.heads=2",
    "model.tiny.intermediate=64",
]


def test_table_rows_ratios_and_files(tmp_path) -> None:
    cfg = config.load("sample", [*TINY, f"models_dir={tmp_path}"])
    # rows in this process (the stage runs each in a fresh one): the table's code is what is tested here
    summary = bench.run(cfg, lambda spec: bench.run_row(cfg, spec), log=lambda *a: None)
    rows = {r["spec"]["key"]: r for r in summary["rows"]}
    assert list(rows) == ["fp32", "mp", "mp_acc", "mp_ckpt", "all3", "trim", "adamw8bit", "autofit"]
    for key, r in rows.items():
        if key == "adamw8bit":  # no CUDA here: n/a with the reason, and no Trainer row for it
            assert "CUDA" in r["ours"]["na"] and r["trainer"] is None
            continue
        o = r["ours"]
        assert o["micro"] * o["accumulation"] == 4  # the same effective batch everywhere
        assert r["trainer"]["micro"] == o["micro"] and r["trainer"]["runner"] == "trainer"
        assert o["samples_per_second"] > 0 and "speed_vs_base" in r and "speed_vs_trainer" in r
        assert "mem_vs_floor" in r
    assert rows["fp32"]["speed_vs_base"] == 1.0
    assert rows["trim"]["ours"]["trained_parameters"] < rows["all3"]["ours"]["trained_parameters"]
    assert summary["floor_mb"] == 16 * rows["fp32"]["ours"]["parameters"] / 2**20
    table = (tmp_path / "bench" / "tiny.md").read_text()
    assert "all three + vocabulary trimming" in table and "Floor:" in table and "n/a" in table
    assert (tmp_path / "bench" / "tiny.png").stat().st_size > 0
    assert json.loads((tmp_path / "bench" / "tiny.json").read_text())["parameters"] == summary["parameters"]


def test_one_row_in_a_fresh_process(tmp_path) -> None:
    spec = {**bench.plan(config.load("sample", TINY))[4], "runner": "ours"}  # all three
    out = bench.run_subprocess(["--config", "sample", *TINY], spec)
    assert out["key"] == "all3" and out["peak_mb"] > 0 and out["micro"] == 2 and out["accumulation"] == 2
