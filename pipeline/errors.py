"""Mistakes a user can fix are printed as one line that says what to do, never as a stack trace."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


class PipelineError(Exception):
    """A problem with the user's input, settings or environment; the message is one clear line."""


class DataError(PipelineError, ValueError):
    """A problem with the user's input files or prepared data; the message is one line that names the file."""


def run_stage(stage: Callable[[], None]) -> int:
    """Run a stage's body; a PipelineError becomes `error: ...` on stderr and exit status 2.

    Every stage starts here, so this is also where transformers' own progress bars are switched off.
    """
    from pipeline import progress

    progress.silence_transformers()
    try:
        stage()
    except PipelineError as e:
        progress.fresh_line()  # the message starts its own line, never at the end of a bar's
        if getattr(e, "planned", False):
            return planned_stop(e)
        print(f"error: {e}", file=sys.stderr)
        return getattr(e, "exit_code", 2)  # 2, or a stop the caller handles (75: the session's time is up)
    except KeyboardInterrupt:
        progress.fresh_line()
        print("interrupted", file=sys.stderr)
        return 130
    return 0


def planned_stop(e: PipelineError) -> int:
    """A stop the caller planned (the session's time is up, the state saved): said once, by the first process,
    and not as an error. Under torchrun it exits 0, so that torchrun does not report the job failed with a
    traceback; the caller knows the stop from the file the stage left (the notebook: time_up.json)."""
    if os.environ.get("RANK", "0") == "0":
        print(f"stopped: {e}", file=sys.stderr)
    return 0 if int(os.environ.get("WORLD_SIZE", "1")) > 1 else getattr(e, "exit_code", 2)
