"""Tests for pipeline.kernel (`make kernel`, `make kernel-output`, `make kernel-status`). No test reaches the network.

The kaggle API is replaced at the seam (the functions of pipeline/kaggle/ take `api=`) by FakeKaggleApi,
which records every call. The notebook's code file itself is run in a subprocess against a simulated
Kaggle layout: temporary folders stand for /kaggle/input (the sample competition, the code bundle as
Kaggle mounts it, a tiny model folder) and /kaggle/working, sockets are disabled, and the submission
must appear at <working>/submission.csv.

The plan and metadata checks are in tests/kaggle/test_plan.py, the code bundle in tests/kaggle/test_bundle.py,
Kaggle's folders and mounts in tests/kaggle/test_session.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import config, cv, data, kernel, layout, notebook, predict, train
from pipeline.inputs import sample
from pipeline.kaggle import client, datasets, kernels, launch, output, session
from pipeline.kaggle import clock as kaggle_clock
from pipeline.kaggle import plan as kaggle_plan
from pipeline.kaggle.client import KaggleError
from pipeline.kaggle.plan import KernelError
from tests.helpers import fake_kaggle, under
from tests.helpers.fake_kaggle import FakeKaggleApi, http_error, run_python
from tests.helpers.kernels import COMPETITION, dry, make_cfg

pytestmark = pytest.mark.e2e  # starts processes: `make unit` leaves it out (docs/testing.md)

REPO = Path(__file__).resolve().parents[1]
# Small and fast: a 2-layer, 32-wide XLM-R, 2 folds, 1 epoch, short sequences.
SMALL = (
    "data.folds=2",
    "train.epochs=1",
    "train.micro_batch=32",
    "train.accumulation=1",
    "train.eval_batch=128",
    "model.max_length=32",
    "model.tiny.layers=2",
    "model.tiny.hidden=32",
    "model.tiny.heads=2",
    "model.tiny.intermediate=64",
    "model.tiny.vocab=1000",
    "train.precision=fp32",  # bf16 autocast is slow on CPU; the GPU run keeps auto
    "data.english_negatives=100",
    "data.extra_files=[]",  # the real competition has no translated-train.csv
    "train.device=cpu",  # without it a notebook that sees no GPU stops at once
)
LAYOUT_SCALE = 0.1  # the sample competition under the simulated /kaggle/input: 90 validation, 90 test rows


@pytest.fixture(autouse=True)
def no_credentials(no_kaggle_env: Path) -> Path:
    """Every test starts with no Kaggle credentials and an empty HOME."""
    return no_kaggle_env


# ---------------------------------------------------------------------------------------------
# The module and the paths


def test_import_is_light(tmp_path: Path) -> None:
    result = run_python(
        "import pipeline.kernel, sys; print(sorted(m for m in ('kaggle', 'torch') if m in sys.modules))", tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"  # nothing runs at import, kaggle is reached only through the seam


# ---------------------------------------------------------------------------------------------
# Pushing, through the fake API


def test_dry_run_sends_nothing_and_says_what_would(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["--config", "sample", f"kaggle.dir={tmp_path / 'kernel'}", "kaggle.dry_run=true", "data.extra_files=[]",
            f"input_dir={tmp_path / 'input'}", f"models_dir={tmp_path / 'models'}"]  # fmt: skip
    assert kernel.main(argv) == 0
    out = capsys.readouterr().out
    assert "your-kaggle-name" in out  # no credentials: a placeholder user, said so
    assert "nothing sent" in out and "make kernel-status CONFIG=sample" in out
    assert "make kernel-output CONFIG=sample" in out and "files," in out  # the bundle's size is printed
    assert (tmp_path / "kernel" / "jigsaw-sample" / "notebook" / "kernel-metadata.json").is_file()


@pytest.mark.parametrize("dry_run", [True, False])
def test_each_slow_step_of_a_push_is_announced_by_a_line_before_it(tmp_path: Path, monkeypatch, capsys, dry_run):
    """The first line says what is starting; the time plan (counting the tables), the code bundle and (a
    push) the question to Kaggle and the upload each come after a line that names them, not in silence."""
    from pipeline.kaggle import bundle, hours

    before: dict[str, str] = {}

    def spy(name, real):
        def step(*args, **kwargs):
            printed = capsys.readouterr().out
            print(printed, end="")  # kept for the assertions below
            before.setdefault(name, printed.rstrip("\n").rsplit("\n", 1)[-1])  # its first call
            return real(*args, **kwargs)

        return step

    monkeypatch.setattr(kernel, "make_plan", spy("plan", kernel.make_plan))
    monkeypatch.setattr(hours, "plan_time", spy("time", hours.plan_time))
    monkeypatch.setattr(kernel, "write_bundle", spy("bundle", bundle.write_bundle))
    monkeypatch.setattr(output, "ended_state", spy("state", output.ended_state))
    monkeypatch.setattr(kernel, "ended_state", spy("state", output.ended_state))
    cfg = dry(tmp_path) if dry_run else make_cfg(tmp_path)
    kernel.build_and_push(cfg, api=None if dry_run else FakeKaggleApi())
    assert before["plan"].startswith("kernel: planning the notebook of sample: settings, disk, time and memory")
    assert before["time"] == "kernel: counting the rows and tokens of the competition's tables, for the time plan"
    assert before["bundle"].startswith("kernel: writing the code bundle in ")
    if not dry_run:
        assert (
            before["state"] == "kernel: asking Kaggle whether tester/jigsaw-sample runs, then uploading "
            "tester/jigsaw-sample-code"
        )


@pytest.mark.parametrize("flag", [[], ["--output"], ["--status"]])
def test_a_kernel_folder_that_is_a_file_is_one_line(flag: list[str], capsys: pytest.CaptureFixture) -> None:
    argv = ["--config", "sample", "kaggle.dir=/dev/null", "kaggle.dry_run=true", "data.extra_files=[]", *flag]
    assert kernel.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: /dev/null: is a file, but the kernel folder (kaggle.dir) must be a folder")
    assert err.count("\n") == 1


def test_first_push_creates_the_dataset_then_pushes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    api = FakeKaggleApi()
    api.dataset_states = ["pending"]  # created, then ready at the second poll
    cfg = make_cfg(tmp_path)
    sleeps = []
    orig = datasets.wait_dataset_ready
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datasets, "wait_dataset_ready", lambda ref, api: orig(ref, api, sleep=sleeps.append))
        result = kernel.build_and_push(cfg, api=api)
    names = [name for name, _ in api.calls]
    # the kernel's state (not running); the bundle's version before (none: 404), exists?, then the version the
    # notebook pins, then polled until ready
    assert names == ["kernels_status", *["dataset_status"] * 2, "dataset_create_new", *["dataset_status"] * 3,
                     "kernels_push"]  # fmt: skip
    create = api.calls[3][1]
    assert create["dir_mode"] == "zip" and create["public"] is False
    assert create["sent"] == ["kernel-config.yaml", "pipeline.zip"]  # subfolders travel zipped
    push = api.calls[-1][1]
    assert push["folder"] == str(result["kernel_dir"]) and push["metadata"]["id"] == "tester/jigsaw-sample"
    assert push["metadata"]["enable_internet"] is False and push["metadata"]["enable_gpu"] is True
    assert len(sleeps) == 1
    out = capsys.readouterr().out
    assert "https://www.kaggle.com/code/tester/jigsaw-sample" in out
    assert "make kernel-status CONFIG=sample" in out and "make kernel-output CONFIG=sample" in out


def test_second_push_adds_a_version(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.add_bundle("tester/jigsaw-sample-code")
    kernel.build_and_push(make_cfg(tmp_path, "kaggle.timeout=3600"), api=api)
    names = [name for name, _ in api.calls]
    # exists: then it must hold a bundle (its files listed) before a version is added to it
    assert names == ["kernels_status", *["dataset_status"] * 2, "dataset_list_files", "dataset_create_version",
                     *["dataset_status"] * 2, "kernels_push"]  # fmt: skip
    assert api.calls[4][1]["dir_mode"] == "zip"
    assert api.calls[-1][1]["timeout"] == "3600"
    assert api.calls[-1][1]["metadata"]["dataset_sources"][0] == "tester/jigsaw-sample-code/8"  # 7 before


def test_no_push_while_the_latest_version_still_runs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A plain push (no kaggle.continue_from) while the kernel's latest version is queued or runs would start a second
    GPU session beside it: refused in one line before anything is sent. A kernel never pushed (404) is pushed."""
    for state in ("RUNNING", "QUEUED"):
        api = FakeKaggleApi()
        api.kernel_state = state
        with pytest.raises(KernelError, match=f"kernel tester/jigsaw-sample is {state.lower()}: a push now would "
                                              "start a second GPU session beside it; wait for it to end"):  # fmt: skip
            kernel.build_and_push(make_cfg(tmp_path), api=api)
        assert [name for name, _ in api.calls] == ["kernels_status"]  # nothing uploaded, nothing pushed
    api = FakeKaggleApi()
    api.fail["kernels_status"] = http_error(404, "Not Found")  # the first push of this kernel
    assert kernel.build_and_push(make_cfg(tmp_path), api=api)["version"] == 1
    assert api.calls[0] == ("kernels_status", {"kernel": "tester/jigsaw-sample"})
    api = FakeKaggleApi()
    api.fail["kernels_status"] = http_error(500, "Server Error")  # not known whether it runs: nothing sent
    with pytest.raises(KaggleError, match="Kaggle answered 500"):
        kernel.build_and_push(make_cfg(tmp_path), api=api)
    assert "kernels_push" not in [name for name, _ in api.calls]
    kernel.build_and_push(dry(tmp_path))
    assert "a push asks Kaggle first whether tester/jigsaw-sample still runs" in capsys.readouterr().out


def test_a_first_push_answered_403_is_a_first_push(tmp_path: Path) -> None:
    """Kaggle may answer kernels_status for a kernel that does not exist with 403 as well as 404 (kaggle 2.2.5 raises
    its "most likely a wrong kernel slug" ValueError): the user's own kernel list, searched by the slug, decides. Not
    there: the first push. There: a real refusal, said as one, and nothing is sent."""
    api = FakeKaggleApi()
    api.exists, api.missing_status = False, 403
    assert kernel.build_and_push(make_cfg(tmp_path), api=api)["version"] == 1
    assert api.calls[:2] == [("kernels_status", {"kernel": "tester/jigsaw-sample"}),
                             ("kernels_list", {"search": "jigsaw-sample", "user": "tester", "mine": True})]  # fmt: skip
    assert api.calls[-1][0] == "kernels_push"
    api = FakeKaggleApi()
    api.fail["kernels_status"], api.current_version = fake_kaggle.kernel_denied("tester/jigsaw-sample"), 3
    with pytest.raises(KaggleError, match=r"kernel tester/jigsaw-sample: access denied \(403\)"):
        kernel.build_and_push(make_cfg(tmp_path), api=api)
    assert [name for name, _ in api.calls] == ["kernels_status", "kernels_list"]  # listed: nothing sent
    api = FakeKaggleApi()
    api.exists, api.missing_status = False, 403
    with pytest.raises(KaggleError, match=r"kernel someone/jigsaw-sample: access denied \(403\)"):  # not the user's
        kernel.build_and_push(make_cfg(tmp_path, "kaggle.user=someone"), api=api)
    assert "kernels_push" not in [name for name, _ in api.calls]
    api = FakeKaggleApi()
    api.fail["kernels_status"] = fake_kaggle.kernel_denied("tester/jigsaw-sample", 401)  # credentials: no listing
    with pytest.raises(KaggleError, match=r"rejected the credentials \(401\)"):
        kernel.build_and_push(make_cfg(tmp_path), api=api)
    assert [name for name, _ in api.calls] == ["kernels_status"]


def test_a_version_saved_without_running_does_not_block_a_push(tmp_path: Path, capsys) -> None:
    """NEW_SCRIPT (a version pushed with no_run, or a Quick Save on the website) runs nothing: a push goes through,
    a continued run looks past it to the version before, and kernel-output says it has no output."""
    api = FakeKaggleApi()
    api.kernel_state = "NEW_SCRIPT"
    assert kernel.build_and_push(make_cfg(tmp_path), api=api)["version"] == 1
    assert api.calls[-1][0] == "kernels_push"
    api = FakeKaggleApi()
    api.kernel_state, api.current_version = "NEW_SCRIPT", 2
    api.kernel_versions = {
        1: {
            "state": "ERROR",
            "outputs": {
                "kernel-session.json": json.dumps(
                    {"session": "abc", "processes": 1, "experiments": {"sample": {"complete": [0], "cut": []}}}
                ).encode()
            },
        }
    }
    built = kernel.build_and_push(make_cfg(tmp_path, "kaggle.continue_from=self"), api=api)
    assert built["plan"].continue_version == 1 and built["plan"].continue_session == "abc"
    assert "continuing from tester/jigsaw-sample/1 (ended error): sample: 0 complete" in capsys.readouterr().out
    with pytest.raises(KernelError, match="latest version was saved without running .new_script"):
        output.fetch_output(make_cfg(tmp_path), api=api)
    assert output.kernel_status(make_cfg(tmp_path), api=api, follow=True, sleep=never) == "new_script"  # not followed
    assert "kernels_logs_stream" not in [name for name, _ in api.calls]


def never(seconds: float) -> None:
    raise AssertionError(f"slept {seconds} s")


def test_the_bundle_version_is_the_one_after_the_upload(tmp_path: Path, capsys) -> None:
    """Right after an upload Kaggle may still answer the previous version number (or 404): the kernel waits for a
    number past the one before the upload instead of pinning the previous bundle."""
    api = FakeKaggleApi()
    api.add_bundle("tester/jigsaw-sample-code")
    answers = iter([7, 7, 404, 8])  # before the upload; then the old number, a 404, the new one

    def dataset_version(ref: str, api) -> int:
        number = next(answers)
        if number == 404:
            raise KaggleError("dataset: not found (404)") from http_error(404)
        return number

    sleeps: list[float] = []
    orig = datasets.wait_new_version
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datasets, "dataset_version", dataset_version)
        mp.setattr(datasets, "wait_new_version", lambda ref, before, api: orig(ref, before, api, sleep=sleeps.append))
        result = kernel.build_and_push(make_cfg(tmp_path), api=api)
    assert result["metadata"]["dataset_sources"][0] == "tester/jigsaw-sample-code/8" and len(sleeps) == 2
    answers = iter([7, *[7] * 40])  # never past 7: refused before the push
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datasets, "dataset_version", dataset_version)
        mp.setattr(datasets, "wait_new_version", lambda ref, before, api: orig(ref, before, api, sleep=lambda s: None))
        with pytest.raises(KaggleError, match="still serves version 7 after 300 s, the one before this upload"):
            kernel.build_and_push(make_cfg(tmp_path), api=api)


def test_the_bundle_is_ready_in_the_version_the_kernel_attaches(tmp_path: Path, monkeypatch) -> None:
    """Right after an upload Kaggle still answers the previous version's number, and its "ready": the push waits for
    the new number first, then for that version to be ready (pending here), never for the previous one's state."""
    api = FakeKaggleApi()
    api.add_bundle("tester/jigsaw-sample-code")
    # asked whether it exists (ready); after the upload the old number twice, then the new version processing
    api.version_lag, api.dataset_states = 2, ["ready", "pending", "pending"]
    monkeypatch.setattr("time.sleep", lambda s: None)
    result = kernel.build_and_push(make_cfg(tmp_path), api=api)
    assert result["metadata"]["dataset_sources"][0] == "tester/jigsaw-sample-code/8"
    assert api.dataset_states == []  # the new version's states were waited through before the push
    asked = [kw["format"] for name, kw in api.calls if name == "dataset_status"]
    assert asked[-4:] == ["json(current_version_number)", None, None, None]  # the number, then ready


def test_user_comes_from_the_api_else_config(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.username = "alice"
    assert kernel.build_and_push(make_cfg(tmp_path), api=api)["plan"].kernel_ref == "alice/jigsaw-sample"
    api = FakeKaggleApi()
    result = kernel.build_and_push(make_cfg(tmp_path, "kaggle.user=bob", "kaggle.kernel_slug=my-run"), api=api)
    assert result["plan"].kernel_ref == "bob/my-run" and result["metadata"]["title"] == "My run"


def test_push_without_credentials_says_how(tmp_path: Path) -> None:
    with pytest.raises(KaggleError, match="No Kaggle credentials found") as info:
        kernel.build_and_push(make_cfg(tmp_path))
    assert client.credentials_hint() in str(info.value)
    argv = ["--config", "sample", *under(tmp_path), f"kaggle.dir={tmp_path / 'kernel'}", "data.extra_files=[]"]
    assert kernel.main(argv) == 2


@pytest.mark.parametrize(
    ("method", "status", "expected"),
    [
        ("dataset_create_new", 403, "dataset tester/jigsaw-sample-code: access denied (403)"),
        ("dataset_create_version", 409, "conflict (409)"),
        ("kernels_push", 403, "kernel tester/jigsaw-sample: access denied (403)"),
        ("kernels_push", 404, "kernel tester/jigsaw-sample: not found (404)"),
        ("kernels_push", 409, "kernel tester/jigsaw-sample: conflict (409)"),
        ("kernels_push", 401, "rejected the credentials (401)"),
        ("dataset_status", 403, "dataset tester/jigsaw-sample-code: access denied (403)"),
    ],
)
def test_api_errors_are_clear(tmp_path: Path, method: str, status: int, expected: str) -> None:
    api = FakeKaggleApi()
    if method == "dataset_create_version":
        api.add_bundle("tester/jigsaw-sample-code")
    api.fail[method] = http_error(status)
    with pytest.raises(KaggleError) as info:
        kernel.build_and_push(make_cfg(tmp_path), api=api)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_refusals_in_the_response_are_errors(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.create_result = {"status": "error", "error": "The requested slug is already in use by a dataset."}
    api.datasets = set()
    with pytest.raises(KaggleError, match="conflict"):
        kernel.build_and_push(make_cfg(tmp_path), api=api)

    api = FakeKaggleApi()
    api.push_result = {"invalid_dataset_sources": ["someone/xlm-roberta-large"]}
    cfg = make_cfg(tmp_path, "model.name=xlm-roberta-large", "kaggle.model_source=someone/xlm-roberta-large")
    with pytest.raises(KaggleError, match="could not attach dataset sources someone/xlm-roberta-large"):
        kernel.build_and_push(cfg, api=api)

    api = FakeKaggleApi()
    api.push_result = {"error": "Notebook not found"}
    with pytest.raises(KaggleError, match="push refused: Notebook not found"):
        kernel.build_and_push(make_cfg(tmp_path), api=api)


# ---------------------------------------------------------------------------------------------
# make kernel-output


def test_output_is_downloaded_and_installed(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.outputs = {
        "submission.csv": b"id,toxic\n0,0.5\n",
        "sample.csv": b"id,toxic\n0,0.5\n",
        "models/sample/fold0/model.safetensors": b"weights",
        "models/sample/fold0/oof.csv": b"id,toxic\n",
        "models/sample/cv.json": b"{}",
        "input/cache/abc/train_ids.npy": b"big",  # not wanted back
    }
    cfg = make_cfg(tmp_path)
    installed = output.fetch_output(cfg, api=api)
    assert [name for name, _ in api.calls] == ["kernels_status", "kernels_output"]
    assert (tmp_path / "models" / "sample" / "fold0" / "model.safetensors").read_bytes() == b"weights"
    assert (tmp_path / "models" / "sample" / "cv.json").is_file()
    assert (tmp_path / "submissions" / "submission.csv").is_file() and (
        tmp_path / "submissions" / "sample.csv"
    ).is_file()
    assert not (tmp_path / "kernel" / "jigsaw-sample" / "output" / "input").exists()
    assert (tmp_path / "kernel" / "jigsaw-sample" / "output" / "jigsaw-sample.log").is_file()
    assert len(installed) == 5


# each matches the pattern of the files worth downloading (output.output_pattern), as a crafted name would
@pytest.mark.parametrize(
    "name", ["models/sample/../../../escaped.csv", "models/sample/fold0/../../../../../escaped.csv"]
)
def test_an_output_file_named_outside_its_folder_is_refused(tmp_path: Path, name: str) -> None:
    """Another user's output could name a file `../x`: kaggle refuses that itself, and so does this, in one line,
    before anything is installed (the fake writes it where the name says, as a library that did not refuse)."""
    api = FakeKaggleApi()
    api.outputs = {"models/sample/fold0/model.safetensors": b"weights", name: b"id,toxic\n"}
    with pytest.raises(KaggleError, match=r"the output lists .*escaped.csv, outside .*output: refused") as err:
        output.fetch_output(make_cfg(tmp_path), api=api)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "models" / "sample" / "fold0").exists()  # nothing installed


def test_a_version_whose_output_names_a_file_outside_its_folder_is_refused(tmp_path: Path) -> None:
    """The files `make kernel` fetches to choose the version a continued run attaches: checked the same way."""
    api = FakeKaggleApi()
    api.outputs = {"../kernel-session.json": b"{}"}
    with pytest.raises(KaggleError, match="kernel-session.json, outside .*v1: refused"):
        kernels.download_output_files("me/jigsaw-sample", tmp_path / "v1", r"session", api)


def test_output_of_an_unfinished_kernel_is_refused(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.kernel_state = "RUNNING"
    with pytest.raises(KernelError, match="is running, not finished; follow it with `make kernel-status"):
        output.fetch_output(make_cfg(tmp_path), api=api)
    assert [name for name, _ in api.calls] == ["kernels_status"]


KAGGLE_LOG = json.dumps(  # the shape of a Kaggle kernel log: JSON entries of streamed text
    [{"stream_name": "stdout", "time": i, "data": f"step {i}\n"} for i in range(30)]
    + [{"stream_name": "stderr", "time": 31, "data": "torch.OutOfMemoryError: CUDA out of memory\n"}]
)


def test_output_of_a_failed_kernel_shows_its_log(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    api = FakeKaggleApi()
    api.kernel_state, api.failure_message, api.log = "ERROR", "Your notebook tried to allocate more memory", KAGGLE_LOG
    with pytest.raises(KernelError, match="failed and left no output: Your notebook tried to allocate more memory"):
        output.fetch_output(make_cfg(tmp_path), api=api)
    assert [name for name, _ in api.calls] == ["kernels_status", "kernels_logs", "kernels_output"]
    out = capsys.readouterr().out
    assert "| torch.OutOfMemoryError: CUDA out of memory" in out and "| step 29" in out
    assert "| step 5\n" not in out  # only the tail
    log = tmp_path / "kernel" / "jigsaw-sample" / "output" / "jigsaw-sample.log"
    assert log.read_text().splitlines()[0] == "step 0"  # the whole log is kept, as text


def test_output_of_a_stopped_kernel_comes_back_with_its_complete_folds(tmp_path: Path, capsys) -> None:
    """A session that ran out of its hours ends `error` or `cancel_acknowledged`: what it left still comes back."""
    api = FakeKaggleApi()
    api.kernel_state, api.log = "CANCEL_ACKNOWLEDGED", KAGGLE_LOG
    api.outputs = {
        "submission.csv": b"id,toxic\n0,0.5\n",
        "models/sample/fold0/done.json": b'{"fold": 0, "digest": "d"}',
        "models/sample/fold0/oof.csv": b"id,toxic\n",
        "models/sample/fold1/resume.pt": b"state",
        "models/sample/fold2/oof.csv": b"id,toxic\n",
    }
    installed = output.fetch_output(make_cfg(tmp_path), api=api)
    assert (tmp_path / "models" / "sample" / "fold1" / "resume.pt").read_bytes() == b"state"
    assert (tmp_path / "submissions" / "submission.csv").is_file() and len(installed) == 5
    out = capsys.readouterr().out
    assert "ended cancel_acknowledged" in out
    assert "kernel: sample folds complete: 0; cut off, with a resume state: 1; not complete: 2" in out
    assert "kaggle.continue_from=self" in out


def test_kernel_status_shows_state_and_tail_and_follows(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    api = FakeKaggleApi()
    api.kernel_state, api.log = "RUNNING", KAGGLE_LOG
    assert output.kernel_status(make_cfg(tmp_path), api=api) == "running"
    out = capsys.readouterr().out
    assert "kernel tester/jigsaw-sample: running" in out and "| step 29" in out

    # following: the log streamed as the session writes it (kaggle 2.2.5: kernels_logs_stream), the latest ETA; its
    # parsers yield an event a line, most without a newline: each is one line, shown as it comes, and an event
    # without data shows nothing (kaggle's own follow prints them so)
    seen: list[str] = []

    def events():
        yield {"stream_name": "stdout", "time": 1.0, "data": "fold 0 epoch 1: AUC 0.7 | ETA 3h10m for the run"}
        seen.append(capsys.readouterr().out)  # what was shown before the next event came
        yield {"stream_name": "stdout", "time": 1.5, "data": None}
        yield {"data": "fold 0 epoch 2: AUC 0.8 | ETA 2h05m for the run"}
        yield {"data": "two lines\nin one event\n"}

    api.log_connections = [events()]
    polled = lambda s: pytest.fail("polled the stored log where the stream was there")  # noqa: E731
    assert output.kernel_status(make_cfg(tmp_path), api=api, follow=True, sleep=polled) == "complete"
    assert seen[0].endswith("  | fold 0 epoch 1: AUC 0.7 | ETA 3h10m for the run\n")
    out = seen[0] + capsys.readouterr().out
    assert "  | fold 0 epoch 1: AUC 0.7 | ETA 3h10m for the run\n  | fold 0 epoch 2: AUC 0.8 | ETA 2h05m" in out
    assert "  | two lines\n  | in one event\n" in out and "None" not in out
    assert out.endswith("kernel tester/jigsaw-sample: complete; ETA 2h05m for the run\n")
    stored = json.dumps([{"data": "a"}, {"data": "b\n"}, {"data": None}, {"data": "c"}])
    assert output.log_lines(stored) == ["a", "b", "c"]  # the stored log: an entry a line too

    # a library without the stream: the stored log, polled
    states = iter(["RUNNING", "COMPLETE"])

    def sleep(seconds: float) -> None:
        api.kernel_state = next(states)
        api.log = json.dumps([{"data": "done\n"}])

    api.kernels_logs_stream, api.kernel_state = None, "QUEUED"
    api.calls.clear()
    assert output.kernel_status(make_cfg(tmp_path), api=api, follow=True, sleep=sleep) == "complete"
    assert [n for n, _ in api.calls].count("kernels_status") == 3
    argv = ["--config", "sample", *under(tmp_path), f"kaggle.dir={tmp_path / 'k'}", "--status"]
    assert kernel.main(argv) == 2  # no credentials


def test_a_kernels_log_reaches_the_terminal_without_its_escape_sequences(tmp_path: Path, capsys) -> None:
    """The log is whatever the kernel's code printed: an OSC 52 sequence in it (it sets the clipboard in many
    terminals) is shown written out by kernel-status, followed or not, and kernel-output, and kept as it is."""
    osc52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"
    api = FakeKaggleApi()
    api.kernel_state, api.failure_message = "RUNNING", f"failed{osc52}"
    api.log = json.dumps([{"data": f"step 1{osc52}\n"}])
    api.log_connections = [iter([{"data": f"step 2{osc52}"}])]
    output.kernel_status(make_cfg(tmp_path), api=api, follow=True, sleep=lambda s: None)
    api.kernel_state = "ERROR"
    with pytest.raises(KernelError) as e:
        output.fetch_output(make_cfg(tmp_path), api=api)
    out = capsys.readouterr().out + str(e.value)
    assert "\x1b" not in out and "\x07" not in out, out
    assert "  | step 1\\x1b]52;c;ZWNobyBwd25lZA==\\x07\n" in out and "  | step 2\\x1b]52" in out, out
    log = tmp_path / "kernel" / "jigsaw-sample" / "output" / "jigsaw-sample.log"
    assert log.read_text() == f"step 1{osc52}\n"  # the file keeps what the kernel wrote


def test_following_survives_a_dropped_log_stream(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The load balancer cuts idle connections: the stream is opened again (kaggle 2.2.5's own follow does, up to five
    times without news), the replayed events are skipped, and no line is shown twice or lost."""
    import requests

    api = FakeKaggleApi()
    api.kernel_state = "RUNNING"
    events = [{"data": f"step {i}\n"} for i in range(6)]
    drop = requests.exceptions.ChunkedEncodingError("Connection broken: InvalidChunkLength")
    # Real: each connection replays the stream from its start, then carries on
    api.log_connections = [[*events[:2], drop], [*events[:4], requests.exceptions.ConnectionError("reset")], events]
    sleeps: list[float] = []
    assert output.kernel_status(make_cfg(tmp_path), api=api, follow=True, sleep=sleeps.append) == "complete"
    shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  | step")]
    assert shown == [f"  | step {i}" for i in range(6)] and len(sleeps) == 2
    # a stream that keeps dropping with nothing new gives up in one line, as kaggle's does
    api.kernel_state, api.log_connections = "RUNNING", [[drop]] * 5
    with pytest.raises(KaggleError, match="the log stream dropped 5 times with nothing new"):
        output.kernel_status(make_cfg(tmp_path), api=api, follow=True, sleep=lambda s: None)


def test_output_access_denied(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    # kaggle 2.2.5 turns a 401/403 on kernels_status into this ValueError
    api.fail["kernels_status"] = ValueError("Cannot access kernel 'x' (Permission 'kernels.get' was denied).")
    with pytest.raises(KaggleError, match=r"access denied \(403\)"):
        output.fetch_output(make_cfg(tmp_path), api=api)


# ---------------------------------------------------------------------------------------------
# The notebook, run end to end on a simulated Kaggle layout

NO_NETWORK = """
import socket

def _refuse(*args, **kwargs):
    raise OSError("network disabled in this test")

socket.socket.connect = _refuse
socket.create_connection = _refuse
socket.getaddrinfo = _refuse
"""


def kaggle_layout(tmp_path: Path) -> tuple[Path, Path]:
    """<tmp>/kaggle/input with the sample competition under the real file names only, an empty working."""
    root = tmp_path / "kaggle"
    competition = root / "input" / "competitions" / COMPETITION  # where current images mount it
    sample.write(competition, seed=0, scale=LAYOUT_SCALE)
    for extra in {p.name for p in competition.iterdir()} - set(kaggle_plan.COMPETITION_FILES):
        (competition / extra).unlink()  # e.g. translated-train.csv: the generator's, not Kaggle's
    assert {p.name for p in competition.iterdir()} <= set(kaggle_plan.COMPETITION_FILES)
    (root / "working").mkdir(parents=True)
    (root / "temp").mkdir()
    return root / "input", root / "working"


def mount_code(code_dir: Path, input_root: Path, slug: str, unpacked: bool) -> None:
    """The code bundle as Kaggle mounts it: pipeline/ unpacked, or left as the uploaded pipeline.zip."""
    mount = input_root / slug
    if unpacked:
        shutil.copytree(code_dir, mount, ignore=shutil.ignore_patterns("dataset-metadata.json"))
    else:
        mount.mkdir()
        shutil.copyfile(code_dir / "kernel-config.yaml", mount / "kernel-config.yaml")
        shutil.make_archive(str(mount / "pipeline"), "zip", code_dir / "pipeline")  # what dir_mode="zip" sends


def tiny_model_folder(dest: Path, competition: Path, cfg: config.Config) -> None:
    """A saved XLM-R (2 layers, hidden 32) and its tokenizer, as a model dataset would hold them."""
    from pipeline.core import modeling
    from pipeline.inputs import tokenizer

    texts = []
    for name, col in (("jigsaw-toxic-comment-train.csv", "comment_text"), ("test.csv", "content")):
        texts += pd.read_csv(competition / name, dtype=str, keep_default_na=False)[col].tolist()
    tokenizer.train_tokenizer(texts, 1000, dest)
    tok = tokenizer.load_tokenizer(dest)
    encoder = modeling.encoder_from_config(modeling.tiny_config(cfg, len(tok), tok.pad_token_id))
    encoder.save_pretrained(dest)  # a pretrained encoder's folder: the head is the pipeline's


def run_notebook(script: Path, input_root: Path, working: Path, tmp_path: Path, **extra) -> subprocess.CompletedProcess:
    guard = tmp_path / "guard"
    guard.mkdir(exist_ok=True)
    (guard / "sitecustomize.py").write_text(textwrap.dedent(NO_NETWORK))
    home = tmp_path / "nb-home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAGGLE_", "PYTHON"))}
    env.update(
        KAGGLE_INPUT_ROOT=str(input_root),
        KAGGLE_WORKING_ROOT=str(working),
        KAGGLE_TEMP_ROOT=str(working.parent / "temp"),
        PYTHONPATH=str(guard),  # not the repository: the code must come from the mounted bundle
        HOME=str(home),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        MPLBACKEND="Agg",
        **extra,
    )
    return subprocess.run(
        [sys.executable, str(script)], cwd=working, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def check_submission(working: Path, input_root: Path, result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sub = pd.read_csv(working / "submission.csv", dtype={"id": str})
    expected = pd.read_csv(input_root / "competitions" / COMPETITION / "sample_submission.csv", dtype={"id": str})
    assert sub["id"].tolist() == expected["id"].tolist()
    assert sub["toxic"].between(0, 1).all()
    assert (working / "kernel-run.yaml").is_file()
    line = next(x for x in result.stdout.splitlines() if x.startswith("kernel: code from "))
    assert str(REPO) not in line  # the bundle's code ran, not the repository's


def working_files(working: Path) -> list[str]:
    return sorted(str(p.relative_to(working)) for p in working.rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, subprocess.CompletedProcess]:
    """`make kernel ARGS="kaggle.dry_run=true"` on the sample, its notebook run once on a simulated Kaggle,
    training under torchrun with two CPU processes (gloo) standing for two T4s. (base, input, working, result)"""
    base = tmp_path_factory.mktemp("sample-run")
    input_root, working = kaggle_layout(base)
    two = ["kaggle.gpus=2"]
    argv = ["--config", "sample", f"kaggle.dir={base / 'kernel'}", "kaggle.dry_run=true", "kaggle.user=tester"]
    assert kernel.main([*argv, *SMALL, *two]) == 0
    root = base / "kernel" / "jigsaw-sample"
    mount_code(root / "code", input_root, "jigsaw-sample-code", unpacked=True)
    result = run_notebook(root / "notebook" / "jigsaw-sample.py", input_root, working, base)
    return base, input_root, working, result


@pytest.mark.slow
def test_sample_kernel_runs_end_to_end(sample_run) -> None:
    _, input_root, working, result = sample_run
    check_submission(working, input_root, result)
    assert f"kernel: code from {input_root / 'jigsaw-sample-code' / 'pipeline'};" in result.stdout
    assert "2 train processes" in result.stdout
    for fold in (0, 1):
        done = json.loads((working / "models" / "sample" / f"fold{fold}" / "done.json").read_text())
        assert done["world"] == 2 and done["effective_batch"] == 2 * 32  # DDP: micro 32 x accumulation 1 x 2
    # working keeps only what the user downloads: no token cache, no prepared table, no resume state
    files = working_files(working)
    fold_files = {f.split("/", 3)[3] for f in files if f.startswith("models/sample/fold0/")}
    assert {"model.safetensors", "done.json", "oof.csv", "test.csv", "metrics.jsonl"} <= fold_files
    assert not any(f.startswith("input/") or f.endswith("resume.pt") for f in files), files
    kept = {"kernel-run.yaml", "submission.csv", "submission.json", "sample.csv", "kernel-session.json"}
    assert {f for f in files if not f.startswith("models/")} == kept
    assert {f.split("/")[2] for f in files if f.startswith("models/")} >= {"cv.json", "oof.csv", "fold0", "fold1"}
    temp = working.parent / "temp"
    assert (temp / "input" / "prepared" / "sample").is_dir()  # the scratch went to temp
    # what working holds is what the disk plan counts: two folds' weights and the small files
    weights = sum((working / "models" / "sample" / f"fold{k}" / "model.safetensors").stat().st_size for k in (0, 1))
    total = session.folder_bytes(working)
    assert weights < total < weights + 5_000_000
    # the competition was read in place, never copied or edited
    assert not (working / "input").exists() and not (temp / "input" / COMPETITION).exists()


def serve_working(working: Path) -> FakeKaggleApi:
    """A fake API whose kernel output is what the notebook left in working."""
    api = FakeKaggleApi()
    api.outputs = {f: (working / f).read_bytes() for f in working_files(working)}
    return api


def local_args(base: Path, input_root: Path, *overrides: str) -> list[str]:
    """Stage arguments for a local run on a copy of the simulated competition, writing under `base`."""
    local_raw = base / "raw"  # the same competition files, in a local folder
    shutil.copytree(input_root / "competitions" / COMPETITION, local_raw)
    return [
        "--config",
        "sample",
        f"input_dir={base / 'input'}",
        f"models_dir={base / 'models'}",
        f"submissions_dir={base / 'submissions'}",
        f"kaggle.dir={base / 'kernel'}",
        "kaggle.user=tester",
        "data.source=dir",
        f"data.dir={local_raw}",
        *overrides,
    ]


@pytest.mark.slow
def test_downloaded_folds_are_used_locally(sample_run, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """After `make kernel-output`, a local `make train` finds every fold complete, and cv and predict use them."""
    _, input_root, working, result = sample_run
    assert result.returncode == 0
    args = local_args(tmp_path, input_root, *SMALL)
    output.fetch_output(config.load("sample", args[2:]), api=serve_working(working))
    assert data.main(args) == 0
    capsys.readouterr()
    assert train.main(args) == 0
    out = capsys.readouterr().out
    assert "fold 0: complete" in out and "fold 1: complete" in out and "epoch 1:" not in out, out
    assert cv.main(args) == 0
    assert predict.main(args) == 0
    assert "2 fold(s)" in capsys.readouterr().out


def test_output_already_there_is_not_fetched_or_copied_again(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    api = FakeKaggleApi()
    api.outputs = {
        "submission.csv": b"id,toxic\n0,0.5\n",
        "models/sample/fold0/model.safetensors": b"weights" * 100,
        "models/sample/fold0/done.json": b"{}",
    }
    cfg = make_cfg(tmp_path)
    assert len(output.fetch_output(cfg, api=api)) == 3
    assert sorted(api.written) == sorted(api.outputs)
    api.written.clear()
    assert output.fetch_output(cfg, api=api) == []  # same sizes: nothing downloaded, nothing copied
    assert api.written == [] and dict(api.calls)["kernels_output"]["force"] is False
    assert "3 files already installed (same size and time)" in capsys.readouterr().out
    # the kernel ran again: new weights of the same size, a new done.json
    weights = tmp_path / "models" / "sample" / "fold0" / "model.safetensors"
    os.utime(weights, (1, 1))  # the first download happened long ago
    api.outputs["models/sample/fold0/model.safetensors"] = b"WEIGHTS" * 100
    api.outputs["models/sample/fold0/done.json"] = b'{"auc": 0.9}'
    installed = output.fetch_output(cfg, api=api)
    assert sorted(installed) == [weights.parent / "done.json", weights]
    assert weights.read_bytes() == b"WEIGHTS" * 100


def test_only_what_the_latest_output_holds_is_installed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Session 1 cut fold 1 (its resume.pt in the output), session 2 completed it (no resume.pt): the second
    `make kernel-output` installs session 2's files only; the first download's resume.pt is not installed again
    beside the complete fold (6.7 GB for XLM-R large), and is gone from the kept download."""
    api = FakeKaggleApi()
    api.outputs = {
        "submission.csv": b"id,toxic\n0,0.5\n",
        "models/sample/fold1/resume.pt": b"state" * 100,
        "models/sample/fold1/metrics.jsonl": b"{}\n",
    }
    cfg = make_cfg(tmp_path)
    output.fetch_output(cfg, api=api)
    fold1 = tmp_path / "models" / "sample" / "fold1"
    assert (fold1 / "resume.pt").is_file()
    shutil.rmtree(tmp_path / "models")  # installed elsewhere, or cleaned up: the download is what is kept
    api.outputs = {
        "submission.csv": b"id,toxic\n0,0.6\n",
        "models/sample/fold1/done.json": b'{"fold": 1}',
        "models/sample/fold1/metrics.jsonl": b"{}\n{}\n",
    }
    capsys.readouterr()
    installed = output.fetch_output(cfg, api=api)
    assert not (fold1 / "resume.pt").exists() and (fold1 / "done.json").is_file()
    assert all(p.name != "resume.pt" for p in installed)
    out = tmp_path / "kernel" / "jigsaw-sample" / "output"
    assert not (out / "models" / "sample" / "fold1" / "resume.pt").exists()
    said = capsys.readouterr().out
    assert "models/sample/fold1/resume.pt: of an earlier output, not in the latest: removed, not installed" in said
    assert "cut off, with a resume state" not in said


def test_what_the_latest_output_no_longer_holds_leaves_models_too(tmp_path: Path, capsys) -> None:
    """kaggle.keep_weights=false: session 1 cut fold 1 (its resume.pt installed), session 2 completed it without
    weights. The second `make kernel-output` removes the installed resume.pt as well as the downloaded one (else a
    local `make train` resumes the fold from session 1's state and retrains it over Kaggle's done.json); an
    installed file changed here since is left, and said so."""
    api = FakeKaggleApi()
    api.outputs = {
        "submission.csv": b"id,toxic\n0,0.5\n",
        "models/sample/fold1/resume.pt": b"state" * 100,
        "models/sample/fold1/metrics.jsonl": b"{}\n",
        "models/sample/fold1/notes.txt": b"session 1",
    }
    cfg = make_cfg(tmp_path, "kaggle.keep_weights=false")
    output.fetch_output(cfg, api=api)
    fold1 = tmp_path / "models" / "sample" / "fold1"
    assert (fold1 / "resume.pt").is_file()
    (fold1 / "notes.txt").write_text("written here")
    api.outputs = {
        "submission.csv": b"id,toxic\n0,0.6\n",
        "models/sample/fold1/done.json": b'{"fold": 1}',
        "models/sample/fold1/test.csv": b"id,toxic\n0,0.6\n",
        "models/sample/fold1/metrics.jsonl": b"{}\n{}\n",
    }
    capsys.readouterr()
    output.fetch_output(cfg, api=api)
    assert not (fold1 / "resume.pt").exists() and (fold1 / "done.json").is_file()
    assert (fold1 / "notes.txt").read_text() == "written here"
    said = capsys.readouterr().out
    assert (f"models/sample/fold1/resume.pt: of an earlier output, not in the latest: removed, not installed; its "
            f"installed copy {fold1 / 'resume.pt'} removed too") in said  # fmt: skip
    assert f"{fold1 / 'notes.txt'} was changed here since it was installed: left as it is" in said


@pytest.mark.slow
def test_kernel_with_a_model_folder_runs_end_to_end(tmp_path: Path) -> None:
    """A non-tiny model.name loads the attached model folder; the bundle mounted as the uploaded zip."""
    input_root, working = kaggle_layout(tmp_path)
    overrides = [*SMALL, "model.name=xlm-roberta-large", "kaggle.model_source=someone/xlmr-tiny-test"]
    cfg = dry(tmp_path, *overrides)
    # a model dataset whose weights sit one folder down: found by their config.json
    tiny_model_folder(
        input_root / "xlmr-tiny-test" / "xlm-roberta-tiny", input_root / "competitions" / COMPETITION, cfg
    )
    result = kernel.build_and_push(cfg)
    mount_code(result["code_dir"], input_root, "jigsaw-sample-code", unpacked=False)
    out = run_notebook(result["kernel_dir"] / "jigsaw-sample.py", input_root, working, tmp_path)
    check_submission(working, input_root, out)
    run_cfg = config.load_file(working / "kernel-run.yaml")
    assert run_cfg.model.path == str(input_root / "xlmr-tiny-test" / "xlm-roberta-tiny")
    assert run_cfg.model.name == "xlm-roberta-large"  # what it is; model.path says where
    assert run_cfg.data.source == "dir" and run_cfg.data.dir == str(input_root / "competitions" / COMPETITION)
    assert run_cfg.models_dir == str(working.parent / "temp" / "models") and run_cfg.submissions_dir == str(working)


@pytest.mark.slow
def test_two_stages_in_one_notebook(tmp_path: Path) -> None:
    """model.init_from in a kernel's config: the notebook trains the stage-1 model first, keeps it, then the folds
    start from it; without that step the folds would stop at "not complete; make it first"."""
    input_root, working = kaggle_layout(tmp_path)
    stage1 = ["model.init_from=sample-s1", "model.init_args=[train.lr=5e-3,train.epochs=1]"]
    cfg = dry(tmp_path, *SMALL, *stage1, "train.training_only_rows=false", "train.lr=1e-3")
    result = kernel.build_and_push(cfg)
    mount_code(result["code_dir"], input_root, "jigsaw-sample-code", unpacked=True)
    out = run_notebook(result["kernel_dir"] / "jigsaw-sample.py", input_root, working, tmp_path)
    check_submission(working, input_root, out)
    assert "stage 1: sample-s1 (one model on the training-only rows), then stage 2: sample" in out.stdout
    s1 = config.load_file(working / session.STAGE1_CONFIG)
    assert (s1.name, s1.train.folds, s1.train.lr, s1.model.init_from) == ("sample-s1", (-1,), 5e-3, "")
    s1_dir = working / "models" / "sample-s1" / "fold-1"
    assert (s1_dir / "model.safetensors").is_file() and not (s1_dir / "oof.csv").exists()
    s1_done = json.loads((s1_dir / "done.json").read_text())
    assert s1_done["auc"] is None
    # stage 2 came after stage 1 and every fold records the stage-1 model it started from
    assert out.stdout.index("kernel: sample-s1 fold -1 kept") < out.stdout.index("kernel: sample fold 0 kept")
    temp_models = working.parent / "temp" / "models"
    for fold in (0, 1):
        saved = config.load_file(temp_models / "sample" / f"fold{fold}" / "pipeline.yaml")
        assert saved.model.init_from == "sample-s1" and saved.train.lr == 1e-3
    assert sorted(p.name for p in (working / "models").iterdir()) == ["sample", "sample-s1"]

    # brought back by `make kernel-output`, both stages count locally: the folds are complete, predict runs
    stage2 = ["train.training_only_rows=false", "train.lr=1e-3"]
    local = local_args(tmp_path / "local", input_root, *SMALL, *stage1, *stage2)
    output.fetch_output(config.load("sample", local[2:]), api=serve_working(working))
    assert (tmp_path / "local" / "models" / "sample-s1" / "fold-1" / "model.safetensors").is_file()
    assert data.main(local) == 0 and train.main(local) == 0 and predict.main(local) == 0


@pytest.mark.slow
def test_stage2_notebook_starts_from_an_attached_stage1_kernel(tmp_path: Path) -> None:
    """Stage 1 in its own kernel (train.folds=[-1]), stage 2 in another that attaches its output
    (kaggle.init_kernel): the second notebook trains no stage-1 model and starts every fold from the first's."""
    a_input, a_working = kaggle_layout(tmp_path / "a")
    s1 = dry(tmp_path / "a", *SMALL, "name=sample-s1", "train.folds=[-1]")
    built = kernel.build_and_push(s1)
    mount_code(built["code_dir"], a_input, "jigsaw-sample-s1-code", unpacked=True)
    first = run_notebook(built["kernel_dir"] / "jigsaw-sample-s1.py", a_input, a_working, tmp_path / "a")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert (a_working / "models" / "sample-s1" / "fold-1" / "model.safetensors").is_file()
    assert not (a_working / "submission.csv").exists()  # a stage-1 model alone predicts nothing

    b_input, b_working = kaggle_layout(tmp_path / "b")
    cfg = dry(tmp_path / "b", *SMALL, "model.init_from=sample-s1", "kaggle.init_kernel=jigsaw-sample-s1")
    built = kernel.build_and_push(cfg)
    assert built["metadata"]["kernel_sources"] == ["tester/jigsaw-sample-s1"]
    mount_code(built["code_dir"], b_input, "jigsaw-sample-code", unpacked=True)
    script = built["kernel_dir"] / "jigsaw-sample.py"
    missing = run_notebook(script, b_input, b_working, tmp_path / "b")
    assert missing.returncode != 0 and "the stage-1 kernel 'jigsaw-sample-s1' is not attached" in missing.stderr
    shutil.copytree(a_working, b_input / "notebooks" / "tester" / "jigsaw-sample-s1")  # where Kaggle mounts it
    second = run_notebook(script, b_input, b_working, tmp_path / "b")
    check_submission(b_working, b_input, second)
    assert "kernel: stage 1: sample-s1 from kernel jigsaw-sample-s1's output" in second.stdout
    assert "sample-s1 fold -1 kept" not in second.stdout and not (b_working / session.STAGE1_CONFIG).exists()
    linked = b_working.parent / "temp" / "models" / "sample-s1" / "fold-1"
    mounted = b_input / "notebooks" / "tester" / "jigsaw-sample-s1" / "models" / "sample-s1" / "fold-1"
    assert linked.is_symlink() and linked.resolve() == mounted


# ---------------------------------------------------------------------------------------------
# Twelve hours never wasted: the time guard, a stopped session's output, a run continued across sessions


def fake_clock(folder: Path, step_seconds: int = 600) -> dict:
    """The notebook's clock advanced 10 simulated minutes at each optimizer step: hours of GPU time in seconds."""
    clock = folder / "clock"
    clock.write_text("0")
    return {"PIPELINE_FAKE_CLOCK": str(clock), "PIPELINE_FAKE_STEP_SECONDS": str(step_seconds)}


def notebook_session(base: Path, *settings: str, earlier: Path | None = None, clock: bool = True):
    """One simulated session of the sample kernel under `base`, built by a dry-run push with `settings`; `earlier`:
    a session's working folder, attached as this kernel's earlier output (kaggle.continue_from=self).
    (input, working, result)"""
    input_root, working = kaggle_layout(base)
    built = kernel.build_and_push(dry(base, *settings, *(["kaggle.continue_from=self"] if earlier else [])))
    mount_code(built["code_dir"], input_root, "jigsaw-sample-code", unpacked=True)
    if earlier is not None:
        shutil.copytree(earlier, input_root / "notebooks" / "tester" / "jigsaw-sample")  # where Kaggle mounts it
    script = built["kernel_dir"] / "jigsaw-sample.py"
    return input_root, working, run_notebook(script, input_root, working, base, **(fake_clock(base) if clock else {}))


@pytest.mark.slow
def test_two_sessions_train_what_one_cannot(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Session 1 (3.5 simulated hours, about an hour an epoch): fold 0, then fold 1's first epoch; its second
    would end after the limit, so the session stops there with fold 1's resume state kept, a submission from
    fold 0 and the command that continues. Session 2 attaches session 1's output (kaggle.continue_from=self):
    fold 0 counts, fold 1 resumes at its second epoch; the end result is an uninterrupted run's."""
    settings = (*SMALL, "train.epochs=2", "kaggle.margin_minutes=0")
    a_input, a_working = kaggle_layout(tmp_path / "a")
    built = kernel.build_and_push(dry(tmp_path / "a", *settings, "kaggle.time_limit_h=3.5"))
    mount_code(built["code_dir"], a_input, "jigsaw-sample-code", unpacked=True)
    first = run_notebook(built["kernel_dir"] / "jigsaw-sample.py", a_input, a_working, tmp_path / "a",
                         **fake_clock(tmp_path / "a"))  # fmt: skip
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    out = first.stdout
    assert "fold 1: epoch 2 needs about" in out and "before the session's limit; its resume state is saved" in out
    # fold 0 predicted as soon as it was complete: the deadline of fold 1 finds no fold left to predict
    assert out.index("predict: 1 fold(s) (fold0)") < out.index("=== fold 1 ===")
    assert "kernel: training stops " in out and "before the session's end" in out
    assert "kernel: stopped for the session's time limit: folds 0 complete; fold 1 cut off (resume state kept)" in out
    assert 'plus ARGS="kaggle.continue_from=self": make kernel' in out
    check_submission(a_working, a_input, first)  # a partial submission, from fold 0
    cv = json.loads((a_working / "models" / "sample" / "cv.json").read_text())
    assert cv["test_auc"]["folds"] == ["fold0"] and list(cv["folds"]) == ["0"]
    assert (a_working / "models" / "sample" / "fold1" / "resume.pt").is_file()
    assert not (a_working / "models" / "sample" / "fold1" / "done.json").exists()

    # make kernel-output on the stopped kernel: fold 0 complete, fold 1 cut off with its resume state
    api = serve_working(a_working)
    api.kernel_state = "ERROR"
    output.fetch_output(make_cfg(tmp_path / "local"), api=api)
    said = capsys.readouterr().out
    assert "kernel: sample folds complete: 0; cut off, with a resume state: 1" in said

    b_input, b_working = kaggle_layout(tmp_path / "b")
    cfg = dry(tmp_path / "b", *settings, "kaggle.continue_from=self")
    built = kernel.build_and_push(cfg)
    assert built["metadata"]["kernel_sources"] == ["tester/jigsaw-sample"]  # this kernel's earlier output
    mount_code(built["code_dir"], b_input, "jigsaw-sample-code", unpacked=True)
    shutil.copytree(a_working, b_input / "notebooks" / "tester" / "jigsaw-sample")  # where Kaggle mounts it
    second = run_notebook(built["kernel_dir"] / "jigsaw-sample.py", b_input, b_working, tmp_path / "b",
                          **fake_clock(tmp_path / "b"))  # fmt: skip
    check_submission(b_working, b_input, second)
    out = second.stdout
    assert "sample fold 0 from the earlier session (complete)" in out
    assert "sample fold 1 from the earlier session (with a resume state)" in out
    assert "sample fold 0: complete from the earlier session (valid AUC" in out and "=== fold 0 ===" not in out
    assert "fold 1: resuming at epoch 1, step" in out
    linked = b_working.parent / "temp" / "models" / "sample" / "fold0" / "model.safetensors"
    assert linked.is_symlink()  # read in place from the earlier output, not copied into temp
    assert (b_working / "models" / "sample" / "fold0" / "done.json").is_file()  # kept for a third session
    assert "kernel: done; submission at" in out and "from folds 0, 1" in out

    # the same two folds trained in one go, here: the same OOF
    args = local_args(tmp_path / "ref", b_input, *settings)
    assert data.main(args) == 0 and train.main(args) == 0
    ref = pd.read_csv(tmp_path / "ref" / "models" / "sample" / "oof.csv", dtype={"id": str}).sort_values("id")
    got = pd.read_csv(b_working / "models" / "sample" / "oof.csv", dtype={"id": str}).sort_values("id")
    assert got["id"].tolist() == ref["id"].tolist()
    np.testing.assert_allclose(got["pred"], ref["pred"], rtol=0, atol=1e-6)


@pytest.mark.slow
def test_a_continued_run_without_kept_weights_never_trains_a_complete_fold_again(tmp_path: Path) -> None:
    """kaggle.keep_weights=false, the disk plan's first remedy: fold 0 comes back with its OOF and test
    predictions and no weights, and the next session counts it as it is (it trained it again, every epoch). The
    cut fold keeps its best weights beside its resume state: the state holds only the current ones."""
    settings = (*SMALL, "train.epochs=2", "kaggle.margin_minutes=0", "kaggle.keep_weights=false")
    _, a_working, first = notebook_session(tmp_path / "a", *settings, "kaggle.time_limit_h=3.5")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "folds 0 complete; fold 1 cut off (resume state kept)" in first.stdout
    kept = a_working / "models" / "sample"
    assert not (kept / "fold0" / "model.safetensors").exists() and (kept / "fold0" / "test.csv").is_file()
    assert (kept / "fold1" / "resume.pt").is_file() and (kept / "fold1" / "model.safetensors").is_file()

    b_input, b_working, second = notebook_session(tmp_path / "b", *settings, earlier=a_working)
    check_submission(b_working, b_input, second)
    out = second.stdout
    assert "sample fold 0: complete from the earlier session (valid AUC" in out and "=== fold 0 ===" not in out
    assert "fold 0 epoch" not in out and "fold 1: resuming at epoch 1, step" in out
    assert "kernel: done; submission at" in out and "from folds 0, 1" in out
    assert "predict: 2 fold(s) (fold0, fold1)" in out  # fold 0 by its test predictions, fold 1 by its weights


@pytest.mark.slow
def test_a_continued_run_that_finds_nothing_stops_at_once(tmp_path: Path) -> None:
    """An earlier output without folds (a version that failed in its first minute) would have the notebook train
    every fold from scratch and end "done" with no word: it stops in one line before any work."""
    (tmp_path / "empty").mkdir()
    input_root, working, result = notebook_session(tmp_path, *SMALL, earlier=tmp_path / "empty", clock=False)
    assert result.returncode == 1
    err = [line for line in result.stderr.splitlines() if line.strip()]
    assert err[-1].startswith("error: kaggle.continue_from=self: the attached output ") and "holds no folds" in err[-1]
    assert "Traceback" not in result.stderr and not (working / "kernel-run.yaml").exists()


def earlier_output(folder: Path, processes: int) -> Path:
    """What a session of `processes` processes leaves: fold 0 complete, fold 1 cut with a resume state."""
    for fold in (0, 1):
        (folder / "models" / "sample" / f"fold{fold}").mkdir(parents=True)
    done = {"fold": 0, "digest": "d", "world": processes}
    (folder / "models" / "sample" / "fold0" / "done.json").write_text(json.dumps(done))
    (folder / "models" / "sample" / "fold1" / "resume.pt").write_bytes(b"state")
    record = {"session": "s1", "processes": processes, "experiments": {"sample": {"complete": [0], "cut": [1]}}}
    (folder / "kernel-session.json").write_text(json.dumps(record))
    return folder


@pytest.mark.slow
def test_a_continued_run_keeps_the_earlier_number_of_processes_or_stops(tmp_path: Path) -> None:
    """Session 1 trained with 2 processes, session 2 has 1 (the all-reduce check fell back, or kaggle.gpus=1): the
    cut fold would start again ("resume.pt was saved by 2 processes") and the folds mix two effective batches.
    Refused in one line before any work."""
    earlier = earlier_output(tmp_path / "earlier", processes=2)
    _, working, result = notebook_session(tmp_path / "one", *SMALL, "kaggle.gpus=1", earlier=earlier, clock=False)
    assert result.returncode == 1
    last = [line for line in result.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("error: the earlier session's folds were trained by 2 process(es) and this session runs 1")
    assert not (working / "kernel-run.yaml").exists()


def test_the_number_of_processes_is_kept_from_the_earlier_session(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    cfg = config.load("sample", [])
    monkeypatch.setattr(notebook, "visible_gpus", lambda: 2)
    monkeypatch.setattr(session, "visible_gpus", lambda: 2)
    monkeypatch.setattr(notebook, "torchrun", lambda *a, **k: 0)
    assert notebook.session_processes(cfg, None) == 2
    assert notebook.session_processes(cfg, 1) == 1  # the earlier session fell back to one: so does this one
    assert "the earlier session's folds were trained by 1 process(es): so are this session's" in capsys.readouterr().out
    monkeypatch.setattr(notebook, "torchrun", lambda *a, **k: 1)  # the all-reduce fails here, with and without P2P
    with pytest.raises(KernelError, match=r"trained by 2 process\(es\) and this session runs 1 \(2 GPU\(s\) visible"):
        notebook.session_processes(cfg, 2)


def test_a_fold_that_cannot_finish_is_not_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    # under tmp_path: the checkout's own models/sample/eta.json, which `make train` wrote, is another run's estimate
    cfg = config.load("sample", [*under(tmp_path), "train.epochs=2", "kaggle.keep_resume=false"])
    monkeypatch.setattr(notebook.eta, "left", lambda: 1.5 * 3600)
    assert notebook.fits(cfg, []) is True  # nothing timed yet: the first fold starts, its epochs guarded
    assert notebook.fits(cfg, [3600.0]) is True
    assert notebook.fits(cfg, [2 * 3600.0]) is False  # 2 h a fold, 1.5 h left
    assert "the next fold needs about 2h00m; 1h30m are left before the deadline" in capsys.readouterr().out
    keep = config.load("sample", [*under(tmp_path), "train.epochs=2", "kaggle.keep_resume=true"])
    assert notebook.fits(keep, [2 * 3600.0]) is True  # one epoch fits; its state carries to the next session


def test_the_notebook_writes_its_lines_as_they_come(tmp_path: Path) -> None:
    """Kaggle sends the notebook's output to a file, where Python buffers 8 kB blocks: the evaluation and ETA lines
    of a session killed at its limit were lost. The code file makes the output line-buffered, and every child
    process (torchrun's workers) unbuffered."""
    code = f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from pipeline.kaggle import launch
        print(sys.stdout.line_buffering, repr(os.environ.get("PYTHONUNBUFFERED")))
        launch.unbuffered()
        from pipeline import notebook
        print(sys.stdout.line_buffering, sys.stderr.line_buffering, notebook.child_env()["PYTHONUNBUFFERED"])
    """
    # stdout is a pipe, as on Kaggle: block-buffered until told otherwise
    result = run_python(code, tmp_path, PYTHONUNBUFFERED="")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "''", "True", "True", "1"]


def test_a_planned_stop_is_said_once_and_is_no_failure_under_torchrun(monkeypatch, capsys) -> None:
    """The session's time is up: every rank stops, the first says so (not as an error), and under torchrun each exits 0
    so that torchrun prints no ChildFailedError traceback; the notebook reads time_up.json."""
    from pipeline import errors
    from pipeline.core.resume import TimeUp

    def stop() -> None:
        raise TimeUp("fold 0 stopped at epoch 1, step 20: the session's time is up; the resume state is saved")

    for rank, said in (("0", 1), ("1", 0)):
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("RANK", rank)
        assert errors.run_stage(stop) == 0
        err = capsys.readouterr().err
        assert err.count("stopped: fold 0 stopped at epoch 1") == said and "error" not in err
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("RANK")
    assert errors.run_stage(stop) == 75  # one process: the status tells the caller


def test_a_bundle_other_than_the_one_pushed_is_refused(tmp_path: Path) -> None:
    input_root, working = kaggle_layout(tmp_path)
    built = kernel.build_and_push(dry(tmp_path, *SMALL))
    mount_code(built["code_dir"], input_root, "jigsaw-sample-code", unpacked=True)
    changed = input_root / "jigsaw-sample-code" / "pipeline" / "train.py"
    changed.write_text(changed.read_text() + "\n# an older or newer version\n")
    result = run_notebook(built["kernel_dir"] / "jigsaw-sample.py", input_root, working, tmp_path)
    assert result.returncode == 1
    assert "error: the attached code bundle jigsaw-sample-code is not the one this kernel was pushed" in result.stderr
    assert not (working / "kernel-run.yaml").exists()  # stopped before any work


def test_the_kernel_attaches_the_bundle_version_it_uploaded(tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.dataset_version = 12
    result = kernel.build_and_push(make_cfg(tmp_path, "kaggle.user=tester"), api=api)
    assert result["metadata"]["dataset_sources"][0] == "tester/jigsaw-sample-code/12"
    meta = json.loads((result["kernel_dir"] / "kernel-metadata.json").read_text())
    assert meta["dataset_sources"][0] == "tester/jigsaw-sample-code/12"
    script = (result["kernel_dir"] / "jigsaw-sample.py").read_text()
    assert f"CODE_DIGEST = {launch.code_digest(result['code_dir'] / 'pipeline')!r}" in script


def test_versions_are_logged_and_a_missing_one_stops_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    lines = session.machine_report()
    assert lines[0].startswith("python ") and "torch " in lines[0] and "transformers " in lines[0]
    cfg = config.load("sample", [])
    session.check_machine(cfg, gpus=2)
    monkeypatch.setattr(transformers, "__version__", "4.40.2")
    with pytest.raises(KernelError, match="transformers 4.40.2 is too old") as info:
        session.check_machine(cfg, gpus=2)
    assert "as a dataset" not in str(info.value)  # advice nothing supports
    monkeypatch.undo()
    monkeypatch.setattr(session.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(KernelError, match="adamw8bit needs bitsandbytes"):
        session.check_machine(config.load("sample", ["train.optimizer=adamw8bit"]), gpus=2)


def test_a_session_without_a_gpu_stops_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session that lands on a machine without GPUs would train XLM-R on CPU for its 12 hours (and leave a
    one-process resume state a two-GPU session cannot take): refused before anything else, unless asked."""
    monkeypatch.setattr(session, "visible_gpus", lambda: 0)
    with pytest.raises(KernelError, match="no GPU is visible in this session") as info:
        session.check_machine(config.load("xlmr-large", []))
    assert "train.device=cpu" in str(info.value) and "\n" not in str(info.value)
    session.check_machine(config.load("xlmr-large", ["train.device=cpu"]))  # asked for: trains on CPU


def test_the_plan_refuses_adamw8bit_unless_the_image_has_bitsandbytes(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="adamw8bit needs bitsandbytes in the Kaggle image"):
        kernel.build_and_push(dry(tmp_path, "train.optimizer=adamw8bit"))
    kernel.build_and_push(dry(tmp_path, "train.optimizer=adamw8bit", "kaggle.has_bitsandbytes=true"))


def test_the_plan_refuses_flash_attention_which_no_kaggle_gpu_runs(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="flash_attention_2 cannot run on Kaggle's GPUs") as info:
        kernel.build_and_push(dry(tmp_path, "model.attn_implementation=flash_attention_2"))
    assert "model.attn_implementation=sdpa" in str(info.value) and "\n" not in str(info.value)
    kernel.build_and_push(dry(tmp_path, "model.attn_implementation=sdpa"))


def test_the_plan_refuses_init_folds_whose_folds_no_notebook_holds(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="model.init_folds=base: a Kaggle notebook holds no folds") as info:
        kernel.build_and_push(dry(tmp_path, "model.init_folds=base"))
    assert "\n" not in str(info.value)


def test_two_gpus_fall_back_to_one_when_an_all_reduce_fails(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    cfg = config.load("sample", [])
    monkeypatch.setattr(notebook, "visible_gpus", lambda: 2)
    monkeypatch.setattr(notebook, "torchrun", lambda *a, **k: 1)
    monkeypatch.delenv("NCCL_P2P_DISABLE", raising=False)
    assert notebook.checked_processes(cfg, 2) == 1
    out = capsys.readouterr().out
    assert "an all-reduce across 2 GPUs failed (1)" in out and "failed with NCCL_P2P_DISABLE=1 (1)" in out
    assert "training on one GPU instead: effective batch 32 instead of 64" in out  # said, not silent
    monkeypatch.setattr(notebook, "torchrun", lambda *a, **k: 0)
    assert notebook.checked_processes(cfg, 2) == 2
    # peer-to-peer over PCIe hangs: the check is tried again without it, and every later torchrun inherits that
    monkeypatch.setattr(notebook, "torchrun", lambda *a, extra_env=None, **k: 0 if extra_env else 1)
    assert notebook.checked_processes(cfg, 2) == 2
    assert os.environ.pop("NCCL_P2P_DISABLE") == "1"
    assert "works with NCCL_P2P_DISABLE=1" in capsys.readouterr().out


LAUNCHER = """#!{python}
import os, signal, subprocess, sys, time
# torchrun's way: each worker in a session of its own; these block as in a hung all-reduce, deaf to SIGTERM
worker = "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \\
         "open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
for rank in range(2):
    subprocess.Popen([sys.executable, "-c", worker, "{folder}/worker%d.pid" % rank], start_new_session=True)
time.sleep(600)
"""


def test_a_hung_all_reduce_check_leaves_no_worker_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A two-process check whose workers block: at the timeout the launcher and both workers are stopped (TERM, then
    KILL for workers deaf to it) and waited for, not left to hold both GPUs through the retry and the session."""
    hung_torchrun(tmp_path, monkeypatch)
    pids: list[int] = []
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            notebook.torchrun("pipeline.core.distributed", [], 2, timeout=8)
        pids = [int((tmp_path / f"worker{rank}.pid").read_text()) for rank in range(2)]
        assert not [pid for pid in pids if running(pid)], "workers outlived the check"
    finally:
        kill_workers(tmp_path, pids)


def test_a_hung_train_stage_is_stopped_after_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An NCCL hang in the training torchrun (after the all-reduce check passed) never reaches the deadline check, a
    collective itself: the launch times out at the deadline plus the time a resume state takes to save plus
    HANG_GRACE_S, and the launcher and both workers are stopped, not left to hold the session to its 12 hours."""
    cfg = config.load("sample", under(tmp_path))
    clock = notebook.SessionClock.begin(cfg, start=notebook.eta.now() - hours_s(cfg) + 60)  # a minute before the end
    saving = clock.costs()["saving a resume state"]
    expected = max(0.0, clock.deadline() - notebook.eta.now()) + saving + kaggle_clock.HANG_GRACE_S
    assert clock.train_timeout() == pytest.approx(expected, abs=1)
    hung_torchrun(tmp_path, monkeypatch)
    pids: list[int] = []
    try:
        with pytest.raises(RuntimeError, match=r"train fold 0 still ran 6s after it started, past the session's "
                                               r"deadline: hung .*stopped with its 2 workers"):  # fmt: skip
            notebook.train_fold(cfg, tmp_path / "run.yaml", 0, 2, timeout=6)
        pids = [int((tmp_path / f"worker{rank}.pid").read_text()) for rank in range(2)]
        assert not [pid for pid in pids if running(pid)], "workers outlived the hung train stage"
    finally:
        kill_workers(tmp_path, pids)


def hung_torchrun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchrun's command line runs LAUNCHER: two workers that block, their pids in tmp_path/worker<rank>.pid."""
    launcher = tmp_path / "torchrun"
    launcher.write_text(LAUNCHER.format(python=sys.executable, folder=tmp_path))
    launcher.chmod(0o755)
    monkeypatch.setattr(notebook.sys, "executable", str(launcher))
    monkeypatch.setattr(notebook, "STOP_GRACE_S", 1.0, raising=False)


def kill_workers(tmp_path: Path, pids: list[int]) -> None:
    """Whatever a failed test left of the stand-in's workers."""
    for pid in pids or [int(p.read_text()) for p in tmp_path.glob("worker*.pid") if p.read_text()]:
        if running(pid):
            os.kill(pid, 9)


def hours_s(cfg: config.Config) -> float:
    return cfg.kaggle.time_limit_h * 3600


def running(pid: int) -> bool:
    """The process runs (not a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_versioned_datasets_are_taken_or_refused_at_the_plan(tmp_path: Path) -> None:
    cfg = dry(tmp_path, "data.datasets=[someone/translated/3]", "data.extra_files=[translated-train.csv]")
    meta = kernel.build_and_push(cfg)["metadata"]
    assert "someone/translated/3" in meta["dataset_sources"]
    assert layout.dataset_dir(cfg, "someone/translated/3").name == "translated"  # mounted under its slug
    with pytest.raises(KernelError, match="is not <owner>/<dataset> or <owner>/<dataset>/<version>"):
        kernel.build_and_push(dry(tmp_path, "data.datasets=[someone/translated/latest]"))


def test_the_dry_run_plans_time_too(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    kernel.build_and_push(dry(tmp_path, "model.name=xlm-roberta-large", "data.source=kaggle", "data.folds=5",
                              "data.english_negatives=400000", "model.max_length=256"))  # fmt: skip
    out = capsys.readouterr().out
    assert "kernel: time plan, an estimate (the log's ETA lines are measured)" in out
    assert "an estimate for 2 T4s from the model's size, 10% of their fp16 peak, not measured" in out
    assert "of a 12 h session" in out and "of a 30 h weekly GPU quota" in out
    assert "kernel: warning: the folds need about" in out and "kaggle.continue_from=self" in out


def test_a_session_that_leaves_no_time_to_train_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """kaggle.time_limit_h=0.5 against XLM-R large's reserve of about 31 minutes (margin, saving, copying,
    predicting) leaves nothing to train: each session would train a few steps (the first epoch always starts),
    for ever. Refused before anything is written; a session that trains more than MIN_TRAINING_S is planned."""
    large = ("model.name=xlm-roberta-large", "data.source=kaggle", "model.max_length=256")
    with pytest.raises(KernelError, match=r"a 0.5 h session keeps 3\dm free at its end .*which leaves 0s to train, "
                                          r"under the 10m a session must train"):  # fmt: skip
        kernel.build_and_push(dry(tmp_path, *large, "kaggle.time_limit_h=0.5"))
    assert not (tmp_path / "kernel").exists()
    with pytest.raises(KernelError, match=r"leaves [0-9]m to train"):
        kernel.build_and_push(dry(tmp_path, *large, "kaggle.time_limit_h=0.6"))
    kernel.build_and_push(dry(tmp_path, *large, "kaggle.time_limit_h=0.75"))
    assert "about 0 fold(s) fit one" in capsys.readouterr().out  # planned: each session trains 14 minutes


def test_the_notebooks_processes_get_expandable_segments_unless_the_user_set_one(monkeypatch) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64")
    assert notebook.child_env()["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64"
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF")
    assert notebook.child_env()["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
