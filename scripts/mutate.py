"""`make mutate`: mutmut 3 over the modules where results are made, each module's mutants run against its own fast
test files only, and a line per module of what became of them (docs/testing.md, "Mutation testing").

mutmut reads one configuration for a whole run (pyproject.toml's [tool.mutmut]: what to copy, pytest's flags), so a
module's own test files cannot be said there: each module runs in a process of its own whose configuration is
pyproject.toml's with `only_mutate` and the test selection of TARGETS put in, and the counts are read back from the
verdicts mutmut keeps under mutants/. Run as `python scripts/mutate.py [MODULE ...]` from the repository root: a
script, not a module of the tests package, so that the process mutmut runs in has imported neither pipeline nor
tests before mutmut puts its mutated copies (mutants/) first on the path.

Writes mutants/ (mutmut's copy of the project, its verdicts) and, for each module, mutants/<module>.left: the diff of
every mutant that survived or that no test reached.
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Target:
    tests: tuple[str, ...]
    """the fast test files that call the module's functions directly (slow and e2e tests are left out by the pytest
    flags of pyproject.toml's [tool.mutmut])"""
    sample: int | None = None
    """mutants drawn (seeded by SEED) where running all of them takes too long; None: all"""


# module -> what its mutants run against: the one owner of this map
TARGETS: dict[str, Target] = {
    # the window's step (unscale, clip, a skipped fp16 step) is run by the loop in test_precision
    "pipeline/core/optim.py": Target(("tests/core/test_optim.py", "tests/core/test_precision.py")),
    "pipeline/core/trim.py": Target(("tests/core/test_trim.py",)),
    # 997 mutants at about 1.3 s each on 2 shared cores: 22 minutes whole
    "pipeline/scoring/metrics.py": Target(("tests/scoring/test_metrics.py",), sample=250),
    "pipeline/scoring/submission.py": Target(("tests/scoring/test_submission.py",)),
    "pipeline/scoring/blending.py": Target(("tests/scoring/test_blending.py",)),
}
SEED = 0

# mutmut's verdicts as the lines print them, the rest (suspicious, segfault...) summed as "other"; "not checked":
# left out of a sample, or not reached before the run stopped
SHOWN = ("killed", "survived", "timeout", "no tests", "not checked")
LEFT = ("survived", "no tests")  # the mutants whose diffs are kept: no test failed on them


def drawn(names: list[str], sample: int | None, seed: int = SEED) -> list[str]:
    """The mutants to run: all of them, or `sample` of them drawn with `seed` (the same for the same names)."""
    if sample is None or sample >= len(names):
        return sorted(names)
    return sorted(random.Random(seed).sample(sorted(names), sample))


def tally(statuses: list[str]) -> dict[str, int]:
    """How many mutants got each verdict, in the order of SHOWN, the rest summed as "other"."""
    counts = Counter(statuses)
    shown = {status: counts.pop(status, 0) for status in SHOWN}
    return {**shown, "other": sum(counts.values())}


def line(module: str, counts: dict[str, int], seconds: float) -> str:
    """One module's result: its verdicts, the killed share of the mutants run, and its minutes."""
    run = sum(counts.values()) - counts["not checked"]
    share = f"{counts['killed'] / run:.0%}" if run else "-"
    verdicts = " ".join(f"{status.replace(' ', '_')}={n}" for status, n in counts.items())
    return f"{module}: {run} mutants run, {verdicts}, killed {share}, {seconds / 60:.1f} min"


def status_of(code: int | None) -> str:
    """mutmut's name for a mutant's exit code (killed, survived, timeout, no tests...)."""
    from mutmut.stats import status_by_exit_code

    return status_by_exit_code[code]


def verdicts(root: Path, module: str) -> dict[str, str]:
    """Each of the module's mutants and its verdict, from the file mutmut keeps beside its mutated copy."""
    meta = json.loads((root / "mutants" / f"{module}.meta").read_text(encoding="utf-8"))
    return {key: status_of(code) for key, code in meta["exit_code_by_key"].items()}


def mutant_names(module: str) -> list[str]:
    """Every mutant mutmut makes of the module, named as `mutmut run` takes them."""
    from mutmut.mutation.file_mutation import mutate_file_contents
    from mutmut.utils.format_utils import get_mutant_name

    made = mutate_file_contents(module, Path(module).read_text(encoding="utf-8"))
    return [get_mutant_name(Path(module), name) for name in made.mutant_names]


def run_one(module: str) -> None:
    """mutmut run in this process, for one module against its own tests, one test process at a time."""
    import mutmut.configuration as mutmut_config

    target = TARGETS[module]
    # the configuration is read once and kept in this global; put in before mutmut's run reads it
    mutmut_config._config = dataclasses.replace(
        mutmut_config.config(), only_mutate=[module], pytest_add_cli_args_test_selection=list(target.tests)
    )
    from mutmut.__main__ import cli
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    # names given: mutmut runs those only (a whole run names none)
    names = drawn(mutant_names(module), target.sample) if target.sample else []
    cli.main(["run", "--max-children", "1", *names], standalone_mode=False)
    # the diffs now: the next module's run turns this mutated copy back into a plain one
    left = {key: status for key, status in verdicts(Path.cwd(), module).items() if status in LEFT}
    diffs = [f"# {key}: {status}\n{get_diff_for_mutant(key, path=module)}" for key, status in left.items()]
    Path(f"mutants/{module}.left").write_text("\n\n".join(diffs) + "\n", encoding="utf-8")


def run_module(root: Path, module: str) -> str:
    """One module in a process of its own; its line, or an error naming the file that holds mutmut's output."""
    copy = root / "mutants" / module
    # a run for another module left this one as a plain copy, newer than its source: mutmut would take that for its
    # mutated file and find no mutants in it, so the copy is made again (verdicts start afresh anyway, as the test
    # selection differs from the last run's)
    copy.unlink(missing_ok=True)
    (root / "mutants" / f"{module}.meta").unlink(missing_ok=True)  # verdicts of mutants a new sample leaves out
    log = copy.with_name(copy.name + ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log.open("w", encoding="utf-8") as out:  # mutmut's spinners and pytest's dots, kept out of the lines
        done = subprocess.run([sys.executable, __file__, "--one", module], stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        raise SystemExit(f"error: mutmut stopped on {module} (exit {done.returncode}); its output: {log}")
    return line(module, tally(list(verdicts(root, module).values())), time.monotonic() - start)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--one"]:
        run_one(args[1])
        return 0
    modules = args or list(TARGETS)
    unknown = [m for m in modules if m not in TARGETS]
    if unknown:
        print(f"error: not in TARGETS of scripts/mutate.py: {', '.join(unknown)}", file=sys.stderr)
        return 2
    began = time.monotonic()
    for module in modules:
        print(run_module(Path.cwd(), module), flush=True)
    print(f"all: {(time.monotonic() - began) / 60:.1f} min; the diffs of the mutants left: mutants/<module>.left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
