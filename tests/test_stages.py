"""The stage table (pipeline/stages.py): every place that names the stages is made from it or checked against it,
so that a new stage is its module, its record in the table and its test."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import experiments, layout, stages, validity
from pipeline.errors import PipelineError
from tests.helpers import ROOT, make_cfg


def test_every_stage_is_a_module_with_a_main_and_a_docstring_of_what_it_reads_and_writes() -> None:
    for s in stages.STAGES:
        path = ROOT / s.path
        assert path.is_file() and importlib.util.find_spec(s.module) is not None, s.name
        text = path.read_text()
        assert "def main(argv" in text, f"{path}: no main(argv=None)"
        assert "Reads" in text.split('"""')[1] and "Writes" in text.split('"""')[1], f"{path}: no Reads/Writes"
        assert s.doc and "\n" not in s.doc


def test_the_generated_parts_are_the_table_s() -> None:
    for name, rewrite in stages.GENERATED.items():
        text = (ROOT / name).read_text(encoding="utf-8")
        assert text == rewrite(text), f"{name}: run `python3 -m pipeline.stages write`"


def test_every_stage_says_what_it_writes_in_the_stages_page_s_table() -> None:
    """docs/stages.md's "What each stage writes" is the records' `writes`: a new stage adds its row there by
    declaring it, and no row outlives its stage."""
    text = (ROOT / "docs/stages.md").read_text(encoding="utf-8")
    table = text.split(stages.WRITES_BEGIN, 1)[1].split(stages.WRITES_END, 1)[0]
    assert table.strip() == stages.writes_table().strip()
    named = re.findall(r"^\| `make ([a-z0-9-]+)` \|", table, flags=re.M)
    assert named == [s.name for s in stages.STAGES], "every stage, in the table's order, once"
    assert all(s.writes for s in stages.STAGES)


@pytest.mark.e2e  # starts processes: `make unit` leaves it out (docs/testing.md)
def test_make_help_and_python_m_pipeline_name_every_stage() -> None:
    # make -n (-o: the venv taken as made): nothing runs; the Makefile reads the table with the system python
    made = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    for s in stages.STAGES:
        assert f"  make {s.name:<14} {s.doc.replace('`', '')}" in made.stdout, made.stdout
        for target in s.targets:
            dry = subprocess.run(["make", "-n", "-o", ".venv/.installed", target], cwd=ROOT, capture_output=True,
                                 text=True, timeout=60)  # fmt: skip
            assert f"-m pipeline {s.name} " in dry.stdout, dry
    usage = subprocess.run([sys.executable, "-m", "pipeline"], cwd=ROOT, capture_output=True, text=True)
    assert usage.returncode == 2 and "{" + ",".join(s.name for s in stages.STAGES) + "}" in usage.stderr


def test_write_rewrites_only_the_generated_parts(tmp_path) -> None:
    for name in stages.GENERATED:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        text = (ROOT / name).read_text(encoding="utf-8")
        # the first of each is in the generated part
        stale = text.replace("| `make cv` |", "| `make old` |", 1)
        stale = stale.replace("| `make board` | `models/board.md`", "| `make board` | `old.md`", 1)
        assert stale.count("old") == text.count("old") + 2
        (tmp_path / name).write_text(stale, encoding="utf-8")
    assert stages.main(["write", str(tmp_path)]) == 0
    for name in stages.GENERATED:
        assert (tmp_path / name).read_text(encoding="utf-8") == (ROOT / name).read_text(encoding="utf-8")


# ---------------------------------------------------------------- a stage declared by its record


def test_a_record_names_its_module_so_a_stage_may_share_a_name_with_a_module() -> None:
    plain = stages.Stage("cv", "x")
    assert (plain.module, plain.path) == ("pipeline.cv", "pipeline/cv.py")
    # `errors` as a stage: pipeline/errors.py is the one-line-errors module, so the stage lives elsewhere
    named = stages.Stage("errors", "x", module="pipeline.checks.errors")
    assert (named.module, named.path) == ("pipeline.checks.errors", "pipeline/checks/errors.py")
    with pytest.raises(ValueError, match="unknown checks or reads"):
        stages.Stage("probe", "x", checks=("no such check",))
    with pytest.raises(KeyError, match="no stage 'probe'"):
        stages.of("probe")


def test_every_check_and_read_a_record_may_name_is_made_somewhere() -> None:
    assert set(experiments.CHECKS) == set(stages.CHECKS)
    assert set(layout.FOLD_NEEDS) == set(stages.READS)


def test_each_stage_preflights_under_its_own_name_and_only_a_stage_with_checks_does() -> None:
    for s in stages.STAGES:
        named = re.findall(r"preflight\(\w+, \"(\w+)\"", (ROOT / s.path).read_text())
        assert named == ([s.name] if s.checks else []), s.name


def with_stage(monkeypatch, stage: stages.Stage) -> None:
    monkeypatch.setattr(stages, "STAGES", (*stages.STAGES, stage))


def test_preflight_checks_what_the_record_names_and_nothing_else(tmp_path: Path, monkeypatch) -> None:
    cfg = make_cfg(tmp_path)
    layout.board_path(cfg).mkdir(parents=True)  # models/board.md a folder: the board check refuses it
    with_stage(monkeypatch, stages.Stage("probe", "x", checks=("models",)))
    experiments.preflight(cfg, "probe")  # the models folder is writable: nothing to say
    with_stage(monkeypatch, stages.Stage("probe2", "x", checks=("models", "board")))
    with pytest.raises(PipelineError, match="board.md: is a folder"):
        experiments.preflight(cfg, "probe2")


def test_usable_folds_needs_what_the_record_reads_and_says_the_stage(tmp_path: Path, monkeypatch, capsys) -> None:
    cfg, seen = make_cfg(tmp_path), []
    fold0 = layout.fold_dir(cfg, 0)

    def select(exp, digest, k, needs):  # what validity.fold_status is asked of each fold
        seen.append(needs)
        return [fold0], {"fold1": "why"}

    monkeypatch.setattr(validity, "select_folds", select)
    with_stage(monkeypatch, stages.Stage("probe", "x", reads=("weights",)))
    assert validity.usable_folds(cfg, "d", "probe") == [fold0]
    assert seen == [(layout.WEIGHTS,)]
    assert "probe: using fold0; left out fold1: why" in capsys.readouterr().err
    with_stage(monkeypatch, dataclasses.replace(stages.by_name("probe"), name="probe3", reads=("oof", "all")))
    validity.usable_folds(cfg, "d", "probe3")
    assert seen[-1] == (layout.OOF, layout.ALL)


def test_a_stage_says_it_started_before_its_module_and_torch_load(monkeypatch, capsys) -> None:
    """`python -m pipeline train` prints its first line before the stage's imports (seconds of torch and
    transformers), once: not once a process under torchrun."""
    import importlib

    from pipeline import __main__ as entry

    seen: list[str] = []

    class Stage:
        @staticmethod
        def main(argv):
            return 0

    def import_module(name):
        seen.append(capsys.readouterr().out)
        return Stage

    monkeypatch.setattr(importlib, "import_module", import_module)
    monkeypatch.delenv("RANK", raising=False)
    assert entry.main(["train", "--config", "sample"]) == 0
    assert seen == ["train: starting (loading torch and transformers)\n"]
    assert f"`{seen[0].strip()}`" in (ROOT / "docs" / "stages.md").read_text()  # as the page quotes it
    monkeypatch.setenv("RANK", "1")
    assert entry.main(["train"]) == 0 and seen[-1] == ""
