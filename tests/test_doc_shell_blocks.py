"""Every shell block (```bash, ```sh, ```console, ```shell) of README.md and docs/*.md either runs as pasted, or is
marked `<!-- not run: why -->` on the line just before it (tests/helpers/pages.py; docs/testing.md).

A block that runs does so with bash in a copy of the checkout (its tracked files, .venv linked) on the sample: the
checkout's own input/, models/ and submissions/ are never touched. Only blocks of seconds run; a block left out
(training, Kaggle, a GPU, the suite itself) is still read: every `make` target it names is one the Makefile has,
every variable one it reads, every CONFIG a config in pipeline/configs/ (a recipe's for `make recipe`), every key
in ARGS a setting of pipeline/schema, the keys inside `model.init_args=[...]` included."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline import config, schema, stages
from tests.helpers import ROOT
from tests.helpers.pages import PAGES, SHELL, Block, blocks

pytestmark = pytest.mark.e2e  # starts processes (bash, make): `make unit` leaves it out

BLOCKS = [b for page in PAGES for b in blocks(page, SHELL)]
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
# the Makefile's own rules, and the stages it makes a rule each for (pipeline/stages.py declares them)
TARGETS = set(re.findall(r"^([a-z0-9][a-z0-9-]*)\s*:(?!=)", MAKEFILE, re.M)) | {s.name for s in stages.STAGES}
# the variables a user sets on make's command line: those the Makefile reads in its recipes or conditions
VARIABLES = set(re.findall(r"\$\(([A-Z]+)\)", MAKEFILE)) | set(re.findall(r"\$\$([A-Z]+)", MAKEFILE))
KEYS = {key for key, _, _ in schema.walk()}
SEP, END = "\x1f", "\x1e"  # between the words of one recorded `make` call, after each call


def make_calls(page_blocks: list[Block], upto: int) -> list[list[str]]:
    """The words of each `make` in block `upto` of a page, as bash splits and expands them (its variables and
    `${S2/a/b}` included), with the page's earlier assignments made first; nothing but assignments is run."""
    keep = re.compile(r"^\s*(make\s|[A-Za-z_][A-Za-z0-9_]*=)")

    def lines(block: Block) -> list[str]:
        joined = block.body.replace("\\\n", " ")  # a line continued with a backslash is one command
        return [line for line in joined.splitlines() if keep.match(line)]

    earlier = [line for b in page_blocks[:upto] for line in lines(b) if not line.lstrip().startswith("make")]
    script = "\n".join([f"make() {{ printf '%s{SEP}' \"$@\"; printf '{END}'; }}", *earlier, *lines(page_blocks[upto])])
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env={"PATH": os.defpath})
    assert out.returncode == 0, f"{page_blocks[upto].where}: bash cannot read it:\n{out.stderr}"
    return [call.split(SEP)[:-1] for call in out.stdout.split(END)[:-1]]


def problems(words: list[str]) -> list[str]:
    """What a `make` call names that does not exist: a target, a variable, a config, a setting."""
    found = []
    targets = [w for w in words if "=" not in w and not w.startswith("-")]
    found += [f"no make target {t!r}" for t in targets if t not in TARGETS]
    values = dict(w.split("=", 1) for w in words if "=" in w)
    found += [f"the Makefile reads no variable {v}" for v in values if v not in VARIABLES]
    try:
        if "CONFIG" in values:
            (config.recipe_path if "recipe" in targets else config.config_path)(values["CONFIG"])
    except config.ConfigError as e:
        found.append(str(e).split(" (known:")[0])
    try:
        found += unknown_settings(config.split_args(values.get("ARGS", "")))
    except config.ConfigError as e:  # not key=value, an unclosed quote
        found.append(str(e))
    return found


def unknown_settings(overrides: list[str]) -> list[str]:
    """The keys of `overrides` that are no setting, and those inside a list of overrides (model.init_args)."""
    found = []
    for item in config.join_overrides(overrides):
        key, raw = item.split("=", 1)
        if key not in KEYS:
            found.append(f"no setting {key!r} (pipeline/schema)")
        elif key == "model.init_args" and raw.startswith("["):
            found += unknown_settings([w for w in raw.strip("[]").split(",") if w])
    return found


def checked(page: Path) -> list[tuple[str, list[str]]]:
    """(page:line, its problems) for every shell block of a page, run or not."""
    page_blocks = blocks(page, SHELL)
    return [(b.where, [p for call in make_calls(page_blocks, i) for p in problems(call)] + named_configs(b.body))
            for i, b in enumerate(page_blocks)]  # fmt: skip


def named_configs(body: str) -> list[str]:
    """`--config NAME` given to a stage without make (torchrun's command line): NAME a config that exists."""
    found = []
    for name in re.findall(r"--config[ =](\S+)", body):
        try:
            config.config_path(name)
        except config.ConfigError as e:
            found.append(str(e).split(" (known:")[0])
    return found


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_make_command_names_real_targets_configs_and_settings(page: Path) -> None:
    wrong = {where: found for where, found in checked(page) if found}
    assert not wrong, f"shell blocks naming what does not exist (fix the block): {wrong}"


def test_a_wrong_name_is_caught(tmp_path: Path) -> None:
    """The checks above fail on a target, a config, a setting (also inside model.init_args) that do not exist."""
    page = tmp_path / "page.md"
    page.write_text(
        '```bash\nX="trian.lr=1"\nmake trian CONFIG=xlmr-lage ARGS="$X model.init_args=[trian.epochs=2]"\n'
        "torchrun -m pipeline.train --config xlmr\n```\n"
    )
    assert checked(page) == [("page.md:1", ["no make target 'trian'", "no config named 'xlmr-lage'",
                                            "no setting 'trian.lr' (pipeline/schema)",
                                            "no setting 'trian.epochs' (pipeline/schema)",
                                            "no config named 'xlmr'"])]  # fmt: skip
    found = problems(["train", "ARGS=trian.lr=1 model.init_args=[trian.epochs=2]", "GPUZ=2"])
    assert found == ["the Makefile reads no variable GPUZ", "no setting 'trian.lr' (pipeline/schema)",
                     "no setting 'trian.epochs' (pipeline/schema)"]  # fmt: skip


def test_every_shell_block_left_out_says_why() -> None:
    assert BLOCKS, "no shell block found: the pattern no longer matches the pages"
    for block in BLOCKS:
        assert block.not_run is None or block.not_run.strip(), block.where


@pytest.fixture(scope="module")
def checkout_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's tracked files copied (modification times kept), its .venv linked: what a fresh clone holds."""
    stamp = ROOT / ".venv" / ".installed"
    if not stamp.exists() or stamp.stat().st_mtime < (ROOT / "requirements.txt").stat().st_mtime:
        pytest.skip("make venv has not run here: the Makefile would install the requirements first")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip(f"not a git checkout: {listed.stderr.strip()}")
    copy = tmp_path_factory.mktemp("checkout")
    for name in filter(None, listed.stdout.split("\0")):
        if (ROOT / name).is_file():  # a file deleted but not yet committed is listed too
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    (copy / ".venv").symlink_to((ROOT / ".venv").resolve())
    return copy


RUN = [b for b in BLOCKS if b.not_run is None]


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_a_shell_block_runs_as_pasted(block: Block, checkout_copy: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CONFIG", "ARGS", "BLEND", "GPUS")}
    env["OMP_NUM_THREADS"] = "1"
    out = subprocess.run(["bash", "-e", "-c", block.body], cwd=checkout_copy, env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, f"{block.where}: the block fails as pasted:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
