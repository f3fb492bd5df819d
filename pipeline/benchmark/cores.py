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
from pathlib import Path

from pipeline import config as config_mod
from pipeline.errors import ConfigError, PipelineError, run_stage
from pipeline.schema import Config

LAYOUTS = (("1 x 1", 1, 1), ("2 x 1", 2, 1), ("1 x 2", 1, 2))  # name, processes, threads each


def precision_of(cfg: Config) -> str:
    """train.precision, `auto` as a fold on a CPU would most often take it: bf16 where the CPU has it natively."""
    from pipeline.core import precision

    if cfg.train.precision != "auto":
        return cfg.train.precision
    return "bf16" if precision.cpu_has_bf16() else "fp32"


def whole_steps(text: str) -> int:
    """--steps as a number of timed steps: a whole number from 1, else the one line that says so."""
    try:
        steps = int(text)
    except ValueError:
        steps = 0
    if steps < 1:
        raise ConfigError(f"--steps {text}: the timed steps a process, a whole number from 1 (--steps 3)")
    return steps


def tokenizer_of(cfg: Config, config: str) -> Path | str:
    """Where the model's tokenizer is; the tiny model's is trained by `make data`, so without it, say that."""
    from pipeline.inputs import tokens

    source = tokens.tokenizer_source(cfg)
    # a missing folder would otherwise be looked up on the Hugging Face hub and blamed on the network
    if isinstance(source, Path) and not source.is_dir():
        raise PipelineError(f"{source}: no prepared tokenizer; the tiny model's is made from the data: run "
                            f"`make data CONFIG={config}` (with the same ARGS) first")  # fmt: skip
    return source


def worker(cfg: Config, source: Path | str, steps: int) -> float:
    """Examples a second of this process's whole training steps (the median of `steps`, after a warm-up)."""
    import torch

    from pipeline.core import memory, modeling
    from pipeline.inputs.tokenizer import load_tokenizer

    torch.manual_seed(0)
    model = modeling.build_model(cfg, load_tokenizer(source))
    micro, length, cpu, how = cfg.train.micro_batch, cfg.model.max_length, torch.device("cpu"), precision_of(cfg)
    rates = [memory.step_rates(model, model, micro, length, (how,), cpu, cfg.train) for _ in range(steps)]
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
        if any(p.returncode for p in procs):  # its own error is above, on stderr
            raise PipelineError(f"a {name} process failed (exit {[p.returncode for p in procs]})")
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
    p.add_argument("--steps", default="3", help="timed steps a process (their median counts), a whole number from 1")
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)  # a process of one layout: its threads
    args = p.parse_args(argv)
    return run_stage(lambda: run(args))  # a mistake (a config, --steps, no `make data`) is one line, exit 2


def run(args: argparse.Namespace) -> None:
    steps = whole_steps(args.steps)
    cfg = config_mod.from_args(args, device=False)
    source = tokenizer_of(cfg, args.config)  # checked here, before any process starts, so that it is said once
    if args.worker:
        import torch

        torch.set_num_threads(args.worker)
        print(json.dumps({"ex_s": worker(cfg, source, steps)}), flush=True)
        return
    shared = ["--config", args.config, "--args", args.args, *args.overrides]  # what each process loads
    print(f"cores: {cfg.model.name} at micro-batch {cfg.train.micro_batch} x {cfg.model.max_length} tokens, "
          f"{precision_of(cfg)}, {steps} timed steps a process", flush=True)  # fmt: skip
    print(table(measure(shared, steps)))


if __name__ == "__main__":
    sys.exit(main())
