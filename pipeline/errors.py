"""Mistakes a user can fix are printed as one line that says what to do, never as a stack trace."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path


class PipelineError(Exception):
    """A problem with the user's input, settings or environment; the message is one clear line."""


class ConfigError(PipelineError, ValueError):
    """A setting that cannot be used (unknown, of the wrong type, out of range); the message names the key."""


class DataError(PipelineError, ValueError):
    """A problem with the user's input files or prepared data; the message is one line that names the file."""


# set by pipeline.core.launcher for the processes it starts: each one's last line is kept there as well, so that
# the launcher says the line of a process that could not (stopped by the launcher first) once, not once a process
LINES_ENV = "PIPELINE_LINES"
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def run_stage(stage: Callable[[], None]) -> int:
    """Run a stage's body; a PipelineError becomes `error: ...` on stderr and exit status 2.

    Every stage starts here, so this is also where transformers' own progress bars are switched off. A full disk
    that no writer named (pipeline.files does where it writes) is one line too.
    """
    from pipeline import progress

    progress.silence_transformers()
    try:
        stage()
    except PipelineError as e:
        progress.fresh_line()  # the message starts its own line, never at the end of a bar's
        if getattr(e, "planned", False):
            return planned_stop(e)
        if getattr(e, "asked", False):  # Ctrl-C or SIGTERM, the state saved: what the user asked for
            return say(f"stopped: {e}", getattr(e, "exit_code", 130))
        return say(f"error: {e}", getattr(e, "exit_code", 2))  # 2, or a stop the caller handles (75: time is up)
    except KeyboardInterrupt:
        progress.fresh_line()
        return say("interrupted", 130)
    except OSError as e:
        if e.errno not in DISK_FULL:
            raise
        progress.fresh_line()
        where = f" writing {e.filename}" if e.filename else ""
        return say(f"error: the disk is full{where}; free some space and run it again (nothing is damaged: "
                   "a file is replaced only once it is complete)", 2)  # fmt: skip
    return 0


def planned_stop(e: PipelineError) -> int:
    """A stop the caller planned (the session's time is up, the state saved): said once, by the first process,
    and not as an error. Under torchrun it exits 0, so that torchrun does not report the job failed with a
    traceback; the caller knows the stop from the file the stage left (the notebook: time_up.json)."""
    if os.environ.get("RANK", "0") == "0":
        print(f"stopped: {e}", file=sys.stderr)
    return 0 if int(os.environ.get("WORLD_SIZE", "1")) > 1 else getattr(e, "exit_code", 2)


def say(line: str, code: int) -> int:
    """Print a stage's last line on stderr and return its exit status. Under pipeline.core.launcher the first
    process prints it and every process keeps it for the launcher, which prints the others' that differ."""
    folder, rank = os.environ.get(LINES_ENV), os.environ.get("RANK", "0")
    # torchrun stops the other processes (SIGTERM) as soon as one has failed, maybe this one between keeping its
    # line and printing it: the launcher takes the first process's kept line as said, so a stop waits for both
    with stops_held():
        if folder:
            try:
                Path(folder, f"rank{rank}.json").write_text(json.dumps({"line": line, "code": code}))
            except OSError:
                rank = "0"  # not kept: printed here instead
        if rank == "0" or not folder:
            print(line, file=sys.stderr, flush=True)
    return code


STOPS = (signal.SIGINT, signal.SIGTERM)  # what ends a process at once: torchrun's stop, Ctrl-C


@contextlib.contextmanager
def stops_held():
    """The block runs whole: a stop that arrives in it is taken once the block is done, as it would have been
    taken at that moment (its previous handler, by default the end of the process). A handler, not a blocked
    signal mask: a signal blocked in this thread alone would reach another (torch's) and end the process there."""
    if threading.current_thread() is not threading.main_thread():  # handlers are set in the main thread only
        yield
        return
    arrived: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in STOPS}
    held = [sig for sig, handler in previous.items() if handler is not None]  # None: set outside Python, left so
    for sig in held:
        signal.signal(sig, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        for sig in held:
            signal.signal(sig, previous[sig])
        for sig in dict.fromkeys(arrived):  # each stop once, in the order they came
            os.kill(os.getpid(), sig)


def one_of(choices) -> str:
    """A setting's allowed values for an error line, each quoted: an empty one shows as '' (not as nothing)."""
    return ", ".join(repr(c) for c in choices)
