"""`python -m pipeline <stage> ...`: run a stage by its make target's name (pipeline/stages.py), as the Makefile does.

The stage is imported here, inside the process's one guard: Ctrl-C while torch and transformers load (the
first seconds of every stage) ends the run with one line and exit status 130, not a stack trace. A line says the
stage has started before they load, so that a run never begins in silence.
"""

from __future__ import annotations

import importlib
import os
import sys

from pipeline.stages import STAGES, by_name


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or by_name(argv[0]) is None:
        names = ",".join(s.name for s in STAGES)
        print(f"usage: python -m pipeline {{{names}}} [--config NAME] [key=value ...]", file=sys.stderr)
        return 2
    if os.environ.get("RANK", "0") == "0":  # one line, not one a process, under torchrun
        # torch and transformers take seconds to load (minutes on a busy machine): the user sees the run has begun
        print(f"{argv[0]}: starting (loading torch and transformers)", flush=True)
    try:
        stage = importlib.import_module(by_name(argv[0]).module)
    except KeyboardInterrupt:
        from pipeline.errors import say  # one line, said once under pipeline.core.launcher too

        return say("interrupted", 130)
    return stage.main(argv[1:])


if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # a torchrun worker (train, stage1): see exit_process there
        from pipeline.core import distributed

        distributed.exit_process(code)
    sys.exit(code)
