"""Files that survive a crash (pipeline.files): atomic artifacts, one file mode, the disk check, paths that cannot
be read or written, and one run per experiment (the locks). A crash mid-write or a full disk loses nothing."""

from __future__ import annotations

import fcntl
import json
import os
import pathlib
import stat
import time
import types
from pathlib import Path

import pandas as pd
import pytest

from pipeline import baseline, blend, board, cv, data, experiments, files, layout, train
from pipeline.core.foldmodel import save_model
from pipeline.errors import PipelineError
from pipeline.layout import VALID
from tests.helpers import digests, make_cfg, one_line_error, prepare_tokens, stage_args, strict_json
from tests.helpers.tinyrun import TINY, overrides


class Crash(Exception):
    pass


def leftovers(folder: Path) -> list[Path]:
    """Temporary names (".x.tmp-<pid>", ".x.old-<pid>") anywhere under `folder`."""
    return [p for p in folder.rglob(".*")]


def half_then_crash(exc: BaseException):
    """A writer stand-in: write half of what the real writer would, then fail as a crash would."""

    def write(path: Path, payload: bytes) -> None:
        Path(path).write_bytes(payload[: len(payload) // 2])
        raise exc

    return write


CRASHES = [Crash("power cut"), KeyboardInterrupt(), OSError(28, "No space left on device")]
IDS = ["exception", "ctrl-c", "enospc"]


@pytest.mark.parametrize("exc", CRASHES, ids=IDS)
def test_atomic_path_crash_keeps_old_file(tmp_path: Path, exc) -> None:
    target = tmp_path / "weights.bin"
    target.write_bytes(b"old" * 100)
    with pytest.raises(type(exc)), files.atomic_path(target) as tmp:
        half_then_crash(exc)(tmp, b"new" * 100)
    assert target.read_bytes() == b"old" * 100
    assert leftovers(tmp_path) == []


def test_atomic_path_crash_without_old_file_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(Crash), files.atomic_path(tmp_path / "sub" / "a.bin") as tmp:
        half_then_crash(Crash())(tmp, b"x" * 10)
    assert list((tmp_path / "sub").iterdir()) == []


@pytest.mark.parametrize("exc", CRASHES, ids=IDS)
def test_atomic_dir_crash_keeps_old_folder(tmp_path: Path, exc) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "a.npy").write_bytes(b"A" * 50)
    (folder / "meta.json").write_text('{"ok": true}\n')
    before = digests(folder)
    with pytest.raises(type(exc)), files.atomic_dir(folder) as tmp:
        (tmp / "a.npy").write_bytes(b"B" * 50)  # one file complete, the next one half written
        half_then_crash(exc)(tmp / "meta.json", b'{"ok": false}\n')
    assert digests(folder) == before
    assert leftovers(tmp_path) == []


def test_atomic_dir_success_replaces_whole_folder(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / "stale.npy").write_bytes(b"old")
    with files.atomic_dir(folder) as tmp:
        (tmp / "new.npy").write_bytes(b"new")
    assert sorted(p.name for p in folder.iterdir()) == ["new.npy"]
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("exc", CRASHES, ids=IDS)
def test_write_csv_crash_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc) -> None:
    target = tmp_path / "folds.csv"
    files.write_csv(target, pd.DataFrame({"id": ["a"], "text": ["old"]}))
    before = target.read_bytes()
    real = pd.DataFrame.to_csv

    def to_csv(self, path, **kwargs):
        half_then_crash(exc)(path, real(self, **kwargs).encode())

    monkeypatch.setattr(pd.DataFrame, "to_csv", to_csv)
    with pytest.raises(type(exc)):
        files.write_csv(target, pd.DataFrame({"id": list("abcdef"), "text": ["new text, with a comma"] * 6}))
    assert target.read_bytes() == before
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("exc", CRASHES, ids=IDS)
def test_write_json_crash_keeps_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc) -> None:
    target = tmp_path / "data.json"
    files.write_json(target, {"version": 1})
    before = target.read_bytes()

    def write_text(self, text, encoding=None, errors=None, newline=None):
        half_then_crash(exc)(self, text.encode())

    monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    with pytest.raises(type(exc)):
        files.write_json(target, {"version": 2, "rows": list(range(100))})
    monkeypatch.undo()
    assert target.read_bytes() == before
    assert json.loads(target.read_text()) == {"version": 1}
    assert leftovers(tmp_path) == []


def test_write_json_writes_null_for_a_figure_that_is_not_a_number(tmp_path: Path) -> None:
    """An AUC over one class is NaN: the file holds null, which every JSON reader reads, never a bare NaN."""
    import numpy as np

    path = tmp_path / "cv.json"
    figures = {"auc": float("nan"), "brier": np.float64("nan"), "per_lang": {"es": 0.8, "tr": float("inf")}}
    files.write_json(path, {**figures, "corners": [0.7, -float("inf")], "rows": (3, 4), "name": "x"})
    assert strict_json(path.read_text()) == {
        "auc": None, "brier": None, "per_lang": {"es": 0.8, "tr": None}, "corners": [0.7, None], "rows": [3, 4],
        "name": "x",
    }  # fmt: skip


def test_write_csv_round_trips_carriage_returns(tmp_path: Path) -> None:
    """A lone "\\r" in a comment used to be written unquoted, splitting the row when the table was read back."""
    frame = pd.DataFrame(
        {"id": ["a", "b\rc", "d"], "text": ["one\rtwo", 'q"u,o\r\nte', "plain"], "fold": [0, -1, 1], "p": [0.5, 1, 0]}
    )
    files.write_csv(tmp_path / "t.csv", frame)
    back = pd.read_csv(tmp_path / "t.csv", dtype={"id": str, "text": str}, keep_default_na=False)
    assert back.to_dict("list") == frame.to_dict("list")
    files.write_csv(tmp_path / "plain.csv", frame.assign(id=list("abc"), text=list("xyz")))
    assert (tmp_path / "plain.csv").read_text() == "id,text,fold,p\na,x,0,0.5\nb,y,-1,1.0\nc,z,1,0.0\n"  # unchanged


# ---------------------------------------------------------------- one file mode


def test_every_artifact_gets_the_same_file_mode(tmp_path: Path) -> None:
    from tests.helpers.tinymodel import tiny_classifier

    old = os.umask(0o022)
    try:
        cfg = make_cfg(tmp_path)
        fold = tmp_path / "fold0"
        fold.mkdir()
        model = tiny_classifier()

        class NoTokenizer:
            def save_pretrained(self, folder):
                Path(folder, "tokenizer.json").write_text("{}")

        save_model(model, NoTokenizer(), cfg, fold)
        with files.atomic_path(tmp_path / "private.bin") as tmp:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600))  # as mkstemp would make it
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [*fold.iterdir(), tmp_path / "private.bin"]}
        assert "model.safetensors" in modes
        assert set(modes.values()) == {0o644}, modes
    finally:
        os.umask(old)


# ---------------------------------------------------------------- the disk check


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch):
    """shutil.disk_usage, as pipeline.files sees it, reports 10 MiB free."""

    def disk_usage(path):
        return types.SimpleNamespace(total=100 << 30, used=(100 << 30) - (10 << 20), free=10 << 20)

    monkeypatch.setattr(files.shutil, "disk_usage", disk_usage)


def test_check_free_space_is_a_one_line_pipeline_error(tmp_path: Path, full_disk) -> None:
    with pytest.raises(files.DiskFullError) as info:
        files.check_free_space(tmp_path / "not" / "yet", 5 << 30, "the token cache")
    assert isinstance(info.value, PipelineError) and isinstance(info.value, OSError)
    message = str(info.value)
    assert message.startswith("not enough disk space for the token cache in ")
    # what the check asks for (the margin in), and sizes a person reads: never "need about 0.00 GiB, 0.00 GiB free"
    assert "need about 5.56 GiB (a margin included), 10.0 MiB free" in message and "\n" not in message
    with pytest.raises(files.DiskFullError, match=r"need about 65\.1 MiB \(a margin included\), 10\.0 MiB free"):
        files.check_free_space(tmp_path, 1 << 20, "a small file")


def test_sizes_read_as_a_person_reads_them() -> None:
    assert [files.size_text(n) for n in (0, 512, 12 << 10, 340 << 20, int(1.2 * (1 << 30)))] == [
        "0 bytes", "512 bytes", "12.0 KiB", "340.0 MiB", "1.20 GiB"]  # fmt: skip


def test_a_full_disk_while_an_artifact_is_written_is_one_line_and_keeps_the_old_file(tmp_path: Path, capsys) -> None:
    target = tmp_path / "fold0" / "resume.pt"
    target.parent.mkdir()
    target.write_bytes(b"old" * 100)
    with pytest.raises(files.DiskFullError) as info, files.atomic_path(target, need=3 << 30) as tmp:
        half_then_crash(OSError(28, "No space left on device"))(tmp, b"new" * 100)
    message = str(info.value)
    assert message.startswith(f"the disk is full: resume.pt could not be written in {target.parent} (needs about ")
    assert "3.00 GiB, " in message and " free)" in message and "\n" not in message
    assert target.read_bytes() == b"old" * 100 and leftovers(tmp_path) == []
    # through a stage: one line, exit status 2
    from pipeline.errors import run_stage

    def stage() -> None:
        with files.atomic_path(target) as tmp:
            half_then_crash(OSError(28, "No space left on device"))(tmp, b"x" * 10)

    assert run_stage(stage) == 2
    assert one_line_error(capsys).startswith("error: the disk is full: resume.pt could not be written in ")


def test_a_full_disk_in_a_folder_written_at_once_names_the_folder(tmp_path: Path) -> None:
    """np.save on a full disk raises ENOSPC with no file name: the folder being built is named instead."""
    folder = tmp_path / "cache" / "abc123"
    folder.mkdir(parents=True)
    (folder / "a.npy").write_bytes(b"A" * 50)
    before = digests(folder)
    with pytest.raises(files.DiskFullError) as info, files.atomic_dir(folder, need=5 << 20):
        raise OSError(28, "No space left on device")
    assert str(info.value).startswith(
        f"the disk is full: abc123 could not be written in {folder.parent} (needs about 5.0 MiB, "
    )
    assert digests(folder) == before and leftovers(tmp_path / "cache") == []


def test_a_full_disk_said_in_other_words_is_known() -> None:
    class SafetensorError(Exception):  # safetensors' Rust error carries the errno in its text only
        pass

    assert files.is_disk_full(SafetensorError("I/O error: No space left on device (os error 28)"))
    assert files.is_disk_full(OSError(122, "Disk quota exceeded"))
    assert not files.is_disk_full(OSError(13, "Permission denied")) and not files.is_disk_full(ValueError("x"))
    with pytest.raises(PermissionError), files.disk_full(Path("x")):
        raise PermissionError(13, "Permission denied")  # every other error passes as it is


def test_a_full_disk_nobody_named_is_still_one_line(capsys) -> None:
    from pipeline.errors import run_stage

    def stage() -> None:
        raise OSError(28, "No space left on device", "/somewhere/steps.jsonl")

    assert run_stage(stage) == 2
    assert one_line_error(capsys).startswith("error: the disk is full writing /somewhere/steps.jsonl; free some space")


def test_the_lock_is_taken_on_a_full_disk(tmp_path: Path, monkeypatch) -> None:
    """`make data` on a full disk: the lock's note (who holds it) cannot be written, the lock holds all the same,
    and the stage goes on to its own disk check (one line) instead of an OSError from acquire_lock."""
    path = tmp_path / "locks" / "sample.lock"

    def write(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "write", write)
    assert files.acquire_lock(path, "experiment 'sample'", "data") is True
    monkeypatch.undo()
    try:
        with pytest.raises(BlockingIOError):  # held: another open file cannot take it
            fd = os.open(path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            finally:
                os.close(fd)
    finally:
        files.release_lock(path)


def dead_pid() -> int:
    """The id of a process that has ended."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(dead.stdout)


def test_temporaries_of_dead_processes_are_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    pid = dead_pid()
    stale = [tmp_path / f".resume.pt.tmp-{pid}", tmp_path / f".metrics.jsonl.tmp-{pid}"]
    for p in stale:
        p.write_bytes(b"half")
    (tmp_path / f".save-{pid}").mkdir()
    (tmp_path / f".save-{pid}" / "model.safetensors").write_bytes(b"half")
    live = tmp_path / f".resume.pt.tmp-{os.getpid()}"
    live.write_bytes(b"being written")
    other = tmp_path / ".hidden-note"
    other.write_text("not a temporary")
    gone = files.remove_dead_temporaries(tmp_path)
    assert sorted(gone) == sorted([*stale, tmp_path / f".save-{pid}"])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_atomic_dir_killed_between_its_renames_gets_its_old_folder_back(tmp_path: Path) -> None:
    """atomic_dir renames `x` to .x.old-<pid>, then .x.tmp-<pid> to `x`: killed between the two, no `x` is
    left. The cleanup puts the previous folder back instead of removing both temporaries."""
    pid = dead_pid()
    for kind, text in (("old", "previous"), ("tmp", "new")):
        (tmp_path / f".cache.{kind}-{pid}").mkdir()
        (tmp_path / f".cache.{kind}-{pid}" / "a.npy").write_text(text)
    gone = files.remove_dead_temporaries(tmp_path)
    assert gone == [tmp_path / f".cache.tmp-{pid}"]
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]
    assert (tmp_path / "cache" / "a.npy").read_text() == "previous"


def test_a_dead_old_folder_beside_its_replacement_is_removed(tmp_path: Path) -> None:
    """Killed after both renames, before the old copy was removed: `x` is the new folder, the old one goes."""
    pid = dead_pid()
    for name, text in ((f".cache.old-{pid}", "previous"), ("cache", "new")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.npy").write_text(text)
    assert files.remove_dead_temporaries(tmp_path) == [tmp_path / f".cache.old-{pid}"]
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]
    assert (tmp_path / "cache" / "a.npy").read_text() == "new"


def test_check_free_space_passes_with_room(tmp_path: Path) -> None:
    files.check_free_space(tmp_path, 1 << 10, "a small file")


def one_line_disk_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: not enough disk space") and err.count("\n") == 1, err
    return err


def test_data_stage_stops_before_writing_the_sample(tmp_path: Path, full_disk, capsys) -> None:
    code = data.main([f"input_dir={tmp_path / 'input'}", "data.sample_scale=0.2"])
    assert code == 2
    assert "the sample" in one_line_disk_error(capsys)
    assert not (tmp_path / "input").exists() or not [
        p for p in (tmp_path / "input").rglob("*") if p.is_file() and p.suffix != ".lock"
    ]


def test_data_stage_stops_before_writing_the_tables(
    tmp_path: Path, raw_sample: Path, monkeypatch: pytest.MonkeyPatch, full_disk, capsys
) -> None:
    raw_before = digests(raw_sample)
    code = data.main([f"input_dir={tmp_path / 'input'}", "data.source=dir", f"data.dir={raw_sample}"])
    assert code == 2
    assert "the prepared tables" in one_line_disk_error(capsys)
    assert not (tmp_path / "input").exists() or not [
        p for p in (tmp_path / "input").rglob("*") if p.is_file() and p.suffix != ".lock"
    ]
    assert digests(raw_sample) == raw_before


def test_token_cache_stops_before_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    cfg = make_cfg(tmp_path, "model.max_length=32")
    data.prepare(cfg, log=lambda *a: None)
    monkeypatch.setattr(files.shutil, "disk_usage", lambda p: types.SimpleNamespace(total=1, used=1, free=10 << 20))
    with pytest.raises(files.DiskFullError, match="the token cache"):
        prepare_tokens(cfg, log=lambda *a: None)
    cache = layout.cache_root(cfg)
    assert not cache.exists() or list(cache.iterdir()) == []
    assert not (layout.prepared_dir(cfg) / "tokens.json").exists()
    argv = [f"input_dir={tmp_path / 'input'}", "data.sample_scale=0.2", "model.tiny.vocab=1000", "model.max_length=32"]
    assert data.main(argv) == 2  # tokens.main is gone: `make data` builds the token cache
    assert "the token cache" in one_line_disk_error(capsys)


def test_train_stops_before_writing_a_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    args = ["--config", "sample", *overrides(tmp_path), *TINY]
    assert data.main(args) == 0
    capsys.readouterr()
    # the tiny model needs a few MB; the check keeps a 64 MiB margin, so 1 MiB free stops it
    monkeypatch.setattr(files.shutil, "disk_usage", lambda p: types.SimpleNamespace(total=1, used=1, free=1 << 20))
    assert train.main(args) == 2
    assert "fold 0's resume state and weights" in one_line_disk_error(capsys)
    exp = tmp_path / "models" / "sample"
    assert not [p for p in exp.rglob("*") if p.is_file() and p.name != "pipeline.yaml"]


# ---------------------------------------------------------------- paths and permissions


def test_unwritable_and_unreadable_paths(tmp_path: Path, raw_sample: Path, monkeypatch, capsys) -> None:
    denied = {tmp_path / "models", raw_sample / VALID}
    # the seam: this suite may run as root, whom os.access never refuses
    monkeypatch.setattr(files, "_access", lambda p, mode: Path(p) not in denied)
    (tmp_path / "models").mkdir()
    assert train.main(stage_args(tmp_path, f"models_dir={tmp_path / 'models'}")) == 2
    assert "the models folder (models_dir) cannot be written (permission denied)" in one_line_error(capsys)
    # every stage that writes under models/ says so before it reads anything
    for stage in (cv, board, baseline):
        assert stage.main(stage_args(tmp_path, f"models_dir={tmp_path / 'models'}")) == 2, stage.__name__
        assert "cannot be written (permission denied)" in one_line_error(capsys), stage.__name__
    assert blend.main([*stage_args(tmp_path, f"models_dir={tmp_path / 'models'}"), "--members", "a b"]) == 2
    assert "cannot be written (permission denied)" in one_line_error(capsys)
    assert data.main(stage_args(tmp_path, "data.source=dir", f"data.dir={raw_sample}")) == 2
    line = one_line_error(capsys)
    assert line.startswith(f"error: {raw_sample / VALID}: the competition folder (data.dir) cannot be read")
    (tmp_path / "input").mkdir()
    denied.add(tmp_path / "input")
    assert data.main(stage_args(tmp_path)) == 2
    assert one_line_error(capsys).startswith(f"error: {tmp_path / 'input'}: the input folder (input_dir) cannot be")


# ---------------------------------------------------------------- one run per experiment


def hold_from_elsewhere(path: Path, text: str) -> int:
    """A lock held through another open file, as another process would hold it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, text.encode())
    return fd


def test_second_run_on_the_same_experiment_stops_at_once(tmp_path: Path, capsys, monkeypatch) -> None:
    cfg = make_cfg(tmp_path)
    fd = hold_from_elsewhere(layout.lock_path(cfg), "pid 4242 (train: python -m pipeline.train)\n")
    try:
        start = time.perf_counter()
        assert data.main(stage_args(tmp_path)) == 2
        line = one_line_error(capsys)
        assert line == (
            "error: experiment 'sample' is in use by pid 4242 (train: python -m pipeline.train); "
            f"wait for it to finish or stop it (lock: {layout.lock_path(cfg)})"
        )
        assert time.perf_counter() - start < 5
        assert not (tmp_path / "input" / "prepared").exists()
        assert train.main(stage_args(tmp_path)) == 2
        assert "is in use by pid 4242" in one_line_error(capsys)
        # the ranks of one torchrun group do not refuse each other: only rank 0 locks
        monkeypatch.setenv("RANK", "1")
        assert files.acquire_lock(layout.lock_path(cfg), "experiment") is False
        monkeypatch.delenv("RANK")
        with experiments.experiment_lock(make_cfg(tmp_path, "name=another"), "data"):  # other experiments are free
            pass
    finally:
        os.close(fd)


def test_trains_of_other_folds_run_side_by_side(tmp_path: Path, capsys) -> None:
    """Another process trains fold 1 (the experiment's lock shared, fold 1's own): this one may train fold 0
    beside it, while a second train of fold 1, `make data` and `make predict` stop at once, naming it."""
    cfg = make_cfg(tmp_path)
    holder = "pid 4242 (train: python -m pipeline train)\n"
    layout.lock_path(cfg).parent.mkdir(parents=True)
    shared = os.open(layout.lock_path(cfg), os.O_RDWR | os.O_CREAT)
    fcntl.flock(shared, fcntl.LOCK_SH | fcntl.LOCK_NB)
    os.write(shared, holder.encode())
    fold1 = hold_from_elsewhere(layout.fold_lock_path(cfg, 1), holder)
    try:
        experiments.hold_fold_locks(cfg, [0])  # fold 0 beside fold 1
        for path in (layout.lock_path(cfg), layout.fold_lock_path(cfg, 0)):
            files.release_lock(path)
        assert train.main(stage_args(tmp_path, "train.folds=[1]")) == 2
        assert one_line_error(capsys) == (
            f"error: fold 1 of experiment 'sample' is in use by {holder.strip()}; wait for it to finish or stop "
            f"it (lock: {layout.fold_lock_path(cfg, 1)})"
        )
        assert train.main(stage_args(tmp_path)) == 2  # every fold: fold 1 among them
        assert "fold 1 of experiment 'sample' is in use by pid 4242" in one_line_error(capsys)
        assert data.main(stage_args(tmp_path)) == 2  # the tables the folds read are not replaced under them
        assert "experiment 'sample' is in use by pid " in one_line_error(capsys)  # the latest shared holder
    finally:
        os.close(shared)
        os.close(fold1)
        for path in (layout.lock_path(cfg), layout.fold_lock_path(cfg, 0)):
            files.release_lock(path)


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path)
    path = layout.lock_path(cfg)
    path.parent.mkdir(parents=True)
    path.write_text("pid 999999 (data: killed with -9)\n")  # its holder died: the kernel released the flock
    with experiments.experiment_lock(cfg, "data"):
        assert path.read_text().startswith(f"pid {os.getpid()} (data: ")
        with experiments.experiment_lock(cfg, "train"):  # the same process again: no self-refusal
            pass
    assert path.read_text() == ""


# ---------------------------------------------------------------- durability: the bytes reach the disk first


@pytest.mark.parametrize(
    "write",
    [
        lambda p: files.write_json(p, {"auc": 0.9}),
        lambda p: files.write_csv(p, pd.DataFrame({"id": ["a"], "toxic": [1e-7]})),
        lambda p: files.atomic_write_text(p, "text\n"),
    ],
    ids=["json", "csv", "text"],
)
def test_an_artifact_is_written_and_fsynced_before_it_is_renamed(tmp_path: Path, monkeypatch, write) -> None:
    """A power cut after the rename but before the page cache reached the disk would leave a named, empty file:
    the temporary's bytes are fsynced, all of them, before the rename gives it the final name."""
    events: list[tuple] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")  # which file the descriptor is, and what it holds now
        events.append(("fsync", name, Path(name).read_bytes()))
        real_fsync(fd)

    def replace(src, dst) -> None:
        events.append(("replace", str(src), str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "out" / "artifact"
    write(path)
    final = path.read_bytes()
    renames = [e for e in events if e[0] == "replace" and e[2] == str(path)]
    assert len(renames) == 1, events
    tmp = renames[0][1]
    synced = [i for i, e in enumerate(events) if e[0] == "fsync" and e[1] == tmp]
    assert synced, f"the temporary {tmp} was never fsynced: {events}"
    assert synced[-1] < events.index(renames[0]), f"fsync after the rename: {events}"
    assert events[synced[-1]][2] == final and final  # every byte written before the fsync, none after
