"""scripts/mutate.py (`make mutate`): the seeded sample, the counts per verdict and the line a module gets; and its
map of modules to test files against the tree."""

from __future__ import annotations

from pathlib import Path

from scripts import mutate
from tests.helpers import ROOT


def test_a_sample_is_the_same_for_the_same_names_and_seed_and_a_subset() -> None:
    names = [f"pipeline.m.x_f__mutmut_{i}" for i in range(1, 101)]
    first = mutate.drawn(names, 10)
    assert first == mutate.drawn(list(reversed(names)), 10)  # the order mutmut lists them in does not matter
    assert len(set(first)) == 10 and set(first) <= set(names)
    assert mutate.drawn(names, 10, seed=1) != first
    assert mutate.drawn(names, None) == sorted(names) == mutate.drawn(names, 100)


def test_the_tally_keeps_every_mutant_and_the_share_counts_only_those_run() -> None:
    counts = mutate.tally(["killed"] * 3 + ["survived", "no tests", "suspicious"] + ["not checked"] * 4)
    assert counts == {"killed": 3, "survived": 1, "timeout": 0, "no tests": 1, "not checked": 4, "other": 1}
    shown = mutate.line("pipeline/m.py", counts, 90)
    assert shown.startswith("pipeline/m.py: 6 mutants run, killed=3 survived=1 timeout=0 no_tests=1 not_checked=4")
    assert shown.endswith("other=1, killed 50%, 1.5 min")


def test_every_target_is_a_module_and_its_tests_are_test_files() -> None:
    for module, target in mutate.TARGETS.items():
        assert (ROOT / module).is_file(), module
        assert target.tests and all(Path(ROOT / t).is_file() and Path(t).name.startswith("test_") for t in target.tests)
