"""DDP on CPU (gloo, 2 processes; pipeline.core.distributed): accumulation under no_sync equals one process with
twice the window, torchrun's two processes match one, and a worker's exit keeps its code and output."""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pipeline.core import batching, precision
from pipeline.inputs.tokens import Ragged
from pipeline.schema import TrainConfig
from tests.helpers import free_port
from tests.helpers.tinymodel import tiny_classifier
from tests.helpers.training import train_parts

pytestmark = pytest.mark.e2e  # starts processes: `make unit` leaves it out (docs/testing.md)

ROOT = Path(__file__).resolve().parents[2]
MICRO, ACCUM = 3, 2


def tiny_model(seed: int = 0):
    return tiny_classifier(vocab=50, hidden=16, layers=2, intermediate=32, seed=seed)


def lora_model():
    """The tiny model with LoRA's adapters over its frozen base (no dropout, as the tiny model: runs must match; B
    drawn away from zero: every adapter trains)."""
    from pipeline import config
    from pipeline.core import lora

    model = tiny_model()
    lora_cfg = config.load("sample", ["model.lora.r=2", "model.lora.dropout=0"], device=False).model.lora
    lora.attach(model, lora.spec(lora_cfg, model.encoder, {"from": "test"}), torch.float32)
    torch.manual_seed(1)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    return model


def toy_data(n: int = 29, seed: int = 1) -> tuple[Ragged, np.ndarray]:
    rng = np.random.default_rng(seed)
    rows = [[0, *rng.integers(4, 50, size=rng.integers(2, 12)).tolist(), 2] for _ in range(n)]
    return Ragged.from_lists(rows), rng.integers(0, 2, size=n).astype(np.float32)


def train_once(model, steps, rank: int, world: int, accumulation: int):
    """One epoch over `steps` with plain SGD (so weights move by exactly lr x gradient)."""
    data, labels = toy_data()
    cfg = TrainConfig(accumulation=accumulation, max_grad_norm=1e9, lr=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    scaler = precision.make_scaler("fp32", torch.device("cpu"))
    return train_parts(
        model,
        steps,
        data,
        labels,
        optimizer,
        scheduler,
        scaler,
        cfg,
        "fp32",
        torch.device("cpu"),
        pad_id=1,
        rank=rank,
        world=world,
        progress=False,
    )


def plan(world: int) -> list[list[np.ndarray]]:
    data, _ = toy_data()
    batches = batching.length_grouped_batches(data.lengths, MICRO, seed=0, epoch=0, world=1)
    batches = batches[: (len(batches) // 2) * 2]  # an even count: both plans see the same rows
    return batching.micro_steps(batches, world)


HANG_S = 150  # a worker still running then is stuck: the whole run takes about 5 s alone, a minute on a busy CPU


def _worker(rank: int, world: int, port: int, out: str) -> None:
    # a hang leaves each rank's stacks in a file and ends the process, so the test fails with a reason
    stacks = open(f"{out}.rank{rank}.stacks", "w")  # open until the process ends
    faulthandler.dump_traceback_later(HANG_S, exit=True, file=stacks)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    # a collective that waits past this raises instead of blocking (the default is 30 minutes)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=HANG_S - 30))
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from pipeline.core.modeling import enable_checkpointing

    results, nets = {}, []
    for checkpointing in (False, True, "lora"):
        model = lora_model() if checkpointing == "lora" else tiny_model()
        if checkpointing:
            enable_checkpointing(model)  # before DDP wraps the model
        nets.append(net := DDP(model))
        calls = []

        def counting_hook(state, bucket, calls=calls):
            calls.append(bucket.index())  # one call per bucket per synchronised backward
            return allreduce_hook(state, bucket)

        net.register_comm_hook(None, counting_hook)
        steps = plan(world)
        train_once(net, steps, rank, world, ACCUM)
        results[checkpointing] = {
            "state": model.state_dict(),
            "bucket0_calls": calls.count(0),
            "windows": len(batching.accumulation_windows(len(steps), ACCUM)),
        }
    if rank == 0:
        torch.save(results, out)
    dist.barrier()  # every rank is done before any leaves
    # Leave without running destructors. A Python comm hook's futures are released on gloo's worker thread,
    # which needs the GIL for that, while ProcessGroupGloo's destructor joins the thread holding the GIL:
    # a deadlock at exit, seen in about one run in fifteen (the pipeline registers no Python hook)
    os._exit(0)


def spawn_bounded(out: Path, world: int = 2) -> None:
    """mp.spawn with a deadline: a stuck worker is killed and the test fails with every rank's stacks."""
    ctx = mp.spawn(_worker, args=(world, free_port(), str(out)), nprocs=world, join=False)
    deadline = time.monotonic() + HANG_S + 30
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the gloo workers did not finish in {HANG_S + 30} s")
    except Exception as e:  # a worker failed, or hung and faulthandler ended it, or all of them hung
        for proc in ctx.processes:
            proc.kill()
        stacks = "\n".join(p.read_text() for p in sorted(out.parent.glob(f"{out.name}.rank*.stacks")))
        pytest.fail(f"{e}\nthe workers' stacks at the hang, if one was:\n{stacks}")


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory) -> dict:
    """One 2-process gloo run (spawning is the slow part), with and without checkpointing."""
    out = tmp_path_factory.mktemp("ddp") / "ddp.pt"
    spawn_bounded(out)
    return torch.load(out, weights_only=False)


@pytest.mark.parametrize("checkpointing", [False, True, "lora"])
def test_two_ranks_equal_one_process_with_double_accumulation(ddp_results: dict, checkpointing: bool | str):
    """`lora`: LoRA's adapters over the frozen base, with checkpointing: DDP reduces the adapters' gradients alone."""
    ddp = ddp_results[checkpointing]
    single = lora_model() if checkpointing == "lora" else tiny_model()
    if checkpointing:
        from pipeline.core.modeling import enable_checkpointing

        enable_checkpointing(single)
    train_once(single, plan(1), rank=0, world=1, accumulation=2 * ACCUM)

    start = (lora_model() if checkpointing == "lora" else tiny_model()).state_dict()
    moved = False
    for name, value in single.state_dict().items():
        torch.testing.assert_close(ddp["state"][name], value, rtol=1e-5, atol=1e-6, msg=name)
        moved |= not torch.equal(value, start[name])
    assert moved, "training did not change the weights"
    if checkpointing == "lora":  # the frozen base as it was, under DDP too
        from pipeline.core import lora

        trained = set(lora.trained_state(single))
        assert all(torch.equal(ddp["state"][k], v) for k, v in start.items() if k not in trained)
    # gradients crossed between ranks once per accumulation window, not once per micro-batch
    assert ddp["bucket0_calls"] == ddp["windows"]
    assert ddp["windows"] < len(plan(2))


# ---------------------------------------------------------------- end to end: torchrun, 2 CPU processes

E2E = [
    "data.sample_scale=0.5",
    "data.folds=2",
    "train.epochs=2",
    "model.tiny.vocab=1000",
    "model.max_length=48",
    "train.micro_batch=16",
]


def _stage(args: list[str], base, launcher: list[str]) -> str:
    import subprocess
    import sys

    env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    paths = [f"input_dir={base / 'input'}", f"models_dir={base / 'models'}", f"submissions_dir={base / 'subs'}"]
    cmd = [*launcher, *args, *paths, *E2E] if launcher else [sys.executable, "-m", *args, *paths, *E2E]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout


def test_torchrun_two_processes_match_one(tmp_path):
    import json
    import shutil
    import sys
    from pathlib import Path

    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node=2", "-m"]
    one, two = tmp_path / "one", tmp_path / "two"
    _stage(["pipeline.data", "--config", "sample"], one, [])
    shutil.copytree(one / "input", two / "input")  # the same tables for both runs, made once
    # the same effective batch: 16 x 2 x 1 process = 16 x 1 x 2 processes; no dropout and fp32, so that the two
    # runs differ only in the order sums are taken (each process would draw other dropout masks)
    same = ["model.dropout=0.0", "train.precision=fp32"]
    _stage(["pipeline.train", "--config", "sample", "train.accumulation=2", *same], one, [])
    out = _stage(["pipeline.train", "--config", "sample", "train.accumulation=1", *same], two, torchrun)
    assert "x world 2 = effective batch 32" in out
    files = {
        b: sorted(str(p.relative_to(b / "models")) for p in (b / "models").rglob("*") if p.is_file())
        for b in (one, two)
    }
    assert files[one] == files[two]
    cv = {b: json.loads((b / "models" / "sample" / "cv.json").read_text()) for b in (one, two)}
    assert cv[one]["metrics"]["valid_auc"] > 0.6
    assert abs(cv[one]["metrics"]["valid_auc"] - cv[two]["metrics"]["valid_auc"]) < 0.005
    assert cv[one]["rows"] == cv[two]["rows"]  # every fold row scored exactly once under DDP too
    done = json.loads((two / "models" / "sample" / "fold0" / "done.json").read_text())
    assert done["world"] == 2 and done["effective_batch"] == 32

    # predict on two processes: each its own folds, rank 0 ensembles; the same file as one process writes
    out = _stage(["pipeline.predict", "--config", "sample", "train.accumulation=1", *same], two, torchrun)
    assert "process 0 of 2 on cpu: fold0" in out and "process 1 of 2 on cpu: fold1" in out
    shared = (two / "subs" / "sample.csv").read_bytes()
    for fold in ("fold0", "fold1"):
        (two / "models" / "sample" / fold / "test.csv").unlink()  # no cache: the one process predicts both
    _stage(["pipeline.predict", "--config", "sample", "train.accumulation=1", *same], two, [])
    assert (two / "subs" / "sample.csv").read_bytes() == shared


# ---------------------------------------------------------------- leaving a torchrun worker


@pytest.mark.usefixtures("torch_one_thread")
@pytest.mark.parametrize("world", ["1", "2"])
def test_exit_process_keeps_the_code_and_the_output(world: str) -> None:
    """A torchrun worker leaves with os._exit (no interpreter teardown): its exit code and its printed lines
    must come through as with sys.exit."""
    code = "from pipeline.core import distributed; print('last line', end=''); distributed.exit_process(3)"
    env = {**os.environ, "WORLD_SIZE": world}
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (3, "last line")
