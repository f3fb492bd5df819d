"""Rank, world size and device from torchrun's environment; one process per device.

`torchrun --nproc_per_node=N -m pipeline.train` sets RANK, WORLD_SIZE and LOCAL_RANK; a plain
`python -m pipeline.train` has none of them and runs as rank 0 of a world of 1. The same code runs on
one node or many: the rendezvous is torchrun's business, not ours.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def pick_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda" and device.index is None:
        device = torch.device(f"cuda:{local_rank}")
    return device


# what a process torchrun started gets when the launcher dies: a signal of its own, because Linux sends it once for
# each of the launcher's threads that ends (a repeated SIGTERM would mean "stop at once", like a second Ctrl-C)
LAUNCHER_GONE = signal.SIGUSR2


def stop_with_launcher() -> None:
    """A process torchrun started is told when the launcher dies, even by SIGKILL (Linux's PR_SET_PDEATHSIG): it
    then saves a resume state at the next step and stops (resume.StopFlag), instead of training on unseen."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, int(LAUNCHER_GONE))
    if os.getppid() == 1:  # the launcher died before this process asked: init took it over
        os.kill(os.getpid(), LAUNCHER_GONE)


def setup(device_name: str = "auto", timeout_minutes: float = 60) -> Dist:
    """Join the process group torchrun prepared (NCCL on CUDA, gloo on CPU), or run alone."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_name, local_rank)
    if world > 1 and not dist.is_initialized():
        stop_with_launcher()
        if device.type == "cuda":
            torch.cuda.set_device(device)
        backend = "nccl" if device.type == "cuda" else "gloo"
        # a generous timeout: rank 0 may spend minutes writing files while the others wait at a barrier
        dist.init_process_group(backend=backend, timeout=timedelta(minutes=timeout_minutes))
    return Dist(rank, world, local_rank, device)


def teardown(d: Dist, clean: bool = True) -> None:
    """Leave the process group. After a clean run every rank first waits for the others (a rank that failed
    may be gone, so not then), and the garbage that may still hold the group is collected first."""
    if d.enabled and dist.is_initialized():
        if clean:
            dist.barrier()  # the last collective that carries Python tensors is finished on every rank
        gc.collect()
        dist.destroy_process_group()


def exit_process(code: int) -> None:
    """End the process with `code`; a torchrun worker skips the interpreter's own teardown.

    gloo's worker threads may still release a finished collective's tensors, which takes the GIL, while the
    interpreter finalizes: the process then aborts ("terminate called without an active exception", exit
    -6) after training ended well, and torchrun reports the whole job failed. Seen in about one run in a few
    dozen, also after destroy_process_group (pytorch/pytorch#190489, #179291). Output is flushed first.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def barrier(d: Dist) -> None:
    if d.enabled:
        dist.barrier()


def gather_objects(d: Dist, obj) -> list:
    """Every rank's `obj`, in rank order (a list of one where there is one process)."""
    if not d.enabled:
        return [obj]
    out = [None] * d.world
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(d: Dist, obj):
    """Rank 0's `obj` on every rank (pickled; tensors in it travel through the process group)."""
    if not d.enabled:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def any_rank(d: Dist, flag: bool) -> bool:
    """True on every rank if it is true on any: ranks decide together, so none waits alone at a collective."""
    if not d.enabled:
        return flag
    t = torch.tensor([int(flag)], device=d.device if d.device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def check_all_reduce() -> int:
    """One all-reduce across the processes torchrun started (NCCL on CUDA): 0 when every rank sees the sum.

    `python -m torch.distributed.run --nproc_per_node=N -m pipeline.core.distributed` runs it; the Kaggle
    notebook does, before the first fold on two GPUs, so that a broken NCCL shows in a minute, not hours in.
    """
    d = setup("auto", timeout_minutes=2)  # a check: a hang must end within minutes
    if d.enabled:
        dist.barrier()
    t = torch.ones(1, device=d.device if d.device.type == "cuda" else "cpu")
    if d.enabled:
        dist.all_reduce(t)
    ok = int(t.item()) == d.world
    teardown(d)
    return 0 if ok else 1


if __name__ == "__main__":
    exit_process(check_all_reduce())
