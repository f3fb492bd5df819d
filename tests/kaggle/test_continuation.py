"""Tests for pipeline/kaggle/continuation.py: which earlier version a continued run attaches (through a fake API,
before anything is sent) and what the notebook makes of the mounted output. The notebook runs themselves are in
tests/test_kernel.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline import kernel, layout
from pipeline.kaggle import continuation
from pipeline.kaggle.plan import KernelError
from tests.helpers.fake_kaggle import FakeKaggleApi
from tests.helpers.kernels import make_cfg
from tests.helpers.pickles import write_crafted_state


@pytest.fixture(autouse=True)
def no_credentials(no_kaggle_env: Path) -> Path:
    return no_kaggle_env


def record(session: str, complete=(), cut=(), processes: int = 2) -> bytes:
    folds = {"sample": {"complete": list(complete), "cut": list(cut)}}
    return json.dumps({"session": session, "processes": processes, "experiments": folds}).encode()


def pushed(api: FakeKaggleApi) -> dict:
    return next(kw for name, kw in api.calls if name == "kernels_push")


def test_a_continued_run_attaches_the_newest_version_that_finished_with_folds(tmp_path: Path, capsys) -> None:
    """Version 3 failed in its first minute (no record, no folds), version 2 cut fold 1: the push attaches version 2's
    output, pinned, and the code file carries its session id for the notebook to check the mount against."""
    api = FakeKaggleApi()
    api.current_version, api.kernel_state, api.failure_message = 3, "ERROR", "ModuleNotFoundError"
    api.outputs = {}  # version 3: nothing
    api.kernel_versions = {2: {"state": "CANCEL_ACKNOWLEDGED", "outputs": {
        continuation.RECORD: record("s2", complete=[0], cut=[1]),
        "models/sample/fold0/done.json": b'{"fold": 0, "digest": "d"}',
        "models/sample/fold0/model.safetensors": b"weights, never downloaded here",
    }}}  # fmt: skip
    result = kernel.build_and_push(make_cfg(tmp_path, "kaggle.continue_from=self"), api=api)
    assert result["metadata"]["kernel_sources"] == ["tester/jigsaw-sample/2"]
    assert pushed(api)["metadata"]["kernel_sources"] == ["tester/jigsaw-sample/2"]
    script = (result["kernel_dir"] / "jigsaw-sample.py").read_text()
    assert "CONTINUES = 's2'" in script and "run(CODE_DATASET, CONFIG, CODE_DIGEST, CONTINUES)" in script
    out = capsys.readouterr().out
    assert "tester/jigsaw-sample/3 (ended error: ModuleNotFoundError) left no folds of sample" in out
    assert "continuing from tester/jigsaw-sample/2 (ended cancel_acknowledged): sample: 0 complete; 1 cut off" in out
    downloads = [kw["file_pattern"] for name, kw in api.calls if name == "kernels_output"]
    assert downloads and all("safetensors" not in p and "resume" not in p for p in downloads)  # small files only


def test_a_continued_run_is_refused_while_a_version_runs(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.kernel_state = "RUNNING"
    with pytest.raises(KernelError, match="is running: a push now would start a second GPU session beside it"):
        kernel.build_and_push(make_cfg(tmp_path, "kaggle.continue_from=self"), api=api)
    assert [name for name, _ in api.calls] == ["kernels_status"]  # nothing uploaded, nothing pushed


def test_a_continued_run_with_no_folds_anywhere_is_refused(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.current_version, api.outputs = 2, {"submission.csv": b"id,toxic\n"}
    api.kernel_versions = {1: {"state": "COMPLETE", "outputs": {}}}
    with pytest.raises(KernelError, match="versions 1-2 of tester/jigsaw-sample left no folds of sample"):
        kernel.build_and_push(make_cfg(tmp_path, "kaggle.continue_from=self"), api=api)
    assert "kernels_push" not in [name for name, _ in api.calls] and "dataset_create_new" not in str(api.calls)


def test_an_older_output_without_a_record_counts_by_its_done_files(tmp_path: Path) -> None:
    """Outputs of sessions before the record existed: their done.json files say which folds are complete."""
    api = FakeKaggleApi()
    api.outputs = {"models/sample/fold0/done.json": b'{"fold": 0, "digest": "d"}'}
    result = kernel.build_and_push(make_cfg(tmp_path, "kaggle.continue_from=someone/other-run"), api=api)
    assert result["metadata"]["kernel_sources"] == ["someone/other-run"]  # no version known: the latest, checked


def test_a_named_version_is_taken_as_it_is(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.kernel_versions = {4: {"state": "COMPLETE", "outputs": {continuation.RECORD: record("s4", complete=[0])}}}
    result = kernel.build_and_push(make_cfg(tmp_path, "kaggle.continue_from=tester/jigsaw-sample/4"), api=api)
    assert result["metadata"]["kernel_sources"] == ["tester/jigsaw-sample/4"]


def test_the_last_pushed_version_is_where_the_search_starts_without_a_listing(tmp_path: Path) -> None:
    api = FakeKaggleApi()  # kernels_list does not show the kernel
    api.kernel_versions = {5: {"state": "COMPLETE", "outputs": {continuation.RECORD: record("s5", cut=[0])}}}
    continuation.note_push(tmp_path / "kernel" / "jigsaw-sample", "tester/jigsaw-sample", 5)
    continuation.note_push(tmp_path / "kernel" / "jigsaw-sample", "tester/jigsaw-sample-2", 9)  # another kernel
    result = kernel.build_and_push(make_cfg(tmp_path, "kaggle.continue_from=self"), api=api)
    assert result["metadata"]["kernel_sources"] == ["tester/jigsaw-sample/5"]


# ---------------------------------------------------------------------------------------------
# The mounted output, in the notebook


def earlier(tmp_path: Path, session: str = "s1", processes: int = 2) -> Path:
    mount = tmp_path / "mount"
    (mount / "models" / "sample" / "fold0").mkdir(parents=True)
    (mount / "models" / "sample" / "fold0" / layout.DONE).write_text(json.dumps({"fold": 0, "digest": "d",
                                                                                 "world": processes}))  # fmt: skip
    (mount / "models" / "sample" / "fold0" / layout.WEIGHTS).write_bytes(b"w" * 100)
    (mount / "models" / "sample" / "fold1").mkdir()
    (mount / "models" / "sample" / "fold1" / layout.RESUME).write_bytes(b"state")
    (mount / continuation.RECORD).write_bytes(record(session, [0], [1], processes))
    return mount


def test_the_mount_must_be_the_version_checked_and_hold_folds(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, "kaggle.continue_from=self")
    mount = earlier(tmp_path)
    assert continuation.check_mounted(cfg, mount, "s1")["processes"] == 2
    assert continuation.check_mounted(cfg, mount, "")["session"] == "s1"  # a dry run's push: no id to compare
    with pytest.raises(KernelError, match="is not the version `make kernel` checked .session s1, expected s9"):
        continuation.check_mounted(cfg, mount, "s9")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(KernelError, match="holds no folds of sample .* starting over would not be what was asked"):
        continuation.check_mounted(cfg, empty, "")


def test_the_earlier_world_comes_from_the_folds(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, "kaggle.continue_from=self")
    mount = earlier(tmp_path, processes=2)
    assert continuation.earlier_world(mount, cfg, continuation.read_record(mount)) == 2
    (mount / "models" / "sample" / "fold0" / layout.DONE).write_text('{"fold": 0, "digest": "d", "world": 1}')
    with pytest.raises(KernelError, match="trained by 1 and 2 processes: they are not one experiment"):
        continuation.earlier_world(mount, cfg, continuation.read_record(mount))


def test_a_crafted_resume_state_in_the_mounted_output_runs_no_code(tmp_path: Path) -> None:
    """The processes of a cut fold, read from a resume state another user's output may hold: loaded safely (no
    code runs); what it is not is refused where the fold loads it (pipeline.core.resume.read_state)."""
    state = tmp_path / "mount" / "models" / "sample" / "fold1" / layout.RESUME
    write_crafted_state(state, tmp_path / "ran")
    assert continuation.resume_world(state) == 1
    assert not (tmp_path / "ran").exists()


def test_earlier_folds_are_linked_not_copied(tmp_path: Path) -> None:
    """Weights and resume states are read in place from the mounted output (18 GB for five XLM-R large folds)."""
    cfg = make_cfg(tmp_path, "kaggle.continue_from=self")
    mount = earlier(tmp_path)
    said = continuation.link_folds(mount, cfg)
    assert said == ["sample fold 0 from the earlier session (complete)",
                    "sample fold 1 from the earlier session (with a resume state)"]  # fmt: skip
    fold0, fold1 = layout.fold_dir(cfg, 0), layout.fold_dir(cfg, 1)
    assert (fold0 / layout.WEIGHTS).is_symlink() and (fold1 / layout.RESUME).is_symlink()
    assert not (fold0 / layout.DONE).is_symlink() and (fold0 / layout.DONE).read_text().startswith('{"fold": 0')
