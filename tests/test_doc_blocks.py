"""Every ```python block of README.md and docs/*.md runs as pasted: in a fresh interpreter, in a folder holding
the files it names (made by the stages on the sample), with no name given to it from outside.

Two markers, an HTML comment on a line of its own just before a block, say otherwise:
`<!-- continues the block above -->` runs it after the page's previous Python block, in the same interpreter (as a
reader pasting both into one session); `<!-- not run: why -->` leaves out a block that is not meant to run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import baseline, blend, export, predict, train
from tests.helpers import ROOT, prepare_tiny
from tests.helpers.pages import CONTINUES, PAGES, PYTHON, blocks

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("torch_one_thread")]


def scripts() -> list[tuple[str, str]]:
    """(page:line, source) for each script a reader would paste: a block with the ones that continue it."""
    out: list[tuple[str, str]] = []
    for path in PAGES:
        previous = None
        for block in blocks(path, PYTHON):
            if block.not_run is not None:
                previous = None
                continue
            if block.before == CONTINUES:
                assert previous is not None, f"{block.where}: continues no Python block above it"
                out[previous] = (out[previous][0], out[previous][1] + block.body)
                continue
            out.append((block.where, block.body))
            previous = len(out) - 1
    return out


SCRIPTS = scripts()


def test_the_pages_have_python_blocks_and_few_left_out() -> None:
    assert SCRIPTS, "no ```python block found: the pattern no longer matches the pages"
    left_out = [b.not_run for p in PAGES for b in blocks(p, PYTHON) if b.not_run is not None]
    assert len(left_out) <= 2, left_out  # an exception, each with its reason; not a way around this test


@pytest.fixture(scope="module")
def sample_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder as after `make data train export` on the sample (one fold of the tiny model): the files the
    blocks name (models/sample/export/fold0, ...) are there."""
    base = tmp_path_factory.mktemp("sample")
    cfg = prepare_tiny(base, "train.folds=[0]", "train.device=cpu", "train.max_steps=2")
    assert cfg.name == "sample"
    train.run(cfg)
    export.run(cfg)
    return base


@pytest.mark.parametrize(("where", "source"), SCRIPTS, ids=[w for w, _ in SCRIPTS])
def test_a_python_block_runs_as_pasted(where: str, source: str, sample_folder: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as a reader's shell: the checkout not on it
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-c", source], cwd=sample_folder, env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, f"{where}: the block fails as pasted:\n{out.stderr[-3000:]}"


@pytest.mark.slow
def test_the_blend_of_the_sample_that_recipes_md_shows_runs(tmp_path: Path) -> None:
    """docs/recipes.md's sample blend (`make baseline`, then `make blend BLEND="..."` with the members it names)
    after `make data train predict`, here on the tiny model in one process: the names are the sample's own."""

    page = (ROOT / "docs" / "recipes.md").read_text()
    block = page.split("## Blends", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    assert commands[0] == "make baseline", commands
    members = re.fullmatch(r'make blend BLEND="([^"]+)"', commands[1]).group(1)
    cfg = prepare_tiny(tmp_path, "train.device=cpu", "train.max_steps=2")
    train.run(cfg)
    predict.run(cfg)
    baseline.run(cfg)
    blend.run(blend.with_members(cfg, members))
    assert (Path(cfg.submissions_dir) / f"{members.replace(' ', '+')}.csv").is_file()
