"""`python -m pipeline.benchmark.cores --config NAME`: how training processes best share a CPU's cores.

Reads   the config's model (model.name, model.max_length, train.micro_batch, train.precision)
Writes  nothing; prints examples a second of whole training steps in three layouts of two cores:

  1 x 1   one process, one torch thread, alone
  2 x 1   two such processes at once (what `make recipe` runs: two steps side by side)
  1 x 2   one process with two threads

and what each gives against the first. Two processes side by side give twice one alone only where the cores do
not share what a step needs (their vector units, the memory bus, the caches); a machine's two cores may well
share them, and then the recipe's ETA, which assumes they do not, is short by the ratio this prints.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from pipeline import config as config_mod
from pipeline.schema import Config

LAYOUTS = (("1 x 1", 1, 1), ("2 x 1", 2, 1), ("1 x 2", 1, 2))  # name, processes, threads each


def precision_of(cfg: Config) -> str:
    """train.precision, `auto` as a fold on a CPU would most often take it: bf16 where the CPU has it natively."""
    from pipeline.core import precision

    if cfg.train.precision != "auto":
        return cfg.train.precision
    return "bf16" if precision.cpu_has_bf16() else "fp32"


def worker(cfg: Config, steps: int) -> float:
    """Examples a second of this process's whole training steps (the median of `steps`, after a warm-up)."""
    import torch

    from pipeline.core import memory, modeling
    from pipeline.inputs import tokens
    from pipeline.inputs.tokenizer import load_tokenizer

    torch.manual_seed(0)
    model = modeling.build_model(cfg, load_tokenizer(tokens.tokenizer_source(cfg)))
    micro, length, cpu, how = cfg.train.micro_batch, cfg.model.max_length, torch.device("cpu"), precision_of(cfg)
    rates = [memory.step_rates(model, model, micro, length, (how,), cpu, cfg.train.optimizer) for _ in range(steps)]
    return statistics.median(r[how] for r in rates)


def launch(argv: list[str], threads: int, steps: int) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "HF_HUB_DISABLE_PROGRESS_BARS": "1"}  # fmt: skip  # each process's loading bar says nothing here
    cmd = [sys.executable, "-m", "pipeline.benchmark.cores", *argv, "--worker", str(threads), "--steps", str(steps)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)


def measure(argv: list[str], steps: int) -> dict[str, list[float]]:
    """{layout: each process's examples a second}; the processes of a layout run at once, layouts one by one."""
    out = {}
    for name, processes, threads in LAYOUTS:
        procs = [launch(argv, threads, steps) for _ in range(processes)]
        found = [p.communicate()[0] for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit(f"cores: a {name} process failed (exit {[p.returncode for p in procs]})")
        out[name] = [json.loads(text.strip().splitlines()[-1])["ex_s"] for text in found]
    return out


def table(rates: dict[str, list[float]]) -> str:
    """The layouts side by side: each process's rate, all of them together, and against one process alone."""
    alone = sum(rates["1 x 1"])
    lines = ["| layout | ex/s a process | ex/s in all | vs 1 x 1 |", "|---|---:|---:|---:|"]
    for name, each in rates.items():
        lines.append(
            f"| {name} | {' / '.join(f'{r:.2f}' for r in each)} | {sum(each):.2f} | {sum(each) / alone:.2f}x |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = config_mod.parser("Examples a second of training steps: one process alone, two side by side, two threads.")
    p.add_argument("--steps", type=int, default=3, help="timed steps a process (their median counts)")
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)  # a process of one layout: its threads
    args = p.parse_args(argv)
    cfg = config_mod.from_args(args, device=False)
    if args.worker:
        import torch

        torch.set_num_threads(args.worker)
        print(json.dumps({"ex_s": worker(cfg, args.steps)}), flush=True)
        return 0
    shared = ["--config", args.config, "--args", args.args, *args.overrides]  # what each process loads
    print(f"cores: {cfg.model.name} at micro-batch {cfg.train.micro_batch} x {cfg.model.max_length} tokens, "
          f"{precision_of(cfg)}, {args.steps} timed steps a process", flush=True)  # fmt: skip
    print(table(measure(shared, args.steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
