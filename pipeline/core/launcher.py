"""`make train GPUS=N` (and `make stage1`, `make predict`): torchrun, one process per device, with one-line errors.

`python -m pipeline.core.launcher N STAGE ARGS...` runs PyTorch's own launcher (torch.distributed.run, as
`torchrun --standalone --nproc_per_node=N -m pipeline STAGE ARGS...`) in this process, and ends as one process
would: a stage's error is one line, said once (not once a process, and never followed by torchrun's
ChildFailedError report), a process that died without a word (a signal, a crash) is named in one line, and the
exit status is the failing process's. Each process keeps its last line in a folder of this launcher's
(errors.LINES_ENV); the first process prints its own, the launcher the others' that differ. Ctrl-C reaches the
processes once, through torchrun (they save a resume state at the next step and stop), and they are given
`TORCH_ELASTIC_SHUTDOWN_TIMEOUT` seconds for it, 300 unless set. If the launcher itself dies, even by SIGKILL,
every process gets SIGTERM and stops the same way (distributed.stop_with_launcher).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path

from pipeline.core import headroom
from pipeline.errors import LINES_ENV

SHUTDOWN_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"  # seconds torchrun waits for its processes after a stop


def kept_lines(folder: Path) -> dict[int, dict]:
    """{rank: {"line", "code"}} of the processes that ended with a line of their own."""
    out = {}
    for path in folder.glob("rank*.json"):
        try:
            out[int(path.stem[4:])] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return out


def how_it_ended(exitcode: int) -> str:
    """`was killed by SIGKILL (out of memory?)`, `ended with exit status 1 (its output above says why)`."""
    if exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.Signals._value2member_map_ else -exitcode
        hint = " (out of memory?)" if exitcode == -signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"ended with exit status {exitcode} (its output above says why)"


def report(lines: dict[int, dict], failures: dict[int, int], world: int) -> tuple[list[str], int]:
    """(what the launcher prints, its exit status) once the processes ended. `lines`: each one's last line (the
    first process printed its own); `failures`: {rank: exit status} of those that failed, the first first (torchrun
    stopped the others). A first failure without a line of its own (a signal, a crash) is named."""
    said = lines.get(0, {}).get("line")
    out = []
    for rank in sorted(lines):
        if lines[rank]["line"] not in (said, *out):
            out.append(lines[rank]["line"])
    first = next(iter(failures), None)
    if first is None:
        return out, lines.get(0, {}).get("code", 0)
    if first in lines:
        return out, lines[first]["code"]
    code = failures[first]
    return [f"error: process {first} of {world} {how_it_ended(code)}", *out], code if code > 0 else 128 - code


def run(world: int, argv: list[str]) -> int:
    """torchrun's launcher for `python -m pipeline ARGV` on `world` processes; the exit status of the run."""
    from torch.distributed import run as torchrun
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    for name in list(logging.root.manager.loggerDict):  # its own log lines (a worker failed, ...): said here
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    os.environ.setdefault(SHUTDOWN_ENV, "300")  # time to save a resume state at the next step after Ctrl-C
    os.environ.update(headroom.alloc_env(os.environ))  # the workers' allocator, unless the user chose one
    with tempfile.TemporaryDirectory(prefix="pipeline-lines-") as folder:
        os.environ[LINES_ENV] = folder
        failures: dict[int, int] = {}
        try:
            torchrun.run(torchrun.parse_args(["--standalone", f"--nproc_per_node={world}", "-m", "pipeline", *argv]))
        except ChildFailedError as e:
            first, _ = e.get_first_failure()
            failures = {first: e.failures[first].exitcode}
            failures.update({r: f.exitcode for r, f in e.failures.items() if r != first})
        except SignalException:  # Ctrl-C or SIGTERM: torchrun passed it on and waited for the processes
            if not kept_lines(Path(folder)):
                print("interrupted", file=sys.stderr)
                return 130
        out, code = report(kept_lines(Path(folder)), failures, world)
    for line in out:
        print(line, file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or not argv[0].isdigit() or int(argv[0]) < 1:
        print("usage: python -m pipeline.core.launcher N STAGE [ARGS...] (N processes, one a device)", file=sys.stderr)
        return 2
    try:
        return run(int(argv[0]), argv[1:])
    except KeyboardInterrupt:  # before torchrun took the signals over
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
