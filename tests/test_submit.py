"""`make submit` and `make submissions` against the fake Kaggle API: checks first, then the score, recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import requests

from pipeline import config, submit
from pipeline.inputs import sample
from pipeline.kaggle.client import KaggleError
from pipeline.submit import SubmitError
from tests.helpers.fake_kaggle import FakeKaggleApi, http_error

COMPETITION = "jigsaw-multilingual-toxic-comment-classification"


@pytest.fixture(autouse=True)
def no_credentials(no_kaggle_env: Path) -> Path:
    return no_kaggle_env


@pytest.fixture
def cfg(tmp_path: Path) -> config.Config:
    """The sample experiment with a cv.json and a submission matching the sample competition's ids."""
    raw = tmp_path / "raw"
    sample.write(raw, seed=0, scale=0.05)
    cfg = config.load(
        "sample",
        [
            "data.source=dir",
            f"data.dir={raw}",
            f"models_dir={tmp_path / 'models'}",
            f"submissions_dir={tmp_path / 'submissions'}",
        ],
    )
    (tmp_path / "models" / "sample").mkdir(parents=True)
    (tmp_path / "models" / "sample" / "cv.json").write_text(
        json.dumps({"metrics": {"six": None, "valid_auc": 0.91234}})
    )
    ids = pd.read_csv(raw / "sample_submission.csv", dtype={"id": str})["id"]
    (tmp_path / "submissions").mkdir()
    pd.DataFrame({"id": ids, "toxic": 0.25}).to_csv(tmp_path / "submissions" / "sample.csv", index=False)
    return cfg


def no_sleep(seconds: float) -> None:
    pass


def test_submit_waits_for_the_score_and_records_it(cfg: config.Config, tmp_path: Path, capsys) -> None:
    api = FakeKaggleApi()
    api.submission_states = [
        {"status": "PENDING"},
        {"status": "COMPLETE", "public_score": "0.9312", "private_score": ""},
    ]
    entry = submit.submit(cfg, api=api, sleep=no_sleep)
    sent = dict(api.calls)["competition_submit"]
    assert sent["competition"] == COMPETITION and sent["file_name"] == str(tmp_path / "submissions" / "sample.csv")
    assert sent["message"].startswith("sample; valid AUC 0.9123")  # no six-language AUC: the next figure
    assert [n for n, _ in api.calls] == ["competition_submit", "get_submission", "get_submission"]
    assert entry["status"] == "complete" and entry["public"] == "0.9312"
    assert "public score 0.9312" in capsys.readouterr().out
    lines = (tmp_path / "models" / "sample" / "submissions.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["ref"] == 123
    # a second submission is appended; `make submissions` lists both beside the OOF AUC
    submit.submit(cfg, api=api, sleep=no_sleep)
    rows = submit.recorded(tmp_path / "models")
    assert [r["public"] for r in rows] == ["0.9312", "0.9312"] and rows[0]["oof"] == (
        "valid AUC",
        pytest.approx(0.91234),
    )
    table = submit.submissions_table(rows)
    assert "sample" in table and "0.9123" in table and "0.9312" in table


def test_a_404_right_after_submitting_is_pending_and_a_timeout_keeps_the_record(cfg: config.Config, tmp_path: Path):
    api = FakeKaggleApi()
    api.submission_states = [http_error(404, "Not Found")]
    cfg = config.from_dict({**cfg.to_dict(), "kaggle": {**cfg.to_dict()["kaggle"], "submit_timeout": 60}})
    entry = submit.submit(cfg, api=api, sleep=no_sleep)
    assert entry["status"] == "pending"
    assert json.loads((tmp_path / "models" / "sample" / "submissions.jsonl").read_text())["status"] == "pending"


def test_the_wait_asks_again_through_transient_failures_until_the_timeout(cfg: config.Config, tmp_path: Path, capsys):
    """A 5xx or a dropped connection while waiting is asked again, not an error that leaves the record pending; the
    time the calls take counts toward kaggle.submit_timeout as well as the sleeps."""
    api = FakeKaggleApi()
    api.submission_states = [http_error(503, "Service Unavailable"), requests.ConnectionError("connection reset"),
                             {"status": "COMPLETE", "public_score": "0.93"}]  # fmt: skip
    entry = submit.submit(cfg, api=api, sleep=no_sleep)
    assert entry["status"] == "complete" and entry["public"] == "0.93"
    out = capsys.readouterr().out
    assert "Kaggle answered 503" in out and "cannot reach Kaggle" in out and out.count("asking again") == 2
    assert json.loads((tmp_path / "models" / "sample" / "submissions.jsonl").read_text())["status"] == "complete"
    # each call takes 50 s, each sleep 15 s: a 200 s timeout ends at the 4th call (245 s), not the 15th (14 sleeps)
    now = [0.0]
    api = FakeKaggleApi()
    api.submission_states = [{"status": "PENDING"}]
    slow = api.get_submission

    def get_submission(submission_ref):
        now[0] += 50
        return slow(submission_ref)

    api.get_submission = get_submission
    cfg = config.from_dict({**cfg.to_dict(), "kaggle": {**cfg.to_dict()["kaggle"], "submit_timeout": 200}})
    entry = submit.submit(cfg, api=api, sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0])
    assert entry["status"] == "pending" and [n for n, _ in api.calls].count("get_submission") == 4
    # another failure ends the wait with its error; the record is kept, pending
    api = FakeKaggleApi()
    api.submission_states = [http_error(401, "Unauthorized")]
    with pytest.raises(KaggleError, match="rejected the credentials"):
        submit.submit(cfg, api=api, sleep=no_sleep)


def test_scoring_error_is_reported_and_recorded(cfg: config.Config, tmp_path: Path) -> None:
    api = FakeKaggleApi()
    api.submission_states = [{"status": "ERROR", "error_description": "Submission has 3 rows, expected 63812"}]
    with pytest.raises(SubmitError, match="failed to score: Submission has 3 rows"):
        submit.submit(cfg, api=api, sleep=no_sleep)
    assert json.loads((tmp_path / "models" / "sample" / "submissions.jsonl").read_text())["status"] == "error"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: f.iloc[:-1], "ids differ from sample_submission.csv"),
        (lambda f: f.assign(toxic=1.5), r"\[0, 1\]"),
        (lambda f: f.rename(columns={"toxic": "pred"}), "expected id,toxic"),
    ],
)
def test_a_bad_file_is_never_submitted(cfg: config.Config, tmp_path: Path, damage, message: str) -> None:
    path = tmp_path / "submissions" / "sample.csv"
    damage(pd.read_csv(path, dtype={"id": str})).to_csv(path, index=False)
    api = FakeKaggleApi()
    with pytest.raises(SubmitError, match=message):
        submit.submit(cfg, api=api, sleep=no_sleep)
    assert api.calls == []
    assert not (tmp_path / "models" / "sample" / "submissions.jsonl").exists()


def test_no_file_says_how_to_make_one(cfg: config.Config, tmp_path: Path) -> None:
    (tmp_path / "submissions" / "sample.csv").unlink()
    with pytest.raises(SubmitError, match="run `make predict` \\(or `make kernel-output`\\) first"):
        submit.submit(cfg, api=FakeKaggleApi(), sleep=no_sleep)


@pytest.mark.parametrize(
    ("failure", "result", "message"),
    [
        (http_error(403, "Forbidden"), None, "Accept the competition's rules"),
        (http_error(429, "Too Many Requests: daily submission limit"), None, "daily submission limit reached"),
        (None, {"ref": 0, "message": "You have reached the maximum number of submissions"}, "daily submission limit"),
        (None, {"ref": 0, "message": "Could not submit to competition"}, "not accepted: Could not submit"),
    ],
)
def test_refusals_are_one_line(cfg: config.Config, tmp_path: Path, failure, result, message: str) -> None:
    api = FakeKaggleApi()
    if failure is not None:
        api.fail["competition_submit"] = failure
    if result is not None:
        api.submit_result = result
    with pytest.raises(KaggleError, match=message) as info:
        submit.submit(cfg, api=api, sleep=no_sleep)
    assert "\n" not in str(info.value)
    assert [n for n, _ in api.calls] == ["competition_submit"]  # nothing polled, nothing recorded
    assert not (tmp_path / "models" / "sample" / "submissions.jsonl").exists()


def test_no_credentials_submits_nothing(cfg: config.Config, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("KAGGLE_USERNAME", "me")  # a username alone is not a credential
    args = ["--config", "sample", f"models_dir={tmp_path / 'models'}", f"submissions_dir={tmp_path / 'submissions'}"]
    args += ["data.source=dir", f"data.dir={tmp_path / 'raw'}"]
    assert submit.main(args) == 2
    assert "KAGGLE_USERNAME is set but KAGGLE_KEY is not" in capsys.readouterr().err
    assert submit.main([*args, "--list"]) == 0
    assert "no submissions recorded yet" in capsys.readouterr().out


def test_lines_of_submissions_jsonl_that_cannot_be_read_are_named_and_left_out(tmp_path: Path, capsys) -> None:
    exp = tmp_path / "models" / "x"
    exp.mkdir(parents=True)
    good = {"time": "2026-01-01T00:00:00+00:00", "file": "x.csv", "message": "m", "ref": 1, "status": "complete",
            "public": "0.9", "private": ""}  # fmt: skip
    (exp / "submissions.jsonl").write_text("\n".join([json.dumps(good), "garbage", "[1]", '{"time": 3}']) + "\n")
    (exp / "cv.json").write_text("{not json")
    assert submit.main(["--config", "sample", f"models_dir={tmp_path / 'models'}", "--list"]) == 0
    out, err = capsys.readouterr()
    assert "2026-01-01T00:00:00+00:00" in out and "0.9" in out
    assert [line.split(" is not")[0][-2:] for line in err.splitlines()] == [":2", ":3", ":4"]


def test_the_oof_figure_of_a_cv_json_written_before_it_had_metrics(tmp_path: Path) -> None:
    """An older cv.json keeps its figures under other keys: the validation AUC as oof_auc, the six-language
    AUC in `six` (a figure only where no test language was missing)."""
    exp = tmp_path / "old"
    exp.mkdir()
    (exp / "cv.json").write_text(json.dumps({"oof_auc": 0.9, "six": {"auc": 0.8, "missing": ["fr"]}}))
    assert submit.oof_figure(exp) == ("valid AUC", 0.9)
    (exp / "cv.json").write_text(json.dumps({"oof_auc": 0.9, "six": {"auc": 0.8, "missing": []}}))
    assert submit.oof_figure(exp) == ("6-lang AUC", 0.8)
    (exp / "cv.json").write_text("[1, 2]")
    assert submit.oof_figure(exp) is None
