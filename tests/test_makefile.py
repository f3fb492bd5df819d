"""The Makefile and `python -m pipeline`: what a user types reaches the stages as they meant it, and nothing else.

CONFIG, ARGS and BLEND reach the stages through the environment as single quoted words (the shell never
splits or runs what they hold, nor does make expand it), GPUS must be a whole number from 1, and Ctrl-C while
a stage still loads its libraries is one line, like Ctrl-C later.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # starts processes: `make unit` leaves it out (docs/testing.md)

ROOT = Path(__file__).resolve().parents[1]


def make(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    # the venv's stamp is up to date for `make` in CI (make venv runs first); the stages run from .venv
    return subprocess.run(["make", "-s", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(autouse=True)
def venv_ready() -> None:
    stamp = ROOT / ".venv" / ".installed"
    if not stamp.exists() or stamp.stat().st_mtime < (ROOT / "requirements.txt").stat().st_mtime:
        pytest.skip("make venv has not run here: the Makefile would install the requirements first")


def test_args_reach_the_stage_as_one_word_and_never_run(tmp_path: Path) -> None:
    victim = tmp_path / "afile"
    # unquoted in the recipe, the shell would end the command at `;` and run `touch <path>`
    result = make("cv", f"ARGS=models_dir={tmp_path} name=x;touch {victim}")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: override '{victim}' is not key=value"), result.stderr
    assert not victim.exists()
    result = make("cv", f"CONFIG=sample;touch {victim}")
    assert result.stderr.startswith("error: no config named 'sample;touch "), result.stderr
    assert not victim.exists()


@pytest.mark.parametrize("origin", ["command line", "environment"])
def test_make_expands_nothing_in_the_variables(origin: str, tmp_path: Path) -> None:
    """`$(shell ...)` in ARGS, CONFIG, BLEND or GPUS is text, not a command make runs, and a `$` reaches the stage."""
    victim = tmp_path / "afile"
    values = {name: f"x $(shell touch {victim})" for name in ("CONFIG", "ARGS", "BLEND", "GPUS")}
    if origin == "command line":
        make("help", *(f"{name}={value}" for name, value in values.items()))
    else:
        subprocess.run(["make", "-s", "help"], cwd=ROOT, env={**os.environ, **values}, capture_output=True, timeout=300)
    assert not victim.exists()
    # make would drop `$b` (an empty variable) and the stage would see `a`
    result = make("cv", f"ARGS=models_dir={tmp_path} a$b")
    assert result.stderr.startswith("error: override 'a$b' is not key=value"), result.stderr


def test_make_venv_installs_a_pinned_pip() -> None:
    """`make venv` pins pip like every requirement: an unpinned upgrade takes whatever the index serves that day."""
    dry = make("-n", "-W", "requirements.txt", "venv")  # -W: as if requirements.txt had changed; -n: nothing run
    assert re.search(r"-m pip install --quiet pip==\d+\.\d+(\.\d+)?\n", dry.stdout), dry.stdout
    assert "--upgrade" not in dry.stdout


@pytest.mark.parametrize("target", ["train", "predict"])
@pytest.mark.parametrize("gpus", ["0", "abc", "-1", "1.5", ""])
def test_gpus_must_be_a_whole_number_from_one(gpus: str, target: str, tmp_path: Path) -> None:
    result = make(target, f"GPUS={gpus}", f"ARGS=input_dir={tmp_path} models_dir={tmp_path} submissions_dir={tmp_path}")
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: GPUS={gpus}: the number of processes"), result.stderr


def test_predict_on_two_processes_runs_two_and_says_an_error_once(tmp_path: Path) -> None:
    """`make predict GPUS=2` shares the folds between two processes (through the launcher), and an error is one
    line, as from one process."""
    dry = make("-n", "predict", "GPUS=2")
    assert '-m pipeline.core.launcher "$GPUS" predict' in dry.stdout, dry.stdout  # one process a device
    paths = f"input_dir={tmp_path / 'in'} models_dir={tmp_path / 'models'} submissions_dir={tmp_path / 'subs'}"
    result = make("predict", "GPUS=2", f"ARGS={paths} train.device=cpu")
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]  # make's own
    assert lines == [f"error: {tmp_path / 'in' / 'prepared' / 'sample'}: no prepared data; run `make data "
                     "CONFIG=...` with the same config first"], result.stderr  # fmt: skip


def test_ctrl_c_while_a_stage_loads_is_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "pipeline", "train", "--config", "sample", f"input_dir={tmp_path}"]
    # Ctrl-C as a terminal delivers it, even where the tests run in the background (`make test &` ignores it)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    # torch takes seconds to import: signal once its libraries are being mapped, whatever the machine's load
    maps, start = Path(f"/proc/{proc.pid}/maps"), time.monotonic()
    while "libtorch" not in maps.read_text() and time.monotonic() - start < 60:
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err.strip() == "interrupted", err


def test_python_m_pipeline_names_the_stages() -> None:
    result = subprocess.run([sys.executable, "-m", "pipeline", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.startswith("usage: python -m pipeline {data,mlm,stage1,train,")
