"""Stage `make bench`: peak memory and speed of each memory technique, ours beside Hugging Face Trainer.

Reads   nothing (random weights and token ids; no download)
Writes  models/bench/<model>.md     the table, the floor and the notes (also printed)
        models/bench/<model>.json   every row's raw measurements, per-step times included
        models/bench/<model>.png    bar chart: peak memory and samples per second per row

The model is XLM-R's architecture from a config (base or large sizes, the real 250,002-token
vocabulary, random weights), its attention model.attn_implementation's (the table's title names the one that ran;
one that cannot run here is refused in one line before any row); the data is random token ids at full length.
Every row trains on the same rows at the same effective batch: an untimed warm-up (one forward/backward on one
row, and the optimizer state created by a zero step), then `bench.steps` optimizer steps, each timed on its own;
pipeline.benchmark.report turns them into a median, a spread and ratios that call a tie a tie.

Each row runs in a fresh process (`python -m pipeline.bench --row ...`, which prints one JSON line)
so that no row inherits another's memory, ours first and then the same job through Trainer, so that
each ratio compares two runs made side by side. Trainer gets the TrainingArguments a user would write
for the job and its own defaults for the rest (its default optimizer included); pipeline.benchmark.trainer
builds them and the table's notes print them back. Peak memory: on CUDA torch.cuda.max_memory_allocated
(and reserved); on CPU the process's peak resident memory minus its resident memory before the model.

`make bench-gpu` (config bench-gpu) is the XLM-R large run for one CUDA GPU; without CUDA it stops
with one line before building anything.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from pipeline import config as config_mod
from pipeline import layout
from pipeline.benchmark import peaks as spec_mod
from pipeline.benchmark import report
from pipeline.benchmark.rows import plan, same_job, trainer_spec
from pipeline.benchmark.runner import ROW_TAG, matmul_peak, model_config, one_gpu, run_row, run_subprocess
from pipeline.config import Config
from pipeline.errors import run_stage
from pipeline.files import atomic_write_text


def measure(cfg: Config, runner, log=print) -> list[dict]:
    """Each row ours, then the same job through Trainer: a list of {spec, ours, trainer}."""
    results, done = [], {}
    for spec in plan(cfg):
        t0 = time.perf_counter()
        ours = runner({**spec, "runner": "ours"})
        log(f"bench: {spec['label']} (ours): {_brief(ours)} [{time.perf_counter() - t0:.0f} s]")
        trainer = None
        if cfg.bench.trainer and "na" not in ours and "failed" not in ours:
            tspec = trainer_spec(spec, ours)
            if same_job(tspec) in done:  # e.g. the trimming row's Trainer run is the all-three row's
                trainer = done[same_job(tspec)]
                log(f"bench: {spec['label']} (Trainer): the same job as a row above, not run again")
            else:
                t0 = time.perf_counter()
                trainer = done[same_job(tspec)] = runner(tspec)
                log(f"bench: {spec['label']} (Trainer): {_brief(trainer)} [{time.perf_counter() - t0:.0f} s]")
        results.append({"spec": spec, "ours": ours, "trainer": trainer})
    return results


def measure_peaks(cfg: Config) -> tuple[dict[str, float], dict]:
    """The measured matmul throughput of each precision the rows use, in FLOP/s (runner.matmul_peak), and the
    device's spec peaks where its name makes them known (benchmark.peaks)."""
    from pipeline.core import distributed, precision

    device = distributed.pick_device(cfg.train.device)
    used = {precision.resolve_precision(p, device) for p in ("fp32", "auto")}
    spec = spec_mod.spec_peaks(spec_mod.device_name(device), device.type == "cuda")
    return {p: matmul_peak(device, p) for p in sorted(used)}, spec


def attention_asked(cfg: Config) -> str:
    """model.attn_implementation in words, or the one line (pipeline.core.attention) refusing it on this device."""
    from pipeline.core import attention, distributed

    choice = cfg.model.attn_implementation
    wanted = attention.implementation(choice, distributed.pick_device(cfg.train.device))
    return f"{wanted} (model.attn_implementation)" if wanted else "auto (model.attn_implementation: transformers' own)"


def _brief(r: dict) -> str:
    if "na" in r:
        return f"n/a ({r['na']})"
    if "failed" in r:
        return f"failed ({r['failed']})"
    return f"peak {r['peak_mb']:,.0f} MB, {report.speed_cell(r)} samples/s"


def run(cfg: Config, runner, log=print) -> dict:
    """Measure every row with `runner(spec) -> result` (a fresh process each), print and write the table."""
    model_config(cfg)  # a model folder that is not there (or too short for bench.seq_len): before any row
    log(f"bench: attention {attention_asked(cfg)}")  # an implementation that cannot run here: refused before any row
    peaks, spec = measure_peaks(cfg)  # before the rows, in this process, alone on the machine
    summary = report.summarize(measure(cfg, runner, log), peaks, cfg.bench.seq_len, spec)
    summary["seq_len"] = cfg.bench.seq_len  # samples/s x this: the tokens/s a Kaggle time plan can start from
    table = report.bench_table(cfg.bench, summary, explain=[])
    out, stem = layout.bench_dir(cfg), Path(cfg.bench.model).name  # a model folder: its name
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{stem}.md", table)
    atomic_write_text(out / f"{stem}.json", json.dumps(summary, indent=1, default=str))
    report.plot_bench(summary, out / f"{stem}.png", f"{cfg.bench.model}, seq {cfg.bench.seq_len}")
    if cfg.bench.profile:
        atomic_write_text(out / f"{stem}.profile.md", report.format_profiles(summary))
    log("\n" + table)
    log(f"wrote {out}/{stem}.md, .json, .png")
    return summary


def main(argv=None) -> int:
    p = config_mod.parser("Peak memory and speed of each memory technique, ours beside HF Trainer.")
    p.add_argument("--row", help=argparse.SUPPRESS)  # internal: run one row and print its JSON line
    args = p.parse_args(argv)
    if args.row:
        print(ROW_TAG + json.dumps(run_row(config_mod.from_args(args), json.loads(args.row))), flush=True)
        return 0

    def stage() -> None:
        from pipeline.core import distributed

        cfg = config_mod.from_args(args)  # a CUDA device that is not there stops here (config.check_device)
        # every row's process gets the same settings: the config, ARGS (`make bench` passes them as --args)
        # and the overrides, then the resolved sequence length
        cfg_args = ["--config", args.config, "--args", args.args, *args.overrides, f"bench.seq_len={cfg.bench.seq_len}"]
        # on CUDA each row's process sees only its GPU: Trainer would otherwise train on all of them (DataParallel)
        cfg_args, env = one_gpu(cfg_args, distributed.pick_device(cfg.train.device), os.environ)
        run(cfg, lambda spec: run_subprocess(cfg_args, spec, env))

    return run_stage(stage)


if __name__ == "__main__":
    sys.exit(main())
