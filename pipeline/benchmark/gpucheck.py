"""`make gpu-check`: on one CUDA GPU, the checks only a GPU can make, as one table, in minutes and without the hub.

Reads   nothing (XLM-R large built from its config, random weights and token ids, as `make bench-gpu` builds it)
Writes  models/gpu-check/report.md     the table (also printed)
        models/gpu-check/report.json   every check's verdict, result and seconds

The checks: the precision `auto` picks for the GPU's compute capability (bf16 from 8.0, else fp16); a few
optimizer steps in fp16 and in bf16, with gradient accumulation and checkpointing, against the same steps in fp32
from the same weights (the losses close); an out-of-memory error forced at the first micro-batch (a real one: an
allocation larger than the GPU) and the loop's halving of the micro-batch that recovers from it; `make bench-gpu`'s
table; and, where two GPUs are there, one NCCL all-reduce across two processes (pipeline.core.distributed). The
check functions take any device: the tests run them on the CPU with a tiny model.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline import config as config_mod
from pipeline import layout
from pipeline.config import Config
from pipeline.errors import PipelineError, run_stage
from pipeline.files import atomic_write_text

CHECK_TORCH = 'python -c "import torch; print(torch.version.cuda, torch.cuda.is_available())"'
LOSS_TOLERANCE = 0.05  # per-example BCE (about 0.69 here): half precision rounds, it does not drift this far
BENCH_SECONDS = 420  # `make bench-gpu` in a few minutes: the whole check stays under ten
DDP_SECONDS = 180


@dataclass(frozen=True)
class Shape:
    """The job every training check runs: STEPS optimizer steps of MICRO x ACCUMULATION rows of SEQ tokens."""

    seq: int = 128
    micro: int = 4
    accumulation: int = 2
    steps: int = 3


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: skipped (what it needs is not there)
    result: str
    seconds: float = 0.0


def verdict(c: Check) -> str:
    return "skipped" if c.ok is None else "ok" if c.ok else "FAILED"


def table(checks: list[Check], device: str) -> str:
    """The report: one Markdown row a check, then how many passed."""
    lines = [f"`make gpu-check` on {device}", "", "| check | verdict | result | seconds |", "|---|---|---|---:|"]
    lines += [f"| {c.name} | {verdict(c)} | {c.result.replace('|', '/')} | {c.seconds:.0f} |" for c in checks]
    failed = sum(c.ok is False for c in checks)
    ran = sum(c.ok is not None for c in checks)
    lines += ["", f"{ran - failed} of {ran} checks ok" + (f", {failed} FAILED" if failed else "")]
    return "\n".join(lines) + "\n"


def timed(name: str, fn: Callable[[], tuple[bool | None, str]]) -> Check:
    """Run one check; an exception is its failure, in one line, and the other checks still run."""
    start = time.perf_counter()
    try:
        ok, result = fn()
    except Exception as e:  # noqa: BLE001 - every failure is a row of the table
        ok, result = False, f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"
    return Check(name, ok, result, time.perf_counter() - start)


# ---------------------------------------------------------------- the checks


def precision_check(device) -> tuple[bool, str]:
    """`auto` picks bf16 on compute capability 8.0 and up, fp16 below (a T4 emulates bf16, slowly)."""
    import torch

    from pipeline.core.precision import resolve_precision

    major, minor = torch.cuda.get_device_capability(device)
    got, want = resolve_precision("auto", device), "bf16" if major >= 8 else "fp16"
    return got == want, f"auto: {got} (compute capability {major}.{minor}; expected {want})"


def job_data(vocab_size: int, shape: Shape, seed: int = 0):
    """Random token ids at full length (<s> ... </s>) and labels, for every step of `shape`."""
    rng = np.random.default_rng(seed)
    rows = shape.steps * shape.micro * shape.accumulation
    ids = rng.integers(4, vocab_size, size=(rows, shape.seq)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 0, 2
    return ids, rng.integers(0, 2, rows).astype(np.float32)


def build_model(cfg: Config):
    """`bench.model` from its config (XLM-R large here, tiny in the tests), dropout off: runs must compare."""
    from pipeline.benchmark import runner
    from pipeline.core import modeling

    mconf = runner.model_config(cfg)
    modeling.with_dropout(mconf, 0.0)
    return modeling.Classifier(
        modeling.encoder_from_config(mconf), modeling.HeadSpec(cfg.model.pooling, 0.0)
    ), mconf.vocab_size


def train_steps(cfg: Config, model, precision: str, device, data, shape: Shape):
    """`shape.steps` optimizer steps through pipeline.core.loop, with accumulation and checkpointing, as `make
    train` runs them: (each step's mean per-example loss, the epoch's StepState)."""
    from pipeline.core import loop, modeling, optim
    from pipeline.core.precision import make_scaler
    from pipeline.inputs.tokens import Ragged

    tcfg = dataclasses.replace(cfg.train, micro_batch=shape.micro, accumulation=shape.accumulation, lr=1e-5,
                               warmup=0.0, checkpointing=True, optimizer="adamw")  # fmt: skip
    model.to(device)
    modeling.enable_checkpointing(model)
    optimizer, scheduler = optim.make_training(model, tcfg, device, shape.steps)
    ids, labels = data
    ragged = Ragged(ids.reshape(-1), np.arange(len(ids) + 1, dtype=np.int64) * ids.shape[1])
    plan = [[np.arange(i, i + shape.micro)] for i in range(0, len(ids), shape.micro)]
    job = loop.Job(model, ragged, labels, optimizer, make_scaler(precision, device), tcfg, precision, device,
                   pad_id=1, rank=0, world=1)  # fmt: skip
    losses: list[float] = []
    state = loop.train_epoch(job, plan, scheduler, progress=False,
                             after_window=lambda s, w: losses.append(w.loss / w.examples) or False)  # fmt: skip
    return losses, state


def loss_check(cfg: Config, device, precisions: list[str], shape: Shape = Shape()) -> tuple[bool, str]:
    """The same steps from the same weights in fp32 and in each of `precisions`: every step's loss within
    LOSS_TOLERANCE of fp32's, all finite, and not every step skipped for overflow."""
    import torch

    torch.manual_seed(cfg.train.seed)
    model, vocab = build_model(cfg)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    data = job_data(vocab, shape, cfg.train.seed)
    runs, skipped = {}, {}
    for p in ["fp32", *precisions]:
        model.load_state_dict(start)
        runs[p], state = train_steps(cfg, model, p, device, data, shape)
        skipped[p] = state.skipped  # fp16's first steps may overflow at GradScaler's first scale: skipped, not bad
    words, ok = [f"fp32 {' '.join(f'{x:.4f}' for x in runs['fp32'])}"], skipped["fp32"] == 0
    for p in precisions:
        gap = max(abs(a - b) for a, b in zip(runs[p], runs["fp32"], strict=True))
        ok = ok and bool(np.isfinite(runs[p]).all()) and gap <= LOSS_TOLERANCE and skipped[p] < shape.steps
        words.append(f"{p} {' '.join(f'{x:.4f}' for x in runs[p])} (largest gap {gap:.4f}, {skipped[p]} skipped)")
    how = f"{shape.steps} steps of {shape.micro} x {shape.accumulation} rows x {shape.seq} tokens, checkpointing"
    return ok, f"{how}: " + "; ".join(words)


def force_oom(device) -> None:
    """A real out-of-memory error on CUDA (twice the GPU's memory asked for at once); elsewhere torch's own
    exception raised, as the allocator would."""
    import torch

    if device.type == "cuda":
        torch.empty(2 * torch.cuda.get_device_properties(device).total_memory, dtype=torch.uint8, device=device)
    raise torch.OutOfMemoryError("gpu-check: out of memory forced")


def oom_check(cfg: Config, device, precision: str, shape: Shape = Shape()) -> tuple[bool, str]:
    """Out of memory at the first micro-batch: the loop halves the micro-batches, redoes the step and finishes."""
    import torch

    torch.manual_seed(cfg.train.seed)
    model, vocab = build_model(cfg)
    fired = []

    def once(module, args, kwargs):
        if not fired:
            fired.append(True)
            force_oom(device)

    hook = model.register_forward_pre_hook(once, with_kwargs=True)
    try:
        losses, state = train_steps(cfg, model, precision, device, job_data(vocab, shape, cfg.train.seed), shape)
    finally:
        hook.remove()
    ok = state.halvings == 1 and state.window == shape.steps and bool(np.isfinite(losses).all())
    micro = -(-shape.micro // 2**state.halvings)
    return ok, (f"{precision}: {state.halvings} halving(s), micro-batch {shape.micro} -> {micro}, "
                f"{state.window} of {shape.steps} steps done")  # fmt: skip


def command_check(cmd: list[str], seconds: int, done: str) -> tuple[bool, str]:
    """A command in a process of its own: ok on exit 0 (`done` says where its result is), else its last line."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        return False, f"not done in {seconds} s"
    if proc.returncode == 0:
        return True, done
    tail = ((proc.stderr or proc.stdout).strip().splitlines() or ["no output"])[-1]
    return False, f"exit {proc.returncode}: {tail[:200]}"


def bench_check(cfg_args: list[str], cfg: Config) -> tuple[bool, str]:
    """`make bench-gpu` as it runs alone (each row in its own process, `cfg_args` its settings): its table."""
    cmd = [sys.executable, "-m", "pipeline.bench", *cfg_args]
    where = layout.bench_dir(cfg) / f"{Path(cfg.bench.model).name}.md"
    return command_check(cmd, BENCH_SECONDS, f"the table in {where}")


def ddp_check() -> tuple[bool | None, str]:
    """One NCCL all-reduce across two processes torchrun starts, where two GPUs are there."""
    import torch

    if torch.cuda.device_count() < 2:
        return None, f"{torch.cuda.device_count()} GPU: two are needed"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "pipeline.core.distributed"]  # fmt: skip
    return command_check(cmd, DDP_SECONDS, "2 processes: every rank saw the sum (NCCL)")


def half_precisions(device) -> list[str]:
    """fp16 always; bf16 where the GPU computes it natively."""
    from pipeline.core.precision import cuda_has_bf16

    return ["fp16", "bf16"] if cuda_has_bf16(device) else ["fp16"]


def run(cfg: Config, cfg_args: list[str], bench: bool = True) -> list[Check]:
    """Every check on `train.device`'s GPU, one after another; the report written and printed."""
    import torch

    from pipeline.core import distributed

    device = distributed.pick_device(cfg.train.device)
    torch.cuda.set_device(device)
    checks = [timed("precision", lambda: precision_check(device))]
    halves = half_precisions(device)
    for p in halves:
        checks.append(timed(f"{p} vs fp32", lambda p=p: loss_check(cfg, device, [p])))
    if "bf16" not in halves:
        checks.append(Check("bf16 vs fp32", None, "this GPU only emulates bf16 (compute capability below 8.0)"))
    checks.append(timed("out of memory", lambda: oom_check(cfg, device, halves[-1])))
    torch.cuda.empty_cache()  # the rows of `make bench-gpu` measure the GPU alone
    checks.append(
        timed("make bench-gpu", lambda: bench_check(cfg_args, cfg))
        if bench
        else Check("make bench-gpu", None, "--no-bench")
    )
    checks.append(timed("DDP (NCCL)", ddp_check))
    write_report(cfg, checks, f"{torch.cuda.get_device_name(device)} ({device})")
    return checks


def write_report(cfg: Config, checks: list[Check], device: str) -> Path:
    out = layout.gpu_check_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    text = table(checks, device)
    atomic_write_text(out / "report.md", text)
    rows = [{**dataclasses.asdict(c), "verdict": verdict(c)} for c in checks]
    atomic_write_text(out / "report.json", json.dumps({"device": device, "checks": rows}, indent=1))
    print("\n" + text + f"wrote {out}/report.md, report.json")
    return out


def require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise PipelineError(
            f"make gpu-check needs a CUDA GPU; torch.cuda.is_available() is False (check the torch build: "
            f"{CHECK_TORCH}; None or False: a CPU wheel or a driver mismatch)"
        )


def main(argv=None) -> int:
    p = config_mod.parser("The checks only a CUDA GPU can make; writes models/gpu-check/report.md.")
    p.set_defaults(config="bench-gpu")
    p.add_argument("--no-bench", action="store_true", help="leave out make bench-gpu's table")
    args = p.parse_args(argv)
    failed = []

    def stage() -> None:
        require_cuda()  # before the config: bench-gpu's train.device=cuda would refuse in other words
        cfg = config_mod.from_args(args)
        cfg_args = ["--config", args.config, "--args", args.args, *args.overrides]  # bench-gpu's, unless named
        failed.extend(c for c in run(cfg, cfg_args, bench=not args.no_bench) if c.ok is False)

    code = run_stage(stage)
    return code or (1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
