"""`python -m pipeline.benchmark.cores`: one process alone, two side by side, two threads in one."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import data
from pipeline.benchmark import cores
from tests.helpers import stage_args


@pytest.mark.parametrize(
    ("more", "said"),
    [
        (["nosuch.key=1"], "unknown config key nosuch"),
        (["--config", "nosuch"], "no config named 'nosuch'"),
        (["--steps", "0"], "--steps 0: the timed steps a process, a whole number from 1"),
        (["--steps", "two"], "--steps two: the timed steps a process, a whole number from 1"),
        ([], "no prepared tokenizer; the tiny model's is made from the data: run `make data CONFIG=sample`"),
    ],
    ids=["unknown-key", "unknown-config", "steps-0", "steps-not-a-number", "no-prepared-data"],
)
def test_a_mistake_is_one_error_line_and_exit_2(tmp_path: Path, capsys, more: list[str], said: str) -> None:
    """No traceback, no process started; without `make data` the line says to run it, not to check the network."""
    assert cores.main(["--config", "sample", *stage_args(tmp_path), *more]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0], captured.err
    assert "network" not in lines[0] and "cores:" not in captured.out  # nothing was measured


def test_the_table_reads_each_layout_against_one_process_alone() -> None:
    text = cores.table({"1 x 1": [4.0], "2 x 1": [2.2, 2.0], "1 x 2": [6.0]})
    assert "| 2 x 1 | 2.20 / 2.00 | 4.20 | 1.05x |" in text and "| 1 x 2 | 6.00 | 6.00 | 1.50x |" in text


@pytest.mark.e2e
def test_every_layout_is_measured_in_processes_of_its_own(tmp_path: Path, capsys) -> None:
    args = stage_args(tmp_path, "model.tiny.hidden=32", "model.tiny.intermediate=64", "model.max_length=16",
                      "train.micro_batch=4", "train.precision=fp32")  # fmt: skip
    assert data.main(args) == 0  # the tiny model's tokenizer is made from the data
    assert cores.main(["--config", "sample", "--steps", "1", *args]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ") and "x" in line}
    assert set(rows) >= {"1 x 1", "2 x 1", "1 x 2"}, out
    assert len(rows["2 x 1"].split("|")[2].split("/")) == 2  # two processes, a rate each
    assert "cores: tiny at micro-batch 4 x 16 tokens, fp32, 1 timed steps a process" in out
