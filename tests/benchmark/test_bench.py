"""The bench on a tiny XLM-R: every row, Trainer's real settings, the median/spread/tie logic, the GPU preset."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from pipeline import bench, config, schema
from pipeline.benchmark import report as bench_report
from pipeline.benchmark import rows as bench_rows
from pipeline.benchmark import runner as bench_runner
from pipeline.benchmark import trainer as bench_trainer
from pipeline.core import precision
from pipeline.errors import ConfigError
from tests.helpers import ROOT

pytestmark = pytest.mark.e2e  # starts processes: `make unit` leaves it out (docs/testing.md)

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
    summary = bench.run(cfg, lambda spec: bench_runner.run_row(cfg, spec), log=lambda *a: None)
    rows = {r["spec"]["key"]: r for r in summary["rows"]}
    assert list(rows) == [
        "fp32",
        "mp",
        "mp_acc",
        "mp_ckpt",
        "all3",
        "trim",
        "adamw8bit",
        "autofit",
        "lora",
        "lora_trim",
    ]
    for key, r in rows.items():
        if key == "adamw8bit":  # no CUDA here: n/a with the reason, and no Trainer row for it
            assert "CUDA" in r["ours"]["na"] and r["trainer"] is None
            continue
        o, t = r["ours"], r["trainer"]
        assert o["micro"] * o["accumulation"] == 4  # the same effective batch everywhere
        assert t["micro"] == o["micro"] and t["runner"] == "trainer"
        assert len(o["step_seconds"]) == len(t["step_seconds"]) == 3  # bench.steps timed steps each
        assert o["samples_per_second"] > 0 and r["speed_vs_trainer"]["verdict"] in ("tie", "faster", "slower")
        assert "mem_vs_floor" in r
    assert rows["fp32"]["speed_vs_base"]["ratio"] == 1.0
    # trimming is ours only: its Trainer run is the all-three one, on the full vocabulary
    assert rows["trim"]["ours"]["trained_parameters"] < rows["all3"]["ours"]["trained_parameters"]
    assert rows["trim"]["trainer"] is rows["all3"]["trainer"]
    assert rows["trim"]["trainer"]["trained_parameters"] == rows["all3"]["ours"]["trained_parameters"]
    assert summary["floor_mb"] == 16 * rows["fp32"]["ours"]["parameters"] / 2**20
    table = (tmp_path / "bench" / "tiny.md").read_text()
    assert "all three + vocabulary trimming" in table and "Floor:" in table and "n/a" in table
    assert "optim=adamw_torch_fused" in table and "switches Trainer lacks" in table
    # auto precision is bf16 on CPU only where it is native; the notes say which it was
    assert ("computed natively" in table) == precision.cpu_has_bf16()
    assert (tmp_path / "bench" / "tiny.png").stat().st_size > 0
    assert json.loads((tmp_path / "bench" / "tiny.json").read_text())["parameters"] == summary["parameters"]
    # model FLOP/s against the matmul throughput measured in the same run; a CPU's spec peak is not known
    assert set(summary["peaks"]) >= {"fp32"} and all(v > 1e8 for v in summary["peaks"].values())
    assert all(0 < rows[k]["of_matmul"] < 1.5 for k in rows if k != "adamw8bit")
    assert "| TFLOP/s | of measured matmul | of spec peak |" in table and "| unknown |" in table
    assert summary["spec"]["peaks"] == {} and "not known from its model name" in table
    assert rows["fp32"]["tflops"] == pytest.approx(
        rows["fp32"]["ours"]["flops_per_token"] * cfg.bench.seq_len * rows["fp32"]["ours"]["samples_per_second"] / 1e12
    )


def test_the_flops_a_token_are_the_matrix_products_torch_counts() -> None:
    """train_flops_per_token against torch's own FLOP counter over a forward of the encoder (x3 for training)."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import XLMRobertaConfig

    from pipeline.benchmark import report
    from pipeline.core import modeling

    conf = XLMRobertaConfig(vocab_size=300, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                            intermediate_size=256, max_position_embeddings=80, pad_token_id=1,
                            attn_implementation="eager")  # fmt: skip
    # eager attention: its two products are plain matmuls the counter sees (CPU's fused kernel it does not count)
    model = modeling.Classifier(modeling.encoder_from_config(conf), modeling.HeadSpec("mean", 0.0)).eval()
    batch, seq = 3, 48
    ids = torch.randint(5, 300, (batch, seq))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(ids, torch.ones_like(ids))
    head = 2 * 64 * batch  # the one-logit head: not counted by the formula
    assert counter.get_total_flops() - head == pytest.approx(report.train_flops_per_token(conf, seq) / 3 * batch * seq,
                                                             rel=0.01)  # fmt: skip


def test_one_row_in_a_fresh_process() -> None:
    spec = {**bench_rows.plan(config.load("sample", TINY))[4], "runner": "ours"}  # all three
    out = bench_runner.run_subprocess(["--config", "sample", *TINY], spec)
    assert out["key"] == "all3" and out["peak_mb"] > 0 and out["micro"] == 2 and out["accumulation"] == 2


def test_each_rows_process_gets_the_settings_make_passes_as_args(monkeypatch, tmp_path) -> None:
    """`make bench ARGS="bench.model=<folder> ..."` reaches `--args`: every row's own process must see it."""
    seen = []

    def fake_run(cfg, runner):
        runner({"key": "fp32", "runner": "ours"})

    monkeypatch.setattr(bench, "run", fake_run)
    monkeypatch.setattr(bench, "run_subprocess", lambda cfg_args, spec, env: seen.append(cfg_args) or {})
    assert bench.main(["--config", "sample", "--args", f"bench.model=tiny models_dir={tmp_path}", *TINY]) == 0
    row_cfg = config.from_args(config.parser("").parse_args(seen[0]))
    assert row_cfg.bench.model == "tiny" and row_cfg.models_dir == str(tmp_path)


# ---------------------------------------------------------------- Trainer's settings


def test_trainer_gets_its_default_optimizer_and_the_jobs_settings(tmp_path) -> None:
    from transformers import Trainer, TrainingArguments

    tcfg = dataclasses.replace(schema.TrainConfig(), micro_batch=4, accumulation=8, checkpointing=True)
    args = bench_trainer.trainer_arguments(tcfg, "bf16", torch.device("cpu"), max_steps=3, output_dir=str(tmp_path))
    default = next(f.default for f in dataclasses.fields(TrainingArguments) if f.name == "optim")
    got = bench_trainer.trainer_settings(args)
    # what a user gets from TrainingArguments(): fused AdamW on torch >= 2.8 (2.13 here)
    assert got["optim"] == default == "adamw_torch_fused"
    assert got["bf16"] is True and got["fp16"] is False
    assert got["per_device_train_batch_size"] == 4 and got["gradient_accumulation_steps"] == 8
    assert got["activation_checkpointing"] is True
    assert got["activation_checkpointing_kwargs"] == {"use_reentrant": False}
    assert got["learning_rate"] == tcfg.lr and got["max_grad_norm"] == tcfg.max_grad_norm
    assert got["weight_decay"] == tcfg.weight_decay and got["lr_scheduler_type"] == "linear"
    # and Trainer really builds the fused optimizer from them
    from tests.helpers.tinymodel import tiny_classifier

    opt = Trainer(model=tiny_classifier(), args=args).create_optimizer()
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["fused"] is True


def test_trainer_8bit_row_names_trainers_bitsandbytes_optimizer(tmp_path) -> None:
    tcfg = dataclasses.replace(schema.TrainConfig(), optimizer="adamw8bit")
    args = bench_trainer.trainer_arguments(tcfg, "fp16", torch.device("cpu"), max_steps=1, output_dir=str(tmp_path))
    assert bench_trainer.trainer_settings(args)["optim"] == "adamw_bnb_8bit"


def test_trainer_s_arguments_follow_the_config_where_trainer_has_a_counterpart(tmp_path, monkeypatch) -> None:
    """Each train setting Trainer has a counterpart of reaches its TrainingArguments: change one, and the row's
    Trainer changes with it (a schedule named by optim.trainer_schedule, the warm-up counted as ours counts it)."""
    from pipeline.core import optim

    tcfg = dataclasses.replace(schema.TrainConfig(), micro_batch=3, accumulation=5, lr=3e-4, weight_decay=0.05,
                               max_grad_norm=0.5, warmup=0.1, seed=7)  # fmt: skip
    monkeypatch.setattr(optim, "trainer_schedule", lambda cfg: "cosine")  # as a schedule option would name it
    args = bench_trainer.trainer_arguments(tcfg, "fp32", torch.device("cpu"), max_steps=20, output_dir=str(tmp_path))
    got = {**bench_trainer.trainer_settings(args), "seed": args.seed}
    assert got["per_device_train_batch_size"] == 3 and got["gradient_accumulation_steps"] == 5
    assert (got["learning_rate"], got["weight_decay"], got["max_grad_norm"]) == (3e-4, 0.05, 0.5)
    assert got["lr_scheduler_type"] == "cosine" and got["seed"] == 7
    assert got["warmup_steps"] == optim.warmup_steps(0.1, 20) == 2


def test_the_schedule_trainer_is_named_is_the_one_ours_runs() -> None:
    """Without warm-up (the bench's rows; ours starts its warm-up at lr/warm where Trainer's starts at 0), Trainer's
    schedule of that name gives every step the rate ours gives."""
    from transformers import get_scheduler

    from pipeline.core import optim

    tcfg, total = dataclasses.replace(schema.TrainConfig(), warmup=0.0), 12
    rates = []
    for make in (
        lambda o: optim.make_scheduler(o, tcfg.warmup, total),
        lambda o: get_scheduler(optim.trainer_schedule(tcfg), o, optim.warmup_steps(tcfg.warmup, total), total),
    ):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched, seen = make(opt), []
        for _ in range(total):
            seen.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        rates.append(seen)
    assert rates[0] == pytest.approx(rates[1])


def test_trainer_row_drops_the_switches_trainer_lacks() -> None:
    spec = next(s for s in bench_rows.plan(config.load("sample", TINY)) if s["key"] == "trim")
    t = bench_rows.trainer_spec(spec, {"micro": 4, "halvings": 1})
    assert t["trim"] is False and t["runner"] == "trainer" and t["force_micro"] == 4  # the micro-batch ours ran
    assert "trimming" in spec["only_ours"] and "sparse" in spec["only_ours"]


# ---------------------------------------------------------------- median, spread, ties


def test_step_stats_median_and_spread() -> None:
    s = bench_report.step_stats([2.0, 1.0, 4.0], examples_per_step=8)
    assert s["median_step_s"] == 2.0 and s["samples_per_second"] == 4.0  # the median, not the mean (7/3 s)
    assert s["sps_low"] == 2.0 and s["sps_high"] == 8.0 and s["spread"] == 1.5
    with pytest.raises(ValueError):
        bench_report.step_stats([], 8)


def _speed(*seconds: float) -> dict:
    return bench_report.step_stats(list(seconds), 10)


def test_ratio_within_the_spread_is_a_tie() -> None:
    # ours 10% faster at the median, but the steps overlap: a tie, not a win
    r = bench_report.speed_ratio(_speed(0.9, 0.95, 1.05), _speed(0.95, 1.0, 1.1))
    assert r["ratio"] == pytest.approx(1.0 / 0.95) and r["verdict"] == "tie"
    assert r["low"] < 1 < r["high"]
    assert bench_report.speed_ratio(_speed(0.5, 0.52, 0.55), _speed(1.0, 1.02, 1.05))["verdict"] == "faster"
    assert bench_report.speed_ratio(_speed(1.0, 1.02, 1.05), _speed(0.5, 0.52, 0.55))["verdict"] == "slower"
    assert bench_report.verdict(1.0, 1.2) == "tie"  # an edge that touches 1 is still a tie


def _row(key: str, ours: dict, trainer: dict) -> dict:
    meta = {"parameters": 100, "trained_parameters": 100, "peak_mb": 10.0, "micro": 4, "accumulation": 1}
    meta |= {"device": "cpu", "precision": "bf16"}
    return {"spec": {"key": key, "label": f"row {key}"}, "ours": {**meta, **ours}, "trainer": {**meta, **trainer}}


def test_table_marks_ties() -> None:
    rows = [
        _row("a", _speed(1.0, 1.0, 1.0), _speed(2.0, 2.0, 2.0)),  # twice as fast, no spread: faster
        _row("b", _speed(0.9, 1.0, 1.2), _speed(1.0, 1.05, 1.1)),  # overlapping: a tie
    ]
    summary = bench_report.summarize(rows)
    assert bench_report.ties(summary) == ["row b"]
    table = bench_report.bench_table(schema.BenchConfig(), summary)
    head = next(x for x in table.splitlines() if x.startswith("| row |"))
    cells = {r: dict(zip(_cells(head), _cells(next(x for x in table.splitlines() if x.startswith(f"| row {r}")))))
             for r in "ab"}  # fmt: skip
    assert cells["a"]["speed ours/Trainer"] == "2.00 (2.00-2.00) faster" and "tie" not in "".join(cells["a"].values())
    assert cells["b"]["speed ours/Trainer"].endswith("**tie**") and cells["b"]["of measured matmul"] == "-"


def _table_cells(table: str) -> dict[str, dict[str, str]]:
    """Each row of a bench table by its label, its cells by the header's names."""
    lines = table.splitlines()
    head = _cells(next(x for x in lines if x.startswith("| row |")))
    return {c[0]: dict(zip(head, c, strict=True)) for c in map(_cells, lines) if c[0].startswith("row ")}


def _x_baseline(table: str) -> dict[str, list[str]]:
    """The two "x baseline" cells (memory, speed) of each row of a bench table, by its label."""
    lines = table.splitlines()
    head = _cells(next(x for x in lines if x.startswith("| row |")))
    at = [i for i, name in enumerate(head) if name == "x baseline"]
    rows = [_cells(x) for x in lines if x.startswith("| ") and not x.startswith(("| row |", "|---"))]
    return {c[0]: [c[i] for i in at] for c in rows}


def test_ratios_are_to_the_row_keyed_fp32_wherever_it_stands_and_to_none_without_it() -> None:
    """The baseline is found by its key: a row before it is not the baseline, and a table without it has no
    "x baseline" figures at all rather than another row's."""
    fast = _row("mp", _speed(1.0, 1.0, 1.0), _speed(1.0, 1.0, 1.0))
    slow = _row("fp32", _speed(2.0, 2.0, 2.0), _speed(2.0, 2.0, 2.0))  # after the row it is the baseline of
    slow["ours"]["peak_mb"] = 20.0
    summary = bench_report.summarize([fast, slow])
    assert fast["speed_vs_base"]["ratio"] == 2.0 and fast["mem_vs_base"] == 0.5
    assert slow["speed_vs_base"]["verdict"] == "baseline"
    assert _x_baseline(bench_report.bench_table(schema.BenchConfig(), summary))["row fp32"] == ["-", "1.00"]
    alone = _row("mp", _speed(1.0, 1.0, 1.0), _speed(2.0, 2.0, 2.0))
    table = bench_report.bench_table(schema.BenchConfig(), bench_report.summarize([alone]))
    assert "speed_vs_base" not in alone and "mem_vs_base" not in alone
    assert _x_baseline(table)["row mp"] == ["-", "-"] and alone["speed_vs_trainer"]["ratio"] == 2.0


def test_baseline_joins_the_rows_chosen_unless_switched_off() -> None:
    def keys(*overrides: str) -> list[str]:
        return [r["key"] for r in bench_rows.plan(config.load("sample", [*TINY, *overrides]))]

    assert keys("bench.rows=[all3]") == ["fp32", "all3"]  # the default: every ratio has its baseline
    assert keys("bench.rows=[all3]", "bench.baseline=false") == ["all3"]
    assert keys("bench.rows=[fp32,all3]", "bench.baseline=false") == ["fp32", "all3"]  # named: it runs
    assert keys("bench.baseline=false") == [k for k in schema.BENCH_ROWS if k != "fp32"]  # nothing chosen: all but it


def test_without_the_baseline_only_the_chosen_row_runs_and_its_ratios_to_it_read_dash(tmp_path) -> None:
    """bench.baseline=false: the row that fits runs alone (the fp32 one never starts), the table and the chart
    are written, and its "x baseline" cells read `-` while ours/Trainer and "x floor" are there."""
    cfg = config.load("sample", [*TINY, f"models_dir={tmp_path}", "bench.baseline=false", "bench.rows=[all3]"])
    started = []

    def runner(spec: dict) -> dict:
        started.append(spec["key"])
        return bench_runner.run_row(cfg, spec)

    summary = bench.run(cfg, runner, log=lambda *a: None)
    assert started == ["all3", "all3"]  # ours, then Trainer: no fp32 row in either
    (r,) = summary["rows"]
    assert "speed_vs_base" not in r and "mem_vs_base" not in r
    # a tiny model's peak can sit inside memory the process already held: x floor is there, maybe 0
    assert r["speed_vs_trainer"]["verdict"] in ("tie", "faster", "slower") and r["mem_vs_floor"] >= 0
    table = (tmp_path / "bench" / "tiny.md").read_text()
    assert _x_baseline(table) == {"all three": ["-", "-"]}
    assert "Mixed precision here is ? " not in table  # the precision note still finds a row to read
    assert (tmp_path / "bench" / "tiny.png").stat().st_size > 0


def test_a_rows_flops_and_shares_follow_from_its_own_samples_and_flops_a_token() -> None:
    """A T4 row in fp16 and one in fp32: TFLOP/s is samples/s x tokens x FLOPs a token as the table prints
    them; the share of the measured matmul divides it by the measured figure, the share of the spec peak by
    the T4's datasheet figure (65 TFLOP/s fp16, 8.1 fp32); a precision the GPU has no figure for is unknown."""
    from pipeline.benchmark import peaks

    seq, large = 256, bench_runner.model_config(config.load("bench-gpu", device=False))  # XLM-R large
    fpt = bench_report.train_flops_per_token(large, seq)
    gpu = {"device": "cuda:0", "gpu": "Tesla T4", "flops_per_token": fpt, "reserved_mb": 12.0}
    # 4.00 and 8.00 samples/s: the cells' own rounding is then that of TFLOP/s (3 decimals) and the share (1%)
    steps = {"a": ((2.4, 2.5, 2.6), "fp32"), "b": ((1.2, 1.25, 1.3), "fp16"), "c": ((1.2, 1.25, 1.3), "bf16")}
    rows = [_row(k, {**_speed(*s), **gpu, "precision": p}, {**_speed(*s), **gpu}) for k, (s, p) in steps.items()]
    measured = {"fp32": 7.0e12, "fp16": 40e12, "bf16": 40e12}
    summary = bench_report.summarize(rows, measured, seq, peaks.spec_peaks("Tesla T4", cuda=True))
    cells = _table_cells(bench_report.bench_table(schema.BenchConfig(seq_len=seq), summary))
    for key, spec in (("a", 8.1e12), ("b", 65e12)):
        c, precision = cells[f"row {key}"], rows["ab".index(key)]["ours"]["precision"]
        flops = float(c["samples/s"].split()[0]) * seq * fpt  # the table's own samples/s
        assert float(c["TFLOP/s"]) == pytest.approx(flops / 1e12, abs=0.0005)
        for name, peak in (("of measured matmul", measured[precision]), ("of spec peak", spec)):
            assert float(c[name].rstrip("%")) == pytest.approx(100 * flops / peak, abs=0.5)
    assert cells["row c"]["of spec peak"] == "unknown" and cells["row c"]["of measured matmul"] != "-"
    assert peaks.spec_peaks("Tesla T4", cuda=True)["peaks"]["fp16"] == 65e12
    assert peaks.spec_peaks("NVIDIA GeForce RTX 5090", cuda=True)["peaks"] == {}  # not in the table: not guessed
    assert peaks.spec_peaks("Intel(R) Xeon(R) Platinum 8480+", cuda=False)["peaks"] == {}


def test_the_docs_flops_table_follows_from_its_own_samples_and_flops_a_token() -> None:
    """docs/bench.md's table of FLOPs utilisation: each row's TFLOP/s from its samples/s and the model's
    FLOPs a token at 128 tokens, its share from those over the measured matmul figure it quotes."""
    from pathlib import Path
    from types import SimpleNamespace

    text = (Path(__file__).parents[2] / "docs" / "bench.md").read_text(encoding="utf-8")
    lines = text.split("## FLOPs utilisation")[1].splitlines()
    head = _cells(next(x for x in lines if x.startswith("| model |")))
    rows = [dict(zip(head, _cells(x), strict=True)) for x in lines if x.startswith(("| XLM-R", "| e5"))]
    sizes = {"XLM-R base": bench_runner.ARCH["xlm-roberta-base"], "e5-small": (384, 12, 12, 1536)}  # its config.json
    assert len(rows) == 4
    for r in rows:
        h, n, _, ffn = sizes[r["model"]]
        fpt = bench_report.train_flops_per_token(SimpleNamespace(hidden_size=h, num_hidden_layers=n,
                                                                 intermediate_size=ffn), 128)  # fmt: skip
        tflops = float(r["samples/s"].split()[0]) * 128 * fpt / 1e12
        # samples/s has 2 decimals: 0.005 of it moves TFLOP/s by up to 0.0003 (XLM-R base), the share by 0.2%
        assert float(r["TFLOP/s"]) == pytest.approx(tflops, abs=0.0008), r
        share = 100 * tflops / float(r["measured matmul TFLOP/s"])
        assert float(r["of measured matmul"].rstrip("%")) == pytest.approx(share, abs=0.7), r
        assert r["of spec peak"] == "unknown"  # a CPU's: not known from its name


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


# ---------------------------------------------------------------- the GPU preset


def test_gpu_preset_plan() -> None:
    cfg = config.load("bench-gpu", device=False)
    b = cfg.bench
    assert (b.model, b.seq_len, b.effective_batch, cfg.train.device) == ("xlm-roberta-large", 256, 32, "cuda")
    rows = bench_rows.plan(cfg)
    assert [r["key"] for r in rows] == ["fp32", "all3", "trim", "adamw8bit", "lora"]
    assert rows[0]["precision"] == "fp32" and rows[0]["micro"] == 32
    assert all(r["micro"] * (32 // r["micro"]) == 32 for r in rows) and b.steps >= 3
    assert rows[1]["checkpointing"] and rows[1]["micro"] < 32 and rows[3]["optimizer"] == "adamw8bit"
    assert bench_runner.model_config(cfg).hidden_size == 1024  # large


def test_xl_preset_plans_full_fine_tuning_beside_lora() -> None:
    """bench-xl: XLM-R XL's published architecture (3.5B parameters: its config, never built here), all three beside
    the two LoRA rows."""
    from pipeline.kaggle import disk

    cfg = config.load("bench-xl", device=False)
    assert [r["key"] for r in bench_rows.plan(cfg)] == ["fp32", "all3", "lora", "lora_trim"]
    conf = bench_runner.model_config(cfg)
    assert conf.model_type == "xlm-roberta-xl" and conf.vocab_size == 250880 and conf.max_position_embeddings == 514
    assert (conf.hidden_size, conf.num_hidden_layers, conf.num_attention_heads, conf.intermediate_size) == (
        2560, 36, 32, 10240)  # fmt: skip
    assert 3.4e9 < disk.transformer_parameters(conf.to_dict()) < 3.6e9


def test_lora_rows_beside_all_three_on_a_tiny_xl(tmp_path) -> None:
    """XLM-R XL's architecture at toy size (a folder of its own weights): the LoRA rows train a fraction of the
    parameters over the same model, ours and Trainer, and the table says what they count."""
    from transformers import XLMRobertaXLConfig

    from pipeline.core import modeling

    conf = XLMRobertaXLConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, max_position_embeddings=40, pad_token_id=1)  # fmt: skip
    modeling.encoder_from_config(conf).save_pretrained(tmp_path / "xl")
    cfg = config.load("sample", [*TINY, f"bench.model={tmp_path / 'xl'}", f"models_dir={tmp_path}",
                                 "bench.rows=[all3,lora,lora_trim]", "bench.lora_r=2"])  # fmt: skip
    summary = bench.run(cfg, lambda spec: bench_runner.run_row(cfg, spec), log=lambda *a: None)
    rows = {r["spec"]["key"]: r for r in summary["rows"]}
    assert list(rows) == ["fp32", "all3", "lora", "lora_trim"]
    full, lora = rows["all3"]["ours"], rows["lora"]["ours"]
    assert lora["parameters"] == full["parameters"] and lora["trained_parameters"] < full["trained_parameters"] / 10
    assert rows["lora_trim"]["ours"]["trained_parameters"] == lora["trained_parameters"]  # the embedding is frozen
    assert rows["lora"]["trainer"]["trained_parameters"] == lora["trained_parameters"]  # Trainer: the same model
    assert rows["lora_trim"]["trainer"] is rows["lora"]["trainer"]
    assert lora["flops_per_token"] < full["flops_per_token"] and lora["samples_per_second"] > 0
    assert "LoRA rows: the encoder frozen" in (tmp_path / "bench" / "xl.md").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_gpu_preset_fails_fast_without_cuda(tmp_path, capsys, monkeypatch) -> None:
    def never(*a, **k):
        raise AssertionError("a row was started")

    monkeypatch.setattr(bench, "run_subprocess", never)
    assert bench.main(["--config", "bench-gpu", f"models_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: train.device='cuda': this machine has no CUDA device")
    assert not (tmp_path / "bench").exists()


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("bench.steps=2", "bench.steps"),  # a median and a spread need 3
        ("bench.steps=0", "bench.steps"),
        ("bench.steps=-1", "bench.steps"),
        ("bench.seq_len=0", "bench.seq_len"),
        ("bench.effective_batch=0", "bench.effective_batch"),
        ("bench.micro_batch=0", "bench.micro_batch"),
        ("bench.micro_batch=3", "bench.micro_batch"),  # does not divide the effective batch (4)
        ("bench.model=xlm-roberta-small", "bench.model"),
        ("bench.rows=[foo]", "bench.rows"),
        ("bench.vocab_used=4", "bench.vocab_used"),
        ("bench.max_memory_gb=0", "bench.max_memory_gb"),
    ],
)
def test_bench_settings_are_checked_when_the_config_loads(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        config.load("sample", [*TINY, override])
    assert str(info.value).startswith(f"{key}=") and "\n" not in str(info.value), str(info.value)


def test_bench_names_are_the_runners_and_the_rows(tmp_path, capsys) -> None:
    assert set(schema.BENCH_MODELS) == {*bench_runner.ARCH, "tiny"}
    assert tuple(r["key"] for r in bench_rows.plan(config.load("sample", TINY))) == schema.BENCH_ROWS
    assert config.load("sample", [f"bench.model={tmp_path}"]).bench.model == str(tmp_path)  # a model folder
    missing = tmp_path / "nowhere"  # a path passes the load (it may be another machine's) but not make bench
    assert bench.main(["--config", "sample", f"models_dir={tmp_path}", *TINY, f"bench.model={missing}"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == (
        f"error: bench.model='{missing}': one of xlm-roberta-base, xlm-roberta-large, xlm-roberta-xl, tiny or a model "
        "folder"
    )


def test_bench_md_quotes_the_line_bench_gpu_stops_with_without_cuda(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without CUDA
    assert bench.main(["--config", "bench-gpu", f"models_dir={tmp_path}"]) == 2
    line = capsys.readouterr().err.strip()
    doc = " ".join((ROOT / "docs" / "bench.md").read_text(encoding="utf-8").split())
    assert f"`{line}`, exit status 2" in doc, line


def test_profile_names_the_ops_of_each_run(tmp_path) -> None:
    cfg = config.load("sample", [*TINY, f"models_dir={tmp_path}", "bench.rows=[mp]", "bench.profile=true"])
    summary = bench.run(cfg, lambda spec: bench_runner.run_row(cfg, spec), log=lambda *a: None)
    mp = summary["rows"][1]
    assert mp["ours"]["profile"] and mp["trainer"]["profile"]
    assert any(p["op"].startswith("aten::") for p in mp["ours"]["profile"])
    text = (tmp_path / "bench" / "tiny.profile.md").read_text()
    assert "## mixed precision (ours)" in text and "## mixed precision (trainer)" in text
    assert "Profiled" in (tmp_path / "bench" / "tiny.md").read_text()


def test_a_row_that_halved_reports_the_micro_batch_it_ran(monkeypatch) -> None:
    cfg = config.load("sample", TINY)
    monkeypatch.setattr(bench_runner, "_run_ours", lambda *a: ([0.1, 0.1, 0.1], 1))  # one out-of-memory halving
    out = bench_runner.run_row(cfg, {**bench_rows.plan(cfg)[0], "runner": "ours"})  # fp32, batch 4 in one go
    assert (out["micro"], out["accumulation"], out["halvings"]) == (2, 2, 1)
    assert bench_rows.trainer_spec(bench_rows.plan(cfg)[0], out)["force_micro"] == 2  # Trainer runs what fit


def test_sparse_switch_off_runs_ours_with_dense_embedding_gradients(monkeypatch) -> None:
    """bench.sparse=false: ours without the one switch Trainer lacks, to measure what that switch is worth."""
    from pipeline.core import modeling

    calls = []
    real = modeling.sparse_embedding_grad
    monkeypatch.setattr(modeling, "sparse_embedding_grad", lambda model: calls.append(model) or real(model))
    for sparse, expected in ((True, 1), (False, 0)):
        cfg = config.load("sample", [*TINY, f"bench.sparse={str(sparse).lower()}"])
        spec = {**next(s for s in bench_rows.plan(cfg) if s["key"] == "mp_acc"), "runner": "ours"}
        calls.clear()
        assert bench_runner.run_row(cfg, spec)["samples_per_second"] > 0
        assert len(calls) == expected
        assert ("sparse" in spec["only_ours"]) == sparse


# ---------------------------------------------------------------- one GPU per row


@pytest.mark.parametrize(
    ("device", "visible", "want", "narrowed"),
    [
        ("cuda", None, "0", True),  # four GPUs, none chosen: the row sees cuda:0 alone
        ("cuda:2", None, "2", True),
        ("cuda:1", "4,5,6", "5", True),  # the user's list: its second entry
        ("cuda:1", "GPU-aa,GPU-bb", "GPU-bb", True),  # UUIDs too
        ("cuda", "3", "3", False),  # one device set by the user: kept
        ("cpu", None, None, False),
    ],
)
def test_each_rows_process_sees_only_the_gpu_it_is_measured_on(device, visible, want, narrowed) -> None:
    """Trainer's DataParallel over every visible GPU would train n_gpu times the rows of ours (one GPU)."""
    environ = {"PATH": "/bin"} | ({} if visible is None else {"CUDA_VISIBLE_DEVICES": visible})
    args, env = bench_runner.one_gpu(["--config", "bench-gpu"], torch.device(device), environ)
    assert env.get("CUDA_VISIBLE_DEVICES") == want and env["PATH"] == "/bin"
    assert args == ["--config", "bench-gpu", *(["train.device=cuda"] if narrowed else [])]


def test_make_bench_gpu_on_four_gpus_gives_each_row_one(monkeypatch, tmp_path) -> None:
    """Through bench.main on a machine that says it has four GPUs: every row's process gets one of them, and its
    settings name the one it sees."""
    seen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(bench, "run", lambda cfg, runner: runner({"key": "fp32", "runner": "trainer"}))
    monkeypatch.setattr(bench, "run_subprocess", lambda cfg_args, spec, env: seen.append((cfg_args, env)) or {})
    assert bench.main(["--config", "bench-gpu", f"models_dir={tmp_path}", "train.device=cuda:3"]) == 0
    ((cfg_args, env),) = seen
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and cfg_args[-1] == "train.device=cuda"


@pytest.mark.parametrize("choice", ["eager", "sdpa"])
def test_the_bench_builds_its_model_with_the_attention_asked_and_says_which(tmp_path, choice: str) -> None:
    cfg = config.load("sample", [*TINY, f"models_dir={tmp_path}", f"model.attn_implementation={choice}",
                                 "bench.rows=[mp]", "bench.baseline=false", "bench.trainer=false"])  # fmt: skip
    said = []
    summary = bench.run(cfg, lambda spec: bench_runner.run_row(cfg, spec), log=said.append)
    assert [r["ours"]["attention"] for r in summary["rows"]] == [choice]  # what the row's encoder ran
    assert f"bench: attention {choice} (model.attn_implementation)" in said
    assert f", attention {choice}\n" in bench_report.bench_table(cfg.bench, summary)


def test_an_attention_that_cannot_run_here_is_refused_in_one_line_before_any_row(tmp_path) -> None:
    from pipeline.core import attention

    cfg = config.load("sample", [*TINY, f"models_dir={tmp_path}", "model.attn_implementation=flash_attention_2"])
    rows = []
    with pytest.raises(attention.AttentionError) as e:
        bench.run(cfg, rows.append, log=lambda *a: None)
    assert "flash_attention_2 runs only on a CUDA GPU" in str(e.value) and "\n" not in str(e.value)
    assert rows == []  # refused before any row's process
