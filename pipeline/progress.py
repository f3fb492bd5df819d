"""Progress a user reads: one tqdm wrapper for every stage, a ticking line for long silent work.

On a terminal a bar redraws as tqdm always does. When stderr is not a terminal (Kaggle's log, CI, a pipe
into a file, `make train > log 2>&1`) a redraw is a line of its own (tqdm's `\r` redraws would join into one
physical line), written at most every LOG_INTERVAL seconds, and a bar's final state (`N/N` at an epoch's end) is
always its last line: a ten-hour run leaves a log one can read line by line, and an error starts a line of its own.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from tqdm.auto import tqdm

LOG_INTERVAL = 60.0  # seconds between redraws of a bar when stderr is not a terminal


def interactive(stream=None) -> bool:
    stream = stream or sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


class _LogBar(tqdm):
    """A bar for a log: each redraw one line; a new postfix or description waits for the next timed redraw (tqdm
    redraws at once); closing writes the final state where the last line shows an earlier one."""

    written = -1  # the count the bar's last line shows; -1: no line yet

    def set_postfix(self, ordered_dict=None, refresh=True, **kwargs):
        super().set_postfix(ordered_dict, refresh=False, **kwargs)

    def set_description(self, desc=None, refresh=True):
        super().set_description(desc, refresh=False)

    def display(self, msg=None, pos=None):
        # never tqdm's `\r` and cursor moves (a nested bar's position): in a file they are noise on one line
        self.fp.write(f"{self.__str__() if msg is None else msg}\n")
        self.fp.flush()
        self.written = self.n
        return True

    def close(self):
        if self.disable:
            return
        if self.written != self.n:  # the update that ended the epoch came between two timed redraws
            self.display()
        # a log keeps its lines: tqdm's own close would clear this one (leave=False) or write an empty line
        self.disable = True
        self._decr_instances(self)


def bar(iterable=None, **kwargs) -> tqdm:
    """tqdm, with redraws spaced out when nobody watches a terminal."""
    if interactive(kwargs.get("file")):
        return tqdm(iterable, **kwargs)
    kwargs.setdefault("mininterval", LOG_INTERVAL)
    # tqdm's monitor thread forces a redraw every maxinterval seconds: keep it as sparse as mininterval
    kwargs.setdefault("maxinterval", max(LOG_INTERVAL, kwargs["mininterval"]))
    return _LogBar(iterable, **kwargs)


def silence_transformers() -> None:
    """transformers' own bars ("Loading weights", "Writing model shards") would interleave with ours."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read when transformers is first imported
    hf_logging = sys.modules.get("transformers.utils.logging")
    if hf_logging is not None:  # already imported (by the stage's own imports): switch it off there
        hf_logging.disable_progress_bar()


def fresh_line() -> None:
    """Close every open bar, so that what is printed next starts on a line of its own.

    A bar left open by an exception (a `for` over a bar does not close it) holds the cursor at the end
    of its line; closing it ends that line (leave=True) or clears it (leave=False).
    """
    for instance in list(getattr(tqdm, "_instances", ())):
        try:
            instance.close()
        except Exception:  # noqa: BLE001 - a broken bar must not hide the error being reported
            pass
    sys.stderr.flush()


class Ticker:
    """`desc: 12 s` for work with no steps to count, shown once it has taken DELAY seconds (a quick run
    prints nothing): redrawn in place on a terminal, a new line every LOG_INTERVAL seconds in a log."""

    DELAY = 2.0

    def __init__(self, desc: str, stream=None) -> None:
        self.desc, self.stream = desc, stream or sys.stderr
        self.start = time.monotonic()
        self.shown = -1.0  # elapsed seconds at the last line; < 0: nothing shown yet
        self.tty = interactive(self.stream)

    def tick(self) -> None:
        elapsed = time.monotonic() - self.start
        if elapsed < self.DELAY or (not self.tty and self.shown >= 0 and elapsed - self.shown < LOG_INTERVAL):
            return
        self.stream.write(f"\r{self.desc}: {elapsed:.0f} s" if self.tty else f"{self.desc}: {elapsed:.0f} s\n")
        self.stream.flush()
        self.shown = elapsed

    def close(self, how: str = "done in") -> None:
        if self.shown >= 0:  # end what was shown with the total, on a line of its own
            elapsed = time.monotonic() - self.start
            self.stream.write(f"{chr(13) if self.tty else ''}{self.desc}: {how} {elapsed:.0f} s\n")
            self.stream.flush()
            self.shown = -1.0


def _child(conn, fn: Callable, args: tuple) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides: Ctrl-C there terminates this process
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent, which raises it
        try:
            conn.send(("error", e))
        except Exception:  # noqa: BLE001 - an exception that cannot be pickled
            conn.send(("error", RuntimeError(f"{type(e).__name__}: {e}")))
    finally:
        conn.close()


@contextlib.contextmanager
def _ctrl_c_noted():
    """A list that gains an entry whenever Ctrl-C comes, while the caller's own handler still runs.

    A Ctrl-C that lands while this process runs a fork's hooks (logging's lock release) raises inside the hook,
    where Python reports it and goes on; masking the signal over the fork does not hold it, since any other
    thread (a test worker's, a tokenizer's) may take it instead. A note the wait reads cannot be lost that way.
    """
    came: list[int] = []
    old = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or not callable(old):
        yield came  # SIG_IGN or SIG_DFL as the caller set them; only the main thread can set a handler
        return

    def note(signum, frame):
        came.append(signum)
        old(signum, frame)

    signal.signal(signal.SIGINT, note)
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, old)


def run_in_child(fn: Callable, *args, desc: str):
    """fn(*args) in a forked child process, with an elapsed-time line; Ctrl-C stops it within a second.

    For native code that ignores Ctrl-C until it is done (SentencePiece training: about 50 s on the real
    slice): Python handles a signal only between bytecodes, so the parent waits in short polls and
    terminates the child when interrupted. fn's result and exceptions must be picklable.
    """
    ctx = multiprocessing.get_context("fork")  # the child shares the parent's memory: no copy of the texts
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, fn, args), daemon=True)
    ticker, status = Ticker(desc), ""
    with _ctrl_c_noted() as came:
        try:
            proc.start()
            send.close()
            while not recv.poll(0.2):
                if came:  # a Ctrl-C raised inside the fork's hooks, where Python drops it
                    raise KeyboardInterrupt
                if not proc.is_alive() and not recv.poll(0.2):
                    raise RuntimeError(f"{desc}: the worker process died (exit code {proc.exitcode})")
                ticker.tick()
            status, value = recv.recv()
        finally:
            ticker.close("done in" if status else "stopped after")
            if proc.is_alive():
                proc.terminate()
                proc.join(2)
                if proc.is_alive():
                    proc.kill()
            if proc.pid is not None:
                proc.join()
            recv.close()
    if status == "error":
        raise value
    return value
