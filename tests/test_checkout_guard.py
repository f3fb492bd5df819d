"""The guard of tests/conftest.py: a test that reads or writes the checkout's own folders is named, with the paths,
whether it opened a file itself or a child process changed one; a test that stays under tmp_path is not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers.checkout import Watch


def test_a_read_a_listing_and_a_write_are_each_seen(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "sample").mkdir(parents=True)
    (models / "sample" / "eta.json").write_text("{}")
    watch = Watch(roots=(models,))
    watch.start()
    (models / "sample" / "eta.json").read_text()
    list((models / "sample").iterdir())
    (tmp_path / "elsewhere.txt").write_text("x")  # outside the watched folders: nobody's business
    touched = watch.stop()
    assert [t.split(" ")[0] for t in touched] == ["open", "os.listdir"]
    assert touched[0].endswith("models/sample/eta.json")


def test_a_child_process_that_writes_is_seen_on_disk(tmp_path: Path) -> None:
    inputs = tmp_path / "input"
    inputs.mkdir()
    watch = Watch(roots=(inputs,))
    watch.start()
    lock = inputs / "locks" / "sample.lock"
    code = f"import pathlib; p = pathlib.Path({str(lock)!r}); p.parent.mkdir(); p.write_text('')"
    subprocess.run([sys.executable, "-c", code], check=True)
    touched = watch.stop()
    assert all(t.startswith("changed on disk: ") for t in touched)
    assert [t.split("input/")[-1] for t in touched] == ["locks", "locks/sample.lock"]


def test_nothing_touched_is_nothing_said(tmp_path: Path) -> None:
    watch = Watch(roots=(tmp_path / "models",))
    watch.start()
    (tmp_path / "other").mkdir()
    assert watch.stop() == []
